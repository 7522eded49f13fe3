"""`shogi-dnn bench convert [CORPUS...] [--workers 1,4] [--backends ...] [--json FILE]`.

Runs the real `convert` job on a corpus once per (backend, worker count), each in a fresh Python
process so that its peak memory (getrusage of the process and of its worker children) is its own.
Reports positions/s with all workers and per worker, positions per CPU-second (what one core does,
even on a busy machine), peak memory (the parent's, and the largest
of one worker; the whole job peaks near parent + workers x worker), and the time split between
parsing, encoding (both summed over workers, CPU-side) and writing shards (parent).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from shogi_dnn.errors import ConfigError, ShogiDnnError
from shogi_dnn.rules import available_backends
from shogi_dnn.wording import plural

# The bundled GNU Shogi corpus (1,886 games in one .tar.xz): what a fresh clone has.
DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "datasets" / "gnushogi.tar.xz"


def build_parser() -> argparse.ArgumentParser:
    cores = len(os.sched_getaffinity(0))
    parser = argparse.ArgumentParser(prog="shogi-dnn bench convert", description=__doc__.split("\n\n")[1])
    parser.add_argument("corpus", nargs="*", metavar="CORPUS",
                        help=f"record files/folders/archives (default: {DEFAULT_CORPUS})")
    parser.add_argument("--workers", default=",".join(sorted({"1", str(cores)}, key=int)),
                        help=f"comma-separated worker counts (default 1,{cores}: one and all cores)")
    parser.add_argument("--backends", default=",".join(available_backends()),
                        help="comma-separated rules backends (default: every installed one)")
    parser.add_argument("--shard-size", type=int, default=100_000, help="positions per shard")
    parser.add_argument("--json", metavar="FILE", default=None, help="also write the results as JSON")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)   # internal: one measurement
    return parser


def measure_once(corpus: list[str], backend: str, workers: int, shard_size: int) -> dict[str, Any]:
    """Convert `corpus` into a temp folder in this process; timings and peak memory (MiB)."""
    from shogi_dnn.convert.run import ConvertSettings, run_convert
    cpu_before = _cpu_seconds()
    with tempfile.TemporaryDirectory(prefix="bench-convert-") as out:
        start = time.perf_counter()
        report = run_convert(corpus, Path(out) / "data", ConvertSettings(shard_size=shard_size),
                             workers=workers, backend=backend)
        wall = time.perf_counter() - start
    cpu = _cpu_seconds() - cpu_before + report.timings.get("worker_cpu_s", 0.0)
    positions = sum(report.positions.values())
    self_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024       # Linux: KiB
    # RUSAGE_CHILDREN would also count helper processes (h5py's import spawns one of ~40 MiB), so
    # each worker reports its own peak with its results.
    child_rss = report.peak_rss_worker_mib if workers > 1 else 0.0
    return {"backend": backend, "workers": workers, "files": report.files_read, "games": report.converted,
            "positions": positions, "seconds": round(wall, 3),
            "positions_per_s": round(positions / wall, 1),
            "positions_per_s_per_worker": round(positions / wall / workers, 1),
            "cpu_s": round(cpu, 4), "positions_per_cpu_s": round(positions / cpu, 1) if cpu else 0.0,
            "parse_s": round(report.timings.get("parse_s", 0.0), 3),
            "encode_s": round(report.timings.get("encode_s", 0.0), 3),
            "write_s": round(report.timings.get("write_s", 0.0), 3),
            "peak_rss_parent_mib": round(self_rss, 1), "peak_rss_worker_mib": round(child_rss, 1)}


def _cpu_seconds() -> float:
    """CPU time of this process. The workers (children of multiprocessing's fork server, not of this
    process) report theirs with their results. On a shared machine positions per CPU-second says
    what one core does, whatever else runs."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def _run_child(corpus: list[str], backend: str, workers: int, shard_size: int) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "shogi_dnn.bench.convert", "--one", "--workers", str(workers),
           "--backends", backend, "--shard-size", str(shard_size), *corpus]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        tail = re.sub(r"^[\w.]*(Error|Exception): ", "", tail)        # never an internal class name
        raise ConfigError(f"bench convert ({backend}, {plural(workers, 'worker')}) failed: {tail}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def format_table(results: list[dict[str, Any]]) -> str:
    head = (f"{'backend':<13}{'workers':>8}{'positions':>10}{'seconds':>9}{'pos/s':>10}{'pos/s/worker':>13}"
            f"{'pos/cpu-s':>10}"
            f"{'parse s':>9}{'encode s':>9}{'write s':>8}{'peak MiB parent/worker':>24}")
    rows = [f"{r['backend']:<13}{r['workers']:>8}{r['positions']:>10}{r['seconds']:>9.2f}"
            f"{r['positions_per_s']:>10,.0f}{r['positions_per_s_per_worker']:>13,.0f}"
            f"{r['positions_per_cpu_s']:>10,.0f}{r['parse_s']:>9.2f}"
            f"{r['encode_s']:>9.2f}{r['write_s']:>8.2f}"
            f"{r['peak_rss_parent_mib']:>15.0f} / {r['peak_rss_worker_mib']:<6.0f}" for r in results]
    return "\n".join([head, *rows])


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    corpus = args.corpus or [str(DEFAULT_CORPUS)]
    missing = [c for c in corpus if not Path(c).exists()]
    if missing:
        raise ConfigError(f"{missing[0]}: no such file or folder (CORPUS defaults to the bundled {DEFAULT_CORPUS.name})")
    try:
        workers = [int(w) for w in args.workers.split(",") if w.strip()]
    except ValueError as exc:
        raise ConfigError(f"--workers {args.workers!r}: expected comma-separated integers") from exc
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in backends if b not in available_backends()]
    if unknown or not backends or not workers or min(workers) < 1:
        raise ConfigError(f"--backends {args.backends!r} / --workers {args.workers!r}: installed backends "
                          f"are {', '.join(available_backends())}; workers must be >= 1")
    if args.one:
        print(json.dumps(measure_once(corpus, backends[0], workers[0], args.shard_size)))
        return 0
    results = [_run_child(corpus, b, w, args.shard_size) for b in backends for w in workers]
    print(f"bench convert: {', '.join(corpus)}; {len(os.sched_getaffinity(0))} cores")
    print(format_table(results))
    if args.json:
        Path(args.json).write_text(json.dumps({"corpus": corpus, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":             # the --one child: a user's error as one line, like the CLI's
    try:
        sys.exit(main())
    except ShogiDnnError as exc:
        print(f"shogi-dnn bench convert: error: {exc}", file=sys.stderr)
        sys.exit(2)
