"""The case file (spec/case-file.md): what is accepted, what is refused and how, where values came from."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from forensics.api import make_config
from forensics.config import CaseConfig, load_case_file, load_saved, save
from forensics.errors import ConfigError
from forensics.scan import config_for_case

GOOD = """\
name = "glm-5.3-kv-pool"
model = "glm-5.3"
window_start = "2026-08-27T00:00:00Z"
window_end = "2026-09-09T02:00:00+02:00"
real_ceiling_tokens = 681280
advertised_window_tokens = "auto"
timezone = "Europe/Berlin"

[[inputs]]
format = "litellm"
path = "logs/gateway"

[[inputs]]
path = "logs/engine"

[match]
k = 12
"""


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "case.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_good_case_file(tmp_path: Path) -> None:
    cfg = load_case_file(_file(tmp_path, GOOD))
    assert cfg.name == "glm-5.3-kv-pool" and cfg.models == ["glm-5.3"]
    assert cfg.window_start == dt.datetime(2026, 8, 27, tzinfo=dt.UTC)
    assert cfg.window_end == dt.datetime(2026, 9, 9, tzinfo=dt.UTC)  # offsets become UTC
    assert (cfg.real_ceiling_tokens, cfg.advertised_window_tokens) == (681280, "auto")
    assert [(i.path, i.format) for i in cfg.inputs] == [((tmp_path / "logs/gateway").resolve(), "litellm"),
                                                        ((tmp_path / "logs/engine").resolve(), "auto")]
    assert cfg.section("match") == {"k": 12} and cfg.section("scan") == {}
    assert cfg.source("real_ceiling_tokens") == "file" and cfg.source("tenant_field") == "default"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("model = ", "modle = "), "unknown key 'modle'"),
        (('real_ceiling_tokens = 681280\n', ""), "missing required key 'real_ceiling_tokens'"),
        (('model = "glm-5.3"\n', ""), "missing required key 'model'"),
        (('name = "glm-5.3-kv-pool"', 'name = ""'), "required key 'name' is empty"),
        (('name = "glm-5.3-kv-pool"', 'name = " \t "'), "required key 'name' is empty"),
        (('name = "glm-5.3-kv-pool"', 'name = "\u200b\u00ad\ufeff"'), "required key 'name' is empty"),
        (('model = "glm-5.3"\n', 'model = "a"\nmodels = ["b"]\n'), "both 'model' and 'models'"),
        (("681280", "-5"), "real_ceiling_tokens = -5 is not a positive whole number"),
        (("681280", '"lots"'), "is not a positive whole number"),
        (('"2026-08-27T00:00:00Z"', '"2026-08-27 00:00:00"'), "has no zone"),
        (('"2026-08-27T00:00:00Z"', '"yesterday"'), "is not an ISO 8601 time"),
        # An offset that takes the time out of the years 1 to 9999 in UTC was an internal error (OverflowError).
        (('"2026-08-27T00:00:00Z"', '"0001-01-01T00:00:00+01:00"'), "window_start = '0001-01-01T00:00:00+01:00' lies outside"),
        (('"2026-09-09T02:00:00+02:00"', '"9999-12-31T23:59:59-01:00"'), "window_end = '9999-12-31T23:59:59-01:00' lies outside"),
        # A number was read as a file name, a list as a pattern that matched nothing.
        (('path = "logs/gateway"', "path = 5"), "inputs[0].path must be a non-empty string, got 5"),
        (('path = "logs/gateway"', 'path = ["logs/gateway"]'), "inputs[0].path must be a non-empty string"),
        (('timezone = "Europe/Berlin"', 'tenant_field = ""'), "tenant_field is empty"),
        (('"2026-08-27T00:00:00Z"', '"2026-09-10T00:00:00Z"'), "window_end (2026-09-09T00:00:00Z) is not after window_start"),
        (("681280", "2000000"), "real_ceiling_tokens (2000000) is above advertised_window_tokens"),
        (('"Europe/Berlin"', '"Mars/Olympus"'), "not a known time zone"),
        (('format = "litellm"', 'format = "syslog"'), "is not a known format"),
        (("path = \"logs/engine\"", "paht = \"logs/engine\""), "inputs[1] has no path"),
        (("[match]", "match = 3\n[scan]"), "unknown key 'match' in inputs[1]"),
        (("name = ", "scan = 3\nname = "), "[scan] must be a table"),
        (("k = 12", "k = 12\n[[broken"), "not valid TOML"),
        # A NUL in a path failed as an internal error deep in the file system calls.
        (('path = "logs/gateway"', 'path = "logs/gate\\u0000way"'), "inputs[0].path holds a NUL character"),
        (('timezone = "Europe/Berlin"', 'tokenizer = "tok\\u0000.json"'), "tokenizer holds a NUL character"),
        # Read as the file "5" (or the case's folder): "tokenizer file not found" named neither the key nor the type.
        (('timezone = "Europe/Berlin"', "tokenizer = 5"), "tokenizer = 5 is not a path"),
        (('timezone = "Europe/Berlin"', 'tokenizer = ""'), "tokenizer = '' is not a path"),
        # A link that leads to itself was "internal error: RuntimeError: Symlink loop" (a review).
        (('path = "logs/gateway"', 'path = "selfloop/x"'), "inputs[0].path = 'selfloop/x' cannot be followed"),
        (('timezone = "Europe/Berlin"', 'tokenizer = "selfloop"'), "tokenizer = 'selfloop' cannot be followed"),
    ],
)
def test_bad_case_files_name_the_key(tmp_path: Path, edit: tuple[str, str], message: str) -> None:
    (tmp_path / "selfloop").symlink_to("selfloop")
    text = GOOD.replace(*edit, 1)
    if "2000000" in edit[1]:
        text = text.replace('advertised_window_tokens = "auto"', "advertised_window_tokens = 1048576")
    path = _file(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_case_file(path)
    assert message in str(info.value)
    assert info.value.file == str(path)


def test_an_error_about_a_value_an_option_gave_says_so_and_does_not_blame_the_case_file(tmp_path: Path) -> None:
    """`scan --config case.toml --window-end <before the start>` said "case.toml: window_end ... is not after
    window_start": the value came from the option (a review)."""
    cfg = load_case_file(_file(tmp_path, GOOD))
    cfg.set("window_end", "2026-08-26T00:00:00Z", "option")
    with pytest.raises(ConfigError) as info:
        cfg.validate()
    assert "(window_end given as an option; window_start from the case file)" in str(info.value)
    # Both from options: the error names no case file.
    with pytest.raises(ConfigError) as info:
        make_config(_file(tmp_path, GOOD), window_start="2026-08-28T00:00:00Z", window_end="2026-08-27T00:00:00Z")
    assert info.value.file is None and "(window_end given as an option; window_start given as an option)" in str(info.value)


def test_a_case_file_saved_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    """Windows editors write one: the error blamed the TOML syntax at line 1, column 1 (a review)."""
    path = tmp_path / "case.toml"
    path.write_bytes(b"\xef\xbb\xbf" + GOOD.encode())
    assert load_case_file(path).name == "glm-5.3-kv-pool"


def test_the_stage_sections_a_case_file_gives_are_recorded_as_the_files(tmp_path: Path) -> None:
    """The manifest said sections came from the defaults beside the file's own [match] values (a review)."""
    assert load_case_file(_file(tmp_path, GOOD)).to_json()["sources"]["sections"] == "file"
    plain = GOOD[:GOOD.index("[match]")]
    assert load_case_file(_file(tmp_path, plain)).to_json()["sources"]["sections"] == "default"


def test_a_path_too_long_for_the_file_system_is_a_config_error(tmp_path: Path) -> None:
    """An input or tokenizer named by a 300-character component was "internal error: OSError: File name too long"."""
    from forensics import api  # noqa: PLC0415
    from forensics.tokens import load_tokenizer  # noqa: PLC0415

    long_name = "x" * 300
    path = _file(tmp_path, GOOD.replace('path = "logs/gateway"', f'path = "{long_name}"', 1))
    with pytest.raises(ConfigError) as info:
        api.run(path, tmp_path / "out")
    assert "cannot be read" in str(info.value) and "check the [[inputs]] path" in info.value.fix
    with pytest.raises(ConfigError) as info:
        load_tokenizer(tmp_path / long_name)
    assert "tokenizer file cannot be read" in str(info.value)


def test_a_missing_key_error_shows_an_example_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_case_file(_file(tmp_path, GOOD.replace('window_end = "2026-09-09T02:00:00+02:00"\n', "")))
    assert info.value.fix is not None and 'window_end = "2026-09-09T00:00:00Z"' in info.value.fix


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="case file not found"):
        load_case_file(tmp_path / "nope.toml")


def test_saved_configuration_round_trips(tmp_path: Path) -> None:
    cfg = load_case_file(_file(tmp_path, GOOD))
    cfg.set("advertised_window_tokens", 1048576, "auto-detected")
    save(cfg, tmp_path / "config.json")
    back = load_saved(tmp_path / "config.json")
    assert back.to_json() == cfg.to_json()
    assert back.source("advertised_window_tokens") == "auto-detected"


def test_options_override_the_file_and_are_recorded(tmp_path: Path) -> None:
    cfg = make_config(_file(tmp_path, GOOD), real_ceiling_tokens="600000", models=["a", "b"], window_start=None)
    assert cfg.real_ceiling_tokens == 600000 and cfg.source("real_ceiling_tokens") == "option"
    assert cfg.models == ["a", "b"] and cfg.source("window_start") == "file"
    with pytest.raises(ConfigError, match="window_end"):
        make_config(_file(tmp_path, GOOD), window_end="2026-08-01T00:00:00Z")


def test_scan_configuration_for_a_case(tmp_path: Path) -> None:
    case = tmp_path / "case"
    case.mkdir()
    # nothing saved and no file: only options
    cfg = config_for_case(case, None, models=["glm-5.3"], real_ceiling_tokens="auto", window_start=None)
    assert cfg.models == ["glm-5.3"] and cfg.real_ceiling_tokens == "auto" and cfg.window_start is None
    # a saved configuration is the base; an auto-detected figure is detected again
    saved = CaseConfig(name="x", models=["glm-5.3"], real_ceiling_tokens=681280, advertised_window_tokens=1048576)
    saved.sources = {"real_ceiling_tokens": "auto-detected", "advertised_window_tokens": "auto-detected"}
    save(saved, case / "config.json")
    again = config_for_case(case)
    assert (again.real_ceiling_tokens, again.advertised_window_tokens) == ("auto", "auto")
    assert again.source("real_ceiling_tokens") == "file" and again.source("advertised_window_tokens") == "default"
    # a case file given explicitly wins over the saved one
    assert config_for_case(case, _file(tmp_path, GOOD)).name == "glm-5.3-kv-pool"
    with pytest.raises(ConfigError, match="real_ceiling_tokens"):
        config_for_case(case, None, real_ceiling_tokens="0")


@pytest.mark.parametrize("section", ["scan", "report"])
def test_unknown_key_in_stage_section_is_refused(tmp_path: Path, section: str) -> None:
    from forensics.config import load_case_file
    from forensics.errors import ConfigError

    path = tmp_path / "case.toml"
    path.write_text('name = "c"\nmodel = "m"\nwindow_start = "2026-01-01T00:00:00Z"\n'
                    f'window_end = "2026-02-01T00:00:00Z"\nreal_ceiling_tokens = 10\n[{section}]\nthreshhold = 3\n')
    with pytest.raises(ConfigError, match=f"unknown key 'threshhold' in \\[{section}\\]"):
        load_case_file(path)


@pytest.mark.parametrize(("key", "example"), [("--now", "--now 2026-09-02T10:00:00Z"), ("--at", "--at 2026-09-02T10:00:00Z"),
                                              ("window_end", 'window_end = "2026-09-09T00:00:00Z"')])
def test_a_time_that_cannot_be_read_shows_how_to_write_it(key: str, example: str) -> None:
    """An option's unreadable time ended "Fix: write it like --now = ..." with no example (a review)."""
    from forensics.config import parse_utc  # noqa: PLC0415

    with pytest.raises(ConfigError) as exc:
        parse_utc("yesterday", key)
    assert f"write it like {example}" in str(exc.value)
