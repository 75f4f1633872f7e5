"""Small self-contained SVG plots, generated as text: deterministic bytes, no fonts or scripts fetched.

Each function returns one ``<svg>`` element usable inline in HTML and as a stand-alone ``.svg``
file next to summary.md.
"""

from __future__ import annotations

import math
from html import escape

WIDTH, HEIGHT = 720, 300
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 46, 64
COLORS = ("#4c78a8", "#e45756", "#f58518", "#72b7b2", "#54a24b")


def _n(x: float) -> str:
    """Coordinates with one decimal, so output bytes never depend on float noise."""
    return f"{x:.1f}"


def _nice_max(v: float) -> float:
    """Top of a 4-tick axis for counts: four equal whole steps of 1, 2 or 5 times a power of ten."""
    need = max(v, 1) / 4
    step = 1.0
    while True:
        for m in (1, 2, 5):
            if m * step >= need:
                return 4 * m * step
        step *= 10


def _frame(title: str, ylabel: str, ymax: float, plot_id: str) -> list[str]:
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="{plot_id}" class="plot" role="img" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'font-family="sans-serif" font-size="11">',
        f"<title>{escape(title)}</title>",
        f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
        f'<text x="{LEFT}" y="18" font-size="13" font-weight="bold">{escape(title)}</text>',
    ]
    h = HEIGHT - TOP - BOTTOM
    for i in range(5):
        v = ymax * i / 4
        y = TOP + h - h * i / 4
        parts.append(f'<line x1="{LEFT}" y1="{_n(y)}" x2="{WIDTH - RIGHT}" y2="{_n(y)}" stroke="#dddddd"/>')
        label = f"{v:,.0f}"
        parts.append(f'<text x="{LEFT - 6}" y="{_n(y + 4)}" text-anchor="end">{label}</text>')
    parts.append(f'<text x="14" y="{_n(TOP + h / 2)}" transform="rotate(-90 14 {_n(TOP + h / 2)})" '
                 f'text-anchor="middle">{escape(ylabel)}</text>')
    return parts


def grouped_bars(title: str, ylabel: str, labels: list[str], series: list[tuple[str, list[int]]], plot_id: str) -> str:
    """Bars per label, one colour per series, with a legend; every bar carries its value as a tooltip."""
    ymax = _nice_max(max((v for _, vals in series for v in vals), default=0))
    parts = _frame(title, ylabel, ymax, plot_id)
    w = WIDTH - LEFT - RIGHT
    h = HEIGHT - TOP - BOTTOM
    n = max(len(labels), 1)
    slot = w / n
    bar = max(min(slot * 0.8 / max(len(series), 1), 40), 1)
    every = max(1, math.ceil(n / 16))  # label at most 16 ticks so dates stay legible
    for i, label in enumerate(labels):
        x0 = LEFT + i * slot + (slot - bar * len(series)) / 2
        for j, (name, vals) in enumerate(series):
            v = vals[i]
            bh = h * v / ymax
            parts.append(
                f'<rect class="bar" x="{_n(x0 + j * bar)}" y="{_n(TOP + h - bh)}" width="{_n(bar)}" height="{_n(bh)}" '
                f'fill="{COLORS[j % len(COLORS)]}"><title>{escape(label)}: {v} {escape(name)}</title></rect>'
            )
        if i % every == 0:
            x = LEFT + i * slot + slot / 2
            parts.append(f'<text x="{_n(x)}" y="{_n(TOP + h + 14)}" text-anchor="end" '
                         f'transform="rotate(-35 {_n(x)} {_n(TOP + h + 14)})">{escape(label)}</text>')
    parts.append(f'<line x1="{LEFT}" y1="{TOP + h}" x2="{WIDTH - RIGHT}" y2="{TOP + h}" stroke="#333333"/>')
    for j, (name, _) in enumerate(series):
        lx = WIDTH - RIGHT - 150 * (len(series) - j)
        parts.append(f'<rect x="{lx}" y="24" width="10" height="10" fill="{COLORS[j % len(COLORS)]}"/>')
        parts.append(f'<text x="{lx + 14}" y="33">{escape(name)}</text>')
    if not labels:
        parts.append(f'<text x="{_n(LEFT + w / 2)}" y="{_n(TOP + h / 2)}" text-anchor="middle">no data</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def length_histogram(title: str, values: list[tuple[int, int]], markers: list[tuple[str, int]], plot_id: str,
                     bins: int = 40) -> str:
    """Histogram of token counts on a log10 axis with vertical marker lines (ceiling, window).

    ``values``: (token count, how many requests had it) pairs, so the caller never holds one
    entry per request.
    """
    positive = [(v, n) for v, n in values if v > 0]
    marks = [(name, m) for name, m in markers if m and m > 0]
    lo_v = min([v for v, _ in positive] + [m for _, m in marks], default=1)
    hi_v = max([v for v, _ in positive] + [m for _, m in marks], default=10)
    lo, hi = math.floor(math.log10(max(lo_v, 1))), math.ceil(math.log10(max(hi_v, 10)) + 0.05)
    if hi <= lo:
        hi = lo + 1
    width = (hi - lo) / bins
    counts = [0] * bins
    for v, n in positive:
        k = min(int((math.log10(v) - lo) / width), bins - 1)
        counts[k] += n
    ymax = _nice_max(max(counts, default=0))
    parts = _frame(title, "requests", ymax, plot_id)
    w = WIDTH - LEFT - RIGHT
    h = HEIGHT - TOP - BOTTOM
    for k, c in enumerate(counts):
        bh = h * c / ymax
        a, b = 10 ** (lo + k * width), 10 ** (lo + (k + 1) * width)
        parts.append(
            f'<rect class="bar" x="{_n(LEFT + k * w / bins)}" y="{_n(TOP + h - bh)}" width="{_n(w / bins - 1)}" '
            f'height="{_n(bh)}" fill="{COLORS[0]}"><title>{a:,.0f} to {b:,.0f} tokens: {c}</title></rect>'
        )
    for e in range(lo, hi + 1):
        x = LEFT + w * (e - lo) / (hi - lo)
        anchor = "end" if e == hi else "start" if e == lo else "middle"  # keep the end labels inside the frame
        parts.append(f'<text x="{_n(x)}" y="{_n(TOP + h + 14)}" text-anchor="{anchor}">{10 ** e:,}</text>')
    parts.append(f'<text x="{_n(LEFT + w / 2)}" y="{_n(HEIGHT - 24)}" text-anchor="middle">prompt tokens (log scale)</text>')
    for j, (name, m) in enumerate(marks):
        x = LEFT + w * (math.log10(m) - lo) / (hi - lo)
        color = COLORS[(j + 1) % len(COLORS)]
        parts.append(f'<line class="marker" x1="{_n(x)}" y1="{TOP}" x2="{_n(x)}" y2="{TOP + h}" stroke="{color}" '
                     f'stroke-width="2" stroke-dasharray="5,3"><title>{escape(name)}: {m:,}</title></line>')
        parts.append(f'<text x="{_n(x - 4)}" y="{_n(TOP + 12 + 13 * j)}" text-anchor="end" fill="{color}">'
                     f'{escape(name)} {m:,}</text>')
    parts.append(f'<line x1="{LEFT}" y1="{TOP + h}" x2="{WIDTH - RIGHT}" y2="{TOP + h}" stroke="#333333"/>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
