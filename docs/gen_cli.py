"""Generate docs/cli.md and the README's usage blocks from the CLI itself, and docs/settings.md
from the settings table (forensics/settings.py).

    python docs/gen_cli.py           # rewrite docs/cli.md, docs/settings.md and the README blocks
    python docs/gen_cli.py --check   # exit 1 (naming the file) when either is stale

The README holds blocks between ``<!-- cli-usage: CMD [CMD ...] -->`` and ``<!-- /cli-usage -->``;
everything between the markers is replaced by each command's synopsis and example, so the
README cannot drift from the code (tests/test_cli_help.py runs the check).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "cli.md"
SETTINGS_DOC = ROOT / "docs" / "settings.md"
README = ROOT / "README.md"
BLOCK = re.compile(r"(<!-- cli-usage: ([a-z ]+) -->\n)(.*?)(<!-- /cli-usage -->)", re.S)


def reference() -> str:
    """The whole of docs/cli.md."""
    from forensics import cli

    names = cli.command_names()
    lines = [
        "# Command-line reference",
        "",
        "Generated from the CLI by `python docs/gen_cli.py`; do not edit by hand "
        "(`tests/test_cli_help.py` fails when this file is stale).",
        "",
        "Exit codes of every command: 0 clean, 1 findings (someone must be told, or drift), 2 error.",
        "`-q` prints nothing but errors (on stderr); `--json` prints only JSON on stdout.",
        "",
        "| command | what it does |",
        "|---|---|",
    ]
    lines += [f"| [`{n}`](#forensics-{n}) | {cli.short_help(n)} |" for n in names]
    for n in names:
        lines += ["", f"## forensics {n}", "", "```text", cli.help_text(n).rstrip("\n"), "```"]
    return "\n".join(lines) + "\n"


def usage_block(names: list[str]) -> str:
    """The body of one README usage block: synopsis and examples of each command."""
    from forensics import cli

    lines = ["```sh"]
    for n in names:
        lines.append(cli.synopsis(n))
        lines += [f"#   e.g. {example}" for example in cli.EXAMPLES.get(n, [])]
    lines.append("```")
    return "\n".join(lines) + "\n"


def readme(text: str) -> str:
    """The README with every usage block regenerated."""
    return BLOCK.sub(lambda m: m.group(1) + usage_block(m.group(2).split()) + m.group(4), text)


def main(argv: list[str]) -> int:
    """Write (or with --check, compare) docs/cli.md and the README's usage blocks."""
    check = "--check" in argv
    stale = []
    from forensics import settings

    for path, fresh in ((DOC, reference()), (SETTINGS_DOC, settings.markdown() + "\n"),
                        (README, readme(README.read_text(encoding="utf-8")))):
        current = path.read_text(encoding="utf-8") if path.is_file() else ""
        if current != fresh:
            stale.append(path.relative_to(ROOT).as_posix())
            if not check:
                path.write_text(fresh, encoding="utf-8")
    if check and stale:
        print(f"stale: {', '.join(stale)}; run: python docs/gen_cli.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
