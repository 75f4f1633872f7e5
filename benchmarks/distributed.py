"""The same simulated incident on ``--engine local`` and on ``--engine spark`` (``local[2]``), in one run.

    python benchmarks/distributed.py [--scale medium] [--seed 5] [--master local[2]] [--work DIR]

Needs the spark extra (PySpark) and a Java runtime, and the lab extra: pip install -e '.[bench]'.

1. Simulates an incident (``forensics simulate``, plain files) once.
2. Runs ``forensics run`` on it with each engine, each in a fresh child process, and prints each
   stage's seconds, the totals and their ratio (Spark / local; the Spark run's JVM start-up is
   timed apart), then checks that the two report folders are byte-identical.
3. From the Spark run's measured rate per core on the distributed stages (ingest parsing and the
   match pass: corpus tokens / (seconds x cores)), projects on paper the time for 10^11 tokens
   on a 64-core cluster, with the stages that stay on the driver scaled from their measured rate.

Both engines run on the same (shared) machine, so absolute times mislead; the ratio is the result.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from forensics.lab.bench import measure

#: The checkout this script is in: scratch files go inside it unless --work says otherwise.
REPO = Path(__file__).resolve().parent.parent
#: The projection's corpus and cluster.
PROJECT_TOKENS = 10**11
PROJECT_CORES = 64


def run_engine(case_file: Path, out: Path, engine: str, master: str) -> dict[str, Any]:
    """One ``forensics run`` with ``engine`` (in the measuring child): stage seconds and corpus size."""
    from forensics import api
    from forensics import engine as engines

    started = time.perf_counter()
    cores = 1
    if engine == "spark":
        cores = engines.spark_context(master).defaultParallelism
    startup = time.perf_counter() - started
    result = api.run(case_file, out, engine=engine)
    match = json.loads((result.case_dir / "match.json").read_text(encoding="utf-8"))
    manifest = json.loads((result.case_dir / "manifest.json").read_text(encoding="utf-8"))
    return {"stages": {s["stage"]: s["seconds"] for s in result.stages}, "startup": startup, "cores": cores,
            "tokens": match["searched"]["tokens"], "records": match["searched"]["records"],
            "input_bytes": sum(f.get("size", 0) for f in manifest.get("files", [])),
            "report_dir": str(result.report.report_dir)}


def driver_prepass(case_file: Path) -> tuple[float, int]:
    """Seconds and bytes of what ingest does on the driver before any task runs, for every input
    file of the case: read every byte for its SHA-256 and the spans of big plain files. It does
    not scale with the cluster (measured apart here, as ingest runs it)."""
    from forensics.config import load_case_file
    from forensics.ingest import SPLIT_BYTES, expand_inputs
    from forensics.ingest.reader import scan_file

    cfg = load_case_file(case_file)
    files, _ = expand_inputs([spec.path for spec in cfg.inputs])
    started = time.perf_counter()
    for path, _explicit in files:
        scan_file(path, SPLIT_BYTES)
    return time.perf_counter() - started, sum(path.stat().st_size for path, _ in files)


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


def main(argv: list[str]) -> int:
    """Run the benchmark; print the figures."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", default="medium", help="simulator scale (small, medium, large)")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--master", default="local[2]", help="Spark master for the Spark run")
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temporary one)")
    args = ap.parse_args(argv)
    try:
        import pyspark  # noqa: F401
    except ImportError:
        print("PySpark is not installed: pip install -e '.[bench]'", file=sys.stderr)
        return 2
    from forensics import api
    from forensics.engine import java_missing

    if java_missing():
        print("no Java runtime: install one (Debian: apt-get install default-jre-headless)", file=sys.stderr)
        return 2

    work = args.work or Path(tempfile.mkdtemp(prefix="forensics-distributed-"))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        sim = work / "incident"
        api.simulate(sim, seed=args.seed, scale=args.scale, compress=False)
        case_file = sim / "case.toml"
        # The Spark run's workers import forensics as this interpreter does.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        local = measure(run_engine, case_file, work / "out-local", "local", args.master, interval=None).value
        spark = measure(run_engine, case_file, work / "out-spark", "spark", args.master, interval=None).value
        same = _files(Path(local["report_dir"])) == _files(Path(spark["report_dir"]))
        hashing, hashed = measure(driver_prepass, case_file, interval=None).value

        tokens, cores = local["tokens"], spark["cores"]
        print(f"incident: simulate --scale {args.scale} --seed {args.seed}: {local['records']:,} records, "
              f"{tokens:,} tokens of prompts and responses, {local['input_bytes'] / 1e6:.0f} MB of logs")
        print(f"{'stage':<8} {'local (s)':>10} {'spark ' + args.master + ' (s)':>22}")
        for stage in local["stages"]:
            print(f"{stage:<8} {local['stages'][stage]:>10.2f} {spark['stages'][stage]:>22.2f}")
        t_local, t_spark = sum(local["stages"].values()), sum(spark["stages"].values())
        print(f"{'total':<8} {t_local:>10.2f} {t_spark:>22.2f}   (+ Spark start-up {spark['startup']:.1f} s)")
        print(f"ratio spark / local: {t_spark / t_local:.2f} (total), "
              f"{(spark['stages']['ingest'] + spark['stages']['match']) / (local['stages']['ingest'] + local['stages']['match']):.2f} "
              "(ingest + match)")
        print(f"outputs byte-identical: {'yes' if same else 'NO'}")
        print(f"driver pre-pass (SHA-256 and spans of every input byte, one process, warm page cache): "
              f"{hashing:.2f} s for {hashed / 1e6:.0f} MB ({hashed / 1e6 / max(hashing, 1e-9):.0f} MB/s), "
              f"{100 * hashing / spark['stages']['ingest']:.0f}% of the Spark run's ingest stage")

        # On paper: the distributed stages scale with cores; scan, report and the pre-pass stay on the driver.
        distributed = spark["stages"]["ingest"] - hashing + spark["stages"]["match"]
        per_core = tokens / (distributed * cores)
        driver = spark["stages"]["scan"] + spark["stages"]["report"]
        scale = PROJECT_TOKENS / tokens
        t_dist, t_driver, t_hash = PROJECT_TOKENS / (per_core * PROJECT_CORES), driver * scale, hashing * scale
        # Ingest's finaliser also runs on the driver: counting it as distributed makes this rate a lower bound.
        print(f"measured rate on Spark (ingest + match stages, pre-pass excluded): {per_core:,.0f} tokens/s per core "
              f"({cores} cores; a lower bound: ingest's finaliser runs on the driver)")
        print(f"projection for {PROJECT_TOKENS:.0e} tokens on {PROJECT_CORES} cores: distributed stages "
              f"{_hours(t_dist)}; on the driver, scaled linearly from this run, the pre-pass {_hours(t_hash)} (local "
              f"disk speed; over an object-storage mount it is bound by one node's bandwidth) and scan + report "
              f"{_hours(t_driver)} (an upper bound: they grow with suspects and findings more than with the corpus); "
              f"total about {_hours(t_dist + t_hash + t_driver)}. Assumes linear scaling over cores and the inputs on "
              "storage every executor reads at the same path.")
        return 0 if same else 1
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
