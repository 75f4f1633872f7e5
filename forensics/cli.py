"""Command-line interface: parses options, calls the library, renders, maps errors to exit codes.

Exit codes: 0 clean, 1 findings, 2 error. This is the only module that prints or exits.
"""

from __future__ import annotations

import errno
import inspect
import json
import os
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, TypeVar, cast

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from forensics import __version__
from forensics.csvfile import escape_controls
from forensics.errors import ForensicsError, Interrupted, OutputError
from forensics.interrupts import signals_stop_the_run

if TYPE_CHECKING:  # imported when a command runs: loading the stages would slow every --help
    from forensics.ingest import IngestResult
    from forensics.report import ReportResult
    from forensics.run import StageTiming
    from forensics.scan import ScanResult
    from forensics.verify import Seal

#: Width of every help screen and of docs/cli.md: the same text on every terminal and in the docs.
HELP_WIDTH = 100

#: One runnable example per command, shown at the end of its --help and in docs/cli.md.
EXAMPLES: dict[str, list[str]] = {
    "ingest": ["forensics ingest sample_logs/ --case cases/sim"],
    "simulate": ["forensics simulate --out incidents/sim --seed 7 --scale small"],
    "evaluate": ["forensics evaluate --truth sample_logs/truth.json --report reports/sim-small-seed7"],
    "scan": ["forensics scan --case cases/sim --config sample_logs/case.toml",
             "forensics scan --case cases/sim --window-start 2026-08-28T00:00:00Z   # the saved settings, one changed"],
    "query": ["forensics query --case cases/sim above_ceiling --format csv", "forensics query --list"],
    "match": ["forensics match --case cases/sim --lookback-minutes 60"],
    "report": ["forensics report --case cases/sim --out reports/"],
    "run": ["forensics run sample_logs/ --out reports/", "forensics run sample_logs/ --out reports-spark/ --engine spark",
            "forensics run sample_logs/ --out reports-what-if/ --ceiling 7000 --probable-evalue 0.0005"],
    "verify": ["forensics verify reports/sim-small-seed7/ --rerun"],
    "keygen": ["forensics keygen keys/team.pem"],
    "review": ["forensics review reports/sim-small-seed7 --finding f-a6e6f00f0f5f286c --verdict confirm "
               "--reason \"verbatim sentence of this customer's own prompt\" --analyst 'A. Analyst'"],
    "notified": ["forensics notified reports/sim-small-seed7 --tenant org-camacho-plc-cb52 --channel email "
                 "--at 2026-09-01T10:00:00Z --ref TICKET-1234"],
    "audit": ["forensics audit reports/sim-small-seed7 --now 2026-09-02T10:00:00Z"],
    "viewer": ["forensics viewer reports/sim-small-seed7"],
    "probe": ["forensics probe --base-url http://127.0.0.1:8000/v1 --model my-model --max-input-tokens 131072"],
    "profile suggest": ["forensics profile suggest logs/custom/gateway.jsonl --records 500"],
}


def _param_label(param: Any) -> str:
    """How a parameter is written on the command line: ``-q, --quiet``, ``--case DIR`` or ``CASE.toml``."""
    if param.param_type_name == "argument":
        name = param.metavar or param.name.upper()
        return name + ("..." if param.nargs == -1 else "")
    names = ", ".join(sorted(param.opts, key=len))
    if param.secondary_opts:
        names += " / " + ", ".join(param.secondary_opts)
    if not param.is_flag and param.metavar:
        names += f" {param.metavar}"
    return names


def _param_help(param: Any) -> str:
    """The help of a parameter with its default (when it has a meaningful one) or ``[required]``."""
    text = param.help or ""
    extra = ""
    if param.required:
        extra = "[required]"
    elif (param.param_type_name == "option" and not param.is_flag and param.default is not None
          and param.show_default is not False and not callable(param.default)):
        default = param.default
        extra = f"[default: {', '.join(map(str, default)) if isinstance(default, (list, tuple)) else default}]"
    return f"{text}  {extra}".strip()


def _usage_pieces(command: Any) -> list[str]:
    """The usage line after the command name: ``[OPTIONS]`` then every argument by its metavar."""
    pieces = ["[OPTIONS]"] if any(p.param_type_name == "option" for p in command.params) else []
    for p in command.params:
        if p.param_type_name == "argument":
            pieces.append(_param_label(p) if p.required else f"[{_param_label(p)}]")
    return pieces


class PlainCommand(typer.core.TyperCommand):
    """A command whose --help is plain text in one fixed layout: metavars that say what an option
    takes (``CASE.toml``, ``DIR``, ``N``), never type labels such as ``<path>``, and an example.

    The layout is built here from click's parameter attributes, not left to typer's formatter
    (which changes between releases), so docs/cli.md generated from it stays stable.
    """

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """Usage, description, arguments, options and examples."""
        formatter.write_usage(ctx.command_path, " ".join(_usage_pieces(self)))
        self.format_help_text(ctx, formatter)
        for title, kind in (("Arguments", "argument"), ("Options", "option")):
            rows = [(_param_label(p), _param_help(p)) for p in self.get_params(ctx)
                    if p.param_type_name == kind and not getattr(p, "hidden", False)]
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)
        # Keyed by the words after the program name: "ingest", or "profile suggest" in a group.
        examples = EXAMPLES.get(" ".join(ctx.command_path.split()[1:]) or self.name or "", [])
        if examples:
            with formatter.section("Example" + ("s" if len(examples) > 1 else "")):
                for line in examples:
                    formatter.write_text(line)


class PlainGroup(typer.core.TyperGroup):
    """A command group whose --help lists its commands and then shows each one's whole help (one
    page, so docs/cli.md documents the group's commands under the group's entry)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """Usage, description, the commands, then each command's help."""
        formatter.write_usage(ctx.command_path, "[OPTIONS] COMMAND [ARGS]...")
        self.format_help_text(ctx, formatter)
        names = self.list_commands(ctx)
        with formatter.section("Commands"):
            formatter.write_dl([(n, self.commands[n].get_short_help_str(limit=HELP_WIDTH)) for n in names])
        for name in names:
            command = self.commands[name]
            formatter.write_paragraph()
            command.format_help(command.context_class(command, info_name=name, parent=ctx), formatter)


app = typer.Typer(
    name="forensics",
    help="Blast-radius forensics for cross-tenant leaks in LLM serving.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Help text is shown as written: rich markup mode would eat "[match]" and turn ":x:" into an emoji.
    rich_markup_mode=None,
    context_settings={"max_content_width": HELP_WIDTH, "terminal_width": HELP_WIDTH},
)


def _click_app() -> Any:
    """The click group behind ``app`` (built once per call; cheap)."""
    return typer.main.get_command(app)


def command_names() -> list[str]:
    """Every command, in the order --help lists them."""
    group = _click_app()
    return list(group.list_commands(group.context_class(group, info_name="forensics")))


def help_text(name: str) -> str:
    """The --help of one command exactly as ``forensics NAME --help`` prints it (for docs/cli.md)."""
    group = _click_app()
    root = group.context_class(group, info_name="forensics", terminal_width=HELP_WIDTH, max_content_width=HELP_WIDTH)
    command = group.get_command(root, name)
    return command.get_help(command.context_class(command, info_name=name, parent=root)) + "\n"


def short_help(name: str) -> str:
    """The one-line purpose of a command (the first line of its help)."""
    group = _click_app()
    root = group.context_class(group, info_name="forensics")
    return str(group.get_command(root, name).get_short_help_str(limit=HELP_WIDTH))


def synopsis(name: str) -> str:
    """``forensics NAME`` with its required options spelled out, e.g. ``forensics ingest --case DIR [OPTIONS] LOG_PATH...``."""
    group = _click_app()
    command = group.get_command(group.context_class(group, info_name="forensics"), name)
    required = [_param_label(p) for p in command.params if p.param_type_name == "option" and p.required]
    optional = any(p.param_type_name == "option" and not p.required for p in command.params)
    args = [piece for piece in _usage_pieces(command) if piece != "[OPTIONS]"]
    return " ".join(["forensics", name, *required, *(["[OPTIONS]"] if optional else []), *args])


# Values shown come from logs and file names an attacker may have shaped: no emoji codes, no
# highlighting, and every table cell is a Text (never parsed as markup), see _cells.
out = Console(highlight=False, emoji=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, highlight=False, emoji=False, soft_wrap=True)

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2

QUIET_HELP = "Print nothing but errors (on stderr); the exit code tells the outcome. --json still prints its JSON."
#: --quiet of a command with no --json.
QUIET_ONLY_HELP = "Print nothing but errors (on stderr); the exit code tells the outcome."


#: What to do about an OSError the machine causes, not forensics: by errno, the fix.
_SYSTEM_ERRORS = {
    errno.ENOSPC: "free space on the disk (the one holding --out or --case, or TMPDIR for temporary files), "
                  "or give them folders on another disk; then run again",
    errno.EDQUOT: "free space within your disk quota (where --out or --case lie, or TMPDIR for temporary files), "
                  "or give them folders elsewhere; then run again",
    errno.EROFS: "give --out (or --case) a folder on a writable file system (temporary files go to TMPDIR)",
    errno.EACCES: "give this user access to it (or choose another folder), then run again",
    errno.EPERM: "give this user access to it (or choose another folder), then run again",
}


def _system_error(exc: BaseException) -> ForensicsError | None:
    """A full disk, a quota, a read-only file system or a denied permission as the user's error (None for others)."""
    if not isinstance(exc, OSError) or exc.errno not in _SYSTEM_ERRORS:
        return None
    # Some writers (Arrow's) name no file; the fix then names the folders a stage writes.
    return ForensicsError(os.strerror(exc.errno), file=exc.filename, fix=_SYSTEM_ERRORS[exc.errno])


def _click_outcome(exc: BaseException) -> int | None:
    """The exit code for a click/typer control-flow or usage exception, or None for anything else.

    Recent typer releases vendor their own copy of click, so these exceptions may come from
    either package: they are told apart by their click-defined shape, not their class.
    """
    module = type(exc).__module__
    if not (module.startswith("click") or module.startswith("typer")):
        return None
    name = type(exc).__name__
    if name == "Exit":
        return int(getattr(exc, "exit_code", 0) or 0)
    if name == "Abort":
        err.print("aborted")
        return EXIT_ERROR
    if hasattr(exc, "show") and hasattr(exc, "exit_code"):
        exc.show()  # usage errors: click's own message naming the option and the fix (--help)
        return EXIT_ERROR
    return None


#: Set once the reason to stop is printed: main() and the interrupt watchdog may both get there.
_TOLD: list[bool] = []
_TELL = threading.Lock()


def _tell_interrupted(signum: int) -> None:
    with _TELL:
        if not _TOLD:
            # (Every command, not only a report: an interrupted ingest leaves the case's tables as they were.)
            err.print(f"interrupted by {signal.Signals(signum).name}: stopped before the end; what an earlier run "
                      "wrote is left as it was. Run the same command again to finish.", markup=False)
            _TOLD.append(True)


def _stuck(signum: int) -> None:
    """The run did not unwind in time after a signal (native code holds it): exit anyway."""
    _tell_interrupted(signum)
    os._exit(128 + signum)  # workers follow (forensics.workers); the next run removes the temporary folder


class _RichTask:
    def __init__(self, progress: Progress, task_id: TaskID) -> None:
        self._progress, self._id = progress, task_id

    def advance(self, n: float = 1) -> None:
        self._progress.advance(self._id, n)

    def close(self) -> None:
        self._progress.update(self._id, visible=False)
        self._progress.remove_task(self._id)
        if not self._progress.tasks:
            self._progress.stop()


class RichProgress:
    """Progress bars on stderr for the library's long stages (see forensics.progress)."""

    def __init__(self, console: Console) -> None:
        self._progress = Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )

    def task(self, description: str, total: float | None = None) -> _RichTask:
        if not self._progress.tasks:
            self._progress.start()
        return _RichTask(self._progress, self._progress.add_task(description, total=total))


def _progress(quiet: bool) -> Any:
    """Progress bars for long stages (rich on stderr), or None when quiet or stderr is no terminal.

    Bars redrawn into a log file or pipe only leave blank lines behind.
    """
    return None if quiet or not err.is_terminal else RichProgress(err)


def _emit_json(data: Any) -> None:
    """JSON on stdout exactly as serialised (never through rich: no markup, emoji or wrapping)."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


def _text(value: Any) -> Text:
    """A value as literal text: "[b]" and ":x:" in a tenant id or file name stay as they are, and a
    control character (a terminal escape in a hostile id) is shown as an escape, never sent raw."""
    return Text("" if value is None else escape_controls(str(value)))


def _table(title: Any = None, **kwargs: Any) -> Table:
    """A table whose title (which may hold a path) is literal text."""
    return Table(title=None if title is None else _text(title), title_justify="left", **kwargs)


def _add_row(table: Table, *cells: Any) -> None:
    """Add a row of literal cells (see _text)."""
    table.add_row(*(_text(c) for c in cells))


def _version(value: bool) -> None:
    if value:
        out.print(f"forensics {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Blast-radius forensics for cross-tenant leaks in LLM serving."""


# --------------------------------------------------------------------------------------------
# options generated from the settings table
# --------------------------------------------------------------------------------------------

_F = TypeVar("_F", bound=Callable[..., Any])

#: The Python type of an option, by the kind of its setting ("tokens" takes a number or "auto").
_OPTION_TYPES: dict[str, type] = {"int": int, "float": float, "bool": bool, "file": Path}

#: Where a command's generated options go: ``settings: dict[str, object] = SETTINGS_OPTIONS``.
SETTINGS_OPTIONS: dict[str, object] = {}


def setting_options(*commands: str) -> Callable[[_F], _F]:
    """One option per row of the settings table (forensics/settings.py) whose ``cli`` option belongs
    to one of ``commands``, with the row's type, metavar and help; a new setting is one row there.

    The command declares ``settings: dict[str, object] = SETTINGS_OPTIONS`` where the options are to
    appear in its --help, and receives in it the value of each (by setting key; None: not given).
    """
    from forensics import settings as table

    rows = [s for s in table.SETTINGS if s.cli and s.option_command in commands]

    def decorate(func: _F) -> _F:
        signature = inspect.signature(func, eval_str=True)
        params: list[inspect.Parameter] = []
        for param in signature.parameters.values():
            if param.name != "settings":
                params.append(param)
                continue
            for s in rows:
                option = typer.Option(None, *(s.cli or "").split(" "), metavar=s.option_metavar, help=s.option_help())
                params.append(inspect.Parameter(f"setting_{s.key}", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                default=option, annotation=Optional[_OPTION_TYPES.get(s.kind, str)]))

        def command_with_settings(**kwargs: Any) -> Any:
            given = {s.key: kwargs.pop(f"setting_{s.key}") for s in rows}
            return func(**kwargs, settings=given)

        command_with_settings.__name__ = func.__name__
        command_with_settings.__qualname__ = func.__qualname__
        command_with_settings.__doc__ = func.__doc__
        command_with_settings.__module__ = func.__module__
        # typer reads the parameters from these (inspect.signature honours __signature__).
        command_with_settings.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        command_with_settings.__annotations__ = {p.name: p.annotation for p in params} | {"return": signature.return_annotation}
        return cast(_F, command_with_settings)

    return decorate


def _log_format(value: str) -> str:
    """``ingest --format``: one of the registered log formats (an unknown name is an error listing them)."""
    # The registry is read only when the option is given: loading it imports pyarrow, which
    # would double the start-up time of every command.
    from forensics.ingest.registry import FORMATS

    return FORMATS.get(value).name


def _simulated_format(value: str) -> str:
    """``simulate --format``: a gateway format the simulator has a writer for."""
    from forensics.lab.simulate.writers import gateway_writer

    gateway_writer(value)
    return value


def _simulated_engine_format(value: str) -> str:
    """``simulate --engine-format``: an engine format the simulator has a writer for."""
    from forensics.lab.simulate.writers import engine_writer

    engine_writer(value)
    return value


# --------------------------------------------------------------------------------------------
# ingest
# --------------------------------------------------------------------------------------------


@app.command(cls=PlainCommand)
@setting_options("ingest")
def ingest(
    paths: list[Path] = typer.Argument(..., metavar="LOG_PATH",
                                       help="Log files or folders (.gz/.zst read transparently); give several to ingest them together."),
    case: Path = typer.Option(..., "--case", metavar="DIR", help="Case folder to write the tables into (created if missing)."),
    fmt: Optional[str] = typer.Option(None, "--format", parser=_log_format, metavar="FORMAT",
                                      help="cloudflare-ai-gateway, helicone, langfuse, litellm, mapped, openai-split, sglang or vllm; "
                                           "sniffed from each file when omitted (never mapped: it reads the profile of the --config case file's [[inputs]])."),
    config: Optional[Path] = typer.Option(None, "--config", metavar="CASE.toml", help="Case file for the time zone, tenant field and tokenizer."),
    settings: dict[str, object] = SETTINGS_OPTIONS,
    as_json: bool = typer.Option(False, "--json", help="Print only the summary as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> int:
    """Load gateway and engine logs into a case folder.

    Writes the case's Parquet tables and prints what was read per file. Exit 0 when the logs were
    read, 2 on an error (no log file found, unreadable input).
    """
    from forensics import api

    cfg = api.make_config(config, **settings)
    result = api.ingest(case, paths, fmt=fmt, config=cfg, progress=_progress(quiet))
    if as_json:
        _emit_json(result.summary())
    elif not quiet:
        _render_ingest(result)
    return EXIT_CLEAN


#: Up to this many files the ingest summary lists each one. Beyond it (an object store export holds a
#: file per request) it lists at most this many of the files with something to report, the worst
#: first, and sums up the others: tens of thousands of identical rows would bury the few that matter.
LISTED_FILES = 40


def _files(n: int, more: bool = False) -> str:
    return f"{n:,} {'more ' if more else ''}file{'' if n == 1 else 's'}"


def _file_counts(files: list[dict[str, Any]]) -> list[str]:
    """The summed line counts of ``files``, as the table's cells."""
    return [str(sum(f[k] for f in files)) for k in ("lines", "ingested", "quarantined", "blank", "duplicate")]


def _worth_naming(f: dict[str, Any]) -> int | None:
    """How much a file's row says, the most first (0: skipped or damaged, 1: lines quarantined, 2: no
    rows, 3: duplicate lines), or None for a file read cleanly or whose content was already ingested."""
    if f["status"].startswith("already"):
        return None
    if f["status"] != "ingested":
        return 0
    if f["quarantined"]:
        return 1
    if not f["ingested"] and not f["duplicate"]:
        return 2
    return 3 if f["duplicate"] else None


def _render_ingest(result: IngestResult) -> None:
    table = _table(f"case {result.case}")
    for col in ("file", "format", "lines", "ingested", "quarantined", "blank", "duplicate", "status"):
        table.add_column(col, justify="right" if col not in ("file", "format", "status") else "left")
    files = result.run_files
    summed = len(files) > LISTED_FILES
    listed = files
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}  # files summed up: (what, format) -> files
    if summed:
        named: list[tuple[int, dict[str, Any]]] = []
        for f in files:
            rank = _worth_naming(f)
            if rank is not None:
                named.append((rank, f))
            else:  # content ingested before, or given twice in this run: "already ingested (same SHA-256)"
                what = "already ingested" if f["status"].startswith("already") else "read cleanly"
                groups.setdefault((what, f["format"] or "-"), []).append(f)
        listed = [f for _, f in sorted(named, key=lambda rf: rf[0])]
    for f in listed[:LISTED_FILES]:
        _add_row(
            table, f["path"], f["format"] or "-", str(f["lines"]), str(f["ingested"]), str(f["quarantined"]),
            str(f["blank"]), str(f["duplicate"]), f["status"],
        )
    if len(listed) > LISTED_FILES:
        rest = listed[LISTED_FILES:]
        _add_row(table, f"{_files(len(rest), more=True)} with something to report", "-", *_file_counts(rest),
                 "see manifest.json")
    for (what, fmt), group in sorted(groups.items(), key=lambda g: (g[0][0] != "read cleanly", g[0][1])):
        _add_row(table, f"{_files(len(group))} {what}", fmt, *_file_counts(group), group[0]["status"])
    out.print(table)
    if summed:
        out.print(f"{_files(len(files))}: each one's figures are in {result.case / 'manifest.json'} (and in --json)", markup=False)
    m = result.manifest
    t = m.tables
    out.print(
        f"exchanges: {t.exchanges}  engine_events: {t.engine_events}  quarantine: {t.quarantine}  "
        f"(requests merged as duplicates: {m.duplicate_requests}, "
        f"orphans: {m.orphans.request_only + m.orphans.response_only})"
    )
    if m.time_range:
        out.print(f"time range: {m.time_range[0]} .. {m.time_range[1]}", markup=False)
    if m.models:
        out.print("models: " + ", ".join(f"{model} ({n})" for model, n in m.models), markup=False)
    if m.prompt_tokens_sources:
        out.print("prompt_tokens sources: " + ", ".join(f"{k}={v}" for k, v in sorted(m.prompt_tokens_sources.items())),
                  markup=False)
    if m.implausible_reported_counts:
        out.print(f"[bold]reported token counts not trusted (impossible for their text): {m.implausible_reported_counts}[/bold]")
    damaged = m.records_from_damaged_input
    if damaged.total:
        reasons = ", ".join(f"{k}={v}" for k, v in sorted(damaged.by_reason.items()) if v)
        out.print(f"records from damaged input (see exchanges.damage): {damaged.total} ({reasons})", markup=False)
    for note in (*m.notes, *(m.history or ())):
        out.print(f"note: {note}", markup=False)
    out.print(f"case written to {result.case}", markup=False)


# --------------------------------------------------------------------------------------------
# profile
# --------------------------------------------------------------------------------------------

profile_app = typer.Typer(name="profile", cls=PlainGroup, no_args_is_help=True, rich_markup_mode=None,
                          help="Mapping profiles: read a log in no known format through a case file's [inputs.fields].")
app.add_typer(profile_app)


@profile_app.command("suggest", cls=PlainCommand)
def profile_suggest(
    file: Path = typer.Argument(..., metavar="FILE", help="A log file: JSON Lines, a JSON array, CSV or Parquet."),
    records: int = typer.Option(200, "--records", metavar="N", help="Read the first N records."),
    as_json: bool = typer.Option(False, "--json", help="Print the fields found and the guess as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> int:
    """Print a starting [[inputs]] profile guessed from a sample of a log file.

    Lists the fields found (dotted paths, how many records hold them, an example value) and
    prints an [[inputs]] block with format = "mapped" and a guessed [inputs.fields] mapping to
    paste into the case file. Check every line: comments mark the uncertain guesses.
    """
    from forensics.ingest.profile import suggest

    result = suggest(file, records)
    if as_json:
        _emit_json(result.to_json())
    elif not quiet:
        table = _table(f"{result.file}: {'all' if result.whole_file else 'the first'} {result.records} records ({result.container})")
        for col in ("field", "records", "type", "example"):
            table.add_column(col, justify="right" if col == "records" else "left")
        for f in result.fields:
            _add_row(table, f.path, str(f.present), "|".join(f.types), f.to_json()["example"])
        out.print(table)
        if result.unreadable:
            n, why = result.unreadable[0]
            out.print(_text(f"{len(result.unreadable)} records of the sample could not be read and are not in it "
                            f"(first: line {n}: {why}); ingest will quarantine them"))
        out.print()
        sys.stdout.flush()
        sys.stdout.write(result.toml)  # as written: it is pasted into a case file
    return EXIT_CLEAN


# --------------------------------------------------------------------------------------------
# simulate / evaluate
# --------------------------------------------------------------------------------------------

@app.command(cls=PlainCommand)
def simulate(
    out_dir: Path = typer.Option(..., "--out", metavar="DIR", help="Folder to write the simulated incident into."),
    seed: int = typer.Option(7, "--seed", metavar="N", help="Seed: the same seed (and --out name, which the files record) gives the same bytes."),
    scale: str = typer.Option("small", "--scale", metavar="SIZE",
                              help="small (scaled-down pool, a few MB), medium (~100 MB), large (~1 GB) or realistic "
                                   "(scaled-down pool, 220 tenants, ~15,000 requests of real text; needs --corpus)."),
    fmt: str = typer.Option("litellm", "--format", parser=_simulated_format, metavar="FORMAT",
                            help="Gateway log format: litellm, openai-split, helicone, langfuse, cloudflare-ai-gateway "
                                 "(an unknown name lists every one the simulator writes)."),
    engine_fmt: str = typer.Option("sglang", "--engine-format", parser=_simulated_engine_format, metavar="FORMAT",
                                   help="Engine log format: sglang or vllm (RequestLogger lines). The same seed is the same incident in every format."),
    corpus: Optional[Path] = typer.Option(None, "--corpus", metavar="DIR", help="Folder of real text (.json/.jsonl/.txt) to draw documents and answers from."),
    corpus_part: Optional[str] = typer.Option(None, "--corpus-part", metavar="K/N",
                                              help="The tenants own only part K of N of the corpus's documents: incidents of "
                                                   "different parts share no private text, to merge into one bigger incident."),
    force: bool = typer.Option(False, "--force", help="Replace an earlier simulation in --out."),
    as_json: bool = typer.Option(False, "--json", help="Print only the summary as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> int:
    """Write a simulated leak incident to practise on.

    Gateway and engine logs, a case.toml and the truth.json that `forensics evaluate` scores a
    report against. The same seed and --out name (the files record the command) give the same bytes.
    """
    from forensics import api
    from forensics.lab.simulate import parse_corpus_part

    part = parse_corpus_part(corpus_part) if corpus_part is not None else None
    result = api.simulate(out_dir, seed=seed, scale=scale, fmt=fmt, engine_fmt=engine_fmt, corpus=corpus, force=force,
                          progress=_progress(quiet), corpus_part=part)
    summary = result.summary()
    if as_json:
        _emit_json(summary)
        return EXIT_CLEAN
    if quiet:
        return EXIT_CLEAN
    c = summary["counts"]
    out.print(f"wrote {len(summary['files'])} log files, {summary['bytes']:,} bytes, to {summary['out']}", markup=False)
    out.print(
        f"{c['requests']} requests from {c['tenants']} tenants; {c['suspects']} suspects; {c['leak_fragments']} leaked fragments "
        f"in {c['finding_pairs']} (recipient, source tenant) pairs; {c['hard_negatives']} hard negatives",
        markup=False,
    )
    out.print(f"case file: {summary['case_file']}  truth: {summary['truth']}", markup=False)
    return EXIT_CLEAN


def _ratio(value: Any) -> str:
    return "n/a" if value is None else f"{value:.3f}"


@app.command(cls=PlainCommand)
def evaluate(
    truth: Path = typer.Option(..., "--truth", metavar="truth.json", help="The truth.json the simulator wrote."),
    report_dir: Path = typer.Option(..., "--report", metavar="REPORT_DIR",
                                    help="Report folder (suspects.csv, evidence.csv, notifications.csv, manifest.json)."),
    as_json: bool = typer.Option(False, "--json", help="Print only the scores as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> int:
    """Score a report against a simulated incident's truth.

    Precision and recall per stage. Warns when the truth file belongs to another simulation than
    the report (other case name or other input files).
    """
    from forensics import api

    data = api.evaluate(truth, report_dir).to_json()
    if as_json:
        _emit_json(data)
        return EXIT_CLEAN
    if quiet:
        return EXIT_CLEAN
    for w in data["warnings"]:
        err.print(f"warning: {escape_controls(w)}", markup=False)
    if data["missing"]:
        out.print("missing report files (scored as empty): " + ", ".join(data["missing"]), markup=False)
    table = _table(f"evaluation of {data['report']}")
    for col in ("what", "truth", "reported", "correct", "precision", "recall"):
        table.add_column(col, justify="left" if col == "what" else "right")
    rows = [("suspects", data["suspects"]), ("finding pairs", data["findings"]),
            ("exposed customers", data["customers"]["exposed"]), ("recipient customers", data["customers"]["recipient"])]
    for name, r in rows:
        _add_row(table, name, str(r["truth"]), str(r["predicted"]), str(r["true_positives"]), _ratio(r["precision"]), _ratio(r["recall"]))
    out.print(table)
    f = data["findings"]
    for title, key in (("fragment recall by length", "fragment_recall_by_length"), ("fragment recall by damage", "fragment_recall_by_damage")):
        out.print(title + ": " + ", ".join(f"{k} {v['found']}/{v['fragments']} ({v['recall']:.2f})" for k, v in f[key].items()), markup=False)
    out.print("pair recall by longest fragment: " + ", ".join(
        f"{k} {v['found']}/{v['pairs']}" + (f" ({v['recall']:.2f})" if v["recall"] is not None else "")
        for k, v in f["pair_recall_by_length"].items()), markup=False)
    loc = f["fragments_located"]
    out.print(f"fragments located (reported span overlaps): {loc['located']}/{loc['fragments']}", markup=False)
    if f["row_precision_by_tier"]:
        out.print("evidence row precision by tier: "
                  + ", ".join(f"{k} {v['correct']}/{v['rows']}" for k, v in f["row_precision_by_tier"].items()), markup=False)
    out.print("false positive suspects by kind: "
              + (", ".join(f"{k} {v}" for k, v in data["suspects"]["false_positives_by_kind"].items()) or "none"), markup=False)
    out.print("false positive findings by kind: " + (", ".join(f"{k} {v}" for k, v in f["false_positives_by_kind"].items()) or "none"), markup=False)
    out.print("false pairs by where their span lies: " + (", ".join(f"{k} {v}" for k, v in f["false_pairs_by_location"].items()) or "none"),
              markup=False)
    hn = f["hard_negative_findings"]
    out.print(f"labelled hard negatives with a wrong finding: {hn['total']['with_findings']} of {hn['total']['labelled']}"
              + "".join(f"; {k} {v['with_findings']}/{v['labelled']}" for k, v in hn["by_kind"].items()), markup=False)
    for w in data["customers"]["exposed_wrong"]:
        reasons = Counter(f"{x['where']} ({x['tier_rule'] or x['tier']})" for x in w["findings"])
        out.print(f"wrongly exposed {w['tenant_id']}: " + ", ".join(f"{k} x{n}" for k, n in sorted(reasons.items())), markup=False)
    for m in data["customers"]["exposed_missed"]:
        out.print(f"missed exposed {m['tenant_id']}: fragments of " + ", ".join(str(x["tokens"]) for x in m["fragments"]) + " tokens",
                  markup=False)
    out.print(f"engine anomalies flagged as suspects (not scored): {data['suspects']['engine_anomalies_flagged']}", markup=False)
    q = data["quarantine"]
    out.print(f"quarantine: expected {q['expected']}, reported {q['reported'] if q['reported'] is not None else 'missing'} ({q['note']})", markup=False)
    return EXIT_CLEAN



# --------------------------------------------------------------------------------------------
# scan / query
# --------------------------------------------------------------------------------------------



@app.command(cls=PlainCommand)
@setting_options("scan")
def scan(
    case: Path = typer.Option(..., "--case", metavar="DIR", help="Case folder written by `forensics ingest`."),
    config: Optional[Path] = typer.Option(None, "--config", metavar="CASE.toml",
                                          help="Case file; default: the settings the case was ingested with (config.json)."),
    model: Optional[list[str]] = typer.Option(None, "--model", metavar="MODEL", help="Affected model (repeat for several)."),
    window_start: Optional[str] = typer.Option(None, "--window-start", metavar="TIME", help="Incident window start, UTC ISO 8601 (inclusive)."),
    window_end: Optional[str] = typer.Option(None, "--window-end", metavar="TIME", help="Incident window end, UTC ISO 8601 (exclusive)."),
    settings: dict[str, object] = SETTINGS_OPTIONS,
    as_json: bool = typer.Option(False, "--json", help="Print only the summary as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> int:
    """Find the responses that may carry another customer's data.

    Writes suspects.csv and scan.json into the case folder. Exit 1 when there are suspect
    responses, 0 when there are none.
    """
    from forensics import api

    cfg = api.config_for_case(case, config, models=model or None, window_start=window_start, window_end=window_end,
                              **settings)
    result = api.scan(case, cfg, progress=_progress(quiet))
    if as_json:
        _emit_json(result.summary())
    elif not quiet:
        _render_scan(result)
    return EXIT_FINDINGS if result.has_findings else EXIT_CLEAN


def _render_scan(result: ScanResult) -> None:
    rec = result.record
    p = rec.parameters
    out.print(f"models: {p.models}  window: {p.window_start} .. {p.window_end} (end exclusive)", markup=False)
    out.print(
        f"real ceiling: {p.real_ceiling_tokens} tokens ({p.real_ceiling_tokens_source})  "
        f"advertised window: {p.advertised_window_tokens} ({p.advertised_window_tokens_source})",
        markup=False,
    )
    table = _table("suspect queries")
    table.add_column("query")
    table.add_column("responses", justify="right")
    for qid, n in sorted(result.by_reason.items()):
        _add_row(table, qid, str(n))
    out.print(table)
    out.print(
        f"[bold]suspect responses: {result.suspects}[/bold]  (borderline: {result.borderline}, "
        f"engine signature: {result.engine_signature}, gateway count below the ceiling: "
        f"{rec.suspect_counts.reported_count_below_ceiling})"
    )
    looks = {k: v for k, v in sorted(result.anomalies.items()) if v}
    if looks:
        out.print("worth a look (scan.json): " + ", ".join(f"{k}={v}" for k, v in looks.items()), markup=False)
    out.print(f"requests in the exposure band (ceiling..advertised window, any model/day): {rec.exposure_band_requests}",
              markup=False)
    for w in rec.warnings:
        out.print(f"warning: {escape_controls(w)}", markup=False)
    out.print(f"suspects written to {result.case_dir / 'suspects.csv'}", markup=False)


@app.command(cls=PlainCommand)
def query(
    name_or_sql: Optional[str] = typer.Argument(None, metavar="NAME_OR_SQL", help="A shipped query id (see --list), a SELECT, or a .sql file."),
    case: Optional[Path] = typer.Option(None, "--case", metavar="DIR", help="Case folder to query (read-only)."),
    param: Optional[list[str]] = typer.Option(None, "--param", metavar="NAME=VALUE", help="name=value for a $name in the SQL (repeatable)."),
    fmt: str = typer.Option("table", "--format", metavar="FORMAT", help="Output: table, csv or json."),
    list_queries: bool = typer.Option(False, "--list", help="List the shipped queries and their parameters."),
) -> int:
    """Run a shipped query or your own SELECT against a case, read-only."""
    from forensics import api
    from forensics.queries import csv_text, plain, rows_of

    if fmt not in ("table", "csv", "json"):
        raise ForensicsError(f"--format {fmt!r} is not table, csv or json", fix="use --format table|csv|json")
    if list_queries:
        listed = [{"id": qd.id, "kind": qd.kind, "parameters": ", ".join(f"{p.name} {p.type}" for p in qd.params) or "-",
                   "title": qd.title} for qd in api.load_queries()]
        if fmt == "json":
            _emit_json(listed)
        elif fmt == "csv":
            import pyarrow as pa

            sys.stdout.write(csv_text(pa.Table.from_pylist(listed)))
        else:
            table = _table("shipped queries")
            for col in ("id", "kind", "parameters", "title"):
                table.add_column(col)
            for row in listed:
                _add_row(table, *row.values())
            out.print(table)
        return EXIT_CLEAN
    if name_or_sql is None or case is None:
        raise ForensicsError("give a case and a query", fix="forensics query --case DIR NAME_OR_SQL (or --list)")
    from forensics.queries import parse_param_options

    params = parse_param_options(param or [])
    rows, _ = api.query_case(case, name_or_sql, params, api.query_defaults(case))
    if fmt == "csv":
        sys.stdout.write(csv_text(rows))
    elif fmt == "json":
        _emit_json(rows_of(rows))
    else:
        table = _table(show_lines=False)
        for col in rows.column_names:
            table.add_column(_text(col), overflow="fold")
        for rec in rows.to_pylist():
            cells = []
            for v in rec.values():
                v = plain(v)
                text = "" if v is None else str(v)
                cells.append(text if len(text) <= 120 else text[:117] + "...")
            _add_row(table, *cells)
        out.print(table)
        err.print(f"{rows.num_rows} row(s)")
    return EXIT_CLEAN

# --------------------------------------------------------------------------------------------
# match
# --------------------------------------------------------------------------------------------



@app.command("match", cls=PlainCommand)
@setting_options("match")
def match_cmd(
    case: Path = typer.Option(..., "--case", metavar="DIR", help="Case folder that has been ingested and scanned."),
    config: Optional[Path] = typer.Option(None, "--config", metavar="CASE.toml",
                                          help="Case file (TOML) for [match]; default: the settings the case was ingested with (config.json)."),
    settings: dict[str, object] = SETTINGS_OPTIONS,
    as_json: bool = typer.Option(False, "--json", help="Print only the summary as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> int:
    """Find other customers' content in the suspect responses.

    Writes evidence.csv and match.json into the case folder. Exit 1 when there are cross-tenant
    findings, 0 when there are none.
    """
    from forensics import api
    from forensics.config import CaseConfig, load_saved

    if config is not None:
        cfg = api.make_config(config)
    elif (case / "config.json").is_file():
        cfg = load_saved(case / "config.json")
    else:
        cfg = CaseConfig()
    result = api.match(case, cfg, progress=_progress(quiet), overrides=settings)
    summary = result.summary()
    if as_json:
        _emit_json(summary)
    elif not quiet:
        f, c, s = result.report.findings, result.report.control, result.report.searched
        out.print(
            f"searched {s.suspects_searched} suspect responses against {s.records} records "
            f"({s.tokens} tokens; lookback {s.lookback}, same decode node: {s.same_decode_node})",
            markup=False,
        )
        out.print(
            f"cross-tenant findings: {f.cross_tenant} (confirmed {f.cross_tenant_confirmed}, probable "
            f"{f.cross_tenant_probable}) in {f.suspects_with_cross_tenant_evidence} suspect responses, "
            f"{f.exposed_tenants} exposed tenants; same-tenant overlaps: {f.same_tenant}",
            markup=False,
        )
        rate = "n/a" if c.false_positive_rate is None else f"{c.false_positive_rate:.4f}"
        out.print(f"control sample: {c.size} responses, {c.responses_with_findings} with findings "
                  f"(false-positive rate {rate})", markup=False)
        for w in summary["warnings"]:
            out.print(f"warning: {escape_controls(w)}", markup=False)
        out.print(f"evidence written to {case / 'evidence.csv'}", markup=False)
    return EXIT_FINDINGS if result.cross_tenant else EXIT_CLEAN

# --------------------------------------------------------------------------------------------
# report / run / verify
# --------------------------------------------------------------------------------------------



@app.command(cls=PlainCommand)
@setting_options("report")
def report(
    case: Path = typer.Option(..., "--case", metavar="DIR", help="Case folder that has been scanned and matched."),
    config: Optional[Path] = typer.Option(None, "--config", metavar="CASE.toml",
                                          help="Case file, the one the case was ingested and scanned with (another is refused); "
                                               "default: the settings its ingest and scan saved (config.json)."),
    out_dir: Path = typer.Option(Path("reports"), "--out", metavar="DIR", help="Where report folders go (OUT/<case name>/)."),
    sign: Optional[Path] = typer.Option(None, "--sign", metavar="KEY.pem", help="Ed25519 private key (PEM) to sign manifest.json with (manifest.json.sig)."),
    settings: dict[str, object] = SETTINGS_OPTIONS,
    as_json: bool = typer.Option(False, "--json", help="Print only the summary as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> int:
    """Write the report: who must be told, their notices, the summary and the manifest.

    Exit 1 when any customer must be notified, 0 when nobody must.
    """
    from forensics import api
    from forensics.verify import check_private_key
    from forensics.verify import sealed as read_seal

    if sign is not None:  # a bad key must fail before the report is written, not after it
        check_private_key(sign)
    cfg = api.make_config(config) if config is not None else None
    result = api.report(case, cfg, out_dir, progress=_progress(quiet), sign=sign, options=settings)
    _warn_leftovers(result)
    sealed = read_seal(result.report_dir)
    if as_json:
        _emit_json(result.summary() | sealed.summary())
    elif not quiet:
        for w in result.notes:
            err.print(f"warning: {escape_controls(w)}", markup=False)
        _render_report(result)
        _render_seal(sealed)
    return EXIT_FINDINGS if result.has_findings else EXIT_CLEAN


def _warn_leftovers(result: ReportResult) -> None:
    # Even with --quiet or --json: an old report left on disk holds customer data someone must delete.
    for w in result.warnings:
        err.print(f"warning: {escape_controls(w)}", markup=False)


def _render_seal(sealed: Seal) -> None:
    out.print(f"manifest.json SHA-256: {sealed.manifest_sha256} (record it outside the report; "
              "`forensics verify` prints it again)", markup=False)
    if sealed.signature:
        out.print(f"signed: {sealed.signature}", markup=False)


def _render_report(result: ReportResult, stages: list[StageTiming] | None = None) -> None:
    if stages:
        table = _table("stages")
        for col in ("stage", "rows", "what", "seconds"):
            table.add_column(col, justify="left" if col in ("stage", "what") else "right")
        for s in stages:
            _add_row(table, s.stage, "-" if s.rows is None else str(s.rows), s.note, f"{s.seconds:.2f}")
        out.print(table)
    table = _table("customers to notify")
    for col in ("role", "confirmed", "probable", "possible"):
        table.add_column(col, justify="left" if col == "role" else "right")
    by_role = result.by_role_and_tier()
    for role in ("exposed", "recipient"):
        tiers = by_role.get(role, {})
        _add_row(table, role, *(str(tiers.get(t, 0)) for t in ("confirmed", "probable", "possible")))
    out.print(table)
    out.print(
        f"suspect responses: {result.suspects}  cross-tenant findings: {result.cross_tenant_findings}  "
        f"packets: {len(result.packets)}"
    )
    out.print(f"report written to {result.report_dir}", markup=False)


@app.command(cls=PlainCommand)
@setting_options("ingest", "scan", "match", "report", "run")
def run(
    config_or_log_dir: Path = typer.Argument(..., metavar="CASE.toml|LOG_DIR",
                                             help="A case file, or a folder holding one case file (a *.toml with the case-file keys; "
                                                  "case.toml when there are several)."),
    out_dir: Path = typer.Option(Path("reports"), "--out", metavar="DIR", help="Where report folders go (OUT/<case name>/)."),
    sign: Optional[Path] = typer.Option(None, "--sign", metavar="KEY.pem", help="Ed25519 private key (PEM) to sign manifest.json with (manifest.json.sig)."),
    name: Optional[str] = typer.Option(None, "--name", metavar="NAME", help="The case's name, over the case file's (the report goes to OUT/<name>/)."),
    model: Optional[list[str]] = typer.Option(None, "--model", metavar="MODEL", help="Affected model, over the case file's (repeat for several)."),
    window_start: Optional[str] = typer.Option(None, "--window-start", metavar="TIME",
                                               help="Incident window start, UTC ISO 8601 (inclusive), over the case file's."),
    window_end: Optional[str] = typer.Option(None, "--window-end", metavar="TIME", help="Incident window end, UTC ISO 8601 (exclusive), over the case file's."),
    description: Optional[str] = typer.Option(None, "--description", metavar="TEXT", help="Free text for the summary, over the case file's."),
    settings: dict[str, object] = SETTINGS_OPTIONS,
    as_json: bool = typer.Option(False, "--json", help="Print only the summary as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> int:
    """Ingest, scan, match and report in one command.

    Every case-file key but [[inputs]] may be given as an option: it overrides the case file's value
    for this run, and the manifest records it as an option's. Exit 0 when nothing was found, 1 when
    customers must be notified, 2 on an error.
    """
    from forensics import api
    from forensics.verify import check_private_key
    from forensics.verify import sealed as read_seal

    if sign is not None:  # a bad key must fail before the run, not after it
        check_private_key(sign)
    given = {"name": name, "models": model or None, "window_start": window_start, "window_end": window_end,
             "description": description, **settings}
    result = api.run(config_or_log_dir, out_dir, progress=_progress(quiet), sign=sign, options=given)
    _warn_leftovers(result.report)
    sealed = read_seal(result.report.report_dir)
    if as_json:
        _emit_json(result.summary() | sealed.summary())
    elif not quiet:
        for w in result.notes:  # (the stages run alone print theirs; --quiet prints only what must be cleaned up)
            err.print(f"warning: {escape_controls(w)}", markup=False)
        _render_report(result.report, result.stages)
        _render_seal(sealed)
    return EXIT_FINDINGS if result.has_findings else EXIT_CLEAN


@app.command(cls=PlainCommand)
def verify(
    report_dir: Path = typer.Argument(..., metavar="REPORT_DIR", help="A report folder (holds manifest.json)."),
    inputs: Optional[Path] = typer.Option(None, "--inputs", metavar="DIR", help="Folder the input paths are relative to, if moved."),
    key: Optional[Path] = typer.Option(None, "--key", metavar="KEY.pem.pub", help="Ed25519 public key (PEM) to check manifest.json.sig with."),
    rerun: bool = typer.Option(False, "--rerun", help="Re-run the pipeline from the recorded inputs and parameters and compare byte for byte."),
    as_json: bool = typer.Option(False, "--json", help="Print only the result as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> int:
    """Check that a report is intact and consistent.

    Checks the signature, the inputs and outputs against the manifest, the report's own tables
    (notifications from evidence, packets from notifications, summary counts from the tables)
    and, with --rerun, a fresh run compared byte for byte. Exit 1 on any drift.
    """
    from forensics import api

    result = api.verify(report_dir, inputs, key=key, rerun=rerun, progress=_progress(quiet))
    heads = _ledger_heads(report_dir)
    if as_json:
        _emit_json(result.summary() | {"ledgers": heads})
    elif not quiet:
        for d in result.drift:
            out.print(f"drift: {d}", markup=False)
        out.print(f"manifest.json SHA-256: {result.manifest_sha256} (compare with the value recorded at the run)", markup=False)
        for name, head in heads.items():
            out.print(f"{name}: {head['lines']} line(s), last line SHA-256 {head['head_sha256']} (compare with the value "
                      "printed when its last line was recorded)", markup=False)
        out.print(f"signature: {result.signature}", markup=False)
        done = "files checked, tables cross-checked" + (", re-run compared byte for byte" if result.rerun else "")
        out.print(f"{'OK' if result.ok else 'DRIFT'}: {result.checked} {done}; {len(result.drift)} problem(s)", markup=False)
    return EXIT_CLEAN if result.ok else EXIT_FINDINGS


def _single_or_import(import_csv: Optional[Path], what: str, given: dict[str, Optional[str]], usage: str) -> None:
    """Entries come from --import alone, or from a single entry's options, every one of them given."""
    options = [f"--{name}" for name in given]
    if import_csv is not None:
        if any(given.values()):
            raise ForensicsError(f"--import and {'/'.join(options)} are exclusive", fix="give one or the other")
    elif not all(given.values()):
        raise ForensicsError(f"a {what} needs {', '.join(options[:-1])} and {options[-1]}", fix=usage)


def _when(value: Optional[str], option: str) -> Any:
    """A UTC time option (None stays None: the library takes the current time)."""
    from forensics.config import parse_utc

    return None if value is None else parse_utc(value, option)


@app.command(cls=PlainCommand)
def review(
    report_dir: Path = typer.Argument(..., metavar="REPORT", help="A report folder (holds manifest.json)."),
    finding: Optional[str] = typer.Option(None, "--finding", metavar="ID", help="Finding id from evidence.csv or review.csv."),
    verdict: Optional[str] = typer.Option(None, "--verdict", metavar="VERDICT", help="confirm, dismiss or escalate."),
    reason: Optional[str] = typer.Option(None, "--reason", metavar="TEXT", help="Why (kept in verdicts.jsonl and the summary)."),
    analyst: Optional[str] = typer.Option(None, "--analyst", metavar="NAME", help="Who decided."),
    import_csv: Optional[Path] = typer.Option(None, "--import", metavar="VERDICTS.csv", help="CSV of verdicts: finding_id,verdict,reason,analyst."),
    as_json: bool = typer.Option(False, "--json", help="Print the verdicts this command records as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> int:
    """Record an analyst's verdict on a finding.

    Appended to the report's hash-chained verdicts.jsonl; the next `forensics report` or `run`
    applies it (a dismissed finding leaves the list, a confirmed review candidate joins it).
    """
    from forensics.review import verdicts as lib

    _single_or_import(import_csv, "verdict", {"finding": finding, "verdict": verdict, "reason": reason, "analyst": analyst},
                      "forensics review REPORT --finding ID --verdict confirm|dismiss|escalate --reason TEXT --analyst NAME")
    if import_csv is not None:
        rows = lib.read_import(report_dir, import_csv)
    else:
        rows = [lib.check(report_dir, finding or "", verdict or "", reason or "", analyst or "")]
    written = lib.record(report_dir, rows)
    if as_json:
        _emit_json(_with_head(report_dir, "verdicts.jsonl", written))
    elif not quiet:
        for e in written:
            out.print(_text(f"recorded #{e['seq']}: {e['verdict']} {e['finding_id']} by {e['analyst']} at {e['at']}"))
        _print_ledger_head(report_dir, "verdicts.jsonl")
        out.print("run `forensics report` (or `run`) again to re-render the list and packets with these verdicts", markup=False)
    return EXIT_CLEAN


def _ledger_heads(report_dir: Path) -> dict[str, dict[str, object]]:
    """Each ledger's lines and the SHA-256 of its last line (its head), as the chain reads them."""
    from forensics.review import LEDGERS, chain

    heads: dict[str, dict[str, object]] = {}
    for name in LEDGERS:
        path = Path(report_dir) / name
        if path.is_file():
            c = chain.read(path)
            heads[name] = {"lines": len(c.entries), "head_sha256": c.head}
    return heads


def _with_head(report_dir: Path, name: str, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries a command recorded, as --json prints them: each with the ledger's head after the append."""
    head = _ledger_heads(report_dir).get(name) or {}
    return [dict(e, ledger_lines=head.get("lines"), ledger_head_sha256=head.get("head_sha256")) for e in entries]


def _print_ledger_head(report_dir: Path, name: str) -> None:
    # The newest lines are anchored by nothing in the report until the next render: whoever can edit the file can
    # rewrite them with their hashes. The head recorded elsewhere now is what shows such an edit later.
    head = _ledger_heads(report_dir).get(name)
    if head is not None:
        out.print(f"{name}: {head['lines']} line(s), last line SHA-256 {head['head_sha256']} (record it outside the "
                  "report: `forensics verify` prints it again)", markup=False)


@app.command(cls=PlainCommand)
def notified(
    report_dir: Path = typer.Argument(..., metavar="REPORT", help="A report folder (holds manifest.json)."),
    tenant: Optional[str] = typer.Option(None, "--tenant", metavar="TENANT", help="The customer notified (tenant_id as in notifications.csv)."),
    channel: Optional[str] = typer.Option(None, "--channel", metavar="CHANNEL", help="email, portal or letter."),
    at: Optional[str] = typer.Option(None, "--at", metavar="TIME", help="When the notice was sent, UTC ISO 8601 with a zone."),
    ref: Optional[str] = typer.Option(None, "--ref", metavar="TEXT", help="Reference of the message sent (ticket, letter number)."),
    import_csv: Optional[Path] = typer.Option(None, "--import", metavar="NOTICES.csv", help="CSV of notices: tenant_id,channel,at,ref."),
    as_json: bool = typer.Option(False, "--json", help="Print the notices this command records as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> int:
    """Record a notice sent to a customer.

    Appended to the report's hash-chained notices.jsonl, which `forensics audit` reads.
    """
    from forensics.review import ledger

    _single_or_import(import_csv, "notice", {"tenant": tenant, "channel": channel, "at": at, "ref": ref},
                      "forensics notified REPORT --tenant ID --channel email|portal|letter --at TIME --ref TEXT")
    if import_csv is not None:
        rows = ledger.read_import(import_csv)
    else:
        rows = [ledger.check(tenant or "", channel or "", at or "", ref or "")]
    written = ledger.record(report_dir, rows)
    warnings = {e["tenant_id"]: ledger.naming_warnings(report_dir, [e["tenant_id"]]) for e in written}
    for warning in [w for ws in warnings.values() for w in ws]:
        err.print(_text(f"warning: {warning}"))
    if as_json:
        # A script must see a mistyped id and the head to keep, as a person reading the text does.
        _emit_json(_with_head(report_dir, "notices.jsonl", [dict(e, warnings=warnings[e["tenant_id"]]) for e in written]))
    elif not quiet:
        for e in written:
            out.print(_text(f"recorded #{e['seq']}: {e['tenant_id']} notified by {e['channel']} at {e['at']} (ref {e['ref']})"))
        _print_ledger_head(report_dir, "notices.jsonl")
    return EXIT_CLEAN


@app.command(cls=PlainCommand)
def audit(
    report_dir: Path = typer.Argument(..., metavar="REPORT", help="A report folder (holds manifest.json)."),
    now: Optional[str] = typer.Option(None, "--now", metavar="TIME", help="The time to audit at, UTC ISO 8601 (default: the clock); fixes re-runs."),
    as_json: bool = typer.Option(False, "--json", help="Print the audit as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> int:
    """Check who on the list has not been notified yet.

    Compares notices sent with the notification list and writes audit.csv; exit 1 while anyone
    on the list is not notified.
    """
    from forensics.review import ledger

    result = ledger.audit(report_dir, _when(now, "--now"))
    summary = result.summary()
    if result.verdicts_since_render and not as_json and not quiet:
        err.print(f"warning: {result.verdicts_since_render} verdict(s) recorded since the report was rendered are not "
                  "applied to the list audited (nor covered by its manifest or signature): render the report again "
                  "(forensics report, or run) to apply them", markup=False)
    if as_json:
        _emit_json(summary)
    elif not quiet:
        table = _table(f"audit of {result.report_dir} at {summary['now']} (deadline {summary['notify_within_hours']:g} h)")
        for col in ("customer", "roles", "status", "notified", "evidence from", "days", "deadline", "overdue", "problems"):
            table.add_column(col, overflow="fold")
        for r in summary["customers"]:
            _add_row(table, r["tenant_id"], r["roles"] or "-", r["status"], r["notified_at"] or "-", r["evidence_from"],
                     r["days_since_report"], r["deadline"] or "-", "OVERDUE" if r["overdue"] else "", r["problems"])
        out.print(table)
        out.print(f"not notified: {summary['not_notified']} (overdue {summary['overdue']}); notified but not on the "
                  f"list: {summary['notified_not_on_list']}; notices before their evidence: {summary['notices_before_evidence']}; "
                  f"notified with findings since: {summary['new_findings_since_notice']}",
                  markup=False)
        out.print(f"audit written to {summary['audit_csv']}", markup=False)
    return EXIT_CLEAN if result.ok else EXIT_FINDINGS


@app.command(cls=PlainCommand)
def viewer(
    report_dir: Path = typer.Argument(..., metavar="REPORT", help="A report folder (holds manifest.json)."),
    case: Optional[Path] = typer.Option(None, "--case", metavar="DIR", help="The case folder the report was made from (default: REPORT/case)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_ONLY_HELP),
) -> int:
    """Write the evidence viewer, review.html, into the report.

    Every finding and review candidate, both texts side by side with the matched passages
    highlighted, filters and keyboard navigation; one file, no network.
    """
    from forensics.review import viewer as lib

    written = lib.build(report_dir, case)
    if not quiet:
        out.print(f"evidence viewer written to {written}", markup=False)
    return EXIT_CLEAN


@app.command(cls=PlainCommand)
def keygen(
    key_file: Path = typer.Argument(..., metavar="KEY.pem", help="Where to write the private key (PEM); the public key goes to KEY.pem.pub."),
    as_json: bool = typer.Option(False, "--json", help="Print only the paths as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> int:
    """Make an Ed25519 key pair for signing reports.

    Sign with run/report --sign KEY.pem; check with verify --key KEY.pem.pub.
    """
    from forensics.verify import keygen as make_key

    private, public = make_key(key_file)
    if as_json:
        _emit_json({"private_key": str(private), "public_key": str(public)})
    elif not quiet:
        out.print(f"private key (keep it secret, sign with --sign): {private}", markup=False)
        out.print(f"public key (give it to whoever verifies, with verify --key): {public}", markup=False)
    return EXIT_CLEAN


# --------------------------------------------------------------------------------------------
# probe
# --------------------------------------------------------------------------------------------

from forensics.probe.core import DEFAULT_MAX_TOTAL_TOKENS  # noqa: E402 - the option's default, shown in --help


@app.command(cls=PlainCommand)
def probe(
    base_url: str = typer.Option(..., "--base-url", metavar="URL", help="API root of the OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1."),
    model: str = typer.Option(..., "--model", metavar="MODEL", help="Model name to send."),
    max_input_tokens: int = typer.Option(..., "--max-input-tokens", metavar="TOKENS", help="The advertised maximum input (prompt) tokens."),
    api_key_env: Optional[str] = typer.Option(None, "--api-key-env", metavar="VAR",
                                              help="Environment variable holding the API key (never printed or written)."),
    pairs: int = typer.Option(1, "--pairs", metavar="N", help="Pairs of distinct prompts sent back to back per level."),
    levels: str = typer.Option("0.5,0.9,0.99", "--levels", metavar="FRACTIONS", help="Prompt sizes as fractions of --max-input-tokens."),
    stream: bool = typer.Option(False, "--stream", help="Use streaming responses (server-sent events)."),
    find_ceiling: bool = typer.Option(False, "--find-ceiling", help="Also bisect for the largest size that answers correctly (within 2%)."),
    max_total_tokens: int = typer.Option(DEFAULT_MAX_TOTAL_TOKENS, "--max-total-tokens", metavar="TOKENS",
                                         help="Token budget: a plan that could exceed it is refused before sending."),
    max_tokens: int = typer.Option(64, "--max-tokens", metavar="TOKENS", help="max_tokens of each answer."),
    timeout: float = typer.Option(120.0, "--timeout", metavar="SECONDS", help="Seconds to wait for each request."),
    retries: int = typer.Option(3, "--retries", metavar="N", help="Retries of a request answered 429 or 5xx (exponential backoff)."),
    seed: int = typer.Option(0, "--seed", metavar="N", help="Seed of the generated markers: same seed, same prompts."),
    tokenizer: Optional[Path] = typer.Option(None, "--tokenizer", metavar="TOKENIZER.json",
                                             help="The model's tokenizers JSON file, to size prompts without calibration requests."),
    out_dir: Optional[Path] = typer.Option(None, "--out", metavar="DIR", help="Folder to write probe.json and probe.md into."),
    as_json: bool = typer.Option(False, "--json", help="Print only the report as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> int:
    """Canary check of a chat endpoint near its advertised maximum.

    Exit 0 clean, 1 a leak or an incoherent answer found, 2 could not test.
    """
    from forensics import probe as lib

    settings = lib.ProbeSettings(
        client=lib.ClientSettings(base_url=base_url, model=model, api_key=lib.api_key_from_env(api_key_env),
                                  timeout=timeout, retries=retries, max_tokens=max_tokens, stream=stream),
        max_input_tokens=max_input_tokens, levels=lib.parse_levels(levels), pairs=pairs, find_ceiling=find_ceiling,
        max_total_tokens=max_total_tokens, seed=seed, tokenizer=tokenizer, api_key_env=api_key_env,
    )
    settings.validate()
    if out_dir is not None:
        lib.check_out_dir(out_dir)  # before a token is spent
    show = None if quiet or not err.is_terminal else _probe_progress
    result = lib.probe(settings, on_request=show)
    data = result.to_json()
    try:
        written = lib.write_report(result, out_dir) if out_dir is not None else []
    except OutputError:
        if not as_json and not quiet:
            _render_probe(data, [])  # the verdict the run paid for, before the error
        raise
    if as_json:
        _emit_json(data | {"report_files": [str(p) for p in written]})
    elif not quiet:
        _render_probe(data, written)
    return {"findings": EXIT_FINDINGS, "untested": EXIT_ERROR}.get(result.verdict, EXIT_CLEAN)


def _probe_progress(rec: Any) -> None:
    err.print(f"{rec.label}: {rec.planned_tokens} tokens planned, status {rec.status or rec.error}"
              + (f", {', '.join(rec.flags)}" if rec.flags else ""), markup=False)


def _render_probe(data: dict[str, Any], written: list[Path]) -> None:
    from forensics import probe as lib

    cal = data["calibration"]
    out.print(f"calibration ({cal['source']}): {cal['bytes_per_token']} bytes per token, "
              f"{cal['intercept_tokens']} fixed tokens per request", markup=False)
    table = _table(f"probe of {data['endpoint']['base_url']} ({data['endpoint']['model']})")
    for col in ("request", "planned tokens", "status", "usage prompt_tokens", "own markers", "foreign markers from", "flags"):
        table.add_column(col, justify="right" if col in ("planned tokens", "usage prompt_tokens", "own markers") else "left")
    for r in data["requests"]:
        foreign = ", ".join(f"{f['from_prompt']} ({f['count']})" for f in r["foreign_markers"]) or "-"
        prompt_tokens = r["usage"]["prompt_tokens"]
        _add_row(table, r["label"], r["planned_tokens"], r["status"] if r["status"] is not None else "-",
                 "-" if prompt_tokens is None else prompt_tokens, r["own_markers_found"] if r["status"] == 200 else "-",
                 foreign, ", ".join(r["flags"]) or "ok")
    out.print(table)
    for f in data["findings"]:
        out.print(f"finding: {f['request']}: {lib.finding_text(f)}", markup=False)
    for w in data["warnings"]:
        out.print(f"warning: {escape_controls(w)}", markup=False)
    c = data["ceiling"]
    if c is not None:
        if c["first_failing_tokens"] is None:
            out.print(f"ceiling: answers correctly up to the advertised maximum (largest size tested: {c['ceiling_tokens']} tokens)", markup=False)
        else:
            out.print(f"ceiling: {c['ceiling_tokens']} tokens answer correctly, {c['first_failing_tokens']} do not "
                      f"({c['requests']} requests)" + (f"; stopped: {c['stopped']}" if c["stopped"] else ""), markup=False)
    b = data["budget"]
    out.print(f"tokens spent (upper bound): {b['spent_tokens']} of {data['parameters']['max_total_tokens']}", markup=False)
    verdicts = {"clean": "CLEAN: no leak, every answer addressed its own prompt",
                "findings": "FINDINGS: a leak or an incoherent answer (evidence above and in probe.json)",
                "untested": "UNTESTED: part of the plan could not be tested (see warnings)"}
    out.print(verdicts[data["verdict"]], markup=False)
    for p in written:
        out.print(f"written: {p}", markup=False)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``forensics`` console script."""
    try:
        with signals_stop_the_run(on_stuck=_stuck):
            code = app(args=argv, prog_name="forensics", standalone_mode=False)
    except ForensicsError as exc:
        err.print(f"error: {exc}", markup=False)
        code = EXIT_ERROR
    except Interrupted as exc:  # exit codes as a shell reports a process killed by the signal
        _tell_interrupted(exc.signum)
        code = 128 + exc.signum
    except KeyboardInterrupt:
        err.print("interrupted")
        code = EXIT_ERROR
    except Exception as exc:  # a bug, not bad input: say so in one line; the traceback on request
        outcome = _click_outcome(exc)
        if outcome is not None:
            sys.exit(outcome)
        if os.environ.get("FORENSICS_DEBUG"):  # a developer's view: which write failed, where
            raise
        system = _system_error(exc)
        if system is not None:  # the machine's doing (a full disk...), not a bug: told as bad input is
            err.print(f"error: {system}", markup=False)
            sys.exit(EXIT_ERROR)
        err.print(
            f"internal error: {type(exc).__name__}: {exc} (this is a bug in forensics; "
            "re-run with FORENSICS_DEBUG=1 for the traceback and report it)",
            markup=False,
        )
        code = EXIT_ERROR
    sys.exit(code if isinstance(code, int) else EXIT_CLEAN)
