"""Every numeric setting has a type and bounds: NaN, infinities and absurd magnitudes are refused
with an error naming the key, the value and the allowed range (issue 11, item 5)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from forensics.cli import main
from forensics.config import NUMERIC_KEYS, load_case_file
from forensics.errors import ConfigError
from forensics.match.tiers import NUMERIC_BOUNDS, MatchParams, params_from

BASE = """\
name = "settings"
model = "glm-5.3"
window_start = "2026-08-27T00:00:00Z"
window_end = "2026-09-09T00:00:00Z"
real_ceiling_tokens = 2000
advertised_window_tokens = 8192
"""

#: Bad values per numeric key, as TOML literals. Every numeric setting must be listed here
#: (test_the_table_covers_every_numeric_setting), so a new knob cannot skip validation.
BAD: dict[str, list[str]] = {
    "real_ceiling_tokens": ["0", "-5", "1e20", "100000000000000000000", "nan", "inf", "2000.5", '"²"', '"８１９２"', '"٨١٩٢"'],
    "advertised_window_tokens": ["0", "-1", "1e30", "99999999999999999999", "nan", "-inf", '"²"'],
    "k": ["1", "1e20", "100000000000000000000", "nan", "inf", "5.0", "true"],
    "min_tokens": ["0", "-3", "10000000000", "nan", "inf"],
    "confirm_tokens": ["0", "10000000000", "nan", "-inf"],
    "min_run": ["0", "10000000000", "nan"],
    "max_tenants": ["0", "10000000000", "inf"],
    "control_size": ["-1", "10000000000", "nan"],
    "seed": ["-1", "18446744073709551616", "nan", '"7"'],
    "margin": ["-1", "10000000000", "inf"],
    "gap": ["0", "10000000000", "nan"],
    "workers": ["-1", "1000000", "nan"],
    "batch_rows": ["0", "10000000000", "inf"],
    "confirm_score": ["nan", "inf", "-inf", "-0.5", "100.5", "1e20", '"90"', "true"],
    "probable_score": ["nan", "inf", "-1", "101"],
    "damaged_score": ["nan", "-inf", "-1", "101"],
    "confirm_rarity": ["nan", "inf", "-0.1", "1.5"],
    "probable_rarity": ["nan", "-inf", "-0.1", "2"],
    "signature_rarity": ["nan", "inf", "1.01"],
    "lookback_minutes": ["nan", "inf", "-1", "1e20"],
    "confirm_evalue": ["nan", "inf", "-1e-9", "1e20"],
    "probable_evalue": ["nan", "inf", "-1", "1e9"],
    "unexplained_evalue": ["nan", "inf", "-1", "1e9"],
}
CASES = [(key, value) for key, values in BAD.items() for value in values]


def _case_text(key: str, value: str) -> str:
    if key in NUMERIC_KEYS:
        return "\n".join(f"{key} = {value}" if line.startswith(key + " =") else line for line in BASE.splitlines()) + "\n"
    return BASE + f"\n[match]\n{key} = {value}\n"


def test_the_table_covers_every_numeric_setting() -> None:
    numeric = {f.name for f in dataclasses.fields(MatchParams) if f.type in ("int", "float")}
    assert numeric == set(NUMERIC_BOUNDS)
    assert set(BAD) == numeric | set(NUMERIC_KEYS)


@pytest.mark.parametrize(("key", "value"), CASES, ids=[f"{k}={v}" for k, v in CASES])
def test_a_bad_value_is_refused_naming_key_value_and_range(tmp_path: Path, key: str, value: str) -> None:
    path = tmp_path / "case.toml"
    path.write_text(_case_text(key, value), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_case_file(path)
    text = str(info.value)
    assert key in text and " from " in text and " to " in text, text
    shown = value.strip('"').lower()
    assert shown.replace("+", "") in text.lower().replace("+", "") or repr(float(value)) in text, text
    assert str(path) in text


@pytest.mark.parametrize("key", sorted(NUMERIC_BOUNDS))
def test_the_bounds_themselves_are_accepted(key: str) -> None:
    kind, lo, hi = NUMERIC_BOUNDS[key]
    for value in (lo, hi):
        assert getattr(params_from({key: kind(value)}), key) == value


def test_a_confirm_threshold_looser_than_the_probable_one_is_warned_of() -> None:
    """confirm_evalue = 0.01 beside probable_evalue = 0.001 was accepted without a word: confirmed became the looser
    tier (a review). Refused, a report made with such a case file could no longer be verified: a warning."""
    from forensics.match.tiers import looser_confirm  # noqa: PLC0415

    warning = looser_confirm(params_from({"confirm_evalue": 0.01, "probable_evalue": 0.001}))
    assert warning is not None and "confirm_evalue (0.01) is above probable_evalue (0.001)" in warning
    assert looser_confirm(params_from({"confirm_evalue": 0.001, "probable_evalue": 0.001})) is None
    # The fixed rules use neither threshold.
    assert looser_confirm(params_from({"confirm_evalue": 0.01, "probable_evalue": 0.001, "tiering": "rules"})) is None


def test_run_prints_the_looser_confirm_warning(tmp_path: Path) -> None:
    from test_run import CASE_TOML, write_logs  # noqa: PLC0415

    from forensics import api  # noqa: PLC0415

    logs = write_logs(tmp_path / "logs")
    (logs / "case.toml").write_text(CASE_TOML + "\n[match]\nconfirm_evalue = 0.01\nprobable_evalue = 0.001\n",
                                    encoding="utf-8")
    result = api.run(logs / "case.toml", tmp_path / "out")
    assert any("confirm_evalue (0.01) is above probable_evalue (0.001)" in w for w in result.notes)


def test_a_bad_option_names_the_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match=r"--confirm-score = nan is not allowed: it must be a number from 0 to 100"):
        params_from({}, {"confirm_score": float("nan")})
    with pytest.raises(SystemExit) as info:
        main(["match", "--case", str(tmp_path / "nothing"), "--k", "100000000000000000000"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--k = 100000000000000000000 is not allowed" in err and "from 2 to 64" in err
    assert "Traceback" not in err


def test_run_refuses_a_nan_threshold_before_ingesting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "case.toml").write_text(BASE + '\n[[inputs]]\npath = "logs"\n\n[match]\nconfirm_score = nan\n', encoding="utf-8")
    with pytest.raises(SystemExit) as info:
        main(["run", str(tmp_path / "case.toml"), "--out", str(tmp_path / "out"), "-q"])
    assert info.value.code == 2
    assert "[match] confirm_score = nan is not allowed: it must be a number from 0 to 100" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused before any stage wrote anything


def test_too_large_a_ceiling_option_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as info:
        main(["scan", "--case", str(tmp_path), "--ceiling", "99999999999999999999999"])
    assert info.value.code == 2
    assert "real_ceiling_tokens = 99999999999999999999999 is not a positive whole number from 1 to" in capsys.readouterr().err
