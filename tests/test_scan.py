"""The scan stage on hand-made cases and on simulated logs: who is suspect, why, and what is written."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from query_cases.build import ADVERTISED, CEILING, MODEL, WINDOW, event, exchange, signature_events, startup, write_case

from forensics import schema
from forensics.cli import main
from forensics.config import CaseConfig, config_from_mapping, load_saved
from forensics.errors import ConfigError
from forensics.scan import config_for_case, scan


def _config(**values: Any) -> CaseConfig:
    data = {"name": "t", "model": MODEL, "window_start": WINDOW[0], "window_end": WINDOW[1], "real_ceiling_tokens": CEILING,
            "advertised_window_tokens": ADVERTISED} | values
    return config_from_mapping({k: v for k, v in data.items() if v is not None}, base=Path("."))


def _incident(root: Path) -> Path:
    """Three tenants; every way of being (or not being) a suspect, once."""
    ex = [
        # exact count above the ceiling; the gateway logged the placeholder's 1
        exchange("r-above", tenant_id="acme", prompt_tokens=812345, prompt_tokens_source="engine", reported_prompt_tokens=1,
                 received_at="2026-08-29T10:00:00Z"),
        # the gateway's count is the placeholder and nothing corrected it: only the engine trace tells
        exchange("r-sig", tenant_id="globex", prompt_tokens=1, prompt_tokens_source="reported", reported_prompt_tokens=1,
                 received_at="2026-08-28T09:00:00Z"),
        # an estimate whose band straddles the ceiling
        exchange("r-border", tenant_id="initech", prompt_tokens=650000, prompt_tokens_source="estimate",
                 prompt_tokens_low=433000, prompt_tokens_high=1040000, received_at="2026-08-30T08:00:00Z"),
        # not suspects
        exchange("r-small", tenant_id="acme", prompt_tokens=2000, received_at="2026-08-29T11:00:00Z"),
        # (CEILING - 1 is refused: SGLang refuses an input of at least its limit, the pool less one)
        exchange("r-below", tenant_id="globex", prompt_tokens=CEILING - 2, received_at="2026-08-29T12:00:00Z"),
        exchange("r-before", tenant_id="acme", prompt_tokens=900000, received_at="2026-08-26T23:59:59Z"),
        exchange("r-end", tenant_id="acme", prompt_tokens=900000, received_at=WINDOW[1]),
        exchange("r-other-model", tenant_id="initech", model="other-model", prompt_tokens=900000),
        exchange("r-rejected", tenant_id="globex", prompt_tokens=900000, status="failure", response_text=""),
    ]
    ev = [startup("prefill-0"), startup("decode-0", pool=2 * CEILING)]
    ev += signature_events("r-above", 101) + signature_events("r-sig", 102)
    ev += [event("decode-0", "context_corruption", rid="r-small", bootstrap_room=103, other_bootstrap_room=101)]
    return write_case(root, ex, ev)


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_suspects_are_found_for_every_reason_and_nothing_else(tmp_path: Path) -> None:
    root = _incident(tmp_path / "case")
    result = scan(root, _config())
    rows = _csv(root / "suspects.csv")
    assert [(r["request_id"], r["tenant_id"], r["reasons"], r["borderline"], r["engine_signature"]) for r in rows] == [
        ("r-sig", "globex", "engine_signature", "false", "true"),
        ("r-above", "acme", "above_ceiling;engine_signature", "false", "true"),
        ("r-border", "initech", "borderline", "true", "false"),
    ]
    assert (result.suspects, result.borderline, result.engine_signature) == (3, 1, 2)
    assert result.has_findings
    # the placeholder's 1 did not hide either request whose gateway logged it
    assert {r["request_id"] for r in rows if r["reported_prompt_tokens"] == "1"} == {"r-above", "r-sig"}
    assert result.record["suspect_counts"]["reported_count_below_ceiling"] == 2


def test_suspects_csv_follows_the_contract(tmp_path: Path) -> None:
    root = _incident(tmp_path / "case")
    scan(root, _config())
    raw = (root / "suspects.csv").read_bytes()
    header = raw.split(b"\r\n", 1)[0].decode()
    assert header.split(",")[:7] == ["request_id", "tenant_id", "model", "received_at", "prompt_tokens",
                                     "prompt_tokens_source", "reasons"]
    assert raw.endswith(b"\r\n") and b"\n" not in raw.replace(b"\r\n", b"")
    rows = _csv(root / "suspects.csv")
    assert rows[0]["received_at"] == "2026-08-28T09:00:00Z"
    assert [(r["received_at"], r["request_id"]) for r in rows] == sorted((r["received_at"], r["request_id"]) for r in rows)
    table = pq.read_table(root / "suspects.parquet")
    assert table.schema.equals(schema.SUSPECTS, check_metadata=False)
    assert table.column("request_id").to_pylist() == [r["request_id"] for r in rows]


def test_scan_json_records_limits_queries_band_and_anomalies(tmp_path: Path) -> None:
    root = _incident(tmp_path / "case")
    scan(root, _config())
    rec = json.loads((root / "scan.json").read_text(encoding="utf-8"))
    assert rec["parameters"]["real_ceiling_tokens"] == CEILING
    assert rec["parameters"]["real_ceiling_tokens_source"] == "file"
    assert rec["limits"]["real_ceiling_tokens"]["per_node"] == {"decode-0": [2 * CEILING], "prefill-0": [CEILING]}
    assert rec["limits"]["engine_over_limit_lines"] == {"exceeds_max_tokens": [CEILING], "over_limit": [CEILING - 1]}
    by_id = {x["id"]: x for x in rec["queries"]}
    assert by_id["above_ceiling"]["rows"] == 1 and len(by_id["above_ceiling"]["sha256"]) == 64
    assert rec["anomalies"]["context_corruption"]["rows"] == 1
    listed = rec["anomalies"]["context_corruption"]["listed"][0]
    assert (listed["request_id"], listed["other_request_id"]) == ("r-small", "r-above")
    # exposure band: every day and model with prompts at/above the ceiling and within the advertised window
    band = {(r["day"], r["model"]): (r["requests"], r["in_window"]) for r in rec["exposure_band"]}
    assert band[("2026-08-26", MODEL)] == (1, 0)
    assert band[("2026-08-29", "other-model")] == (1, 1)
    assert band[("2026-09-09", MODEL)] == (1, 0)
    assert rec["warnings"] == []  # the over-limit lines agree with the configured ceiling


def test_same_inputs_give_byte_identical_outputs(tmp_path: Path) -> None:
    outputs = []
    for name in ("a", "b"):
        root = _incident(tmp_path / name)
        scan(root, _config())
        outputs.append({f: (root / f).read_bytes() for f in ("suspects.csv", "suspects.parquet", "scan.json")})
    assert outputs[0] == outputs[1]


def test_auto_limits_come_from_the_prefill_startup_lines_and_are_saved(tmp_path: Path) -> None:
    root = write_case(tmp_path / "case", [exchange("r-1", prompt_tokens=700000)],
                      [startup("prefill-0", pool=700001), startup("prefill-1", pool=681280), startup("decode-0", pool=900000),
                       event("prefill-0", "exceeds_max_tokens", rid="x", input_len=800000, limit=700001)])
    cfg = _config(real_ceiling_tokens="auto", advertised_window_tokens="auto")
    result = scan(root, cfg)
    lim = result.record["limits"]["real_ceiling_tokens"]
    assert (lim["value"], lim["source"], lim["nodes_used"], lim["nodes_disagree"]) == (681280, "auto-detected", "prefill", True)
    assert result.suspects == 1  # 700,000 tokens do not fit in the smaller prefill pool
    warnings = " ".join(result.record["warnings"])
    assert "prefill-0=700001" in warnings and "prefill-1=681280" in warnings and "decode-0" not in warnings
    assert "imply a ceiling of 700001" in warnings
    saved = load_saved(root / "config.json")
    assert (saved.real_ceiling_tokens, saved.source("real_ceiling_tokens")) == (681280, "auto-detected")
    # a later scan from the saved configuration detects again rather than trusting the old figure
    again = config_for_case(root)
    assert again.real_ceiling_tokens == "auto"


def test_auto_limits_count_only_the_startup_lines_in_effect_in_the_window(tmp_path: Path) -> None:
    """A review set a node's pool to 4,096 on a startup line a restart before the window replaced: "auto" took that
    smallest pool from any date, and three customers went on the list as recipients of answers nothing corrupted."""
    def line(node: str, pool: int, time: str, context: int = ADVERTISED) -> dict[str, Any]:
        return event(node, "startup", max_total_num_tokens=pool, context_len=context, time=time)

    root = write_case(tmp_path / "case", [exchange("r-1", prompt_tokens=650000, received_at="2026-08-29T10:00:00Z")], [
        line("prefill-0", 600000, "2026-08-20T00:00:05Z", context=2 * ADVERTISED),  # replaced by the restart below
        line("prefill-0", CEILING, "2026-08-26T23:50:05Z"),  # the pool in effect when the window opens
        line("prefill-1", 700000, "2026-08-25T00:00:05Z"),  # its only line, before the window: still in effect
        line("prefill-0", 500000, "2026-09-10T00:00:05Z"),  # after the window
        line("prefill-1", 700000, "2026-09-10T00:00:05Z"),  # a restart after the window with the same pool
        # A node that first started after the window does not set the ceiling beside nodes whose pool is known (its
        # smaller pool put wrong recipients on the list; a second review).
        line("prefill-2", 4096, "2026-09-10T00:00:05Z"), line("prefill-2", 400000, "2026-09-11T00:00:05Z"),
        line("decode-0", 900000, "2026-08-26T23:50:05Z"),
    ])
    result = scan(root, _config(real_ceiling_tokens="auto", advertised_window_tokens="auto"))
    ceiling = result.record["limits"]["real_ceiling_tokens"]
    assert (ceiling["value"], ceiling["source"], ceiling["nodes_used"]) == (CEILING, "auto-detected", "prefill")
    assert ceiling["per_node"] == {"decode-0": [900000], "prefill-0": [CEILING], "prefill-1": [700000]}
    # Only values no line in effect gives: prefill-1's restart after the window is its pool in effect again.
    assert ceiling["not_in_effect"] == {"prefill-0": [500000, 600000], "prefill-2": [4096, 400000]}
    # Left out, a node whose pool in the window is not shown is said to be (one that ran there with a smaller pool
    # would hide suspects; a third review).
    assert ceiling["not_shown_in_window"] == {"prefill-2": [4096]}
    assert any(w.startswith(f"real_ceiling_tokens = {CEILING} left out nodes whose startup lines all come after the "
                            "window (prefill-2=4096)") for w in result.record["warnings"])
    assert result.record["limits"]["advertised_window_tokens"]["value"] == ADVERTISED
    assert result.suspects == 0  # 650,000 tokens fit the pool in effect


def test_auto_limits_read_the_deciding_nodes_lines_after_the_window_only_when_none_is_in_effect(tmp_path: Path) -> None:
    """The prefill nodes' logs begin after the window: their earliest lines are the nearest the logs show of their pool,
    said so; the decode nodes' pools, another pool, decided when those lines were left out (a review)."""
    def line(node: str, pool: int, time: str) -> dict[str, Any]:
        return event(node, "startup", max_total_num_tokens=pool, context_len=ADVERTISED, time=time)

    root = write_case(tmp_path / "case", [exchange("r-1", prompt_tokens=700000, received_at="2026-08-29T10:00:00Z")], [
        line("prefill-0", CEILING, "2026-09-10T00:00:05Z"), line("prefill-0", 600000, "2026-09-12T00:00:05Z"),
        line("decode-0", 2 * CEILING, "2026-08-26T23:50:05Z"),
    ])
    result = scan(root, _config(real_ceiling_tokens="auto"))
    ceiling = result.record["limits"]["real_ceiling_tokens"]
    assert (ceiling["value"], ceiling["nodes_used"]) == (CEILING, "prefill") and result.suspects == 1
    assert ceiling["note"].startswith("no startup line in effect in the window gives max_total_num_tokens")
    assert any(w.startswith(f"real_ceiling_tokens = {CEILING} was read from engine startup lines logged after the window")
               for w in result.record["warnings"])
    # Every node's counted values are recorded, the decode node's in effect too (a third review).
    assert ceiling["per_node"] == {"decode-0": [2 * CEILING], "prefill-0": [CEILING]}
    # A ceiling the case file gives carries no note of where "auto" would have read it.
    given = scan(root, _config()).record["limits"]["real_ceiling_tokens"]
    assert given["source"] == "file" and given.get("note") is None


def test_auto_ceiling_never_takes_a_decode_nodes_pool(tmp_path: Path) -> None:
    """The prefill nodes' startup lines rotated away and the decode nodes, restarted, logged a smaller pool of their own:
    "auto" took it, and prompts the prefill side held whole were suspects, their customers named recipients of answers
    nothing corrupted (a review). The pool that decides is the prefill side's: where no startup line gives it, the limit
    its over-limit lines name does; where none does either, "auto" is refused."""
    prompts = [exchange("held", prompt_tokens=CEILING - 10), exchange("refused", prompt_tokens=CEILING + 10)]
    decode = [startup("decode-0", pool=CEILING // 2), startup("decode-1", pool=CEILING // 2)]
    root = write_case(tmp_path / "case", prompts, decode + [
        event("prefill-0", "over_limit", rid="refused", input_len=CEILING + 10, limit=CEILING - 1)])
    result = scan(root, _config(real_ceiling_tokens="auto"))
    ceiling = result.record["limits"]["real_ceiling_tokens"]
    assert (ceiling["value"], ceiling["source"], ceiling["nodes_used"]) == (CEILING, "auto-detected", "over-limit lines")
    assert "over-limit lines" in ceiling["note"] and "decode nodes' pools do not decide" in ceiling["note"]
    assert result.suspects == 1  # "held" fits the prefill side's pool
    only_decode = write_case(tmp_path / "decode-only", prompts, decode)
    with pytest.raises(ConfigError, match="only decode nodes' startup lines give max_total_num_tokens "
                                          r"\(decode-0, decode-1\)") as err:
        scan(only_decode, _config(real_ceiling_tokens="auto"))
    assert "ingest the prefill nodes' logs" in str(err.value)
    # Only the over-limit lines that decide: not a decode node's own (its smaller pool), not one logged before the
    # window, not one naming another model's request (a review of the fix found each setting the ceiling).
    others = write_case(tmp_path / "others", prompts + [exchange("other", model="other-model", prompt_tokens=5000)],
                        decode + [
        event("prefill-0", "over_limit", rid="refused", input_len=CEILING + 10, limit=CEILING - 1),
        event("decode-0", "over_limit", rid="refused", input_len=CEILING + 10, limit=CEILING // 2 - 1),
        event("prefill-0", "over_limit", rid="long-ago", input_len=CEILING, limit=CEILING // 4 - 1,
              time="2026-08-20T10:00:00Z"),
        event("prefill-1", "over_limit", rid="other", input_len=5000, limit=4095),
    ])
    again = scan(others, _config(real_ceiling_tokens="auto"))
    assert again.record["limits"]["real_ceiling_tokens"]["value"] == CEILING and again.suspects == 1
    # Nor a line with no id from a node whose lines that name a request name another model's only (a review).
    rid_less = write_case(tmp_path / "rid-less", prompts + [exchange("other", model="other-model", prompt_tokens=5000)],
                          decode + [
        event("prefill-0", "over_limit", rid="refused", input_len=CEILING + 10, limit=CEILING - 1),
        event("prefill-9", "over_limit", input_len=5000, limit=4095),
        event("prefill-9", "exceeds_max_tokens", rid="other", input_len=5000, limit=4096),
    ])
    assert scan(rid_less, _config(real_ceiling_tokens="auto")).record["limits"]["real_ceiling_tokens"]["value"] == CEILING
    # A server that tells no roles (not disaggregated) still reads its own startup line.
    single = write_case(tmp_path / "single", prompts, [startup("server-0", pool=CEILING)])
    assert scan(single, _config(real_ceiling_tokens="auto")).record["limits"]["real_ceiling_tokens"]["value"] == CEILING


def test_a_left_out_node_is_warned_of_only_where_its_value_would_have_decided_otherwise(tmp_path: Path) -> None:
    """Every node deciding (no prefill node gives the window), a decode node whose lines all come after it was left out
    without a word; and the warning spoke of a smaller pool for the advertised window, which takes the largest, and
    of a node whose value was the one used (a fourth review)."""
    def line(node: str, time: str, pool: int | None = None, context: int | None = None) -> dict[str, Any]:
        return event(node, "startup", max_total_num_tokens=pool, context_len=context, time=time)

    root = write_case(tmp_path / "case", [exchange("r-1", prompt_tokens=2000, received_at="2026-08-29T10:00:00Z")], [
        line("prefill-0", "2026-08-26T23:50:05Z", pool=CEILING),  # the prefill side gives no window
        line("decode-0", "2026-08-26T23:50:05Z", context=ADVERTISED),
        line("decode-1", "2026-09-10T00:00:05Z", context=2 * ADVERTISED),
        line("decode-2", "2026-09-10T00:00:05Z", context=ADVERTISED),
    ])
    result = scan(root, _config(advertised_window_tokens="auto"))
    window = result.record["limits"]["advertised_window_tokens"]
    assert (window["value"], window["nodes_used"]) == (ADVERTISED, "all")
    assert window["not_shown_in_window"] == {"decode-1": [2 * ADVERTISED], "decode-2": [ADVERTISED]}
    (warning,) = [w for w in result.record["warnings"] if "left out nodes" in w]
    assert f"(decode-1={2 * ADVERTISED})" in warning and "a larger window" in warning and "smaller pool" not in warning


def test_no_suspects_means_clean(tmp_path: Path) -> None:
    root = write_case(tmp_path / "case", [exchange("r-1")])
    result = scan(root, _config())
    assert (result.suspects, result.has_findings) == (0, False)
    assert (root / "suspects.csv").read_bytes().count(b"\r\n") == 1  # header only
    assert pq.read_table(root / "suspects.parquet").num_rows == 0


@pytest.mark.parametrize(
    ("values", "events", "setting"),
    [
        ({"window_start": "2026-09-09T00:00:00Z", "window_end": "2026-08-27T00:00:00Z"}, True, "window_end"),
        ({"model": "glm-5.4"}, True, "model 'glm-5.4' never appears"),
        ({"real_ceiling_tokens": 2000000}, True, "real_ceiling_tokens (2000000) is above advertised_window_tokens"),
        ({"real_ceiling_tokens": 2000000, "advertised_window_tokens": "auto"}, True, "real_ceiling_tokens (2000000) is above"),
        ({"real_ceiling_tokens": "auto"}, False, 'real_ceiling_tokens = "auto" but the case has no engine startup line'),
        ({"advertised_window_tokens": "auto"}, False, 'advertised_window_tokens = "auto"'),
    ],
)
def test_bad_configuration_is_one_error_naming_the_setting(tmp_path: Path, values: dict[str, Any], events: bool,
                                                           setting: str) -> None:
    root = write_case(tmp_path / "case", [exchange("r-1")], [startup("prefill-0")] if events else None)
    with pytest.raises(ConfigError) as info:
        scan(root, _config(**values)) if "window_end" not in values else _config(**values)
    assert setting in str(info.value)
    assert not (root / "suspects.csv").exists()


def test_an_engine_pool_larger_than_its_window_is_not_called_a_swap(tmp_path: Path) -> None:
    """vLLM refuses to start unless its KV cache holds one request of the maximum length, so its startup lines
    give a pool above the window (2,000,000 tokens, 131,072 per request). The error said the two values may be
    swapped; such a pool simply cannot be overflowed by one request the window admits."""
    root = write_case(tmp_path / "case", [exchange("r-1")], [startup("gpu-a", pool=2_000_000, context=131_072)])
    with pytest.raises(ConfigError) as info:
        scan(root, _config(real_ceiling_tokens="auto", advertised_window_tokens="auto"))
    text = str(info.value)
    assert "real_ceiling_tokens (2000000, read from the engine's startup lines)" in text and "(131072)" in text
    assert "swapped" not in text
    assert "a prompt the window admits cannot overflow it" in text and "nothing to scan for" in text
    # Both given by hand, a swap is the likelier slip, and the message still says so.
    with pytest.raises(ConfigError, match="swapped"):
        scan(root, _config(real_ceiling_tokens=2_000_000, advertised_window_tokens=131_072))


@pytest.mark.parametrize(("key", "message"), [("models", "model is not set"), ("window_start", "window_start is not set"),
                                              ("real_ceiling_tokens", "real_ceiling_tokens is not set")])
def test_missing_settings_name_the_option(tmp_path: Path, key: str, message: str) -> None:
    root = write_case(tmp_path / "case", [exchange("r-1")])
    cfg = CaseConfig(models=[MODEL], real_ceiling_tokens=CEILING)
    cfg.window_start, cfg.window_end = _config().window_start, _config().window_end
    setattr(cfg, key, [] if key == "models" else None)
    with pytest.raises(ConfigError, match=message):
        scan(root, cfg)


def test_an_unset_advertised_window_without_engine_logs_leaves_the_band_open(tmp_path: Path) -> None:
    root = write_case(tmp_path / "case", [exchange("r-1", prompt_tokens=5_000_000)])
    cfg = _config(advertised_window_tokens=None)
    result = scan(root, cfg)
    assert result.record["parameters"]["advertised_window_tokens"] is None
    assert result.suspects == 1 and result.record["exposure_band"][0]["requests"] == 1


# ---------------------------------------------------------------------------------------------
# the commands


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(args)
    captured = capsys.readouterr()
    return int(info.value.code), captured.out, captured.err


def test_scan_command_exit_codes_and_overrides(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _incident(tmp_path / "case")
    base = ["scan", "--case", str(root), "-q", "--model", MODEL, "--window-start", WINDOW[0], "--window-end", WINDOW[1]]
    code, out, _ = _cli(base + ["--ceiling", "auto", "--json"], capsys)
    assert code == 1
    summary = json.loads(out)
    assert summary["suspects"] == 3 and summary["parameters"]["real_ceiling_tokens_source"] == "auto-detected"
    # the saved configuration is reused by a bare `scan --case`, and options still override it
    code, out, _ = _cli(["scan", "--case", str(root), "--window-start", "2026-08-29T11:30:00Z",
                         "--window-end", "2026-08-30T00:00:00Z"], capsys)
    assert code == 0 and "suspect responses: 0" in out
    # A window that holds no request at all is a slip, not an incident without suspects.
    code, out, err = _cli(["scan", "--case", str(root), "--window-start", "2026-09-01T00:00:00Z", "--window-end", WINDOW[1]], capsys)
    assert code == 2 and out == "" and "no request to the case's model(s) was received in the window" in err
    code, out, err = _cli(base + ["--ceiling", "2000000", "--advertised-window", "1048576"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "real_ceiling_tokens" in err


def test_query_of_a_folder_that_is_no_case_is_an_error_and_the_list_prints_as_asked(tmp_path: Path,
                                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A report folder given as --case answered every query with no rows (so "nothing was quarantined"), exit 0;
    and --list printed its table whatever --format said."""
    root = _incident(tmp_path / "report" / "case")
    code, out, err = _cli(["query", "--case", str(tmp_path / "report"), "SELECT count(*) AS n FROM quarantine"], capsys)
    assert code == 2 and out == "" and "not a case folder" in err and "case" in err.split("Fix:")[1]
    code, out, _ = _cli(["query", "--case", str(root), "SELECT count(*) AS n FROM exchanges", "--format", "json"], capsys)
    assert code == 0 and json.loads(out)[0]["n"] > 0
    code, out, _ = _cli(["query", "--list", "--format", "json"], capsys)
    listed = json.loads(out)
    assert code == 0 and {"id", "kind", "parameters", "title"} <= set(listed[0]) and any(q["id"] == "above_ceiling" for q in listed)
    code, out, _ = _cli(["query", "--list", "--format", "csv"], capsys)
    assert code == 0 and out.splitlines()[0] == "id,kind,parameters,title"


def test_query_command_is_read_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _incident(tmp_path / "case")
    scan(root, _config())
    before = {p.name: p.read_bytes() for p in root.iterdir()}
    code, out, _ = _cli(["query", "--case", str(root), "above_ceiling", "--format", "csv"], capsys)
    assert code == 0 and out.splitlines()[1].startswith("r-above,acme,")
    code, out, _ = _cli(["query", "--case", str(root), "above_ceiling", "--param", "ceiling=2000", "--format", "json"], capsys)
    assert code == 0 and [r["request_id"] for r in json.loads(out)] == ["r-above", "r-below", "r-border", "r-small"]
    code, out, _ = _cli(["query", "--case", str(root), "SELECT count(*) AS n FROM suspects WHERE borderline"], capsys)
    assert code == 0 and "1" in out
    for sql in ("DELETE FROM exchanges", f"COPY exchanges TO '{root / 'exchanges.parquet'}'",
                f"SELECT * FROM read_csv('{root / 'suspects.csv'}')"):
        code, _, err = _cli(["query", "--case", str(root), sql], capsys)
        assert code == 2 and err.startswith("error:")
    assert {p.name: p.read_bytes() for p in root.iterdir()} == before


# ---------------------------------------------------------------------------------------------
# simulated incident (issue 3's simulator): ground truth to compare against


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    simulate = pytest.importorskip("forensics.lab.simulate").simulate
    out = tmp_path_factory.mktemp("sim")
    result = simulate(out / "logs", seed=11, scale="small")
    return result.case_file, json.loads(result.truth.read_text(encoding="utf-8"))


def _ingest_and_scan(case_file: Path, folder: Path, inputs: list[str]) -> tuple[list[dict[str, str]], Any]:
    from forensics.api import ingest
    from forensics.config import load_case_file

    cfg = load_case_file(case_file)
    ingest(folder, [case_file.parent / i for i in inputs], config=cfg)
    result = scan(folder, cfg)
    return _csv(folder / "suspects.csv"), result


def test_simulated_incident_every_suspect_found_none_out_of_scope(simulated: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    case_file, truth = simulated
    rows, result = _ingest_and_scan(case_file, tmp_path / "case", ["gateway", "engine"])
    expected = {s["request_id"] for s in truth["suspects"]}
    got = {r["request_id"] for r in rows}
    assert expected and got == expected
    placeholder = {s["request_id"] for s in truth["suspects"] if s["reported_prompt_tokens"] == 1}
    assert placeholder and placeholder <= {r["request_id"] for r in rows if "engine_signature" in r["reasons"]}
    case = truth["case"]
    assert all(case["window_start"] <= r["received_at"] < case["window_end"] for r in rows)
    assert {r["model"] for r in rows} == {case["model"]}
    negatives = {n["request_id"] for n in truth["scan_negatives"]}
    assert negatives and not (negatives & got)
    # the engine's other anomalies are reported for a look, not made suspects
    corrupted = {a["request_id"] for a in truth["engine_anomalies"]}
    assert not (corrupted & got)
    assert result.anomalies["context_corruption"] == len([a for a in truth["engine_anomalies"]
                                                          if a["kind"] == "context_corruption"])


def test_simulated_gateway_only_suspects_are_borderline(simulated: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    """Without engine logs the placeholder counts are not trusted; the text's estimate band makes them borderline."""
    case_file, truth = simulated
    rows, result = _ingest_and_scan(case_file, tmp_path / "case", ["gateway"])
    expected = {s["request_id"] for s in truth["suspects"]}
    assert expected <= {r["request_id"] for r in rows}
    flagged_borderline = {r["request_id"] for r in rows if r["borderline"] == "true"}
    assert flagged_borderline == {r["request_id"] for r in rows if "borderline" in r["reasons"].split(";")}
    assert result.engine_signature == 0


def test_the_scan_queries_run_under_a_memory_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Without a cap DuckDB takes most of the machine: on the 4 GB benchmark incident its joins over the
    # engine events peaked at 1 GiB, the run's highest point (see the README's memory section).
    from forensics import queries as q
    from forensics.case import QUERY_MEMORY

    seen: list[str] = []
    real = q.run_query

    def spy(con: Any, query: q.Query, params: Any) -> Any:
        seen.append(con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0])
        return real(con, query, params)

    monkeypatch.setattr(q, "run_query", spy)
    scan(_incident(tmp_path / "case"), _config())
    cap = int(QUERY_MEMORY.removesuffix("MB")) * 1_000_000
    assert seen and all(_bytes(s) <= cap for s in seen), seen


def _bytes(setting: str) -> float:
    """DuckDB's memory_limit setting ("488.2 MiB") in bytes."""
    number, unit = setting.split()
    return float(number) * {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[unit]


def test_every_scan_query_on_the_capped_connection_runs_again_uncapped_when_it_must(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Not only the query files: the scan's own checks (startup lines, models, engine limits, the
    # suspects' rows) run on the same capped connection. Each is made to meet DuckDB's
    # out-of-memory error once; the scan's outputs must be those of a scan that never did.
    import duckdb

    from forensics import queries as q

    root = _incident(tmp_path / "case")
    scan(root, _config())
    expected = (root / "suspects.csv").read_bytes(), json.loads((root / "scan.json").read_text())["suspect_counts"]
    calls = {"failed": 0}
    real = q.with_memory_to_spare

    def once_out_of_memory(con: Any, run: Any) -> Any:
        tried = []

        def failing_first() -> Any:
            if not tried:
                tried.append(True)
                calls["failed"] += 1
                raise duckdb.OutOfMemoryException("Out of Memory Error: failed to allocate (test)")
            return run()

        return real(con, failing_first)

    monkeypatch.setattr(q, "with_memory_to_spare", once_out_of_memory)
    scan(root, _config())
    assert calls["failed"] >= 15  # the 11 query files and the scan's own 4 checks
    assert ((root / "suspects.csv").read_bytes(), json.loads((root / "scan.json").read_text())["suspect_counts"]) == expected


def _spend_row(request_id: str, org: str, start: str, prompt_tokens: int, answer: str) -> dict[str, Any]:
    """A LiteLLM spend-log row as written by default (``store_prompts_in_spend_logs`` off): no prompt."""
    return {"request_id": request_id, "call_type": "acompletion", "api_key": "k", "spend": 0.0,
            "total_tokens": prompt_tokens + 5, "prompt_tokens": prompt_tokens, "completion_tokens": 5,
            "startTime": start, "endTime": start, "model": MODEL, "model_group": MODEL, "status": "success",
            "messages": {}, "proxy_server_request": {}, "metadata": {"user_api_key_org_id": org},
            "response": {"id": request_id, "object": "chat.completion", "model": MODEL,
                         "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}]}}


def test_the_placeholders_one_token_with_no_prompt_to_check_is_no_count(tmp_path: Path) -> None:
    """A spend log without prompts gives only the gateway's figure. The placeholder's 1 was trusted as the
    prompt's size: the over-long request passed as a one-token question and the scan said clean. It is
    now no count at all: the response is listed as one whose size is unknown, with a warning."""
    from forensics.api import ingest

    logs = tmp_path / "spend.jsonl"
    logs.write_text(json.dumps(_spend_row("sl-ph", "org-a", "2026-08-30T01:00:00", 1, "Patient: R. Lee, MRN 9384017")) + "\n"
                    + json.dumps(_spend_row("sl-normal", "org-b", "2026-08-30T01:00:05", 120, "a normal answer")) + "\n")
    case = tmp_path / "case"
    ingest(case, [logs], config=_config())
    rows = {r["request_id"]: r for r in pq.read_table(case / "exchanges.parquet").to_pylist()}
    assert (rows["sl-ph"]["prompt_tokens"], rows["sl-ph"]["prompt_tokens_source"]) == (None, "unknown")
    assert rows["sl-ph"]["reported_prompt_tokens"] == 1
    assert (rows["sl-normal"]["prompt_tokens"], rows["sl-normal"]["prompt_tokens_source"]) == (120, "reported")
    result = scan(case, _config())
    rec = json.loads((case / "scan.json").read_text(encoding="utf-8"))
    assert [r["request_id"] for r in rec["anomalies"]["unknown_token_count"]["listed"]] == ["sl-ph"]
    assert result.suspects == 0 and any("unknown_token_count" in w for w in rec["warnings"])


def _ingest_image_prompt(tmp_path: Path, text: str, prompt_tokens: int, answer: str) -> tuple[Path, dict[str, Any]]:
    """A case of one LiteLLM callback whose prompt is ``text`` and an image, with the gateway's ``prompt_tokens``."""
    from forensics.api import ingest

    record = {"id": "img-1", "call_type": "acompletion", "startTime": 1788051600.0, "endTime": 1788051605.0,
              "model": MODEL, "model_group": MODEL, "prompt_tokens": prompt_tokens, "completion_tokens": 5,
              "messages": [{"role": "user", "content": [
                  {"type": "text", "text": text},
                  {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "iVBORw0KGgo" * 50}}]}],
              "response": {"choices": [{"index": 0, "message": {"content": answer}}]},
              "metadata": {"user_api_key_team_id": "team-img"}}
    logs = tmp_path / "callbacks.jsonl"
    logs.write_text(json.dumps(record) + "\n")
    case = tmp_path / "case"
    ingest(case, [logs], config=_config())
    (row,) = pq.read_table(case / "exchanges.parquet").to_pylist()
    return case, row


def test_a_prompt_with_an_image_keeps_the_gateways_count_above_the_ceiling(tmp_path: Path) -> None:
    """An image part carries no text but many tokens: the gateway's figure far above the text's size is
    the whole prompt's, not an impossible one. It was refused as implausible for the 38 bytes of text,
    the prompt counted as 10 tokens, and the over-long request missed."""
    case, row = _ingest_image_prompt(tmp_path, "What does this scanned contract say?", CEILING + 5_000, "It says...")
    assert row["prompt_nontext_parts"] == 1 and row["reported_prompt_tokens_plausible"] is True
    assert (row["prompt_tokens"], row["prompt_tokens_source"]) == (CEILING + 5_000, "reported")
    assert scan(case, _config()).suspects == 1


def test_a_prompt_with_an_image_and_the_placeholders_count_is_borderline_whatever_its_text(tmp_path: Path) -> None:
    """The placeholder's 1 on a prompt with an image: the engine replaced a prompt it counted over its pool, and the
    image holds any number of tokens. The text's band (here wholly below the ceiling) was taken as the prompt's, and
    the response was never a suspect, with no warning."""
    case, row = _ingest_image_prompt(tmp_path, "Compare the attached scan with clause 4.2. " * (CEILING // 20), 1,
                                     "Patient: R. Lee, MRN 9384017")
    assert row["prompt_tokens_source"] == "estimate" and row["prompt_tokens_high"] is None
    assert row["prompt_tokens_low"] < CEILING  # the text alone: below the ceiling
    assert scan(case, _config()).suspects == 1
    [suspect] = _csv(case / "suspects.csv")
    assert suspect["borderline"] == "true" and "borderline" in suspect["reasons"]


def test_a_failed_call_a_decode_node_answered_is_a_suspect(tmp_path: Path) -> None:
    """The gateway logged a failure with no answer and no output tokens, and a decode node generated 300 tokens for it:
    the stream delivered them before it broke. The failure rule left it out, with no warning."""
    ex = [exchange("r-broke", tenant_id="acme", prompt_tokens=900000, status="failure", response_text=None,
                   completion_tokens=0, received_at="2026-08-29T10:00:00Z"),
          exchange("r-refused", tenant_id="globex", prompt_tokens=900000, status="failure", response_text=None,
                   completion_tokens=0, received_at="2026-08-29T10:05:00Z")]
    ev = [startup("prefill-0"), startup("decode-0"),
          event("decode-0", "req_time_stats", rid="r-broke", role="decode", input_len=1, output_len=300,
                time="2026-08-29T10:00:09Z")]
    case = write_case(tmp_path / "case", ex, ev)
    scan(case, _config())
    assert [r["request_id"] for r in _csv(case / "suspects.csv")] == ["r-broke"]


def test_a_bug_signature_with_no_gateway_record_is_warned_as_a_gap_in_the_gateway_logs(tmp_path: Path) -> None:
    """The engine served r-lost with the bug's signature, but no gateway log holds its request. The warning
    sent the team to the window and the model list, which are right; the gateway logs are what is missing."""
    ex = [exchange("r-sig", tenant_id="globex", prompt_tokens=1, reported_prompt_tokens=1),
          exchange("r-late", tenant_id="acme", prompt_tokens=1, reported_prompt_tokens=1, received_at="2026-09-10T00:00:00Z")]
    ev = [startup("prefill-0"), startup("decode-0")]
    ev += signature_events("r-sig", 1) + signature_events("r-lost", 2) + signature_events("r-late", 3)
    root = write_case(tmp_path / "case", ex, ev)
    scan(root, _config())
    warnings = json.loads((root / "scan.json").read_text(encoding="utf-8"))["warnings"]
    gap = [w for w in warnings if "no gateway log holds their request" in w]
    scope = [w for w in warnings if "check the window and the model list" in w]
    assert len(gap) == 1 and gap[0].startswith("1 engine request(s)")
    assert len(scope) == 1 and scope[0].startswith("1 request(s)")


def test_a_model_name_differing_only_in_case_spaces_or_prefix_is_warned(tmp_path: Path) -> None:
    """Requests above the ceiling on "GLM-5.3", "glm-5.3 " or "openai/glm-5.3" were left out without a word
    (only the exposure band counted them): most likely the same model under another spelling."""
    ex = [exchange("r-ok", prompt_tokens=900000),
          exchange("r-upper", tenant_id="globex", model="GLM-5.3", prompt_tokens=900000),
          exchange("r-space", tenant_id="globex", model="glm-5.3 ", prompt_tokens=900000),
          exchange("r-prefix", tenant_id="initech", model="openai/glm-5.3", model_routed="openai/glm-5.3", prompt_tokens=900000),
          exchange("r-other", tenant_id="initech", model="other-model", prompt_tokens=900000),
          exchange("r-late", tenant_id="initech", model="GLM-5.3", prompt_tokens=900000, received_at="2026-09-10T00:00:00Z")]
    root = write_case(tmp_path / "case", ex, [startup("prefill-0"), startup("decode-0")])
    result = scan(root, _config())
    assert result.suspects == 1
    warnings = json.loads((root / "scan.json").read_text(encoding="utf-8"))["warnings"]
    near = sorted(w.split(" in the window name the model ")[1].split(",")[0] for w in warnings if "provider prefix" in w)
    assert near == ["'GLM-5.3'", "'glm-5.3 '", "'openai/glm-5.3'"]
    assert all(w.startswith("1 request(s)") for w in warnings if "provider prefix" in w)


def test_a_near_model_name_is_warned_whether_it_was_asked_for_or_routed_to(tmp_path: Path) -> None:
    """A customer asking for "GLM-5.3", routed to "hosted_vllm/zai-org/GLM-5.3-FP8", was left out without a word:
    the warning looked at the routed name only. Either name near a case model is named, with the fix that
    brings the request back into the scan."""
    ex = [exchange("r-ok", prompt_tokens=900000),
          exchange("r-asked", tenant_id="acme", model="GLM-5.3", model_routed="hosted_vllm/zai-org/GLM-5.3-FP8",
                   prompt_tokens=900000),
          exchange("r-routed", tenant_id="globex", model="glm5", model_routed="openai/GLM-5.3 ", prompt_tokens=900000),
          exchange("r-far", tenant_id="initech", model="other-model", model_routed="hosted_vllm/other-model",
                   prompt_tokens=900000)]
    root = write_case(tmp_path / "case", ex, [startup("prefill-0"), startup("decode-0")])
    assert scan(root, _config()).suspects == 1
    near = [w for w in json.loads((root / "scan.json").read_text(encoding="utf-8"))["warnings"] if "provider prefix" in w]
    assert [w.split(", which")[0] for w in near] == ["1 request(s) in the window name the model 'GLM-5.3'",
                                                     "1 request(s) in the window name the model 'openai/GLM-5.3 '"]
    # the advice names the very spelling to add: with it in the case's models, both requests are suspects
    assert "add 'GLM-5.3' to the case file's models" in near[0]
    assert scan(root, _config(model=None, models=[MODEL, "GLM-5.3", "openai/GLM-5.3 "])).suspects == 3


def test_tenant_ids_that_look_alike_are_warned(tmp_path: Path) -> None:
    """One customer's name logged once composed and once decomposed (typed on another system) was two
    customers, its own text naming it exposed to itself, without a word. Canonically equivalent ids are
    one customer to the matcher, and said so; ids differing only in case or spaces stay two, and are named."""
    import unicodedata

    nfc = "Équipe Zürich"
    ex = [exchange("r-ok", prompt_tokens=900000, tenant_id=nfc),
          exchange("r-nfd", tenant_id=unicodedata.normalize("NFD", nfc)),
          exchange("r-a", tenant_id="Acme Corp"), exchange("r-b", tenant_id="acme  corp"),
          exchange("r-c", tenant_id="initech")]
    root = write_case(tmp_path / "case", ex, [startup("prefill-0"), startup("decode-0")])
    scan(root, _config())
    warnings = [w for w in json.loads((root / "scan.json").read_text(encoding="utf-8"))["warnings"] if "tenant ids" in w]
    assert len(warnings) == 2
    # Quoted as logged (every place that shows a warning writes invisible characters out once), forms named.
    assert f"'{nfc}' (composed, NFC)" in warnings[0] and f"'{unicodedata.normalize('NFD', nfc)}' (decomposed, NFD)" in warnings[0]
    assert "one customer" in warnings[0]
    assert "'Acme Corp'" in warnings[1] and "'acme  corp'" in warnings[1] and "different customers" in warnings[1]


def test_a_tenant_id_holding_a_lone_surrogates_escape_is_warned_of(tmp_path: Path) -> None:
    """A lone surrogate in a customer's id is written as its escape's text, the same as that text typed: two
    customers became one (packets merged, a passage called the customer's own text) without a word (a review).
    The ingest of both spellings is in tests/test_ingest_bad_input.py; here, the warning."""
    ex = [exchange("r-ok", prompt_tokens=900000, tenant_id="org-\\ud800x"),
          exchange("r-b", tenant_id="org-\\uDFFFy"), exchange("r-c", tenant_id="org-\\u0041 plain")]
    root = write_case(tmp_path / "case", ex, [startup("prefill-0"), startup("decode-0")])
    scan(root, _config())
    (warning,) = [w for w in json.loads((root / "scan.json").read_text(encoding="utf-8"))["warnings"] if "surrogate" in w]
    assert warning.startswith("the tenant ids 'org-\\uDFFFy', 'org-\\ud800x' hold the text of a lone surrogate's escape")
    assert "read as one customer" in warning and "u0041" not in warning


def _image_case(root: Path, text: str | None, engine: bool, tokenizer: bool) -> tuple[Path, CaseConfig]:
    """An image prompt in split logs whose gateway count is the placeholder's 1, with or without the
    engine's prefill line (12,000 tokens, above the 8,192-token pool) and a tokenizer file."""
    (root / "split").mkdir(parents=True)
    parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    if text is not None:
        parts.insert(0, {"type": "text", "text": text})
    (root / "split" / "requests.jsonl").write_text(json.dumps({
        "request_id": "img-1", "timestamp": "2026-08-29T03:00:00Z", "tenant_id": "acme",
        "body": {"model": MODEL, "messages": [{"role": "user", "content": parts}]}}) + "\n")
    (root / "split" / "responses.jsonl").write_text(json.dumps({
        "request_id": "img-1", "timestamp": "2026-08-29T03:00:09Z", "status_code": 200,
        "body": {"choices": [{"index": 0, "message": {"role": "assistant", "content": "a cat"}}],
                 "usage": {"prompt_tokens": 1, "completion_tokens": 3}}}) + "\n")
    inputs = [root / "split"]
    if engine:
        (root / "engine").mkdir()
        (root / "engine" / "prefill-0_0.log").write_text(
            "[2026-08-29 00:00:05 TP0] server_args=ServerArgs(model_path='m', tp_size=8, disaggregation_mode='prefill', "
            "served_model_name='glm-5.3')\n"
            "[2026-08-29 00:00:38 TP0] max_total_num_tokens=8192, chunked_prefill_size=8192, max_prefill_tokens=16384, "
            "max_running_requests=64, context_len=16384\n"
            "[2026-08-29 03:00:01 TP0] ReqTimeStats(rid=img-1, bootstrap_room=5226, input_len=12000, cached_input_len=0, "
            "output_len=0, type=prefill): transfer_duration=35.89ms\n")
        inputs.append(root / "engine")
    values: dict[str, Any] = {"real_ceiling_tokens": 8192, "advertised_window_tokens": 16384}
    if tokenizer:
        from tokenizers import Tokenizer, models, pre_tokenizers

        tok = Tokenizer(models.WordLevel({"[UNK]": 0, "describe": 1}, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tok.save(str(root / "tokenizer.json"))
        values["tokenizer"] = str(root / "tokenizer.json")
    cfg = _config(**values)
    from forensics.api import ingest

    ingest(root / "case", inputs, config=cfg)
    return root / "case", cfg


@pytest.mark.parametrize("tokenizer", [False, True], ids=["estimate", "tokenizer"])
def test_an_image_prompts_engine_count_decides_with_or_without_a_tokenizer(tmp_path: Path, tokenizer: bool) -> None:
    """The engine counted 12,000 tokens, the image's included. With a tokenizer file the text's own count
    (5 tokens) stood, the engine's figure was never read, and the suspect was missed; without one it was
    found. The text is only part of such a prompt: the engine's figure decides either way."""
    case, cfg = _image_case(tmp_path, "describe this picture please", engine=True, tokenizer=tokenizer)
    (row,) = pq.read_table(case / "exchanges.parquet").to_pylist()
    assert (row["prompt_tokens"], row["prompt_tokens_source"]) == (12000, "engine")
    assert scan(case, cfg).suspects == 1


def test_an_image_prompts_placeholder_count_is_no_count(tmp_path: Path) -> None:
    """An image-only prompt whose gateway logged the placeholder's 1: the few bytes of template text let 1
    pass as plausible, and the image part made the gateway's figure come first. It is no count: the
    prompt's size is unknown, and the scan says so."""
    case, cfg = _image_case(tmp_path, None, engine=False, tokenizer=False)
    (row,) = pq.read_table(case / "exchanges.parquet").to_pylist()
    assert (row["prompt_tokens"], row["prompt_tokens_source"]) == (None, "unknown")
    scan(case, cfg)
    rec = json.loads((case / "scan.json").read_text(encoding="utf-8"))
    assert rec["anomalies"]["unknown_token_count"]["rows"] == 1 and any("unknown_token_count" in w for w in rec["warnings"])


# An agent's conversation whose 11 KB are almost all the arguments of one tool call, and a request whose
# bulk is its tool definitions and an Anthropic-style top-level system: the engine reads (and counts) both.
AGENT_CODE = "\n".join(f"def handler_{i}(event, context):\n    return process(event, depth={i})" for i in range(160))
AGENT_BODY = {"model": MODEL, "messages": [
    {"role": "user", "content": "Write the handlers module for the billing service."},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
        "name": "write_file", "arguments": json.dumps({"path": "handlers.py", "content": AGENT_CODE})}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "written"},
    {"role": "user", "content": "Now summarise what you wrote."}]}
LEDGER_BODY = {"model": MODEL, "system": "You are the ledger agent. " * 100, "messages": [{"role": "user", "content": "What is entry 7?"}],
               "tools": [{"type": "function", "function": {"name": f"tool_{i}", "description": "Look up the ledger entry " * 8,
                          "parameters": {"type": "object", "properties": {"entry": {"type": "string"}}}}} for i in range(40)]}
# The agent's call in Anthropic's Messages API (LiteLLM's /v1/messages): a tool_use part, a system of blocks.
CLAUDE_BODY = {"model": MODEL, "system": [{"type": "text", "text": "You write billing code.", "cache_control": {"type": "ephemeral"}}],
               "tools": [{"name": "write_file", "description": "Write a file.", "input_schema": {"type": "object"}}], "messages": [
    {"role": "user", "content": "Write the handlers module for the billing service."},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "write_file",
                                       "input": {"path": "handlers.py", "content": AGENT_CODE}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "written"},
                                 {"type": "text", "text": "Now summarise what you wrote."}]}]}
# None of those parts, or empty ones: the prompt is its messages alone, as it always was.
PLAIN_BODY = {"model": MODEL, "system": "", "tools": [], "messages": [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "hi there"}, {"type": "image_url", "image_url": {"url": "data:,x"}}]},
    {"role": "assistant", "content": None, "tool_calls": []},
    {"role": "user", "content": "and?"}]}
PLAIN_TEXT = "<|system|>\nBe brief.\n\n<|user|>\nhi there\n\n<|assistant|>\n\n\n<|user|>\nand?"
GATEWAYS = ("litellm-spend-log", "litellm-payload", "openai-split", "helicone", "langfuse", "cloudflare-ai-gateway")


def _gateway_logs(folder: Path, gateway: str, requests: list[tuple[str, str, dict[str, Any], int]],
                  messages: dict[str, dict[str, Any]] | None = None, answers: dict[str, dict[str, Any]] | None = None) -> Path:
    """``requests`` (id, tenant, request body, the gateway's prompt_tokens) as ``gateway`` logs them, in ``folder``;
    each answered with its assistant message in ``messages`` (by id; "Done." when absent), or with its whole
    answer in ``answers`` (a Responses API answer, say)."""
    folder.mkdir(parents=True)
    lines: dict[str, list[dict[str, Any]]] = {}
    for n, (rid, tenant, body, reported) in enumerate(requests):
        start = f"2026-08-29T10:0{n}:00"
        message = (messages or {}).get(rid, {"role": "assistant", "content": "Done."})
        answer = (answers or {}).get(rid) or {
            "id": rid, "object": "chat.completion", "model": MODEL, "usage": {"prompt_tokens": reported, "completion_tokens": 5},
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
        if gateway == "litellm-spend-log":
            lines.setdefault("spend.jsonl", []).append(_spend_row(rid, tenant, start, reported, "Done.") | {"proxy_server_request": body, "response": answer})
        elif gateway == "litellm-payload":  # LiteLLM puts a system string into the messages, the tools into model_parameters
            system = [{"role": "system", "content": body["system"]}] if body.get("system") else []
            lines.setdefault("callbacks.jsonl", []).append({
                "id": rid, "call_type": "acompletion", "startTime": 1788000000.0 + n, "endTime": 1788000001.0 + n,
                "model": MODEL, "model_group": MODEL, "messages": system + body["messages"], "response": answer,
                "model_parameters": {"tools": body.get("tools", []), "max_tokens": 100}, "prompt_tokens": reported,
                "completion_tokens": 5, "metadata": {"user_api_key_org_id": tenant}})
        elif gateway == "openai-split":
            lines.setdefault("requests.jsonl", []).append({"request_id": rid, "timestamp": start + "Z", "tenant_id": tenant, "body": body})
            lines.setdefault("responses.jsonl", []).append({"request_id": rid, "timestamp": start + ".5Z", "status_code": 200, "body": answer})
        elif gateway == "helicone":
            lines.setdefault("export.jsonl", []).append({
                "request_id": rid, "request_created_at": start + "Z", "response_created_at": start + ".5Z", "status": 200,
                "prompt_tokens": reported, "completion_tokens": 5, "model": MODEL, "organization_id": tenant,
                "request_body": json.dumps(body), "response_body": json.dumps(answer)})
        elif gateway == "langfuse":  # Langfuse's OpenAI integration logs the tools beside the messages
            lines.setdefault("observations.jsonl", []).append({
                "id": rid, "trace_id": f"t-{rid}", "type": "GENERATION", "start_time": start.replace("T", " ") + ".000000",
                "end_time": start.replace("T", " ") + ".500000", "input": {k: v for k, v in body.items() if k != "model"},
                "output": (answers or {}).get(rid) or message, "provided_model_name": MODEL,
                "usage_details": {"input": reported, "output": 5}, "project_id": tenant})
        else:
            lines.setdefault("logs.jsonl", []).append({
                "id": rid, "created_at": start + "Z", "provider": "openai", "model": MODEL, "path": "chat/completions",
                "success": True, "status_code": 200, "tokens_in": reported, "tokens_out": 5, "duration": 500,
                "metadata": json.dumps({"tenant_id": tenant}), "request": json.dumps(body), "response": json.dumps(answer)})
    for name, records in lines.items():
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return folder


@pytest.mark.parametrize("gateway", GATEWAYS)
def test_tool_calls_tool_definitions_and_a_top_level_system_are_part_of_the_prompt(tmp_path: Path, gateway: str) -> None:
    """The prompt text was the message texts only: an agent's 11 KB of tool-call arguments, or 40 tool
    definitions and a 2.6 KB system, left 133 and 25 bytes. The gateway's true 2,600 tokens were ruled
    impossible for them, a 33-token (6-token) estimate replaced it, and the over-long requests were missed;
    with the placeholder's 1 too. The model reads those parts: they are now in the text, its size and count."""
    from forensics.api import ingest

    logs = _gateway_logs(tmp_path / "logs", gateway, [("agent", "acme", AGENT_BODY, 2600), ("ledger", "initech", LEDGER_BODY, 2600),
                                                       ("agent-1", "acme", AGENT_BODY, 1), ("claude", "umbrella", CLAUDE_BODY, 2600),
                                                       ("plain", "globex", PLAIN_BODY, 10)])
    cfg = _config(real_ceiling_tokens=2000)
    ingest(tmp_path / "case", [logs], config=cfg)
    rows = {r["request_id"]: r for r in pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()}
    assert AGENT_CODE.replace("\n", "\\n") in rows["agent"]["prompt_text"] and rows["agent"]["prompt_bytes"] > 11000
    assert "You are the ledger agent." in rows["ledger"]["prompt_text"] and "tool_39" in rows["ledger"]["prompt_text"]
    assert rows["agent"]["reported_prompt_tokens_plausible"] and rows["ledger"]["reported_prompt_tokens_plausible"]
    claude = rows["claude"]["prompt_text"]
    assert all(t in claude for t in (AGENT_CODE.replace("\n", "\\n"), "You write billing code.", "Write a file.", "\nwritten\n"))
    assert rows["claude"]["prompt_nontext_parts"] == 0
    scan(tmp_path / "case", cfg)
    found = {r["request_id"]: r for r in pq.read_table(tmp_path / "case" / "suspects.parquet").to_pylist()}
    assert sorted(found) == ["agent", "agent-1", "claude", "ledger"]
    for rid in ("agent", "ledger", "claude"):
        assert (found[rid]["reasons"], found[rid]["prompt_tokens"], found[rid]["prompt_tokens_source"]) == ("above_ceiling", 2600, "reported")
    assert found["agent-1"]["prompt_tokens_source"] == "estimate" and found["agent-1"]["prompt_tokens"] > 2000


@pytest.mark.parametrize("gateway", GATEWAYS)
def test_a_prompt_with_no_tools_or_top_level_system_is_its_messages_alone(tmp_path: Path, gateway: str) -> None:
    """Empty ``tools``, ``system`` and ``tool_calls`` add nothing: the text, its offsets and its counts are
    those of the messages, as before tool calls and definitions were read."""
    from forensics.api import ingest

    ingest(tmp_path / "case", [_gateway_logs(tmp_path / "logs", gateway, [("plain", "globex", PLAIN_BODY, 10)])], config=_config())
    (row,) = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert (row["prompt_text"], row["prompt_messages"], row["prompt_nontext_parts"]) == (PLAIN_TEXT, 4, 1)
    assert row["prompt_bytes"] == len(PLAIN_TEXT.encode("utf-8"))


def _deep(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = {"k": value}
    return value


DEEP_BODY = {"model": MODEL, "tools": [{"type": "function", "function": {"name": "deep", "parameters": _deep(300)}}],
             "messages": [{"role": "user", "content": "hello"},
                          {"role": "assistant", "content": None, "tool_calls": [
                              {"id": "c1", "type": "function", "function": {"name": "f", "arguments": _deep(300)}}]}]}


@pytest.mark.parametrize("gateway", GATEWAYS)
def test_tool_parts_nested_deeper_than_orjson_writes_are_rendered_not_quarantined(tmp_path: Path, gateway: str) -> None:
    """A tool definition or arguments object 300 levels deep (valid JSON the loader reads) could not be written
    by orjson (255 levels): the whole record was quarantined, its prompt and answer out of the search."""
    from forensics.api import ingest

    ingest(tmp_path / "case", [_gateway_logs(tmp_path / "logs", gateway, [("deep", "acme", DEEP_BODY, 10)])], config=_config())
    (row,) = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert row["prompt_text"].startswith("<|tools|>\n") and row["prompt_text"].count('{"k":') >= 600
    assert not pq.read_table(tmp_path / "case" / "quarantine.parquet").num_rows


def test_a_payload_whose_model_parameters_are_cut_is_still_ingested(tmp_path: Path) -> None:
    """model_parameters holding a cut JSON string quarantined the whole callback payload: the field was read
    for its tool definitions only, and never needed before."""
    from forensics.api import ingest

    logs = _gateway_logs(tmp_path / "logs", "litellm-payload", [("r1", "acme", PLAIN_BODY, 10)])
    record = json.loads((logs / "callbacks.jsonl").read_text(encoding="utf-8"))
    record["model_parameters"] = '{"max_tokens": 100, "temperature": 0.'
    (logs / "callbacks.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
    ingest(tmp_path / "case", [logs], config=_config())
    (row,) = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert row["prompt_text"] == PLAIN_TEXT


def test_one_request_renders_one_text_in_the_payload_and_the_spend_log(tmp_path: Path) -> None:
    """The callback payload carries a top-level system as a leading system message, the spend log beside the
    messages: with tools, the payload's text put the tools before the system and the spend log's after it,
    so offsets and previews depended on which copy was kept."""
    from forensics.api import ingest

    body = {"model": MODEL, "system": "Sys.", "tools": [{"name": "t"}], "messages": [{"role": "user", "content": "q"}]}
    texts = {}
    for gateway in GATEWAYS:
        ingest(tmp_path / gateway / "case", [_gateway_logs(tmp_path / gateway / "logs", gateway, [("r1", "acme", body, 10)])],
               config=_config())
        texts[gateway] = pq.read_table(tmp_path / gateway / "case" / "exchanges.parquet").column("prompt_text")[0].as_py()
    assert set(texts.values()) == {'<|system|>\nSys.\n\n<|tools|>\n{"name":"t"}\n\n<|user|>\nq'}, texts


def test_a_window_that_holds_no_request_of_the_model_is_refused(tmp_path: Path) -> None:
    """A slip in the window's year: no request fell in it, the scan found no suspect, and the run said nobody must
    be told (exit 0), with no warning. Refused as a model that never appears is, saying when the requests ran."""
    from test_run import write_logs

    from forensics import api
    from forensics.config import load_case_file

    logs = write_logs(tmp_path / "logs")
    text = (logs / "case.toml").read_text(encoding="utf-8")
    (logs / "case.toml").write_text(text.replace("2026-08-27", "2025-08-27").replace("2026-09-09", "2025-09-09"), encoding="utf-8")
    cfg = load_case_file(logs / "case.toml")
    api.ingest(tmp_path / "case", [logs / "gateway"], config=cfg)
    with pytest.raises(ConfigError, match=r"no request to the case's model\(s\) was received in the window "
                                          r"2025-08-27T00:00:00Z to 2025-09-09T00:00:00Z; the case's requests to them run "
                                          r"from 2026-08-28T09:00:00Z to 2026-08-28T11:00:00Z"):
        api.scan(tmp_path / "case", cfg)


def test_tenant_ids_alike_but_for_invisible_characters_are_warned_of_and_shown_once_escaped() -> None:
    """Ids that differ only in a character that shows as nothing (U+034F) got no warning; and the ids of the
    warnings were written with ascii(), then escaped again by the summary ("cafe\\\\u0301")."""
    import duckdb
    import pyarrow as pa

    from forensics.csvfile import escape_controls
    from forensics.scan import _near_tenants

    con = duckdb.connect()
    con.register("exchanges", pa.table({"tenant_id": ["acme", "acme\u034f", "caf\u00e9", "cafe\u0301", "other"]}))
    warnings = _near_tenants(con)
    assert any("'acme'" in w and "'acme\u034f'" in w and "invisible" in w for w in warnings), warnings
    shown = [escape_controls(w) for w in warnings]
    assert any("'acme\\u034f'" in w for w in shown) and not any("\\\\" in w for w in shown), shown


def test_a_prompt_its_prefill_node_held_whole_is_no_suspect_and_the_scan_says_why(tmp_path: Path) -> None:
    """Two models on nodes with pools of their own: "auto" takes the smaller pool, and the larger pool's model's
    prompts above it, which its prefill node shows prefilled whole with no over-limit line, were suspects; their
    customers were named recipients of answers nothing corrupted (a review)."""
    ex = [exchange("r-big-model", tenant_id="acme", rid="r-big-model", model="glm-5.3-big", prompt_tokens=6000,
                   prompt_tokens_source="engine", prefill_node="prefill-1"),
          exchange("r-refused", tenant_id="globex", rid="r-refused", prompt_tokens=6000, prompt_tokens_source="engine",
                   reported_prompt_tokens=1)]
    ev = [startup("prefill-0", pool=4096, context=16384), startup("prefill-1", pool=8192, context=16384),
          event("prefill-1", "req_time_stats", rid="r-big-model", input_len=6000),
          event("prefill-0", "over_limit", rid="r-refused", input_len=6000, limit=4095),
          event("prefill-0", "req_time_stats", rid="r-refused", input_len=1)]
    root = write_case(tmp_path / "case", ex, ev)
    result = scan(root, _config(models=[MODEL, "glm-5.3-big"], model=None, real_ceiling_tokens="auto",
                                advertised_window_tokens=16384))
    rec = json.loads((root / "scan.json").read_text())
    assert [r["request_id"] for r in _csv(root / "suspects.csv")] == ["r-refused"]
    assert rec["anomalies"]["prefilled_above_ceiling"]["rows"] == 1
    assert any("prefilled whole with no over-limit line" in w for w in result.summary()["warnings"])


def test_a_suspect_held_in_two_rows_takes_its_count_and_its_band_from_one_row() -> None:
    """A suspect's two rows (a spend log's, count unknown but usage logged; a split log's, estimated from its whole
    prompt): its count, source and band came from different rows, (5100, 'unknown', ...) (a review); its completion
    time and reported usage from the row that has them."""
    import duckdb
    import pyarrow as pa

    from forensics.scan import SUSPECT_TABLE_SQL

    con = duckdb.connect()
    con.execute("""CREATE TABLE exchanges AS SELECT * FROM (VALUES
      ('r-3', 'globex', 'glm-5.3', TIMESTAMPTZ '2026-08-28 11:00:00Z', TIMESTAMPTZ '2026-08-28 11:00:09Z', NULL::BIGINT,
       'unknown', NULL::BIGINT, NULL::BIGINT, 1, NULL, NULL, NULL::UBIGINT, 'a', 1, 'h1'),
      ('r-3', 'globex', 'glm-5.3', TIMESTAMPTZ '2026-08-28 11:00:00.5Z', NULL, 5100, 'estimate', 4600, 5600, NULL,
       'prefill-0', 'decode-1', 7::UBIGINT, 'b', 1, 'h2')
    ) t(request_id, tenant_id, model, received_at, completed_at, prompt_tokens, prompt_tokens_source, prompt_tokens_low,
        prompt_tokens_high, reported_prompt_tokens, prefill_node, decode_node, bootstrap_room, source_sha256, source_line,
        record_hash)""")
    con.register("_flagged", pa.table({"request_id": ["r-3"], "tenant_id": ["globex"], "reasons": ["above_ceiling"],
                                       "borderline": [False], "engine_signature": [False]}))
    (row,) = con.sql(SUSPECT_TABLE_SQL).fetchall()
    names = [d[0] for d in con.sql(SUSPECT_TABLE_SQL).description]
    got = dict(zip(names, row, strict=True))
    assert (got["prompt_tokens"], got["prompt_tokens_source"], got["prompt_tokens_low"], got["prompt_tokens_high"]) == (
        5100, "estimate", 4600, 5600)
    assert (got["reported_prompt_tokens"], got["decode_node"], got["bootstrap_room"]) == (1, "decode-1", 7)
    assert got["completed_at"] is not None
