"""Canary prompts: generated markers only, deterministic for a seed, spread through the whole text.

A marker is ``zq`` followed by ten characters from an alphabet without look-alikes
(``zq7hk2mwx9ta``). Every prompt is a list of its own markers between an instruction at the start
and the same instruction at the end, so any window of a prompt, wherever stale cache pages cut
it, still carries markers that name the prompt they came from. Nothing else goes into a prompt:
no user data, no environment, no time.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import re

PREFIX = "zq"
ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"
BODY_LEN = 10
MARKERS_PER_LINE = 8
# A marker with its separator: "zq" + body + one space or newline.
MARKER_BYTES = len(PREFIX) + BODY_LEN + 1

_HEAD = (
    "Canary check {label}. Below is a list of generated markers: words that start with "
    f'"{PREFIX}". Reply with only the first marker and the last marker of the list, exactly as '
    "written, separated by a space.\n\n"
)
_TAIL = "\n\nEnd of the list. Reply with only the first and the last marker of the list above."
_NON_ALNUM = re.compile(r"[^a-z0-9]+")


@dataclasses.dataclass(frozen=True)
class Prompt:
    """One generated prompt: its label, text and markers (in order)."""

    label: str
    text: str
    markers: tuple[str, ...]

    @property
    def bytes(self) -> int:
        """UTF-8 size of the text (ASCII only, so also its length)."""
        return len(self.text)

    @property
    def sha256(self) -> str:
        """Hex SHA-256 of the text, recorded in the report instead of the text."""
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


class MarkerSource:
    """Draws markers for a run from its seed; no marker is ever handed out twice in a run."""

    def __init__(self, seed: int) -> None:
        # A string seed is hashed (SHA-512) by random: the same markers on every Python version.
        self._rng = random.Random(f"forensics-probe:{seed}")
        self._seen: set[str] = set()

    def draw(self) -> str:
        """A fresh marker body (without the prefix)."""
        while True:
            body = "".join(self._rng.choice(ALPHABET) for _ in range(BODY_LEN))
            if body not in self._seen:
                self._seen.add(body)
                return body


def fixed_bytes(label: str) -> int:
    """Bytes of a prompt that are not markers (the instruction at both ends)."""
    return len(_HEAD.format(label=label)) + len(_TAIL)


def build_prompt(label: str, target_bytes: int, source: MarkerSource) -> Prompt:
    """A prompt of about ``target_bytes`` bytes (never less than two markers) for ``label``."""
    count = max(2, (target_bytes - fixed_bytes(label)) // MARKER_BYTES)
    bodies = [source.draw() for _ in range(count)]
    markers = tuple(PREFIX + b for b in bodies)
    lines = [" ".join(markers[i:i + MARKERS_PER_LINE]) for i in range(0, count, MARKERS_PER_LINE)]
    text = _HEAD.format(label=label) + "\n".join(lines) + _TAIL
    return Prompt(label, text, markers)


def normalise(answer: str) -> str:
    """An answer as one run of lower-case letters and digits, for tolerant marker search.

    A model may change case, split a marker with a space or hyphen, quote it or wrap it in
    markdown; none of that hides the ten characters of its body.
    """
    return _NON_ALNUM.sub("", answer.lower())


class MarkerIndex:
    """Every marker sent in a run, by body, with the prompt it belongs to and its position there."""

    def __init__(self) -> None:
        self._owner: dict[str, tuple[str, int]] = {}

    def add(self, prompt: Prompt) -> None:
        """Remember a prompt's markers."""
        for position, marker in enumerate(prompt.markers):
            self._owner[marker[len(PREFIX):]] = (prompt.label, position)

    def find(self, answer: str) -> dict[str, list[tuple[str, int]]]:
        """Markers found in ``answer``, by owning prompt label: ``[(marker, position), ...]`` in answer order.

        The search slides over the normalised answer, so it is linear in the answer's length
        however many markers the run has sent.
        """
        text = normalise(answer)
        found: dict[str, list[tuple[str, int]]] = {}
        seen: set[str] = set()
        for i in range(len(text) - BODY_LEN + 1):
            body = text[i:i + BODY_LEN]
            owner = self._owner.get(body)
            if owner is None or body in seen:
                continue
            seen.add(body)
            found.setdefault(owner[0], []).append((PREFIX + body, owner[1]))
        return found
