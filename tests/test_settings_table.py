"""The settings table (forensics/settings.py) is the one source of the case file's keys."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from forensics import cli, config, settings
from forensics.match import tiers
from forensics.report import notices

ROOT = Path(__file__).resolve().parent.parent


def test_match_settings_are_the_matchers_parameters_with_their_defaults() -> None:
    params = {f.name: f.default for f in dataclasses.fields(tiers.MatchParams)}
    table = {s.key: s.default for s in settings.section("match")}
    assert table == params
    # What does not change results is what match.json leaves out of its parameters.
    assert {s.key for s in settings.section("match") if not s.result} == set(params) - set(tiers.MatchParams().record())


def test_validation_reads_its_types_and_ranges_from_the_table() -> None:
    for s in settings.section("match"):
        if s.kind in ("int", "float"):
            assert tiers.NUMERIC_BOUNDS[s.key] == (int if s.kind == "int" else float, s.low, s.high)
    assert config.TOKEN_BOUNDS == settings.get("", "real_ceiling_tokens").bounds()
    assert config.SECTION_KEYS["report"] == {s.key for s in settings.section("report")}
    assert notices.MASK_POLICIES == settings.get("report", "mask").choices


def test_top_level_defaults_are_what_a_run_without_the_key_uses() -> None:
    """scan --help and docs/settings.md said --ceiling defaults to "auto", yet a scan without it stops on
    "real_ceiling_tokens is not set": the ceiling is required (a guessed pool would change who is a suspect)."""
    table = {s.key: s.default for s in settings.section("")}
    assert table == {key: getattr(config.CaseConfig(), key) for key in table}
    ceiling = " ".join(cli.help_text("scan").split("--ceiling", 1)[1].split("--advertised-window")[0].split())
    assert 'default "auto"' not in ceiling and "Required: no default" in ceiling
    row = next(line for line in settings.markdown().splitlines() if line.startswith("| `real_ceiling_tokens` |"))
    assert row.split(" | ")[2] == "required"


@pytest.mark.parametrize("setting", [s for s in settings.SETTINGS if s.cli], ids=lambda s: s.name)
def test_every_named_option_exists_on_its_command(setting: settings.Setting) -> None:
    text = cli.help_text(setting.option_command)
    for name in (setting.cli or "").split("/"):  # an on/off flag names both
        assert f"{name} " in text or f"{name}\n" in text


def test_the_settings_reference_is_fresh() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "docs" / "gen_cli.py"), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (ROOT / "docs" / "settings.md").read_text(encoding="utf-8") == settings.markdown() + "\n"
