"""The simulator's own invariants, checked on the logs it writes (read back as a user would)."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import re
import string
from pathlib import Path
from typing import Any

import pytest
from rapidfuzz.distance import LCSseq

from forensics.config import load_case_file
from forensics.errors import ForensicsError
from forensics.lab.simulate import simulate
from forensics.lab.simulate import text as tx
from forensics.lab.simulate.mechanism import SCALES, Exchange, Scale, Simulation
from forensics.lab.simulate.text import load_corpus
from forensics.lab.simulate.writers import open_text
from forensics.schema import render_messages

CORPORA = Path(__file__).resolve().parents[2] / "shared" / "corpora"


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _response_text(resp: Any) -> str:
    resp = _json(resp)
    if not resp:
        return ""
    if isinstance(resp, list):
        return "".join(c["choices"][0]["delta"].get("content") or "" for c in resp)
    return resp["choices"][0]["message"]["content"]


def read_gateway(folder: Path) -> dict[str, dict[str, Any]]:
    """request_id -> tenant, times, prompt and response text, from the callback payloads."""
    rows: dict[str, dict[str, Any]] = {}
    for path in sorted((folder / "gateway").iterdir()):
        if not path.name.startswith("litellm-callbacks"):
            continue
        with open_text(path) as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                rec = rec.get("standard_logging_object", rec)
                if not isinstance(rec.get("startTime"), float):
                    continue
                md = _json(rec["metadata"])
                rows[rec["id"]] = {
                    "tenant": md["user_api_key_org_id"],
                    "received": rec["startTime"],
                    "completed": rec["endTime"],
                    "model": rec["model_group"],
                    "prompt": render_messages(_json(rec["messages"]))[0],
                    "response": _response_text(rec["response"]),
                    "prompt_tokens": rec["prompt_tokens"],
                    "status": rec["status"],
                }
    return rows


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], dict[str, dict[str, Any]]]:
    out = tmp_path_factory.mktemp("sim") / "incident"
    simulate(out, seed=11, scale="small")
    truth = json.loads((out / "truth.json").read_text())
    return out, truth, read_gateway(out)


def _words(text: str) -> list[str]:
    """Words without punctuation or case (a token of punctuation only becomes "<p>")."""
    table = str.maketrans("", "", string.punctuation)
    return [w.translate(table) or "<p>" for w in text.lower().split()]


def test_every_fragment_occurs_damaged_in_its_response(sim: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    out, truth, rows = sim
    assert truth["counts"]["leak_fragments"] >= 10
    for f in truth["fragments"]:
        recipient = rows[f["recipient_request_id"]]["response"]
        got = recipient[f["recipient_start"] : f["recipient_end"]]
        if f["source_kind"] == "shared":
            continue
        src_row = rows[f["source_request_id"]]
        source = src_row["prompt"] if f["source_kind"] == "prompt" else src_row["response"]
        want = source[f["source_start"] : f["source_end"]]
        assert want, f
        if not f["damage"]:
            assert got == want
        elif set(f["damage"]) <= {"whitespace", "case", "punctuation", "truncate"}:
            assert _words(got) == _words(want) or " ".join(_words(got)) == " ".join(_words(want)).replace(" ", " ")
        else:
            a, b = _words(want), _words(got)
            kept = LCSseq.similarity(a, b)  # words of the source kept, in order
            assert kept >= len(a) * (1 - f["damage_fraction"]) - 1, (f, want, got)


def test_sources_are_earlier_and_foreign_unless_labelled_self(sim: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    _, truth, rows = sim
    labels = {f["label"] for f in truth["fragments"]}
    assert {"leak", "self_tenant", "shared_boilerplate"} <= labels
    for f in truth["fragments"]:
        if f["source_request_id"] is None:
            continue
        src, rec = rows[f["source_request_id"]], rows[f["recipient_request_id"]]
        assert src["completed"] < rec["received"]
        same = src["tenant"] == rec["tenant"]
        assert same == (f["label"] == "self_tenant")
        assert f["is_leak"] == (f["label"] == "leak")
    exposed = {f["source_tenant_id"] for f in truth["fragments"] if f["is_leak"]}
    assert truth["exposed"] == sorted(exposed)


def test_suspects_are_over_ceiling_in_window_with_placeholder_counts(sim: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    _, truth, rows = sim
    case = truth["case"]
    assert len(truth["suspects"]) >= 10
    for s in truth["suspects"]:
        row = rows[s["request_id"]]
        assert row["tenant"] == s["tenant_id"] and row["model"] == case["model"]
        assert s["prompt_tokens"] > case["real_ceiling_tokens"]
        assert case["window_start"] <= s["received_at"] < case["window_end"]
        assert row["prompt_tokens"] == 1  # the gateway copied the placeholder's count
        # ~4 characters per token of English-like text
        assert 3.7 <= len(row["prompt"]) / s["prompt_tokens"] <= 4.3
    near = [s for s in truth["suspects"] if s["length_class"] == "near_above"]
    below = [n for n in truth["scan_negatives"] if n["kind"] == "near_ceiling_below"]
    assert near and below
    assert all(n["prompt_tokens"] < case["real_ceiling_tokens"] for n in below)


def test_engine_lines_line_up_by_rid_and_bootstrap_room(sim: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    out, truth, _ = sim
    logs = {p.name: p.read_text() for p in (out / "engine").iterdir()}
    ceiling, window = truth["case"]["real_ceiling_tokens"], truth["case"]["advertised_window_tokens"]
    for text in logs.values():
        assert f"max_total_num_tokens={ceiling}," in text and f"context_len={window}" in text
        stamps = re.findall(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) TP0\]|^\{\"timestamp\":\"([^\"]+)\"", text, re.M)
        times = [a.replace(" ", "T") or b[:19] for a, b in stamps]
        assert times == sorted(times)  # lines in time order
    for s in truth["suspects"]:
        pre, dec = logs[f"{s['prefill_node']}_0.log"], logs[f"{s['decode_node']}_0.log"]
        rid, room = s["request_id"], s["bootstrap_room"]
        assert f"Input length ({s['prompt_tokens']} tokens) exceeds the maximum allowed length ({ceiling - 1} tokens)" in pre
        assert f"self.rid='{rid}'" in pre
        assert f"ReqTimeStats(rid={rid}, bootstrap_room={room}, input_len=1, cached_input_len=0, output_len=0, type=prefill)" in pre
        assert re.search(rf"ReqTimeStats\(rid={rid}, bootstrap_room={room}, input_len=1, .*type=decode\)", dec)
        finished = [json.loads(line) for line in dec.splitlines() if line.startswith("{") and f'"rid":"{rid}"' in line]
        assert finished and finished[0]["obj"]["bootstrap_room"] == room
        assert finished[0]["out"]["meta_info"]["prompt_tokens"] == 1
    rejected = [n for n in truth["scan_negatives"] if n["kind"] == "over_ceiling_outside_window"]
    assert rejected
    for n in rejected:  # the engine refused them: no decode record at all
        assert not any(f"rid={n['request_id']}," in t for name, t in logs.items() if name.startswith("decode"))


def test_hard_negatives_hold(sim: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    _, truth, rows = sim
    kinds = {h["kind"] for h in truth["hard_negatives"]}
    assert {"own_prompt_quote", "self_tenant", "shared_boilerplate", "later_prompt_only"} <= kinds
    for h in truth["hard_negatives"]:
        if h["kind"] == "own_prompt_quote":
            row = rows[h["request_id"]]
            assert row["response"][h["response_start"] : h["response_end"]] == row["prompt"][h["prompt_start"] : h["prompt_end"]]
        if h["kind"] == "later_prompt_only":
            rec, later = rows[h["recipient_request_id"]], rows[h["later_request_id"]]
            assert later["received"] > rec["completed"] and later["tenant"] != rec["tenant"]
            passage = rec["response"][h["recipient_start"] : h["recipient_end"]]
            assert later["prompt"][h["later_start"] : h["later_end"]] == passage
            assert all(passage not in r["prompt"] for r in rows.values() if r["received"] < rec["completed"])


def test_case_file_agrees_with_engine_and_truth(sim: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    out, truth, rows = sim
    cfg = load_case_file(out / "case.toml")
    assert cfg.real_ceiling_tokens == truth["case"]["real_ceiling_tokens"] == 8192
    assert cfg.advertised_window_tokens == 16384 and cfg.models == ["glm-5.3"]
    assert [i.path.name for i in cfg.inputs] == ["gateway", "engine"]
    tenants = {t["tenant_id"] for t in truth["tenants"]}
    # one org id a human typed: spaces, a slash, non-ASCII letters (packet names must be made safe)
    assert any(" " in t and "/" in t and not t.isascii() for t in tenants)
    assert {r["tenant"] for r in rows.values()} <= tenants


def test_spend_logs_overlap_and_are_truncated_like_litellm(sim: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    out, truth, rows = sim
    spend = [p for p in (out / "gateway").iterdir() if p.name.startswith("spend-logs")]
    assert spend
    n = truncated = 0
    for p in spend:
        with open_text(p) as fh:
            for line in fh:
                rec = json.loads(line)
                n += 1
                assert rec["request_id"] in rows
                assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d*[1-9])?", rec["startTime"])  # no zone
                tenant = rec["organization_id"] or rec["team_id"] or rec["metadata"]["user_api_key_org_id"]
                assert tenant == rows[rec["request_id"]]["tenant"]
                for m in rec["proxy_server_request"]["messages"]:
                    c = m["content"]
                    for s in [c] if isinstance(c, str) else [p.get("text", "") for p in c]:
                        if "litellm_truncated skipped" in s:
                            truncated += 1
                            assert len(s) < 2048 + 120
    assert n == truth["spend_log_rows"] and truncated > 0


def test_quarantine_lines_are_really_bad(sim: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    out, truth, _ = sim
    assert truth["quarantine"]["expected"] == len(truth["quarantine"]["lines"]) >= 2
    for q in truth["quarantine"]["lines"]:
        with open_text(out / q["file"]) as fh:
            line = fh.read().splitlines()[q["line"] - 1]
        if "partial" in q["reason"]:
            with pytest.raises(json.JSONDecodeError):
                json.loads(line)
        else:
            assert "2026-13-45" in line


def _hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path, sim: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    out, _, _ = sim
    again = tmp_path / "incident"
    simulate(again, seed=11, scale="small")
    assert _hashes(again) == _hashes(out)
    other = tmp_path / "other"
    simulate(other, seed=12, scale="small")
    assert _hashes(other)["truth.json"] != _hashes(out)["truth.json"]


def test_refuses_to_overwrite_a_folder_that_is_not_a_simulation(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    with pytest.raises(ForensicsError):
        simulate(tmp_path, seed=1, force=True)
    assert (tmp_path / "precious.txt").read_text() == "keep me"
    with pytest.raises(ForensicsError):
        simulate(tmp_path / "x", scale="huge")


def test_openai_split_format_pairs_requests_and_responses(tmp_path: Path) -> None:
    truth_dir = tmp_path / "split"
    simulate(truth_dir, seed=5, scale="small", fmt="openai-split")
    truth = json.loads((truth_dir / "truth.json").read_text())
    requests: dict[str, Any] = {}
    responses: dict[str, Any] = {}
    for p in sorted((truth_dir / "gateway").iterdir()):
        with open_text(p) as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                (requests if p.name.startswith("requests") else responses)[rec["request_id"]] = rec
    kinds: dict[str, set[str]] = {"request_only": set(), "response_only": set()}
    for o in truth["orphans"]:
        kinds[o["kind"]].add(o["request_id"])
    assert kinds["request_only"] == set(requests) - set(responses)
    assert kinds["response_only"] == set(responses) - set(requests)  # request line rotated away
    assert kinds["response_only"]
    assert not kinds["response_only"] & {s["request_id"] for s in truth["suspects"]}
    for s in truth["suspects"]:
        req, resp = requests[s["request_id"]], responses[s["request_id"]]
        assert req["tenant_id"] == s["tenant_id"]
        text = _response_text(resp["chunks"] if "chunks" in resp else resp["body"])
        for fid in s["fragment_ids"]:
            f = next(x for x in truth["fragments"] if x["fragment_id"] == fid)
            assert 0 <= f["recipient_start"] < f["recipient_end"] <= len(text)
    assert (truth_dir / "case.toml").read_text().count('format = "openai-split"') == 1


@pytest.mark.skipif(not CORPORA.is_dir(), reason="shared corpora folder absent (only on the team's machine)")
def test_corpus_text_is_used_and_partitioned(tmp_path: Path) -> None:
    out = tmp_path / "c"
    simulate(out, seed=3, scale="small", corpus=CORPORA / "longdocs")
    truth = json.loads((out / "truth.json").read_text())
    assert truth["generator"]["corpus"] == "longdocs"
    rows = read_gateway(out)
    wiki = (CORPORA / "longdocs" / "wiki_demo.txt").read_text().splitlines()[5][:60]
    assert any(wiki[:40] in r["prompt"] for r in rows.values()) or truth["counts"]["leak_fragments"] > 0


@pytest.mark.skipif(not CORPORA.is_dir(), reason="shared corpora folder absent (only on the team's machine)")
def test_corpus_parts_keep_merged_incidents_text_private() -> None:
    """Seeds merged into one bigger incident (benchmarks/run.py) must not own one document: read as one
    incident, text two customers sent is no leak of either's, and the 1 GB benchmark lost half its true pairs."""
    corpus = load_corpus(CORPORA / "sharegpt")
    text = "\n\u0000".join(corpus.documents + corpus.answers)

    def pools(sim: Simulation) -> set[str]:
        return {p for t in sim.tenants for p in t.pool}

    def private(paragraphs: set[str]) -> set[str]:
        """Those one corpus item holds (boilerplate many documents carry is no one's)."""
        return {p for p in paragraphs if len(p.split()) >= ATTRIBUTABLE_WORDS and text.count(p) == 1}

    whole = [Simulation(seed, REDUCED_REALISTIC, corpus) for seed in (1, 2)]
    assert private(pools(whole[0]) & pools(whole[1]))  # every seed's tenants own the whole corpus among them
    parts = [Simulation(seed, REDUCED_REALISTIC, corpus, (seed - 1, 3)) for seed in (1, 2)]
    assert pools(parts[0]) and pools(parts[1])
    assert not private(pools(parts[0]) & pools(parts[1]))
    assert not {a for t in parts[0].tenants for a in t.answers} & {a for t in parts[1].tenants for a in t.answers}
    # The public text is the same in every part: the popular passages and the garbage sentences.
    assert parts[0].reserve == parts[1].reserve and parts[0].popular == parts[1].popular


@pytest.mark.skipif(not CORPORA.is_dir(), reason="shared corpora folder absent (only on the team's machine)")
def test_corpus_part_is_recorded_and_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from forensics.cli import main

    out = tmp_path / "p"
    simulate(out, seed=3, scale="small", corpus=CORPORA / "longdocs", corpus_part=(1, 2))
    truth = json.loads((out / "truth.json").read_text())
    assert truth["generator"]["corpus_part"] == "2/2" and "--corpus-part 2/2" in truth["generator"]["command"]
    assert "--corpus-part 2/2" in (out / "README.md").read_text()
    for given, said in (("3/2", "K/N with 1 <= K <= N"), ("0/2", "K/N"), ("two", "K/N"), ("1/2x", "K/N"), ("\u00b2/\u2077", "K/N"),
                        ("1/" + "9" * 5000, "K/N"), ("+2/7", "K/N")):
        with pytest.raises(SystemExit) as stop:
            main(["simulate", "--out", str(tmp_path / "q"), "--scale", "small", "--corpus", str(CORPORA / "longdocs"),
                  "--corpus-part", given, "--quiet"])
        err = capsys.readouterr().err
        assert stop.value.code == 2 and said in err and "--corpus-part" in err, (given, err)
    with pytest.raises(ForensicsError, match="needs a corpus"):
        simulate(tmp_path / "r", scale="small", corpus_part=(0, 2))
    assert not (tmp_path / "q").exists() and not (tmp_path / "r").exists()
    from forensics.lab.simulate import parse_corpus_part

    assert [parse_corpus_part(x) for x in (" 2/7", "2/ 7", "02/07", "\uff12/\uff17")] == [(1, 7)] * 4


def _run_in_memory(seed: int, corpus: Path | None = None, scale: Scale = SCALES["small"]) -> tuple[Simulation, dict[str, dict[str, Any]]]:
    """A simulation without files: the exchanges as the gateway logs them (lost request lines left out)."""
    sim = Simulation(seed, scale, load_corpus(corpus) if corpus else None)
    rows: dict[str, dict[str, Any]] = {}

    def keep(ex: Exchange) -> None:
        rows[ex.request_id] = {"tenant": ex.tenant.tenant_id, "received": ex.received, "completed": ex.completed,
                               "prompt": "" if ex.request_lost else ex.prompt_text, "sent": ex.prompt_text,
                               "response": ex.response_text}

    sim.run(keep, lambda node, t, line: None, lambda t: None)
    return sim, rows


#: Shorter passages may coincide between tenants by chance (two words of a catch phrase) and are
#: below what any matcher can attribute (match needs 8 informative tokens).
ATTRIBUTABLE_WORDS = 8


def _holders(rows: dict[str, dict[str, Any]], passage: str, before: float, fields: tuple[str, ...] = ("prompt",)) -> set[str]:
    """Tenants whose requests received before ``before`` carry ``passage`` in one of ``fields``."""
    if len(passage.split()) < ATTRIBUTABLE_WORDS:
        return set()
    return {r["tenant"] for r in rows.values() if r["received"] < before and any(passage in r[f] for f in fields)}


@pytest.mark.parametrize("seed", [1, 3, 7, 11])
def test_hard_negatives_are_what_the_logs_show(seed: int) -> None:
    """A hard negative must look like one in the logs: boilerplate really shared, self and quoted text really own."""
    sim, rows = _run_in_memory(seed)
    kinds = {h["kind"] for h in sim.truth["hard_negatives"]}
    assert {"shared_boilerplate", "self_tenant", "own_prompt_quote"} <= kinds
    check_truth_against_logs(sim, rows, seed)


def check_truth_against_logs(sim: Simulation, rows: dict[str, dict[str, Any]], seed: int) -> None:
    """Every label of the truth holds in the exchanges (also run by hand on the medium scale)."""
    truth = sim.truth
    shared = {name: text for text, name in sim.shared_texts()}
    fragments = {f["fragment_id"]: f for f in truth["fragments"]}
    for h in truth["hard_negatives"]:
        if h["kind"] in ("shared_boilerplate", "self_tenant"):
            f = fragments[h["fragment_id"]]
            rec = rows[f["recipient_request_id"]]
            others = lambda holders, rec=rec: holders - {rec["tenant"]}  # noqa: E731
            if h["kind"] == "shared_boilerplate":
                passage = shared[f["shared_text"]][f["source_start"] : f["source_end"]]
                # the matcher's notion of common: more than 2 tenants besides the recipient hold it
                held = {r["tenant"] for r in rows.values() if r["received"] < rec["received"] and passage in r["prompt"]}
                assert len(others(held)) >= 3, (seed, f)
            else:
                src = rows[f["source_request_id"]]
                assert src["tenant"] == rec["tenant"] and src["completed"] < rec["received"]
                passage = src[f["source_kind"]][f["source_start"] : f["source_end"]]
                assert not others(_holders(rows, passage, rec["received"], ("prompt", "response"))), (seed, f)
        elif h["kind"] == "own_prompt_quote":
            row = rows[h["request_id"]]
            quote = row["sent"][h["prompt_start"] : h["prompt_end"]]  # as sent, even if the log line was lost
            assert quote and row["response"][h["response_start"] : h["response_end"]] == quote
            assert not _holders(rows, quote, row["received"]) - {row["tenant"]}, (seed, h)
        elif h["kind"] == "later_prompt_only":
            rec, later = rows[h["recipient_request_id"]], rows[h["later_request_id"]]
            passage = rec["response"][h["recipient_start"] : h["recipient_end"]]
            assert later["tenant"] != rec["tenant"] and later["received"] > rec["completed"]
            assert later["prompt"][h["later_start"] : h["later_end"]] == passage
            # nobody else held it before the recipient's answer was complete
            assert not _holders(rows, passage, rec["completed"], ("prompt", "response")) - {rec["tenant"]}, (seed, h)
    for f in truth["fragments"]:
        if f["is_leak"]:  # a leak's source text is the source tenant's alone among the other tenants
            src, rec = rows[f["source_request_id"]], rows[f["recipient_request_id"]]
            passage = src[f["source_kind"]][f["source_start"] : f["source_end"]]
            assert _holders(rows, passage, rec["received"]) - {rec["tenant"]} <= {src["tenant"]}, (seed, f)


@pytest.mark.skipif(not CORPORA.is_dir(), reason="shared corpora folder absent (only on the team's machine)")
def test_corpus_duplicates_stay_with_one_tenant() -> None:
    """Real corpora repeat passages across documents: the truth still holds on what the logs show."""
    sim, rows = _run_in_memory(3, CORPORA)
    check_truth_against_logs(sim, rows, 3)


# ---- the realistic scale -----------------------------------------------------------------------

def test_realistic_scale_is_big_varied_and_scaled_down() -> None:
    spec = SCALES["realistic"]
    assert spec.realistic and spec.tenants >= 200
    # The arrival process yields about two thirds of ``requests`` (quiet night hours): 15,000 or more.
    assert spec.requests * 0.66 >= 15000
    assert (spec.ceiling, spec.advertised) == (8192, 16384)  # the small scale's pool: prompts stay small
    mix = spec.fragment_mix
    assert mix is not None and min(lo for lo, _, _ in mix) == 4 and max(hi for _, hi, _ in mix) == 400
    assert dict(((lo, hi), w) for lo, hi, w in mix)[(8, 15)] >= 0.3  # many short fragments: recall by length is measurable
    for name in ("small", "medium", "large"):
        assert not SCALES[name].realistic and SCALES[name].fragment_mix is None


def test_realistic_scale_needs_a_corpus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ForensicsError, match="needs a corpus") as exc:
        simulate(tmp_path / "r", scale="realistic")
    assert "--corpus" in str(exc.value)
    assert not (tmp_path / "r").exists()
    from forensics.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["simulate", "--out", str(tmp_path / "r"), "--scale", "realistic", "--quiet"])
    assert stop.value.code == 2 and "--corpus" in capsys.readouterr().err


#: The realistic scale's code on fewer tenants and requests (the full scale takes ~25 s to generate).
REDUCED_REALISTIC = dataclasses.replace(SCALES["realistic"], tenants=40, requests=2500)


@pytest.fixture(scope="module")
def realistic() -> tuple[Simulation, dict[str, dict[str, Any]]]:
    if not CORPORA.is_dir():
        pytest.skip("shared corpora folder absent (only on the team's machine)")
    return _run_in_memory(2, CORPORA, REDUCED_REALISTIC)


def test_realistic_truth_holds_in_the_logs(realistic: tuple[Simulation, dict[str, dict[str, Any]]]) -> None:
    sim, rows = realistic
    kinds = collections.Counter(h["kind"] for h in sim.truth["hard_negatives"])
    assert {"shared_boilerplate", "self_tenant", "own_prompt_quote", "later_prompt_only"} <= set(kinds), kinds
    check_truth_against_logs(sim, rows, 2)


def test_realistic_fragments_span_short_to_long(realistic: tuple[Simulation, dict[str, dict[str, Any]]]) -> None:
    sim, _ = realistic
    tokens = [f["tokens"] for f in sim.truth["fragments"] if f["is_leak"]]
    assert 4 <= min(tokens) and max(tokens) <= 400 and max(tokens) >= 64
    assert sum(8 <= t <= 15 for t in tokens) >= 0.2 * len(tokens)
    assert sum(t >= 16 for t in tokens) >= 0.4 * len(tokens)


def test_realistic_traffic_shares_templates_and_popular_passages(realistic: tuple[Simulation, dict[str, dict[str, Any]]]) -> None:
    sim, rows = realistic
    tenants = sim.tenants
    # The same system prompt copied whole by several tenants; templates filled in with different values.
    copied = collections.Counter(t.system_prompt for t in tenants if t.system_shared)
    assert copied and copied.most_common(1)[0][1] >= 3
    filled = [t.system_prompt for t in tenants if not t.system_shared]
    assert len(set(filled)) == len(filled) >= 10
    # Forms: one template, many tenants, different values.
    forms = collections.Counter(t.form for t in tenants if t.form is not None)
    assert forms.most_common(1)[0][1] >= 3
    title = tx.FORMS[forms.most_common(1)[0][0]][0] + "\n"
    senders = {r["tenant"] for r in rows.values() if title in r["prompt"]}
    assert len(senders) >= 3
    # Popular quotes and code, each pasted by a group of tenants.
    assert any(n.startswith("popular_code_") for _, n in sim.popular) and any(n.startswith("popular_quote_") for _, n in sim.popular)
    holders = {n: {r["tenant"] for r in rows.values() if text in r["prompt"]} for text, n in sim.popular}
    assert max(len(h) for h in holders.values()) >= 5
    assert any("popular_" in f.get("shared_text", "") for f in sim.truth["fragments"] if f["label"] == "shared_boilerplate")


def test_realistic_text_is_real_and_garbage_is_fresh(realistic: tuple[Simulation, dict[str, dict[str, Any]]]) -> None:
    sim, rows = realistic
    suspect_ids = {s["request_id"] for s in sim.truth["suspects"]}
    answers = {a[:60] for t in sim.tenants for a in t.answers}
    ordinary = [r["response"] for rid, r in rows.items() if rid not in suspect_ids and r["response"]][:300]
    assert sum(any(a in resp for a in answers) for resp in ordinary) >= 30  # answers are the tenants' corpus answers
    # Garbage decoding emits natural sentences no tenant owns, each once.
    assert sim.reserve is not None
    used = sim.reserve.sentences[: sim._sentence_at] if sim._sentence_at else []
    suspects = [rows[rid]["response"] for rid in suspect_ids]
    assert len(used) >= 50 and all(sum(s in resp for resp in suspects) <= 1 for s in used[:200])


def test_garbage_and_popular_passages_share_no_long_run_with_owned_text() -> None:
    owned_text = ("The committee approved the budget for the new library on the corner of Elm Street after a long debate "
                  "about parking spaces and opening hours.")
    owned = tx.token_runs([owned_text])
    reserved = [
        "Nobody expected the river to freeze that early in October. " + owned_text + " Then everyone went home.",
        "```python\n" + "\n".join(f"def step_{i}(x):\n    return x + {i}" for i in range(8)) + "\n```",
        "A short remark about the weather. It rained all day, and the gardens were grateful for it.",
    ]
    r = tx.reserve_material(reserved, n_quotes=0, n_code=1, owned=owned)
    assert len(r.code) == 1 and r.quotes == []
    assert "Nobody expected the river to freeze that early in October." in r.sentences
    assert not any("committee approved" in s for s in r.sentences)  # a 12-token run of owned text: copied, left out
    assert "It rained all day, and the gardens were grateful for it." in r.sentences
    # stock wording: 8-token runs another owner also holds (here the first 80 characters)
    stock = tx.stock_runs([(0, tx.token_hashes(owned_text)), (1, tx.token_hashes("x " + owned_text[:80]))])
    assert tx.mostly_stock(owned_text[:60], stock) and not tx.mostly_stock(owned_text, stock)


def _own_chars_plain(passage: str, phrases: tuple[str, ...]) -> int:
    """own_chars by its definition: every k from 120 down, every phrase (what the bisection must equal)."""
    text = passage
    for phrase in phrases:
        text = text.replace(phrase, "\0")
    head = next((k for k in range(min(len(text), 120), 3, -1) if any(text[:k] in p for p in phrases)), 0)
    text = text[head:]
    tail = next((k for k in range(min(len(text), 120), 3, -1) if any(text[-k:] in p for p in phrases)), 0)
    return sum(c.isalnum() for c in text[: len(text) - tail])


def test_own_chars_bisection_equals_the_plain_definition() -> None:
    import random

    rng = random.Random(0)
    phrases = tx.TEMPLATE_PHRASES
    source = " ".join(phrases) + " Payment of EUR 12,000.00 is due \x01 odd " + " ".join(reversed(phrases))
    for _ in range(3000):
        a = rng.randrange(len(source))
        passage = source[a : a + rng.randint(1, 300)]
        assert tx.own_chars(passage) == _own_chars_plain(passage, phrases), passage


def test_a_simulated_incident_is_private_whatever_the_umask(tmp_path: Path) -> None:
    # Made-up, but customer-shaped, data: folders 0700 and files 0600 like everything forensics writes.
    import os
    import stat

    old = os.umask(0)
    try:
        simulate(tmp_path / "sim", seed=3, scale="small")
    finally:
        os.umask(old)
    entries = [tmp_path / "sim", *(tmp_path / "sim").rglob("*")]
    assert len(entries) > 5
    for p in entries:
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode == (0o700 if p.is_dir() else 0o600), (p, oct(mode))
