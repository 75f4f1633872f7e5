"""How the match stage runs, never what it finds: one object passed down instead of module globals.

Outputs are byte-identical for any value (tests prove it by forcing the pool on small cases and
by retiring common k-grams after every batch); only time and memory change.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Tuning:
    """The match stage's performance knobs (defaults measured with benchmarks/match.py)."""

    #: Below this much (uncompressed) exchanges data no worker is started. This process works alone
    #: during the workers' start-up, so it does not hold up the pass, but it costs CPU (a fork server
    #: importing the matcher, fresh processes faulting their memory in: about 0.6 CPU-seconds).
    #: Measured on a shared 2-core machine, alone / with one worker: 18 MB 0.77-1.14 s / 0.74-1.13 s
    #: (at most a fifth sooner, for 50% more CPU); 66 MB 2.28-2.45 s / 1.53-1.71 s.
    inline_bytes: int = 32 << 20
    #: Wait until the workers are up before the pass (tests set it, so the workers surely take jobs).
    wait_for_workers: bool = False
    #: Uncompressed Parquet bytes per pass task on the pool: big enough that a task's fixed costs
    #: (a message each way, a Parquet footer) vanish, small enough that two workers finish together.
    #: Each process holds a task's hits until they are merged, and before common text is known a
    #: task's hits grow with the targets: 4 MB rather than 8 took the 4 GB benchmark run's peak from
    #: 1,315 to 1,249 MiB (with KEEP_BYTES 64 MiB), in no more time.
    task_bytes: int = 4 << 20
    #: Pass tasks waiting at each worker before this process scans one itself. With 2, the worker ran out
    #: of tasks while this process scanned one of its own or dropped the hits on common k-grams: on the
    #: 1 GB benchmark incident it waited 0.73 s of the 9.4 s pass between tasks; with 4, 0.20-0.22 s. The
    #: peak of the stage is in verification, which this does not move (1,108 MiB, all processes). Results
    #: finished out of order wait in this process up to twice the tasks in flight (forensics.match.pool.ordered):
    #: with more workers, more of them.
    pass_in_flight: int = 4
    #: Verification tasks waiting at each worker before this process verifies one itself. Measured while
    #: this process still scored every task's candidates (each process now scores its own): on the 1 GB
    #: benchmark incident (2 cores, 23 tasks) 2 left the worker idle while this process scored, and the
    #: verifying phase took 21.5-23.2 s; 4 took 19.9-20.3 s, 8 took 18.5-18.8 s. Once scoring took half
    #: the time (array passes), 4 and 8 gave the same (verification 8.2-8.8 s in both): 4, since each
    #: waiting task's results are held in memory.
    verify_in_flight: int = 4
    #: Holder entries buffered before k-grams already common are retired (bounds memory, not results).
    compact_entries: int = 4_000_000
    #: Hits buffered before those on k-grams already common are dropped (bounds memory, not results).
    prune_hits: int = 500_000
    #: Hits held in memory during the pass: more, after a result, and they go to a file in the case folder (bounds
    #: memory, not results). 2M is 46 MiB; one result's hits may come on top.
    memory_hits: int = 2_000_000
    #: Held hits verified at a time, whole scan tasks' hits (bounds memory, not results): 1M is 23 MiB, and about
    #: 4x that while they are filtered and sorted. The match stage's peak, all processes, on the 1 GB / 4 GB benchmark
    #: incidents: 4M 1,354 / 2,302-2,312 MiB, 2M - / 2,229 MiB, 1M 1,200 / 2,104-2,144 MiB (the time within noise).
    verify_part_hits: int = 1_000_000
    #: Candidate pairs' rows held in memory as verification builds them: more, and they go to a file in the case
    #: folder, read back once verification is done and dropped at the stage's end (bounds memory, not results).
    #: 20k rows are about 16 MiB.
    memory_rows: int = 20_000
    #: Groups of targets the candidate rows are held in (by target number): the evidence model reads them a group at
    #: a time, each about 1/64 of the rows (bounds memory, not results).
    row_groups: int = 64


#: What ``match`` uses when given none (a test harness driving the CLI may replace it).
DEFAULT = Tuning()
