"""`shogi-dnn bench convert [CORPUS...] [--workers 1,4] [--backends ...] [--json FILE]`.

Runs the real `convert` job on a corpus once per (backend, worker count), each in a fresh Python
process so that its peak memory (getrusage of the process and of its worker children) is its own.
Reports positions/s with all workers and per worker, positions per CPU-second (what one core does,
even on a busy machine), peak memory (the parent's, and the largest
of one worker; the whole job peaks near parent + workers x worker), and the time split between
parsing, encoding (both summed over workers, CPU-side) and writing shards (parent).

`--peer` runs, alternating with `shogi-dnn convert --workers 1` (every default: legality, repetition,
dedup, checksummed shards), a dlshogi-style converter on cshogi (shogi_dnn/bench/peer_hcpe.py, or
`--peer-script PATH` taking the same arguments and printing "N positions in S s"), both on the same CSA
files (an archive's CSA members are extracted to a temp folder first), `--repeats` rounds. Each run is a
process of its own, measured in CPU seconds (user + system, getrusage of the child), and each round
also runs both on the corpus's first game alone, whose CPU time (interpreter, imports) is subtracted:
positions per CPU-second, what one core of each does whatever else the machine runs; wall time is
printed beside it. `--copies N` gives both the CSA files N times (4 by default: the bundled GNU Shogi
corpus's 250k positions become 1M, so that the start-up is small beside the work); convert then runs
with --no-dedup (else it would keep one copy and write a quarter of the positions).
`--compression NAME` runs convert with that --compression (default: convert's), to weigh the shards'
compression in its CPU time.
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

from shogi_dnn.dataset import shards
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
    parser.add_argument("--workers", default=",".join(sorted({"1", str(cores)}, key=int)) + ",auto",
                        help=f"comma-separated worker counts, `auto` for convert's default plan "
                             f"(default 1,{cores},auto)")
    parser.add_argument("--backends", default=",".join(available_backends()),
                        help="comma-separated rules backends (default: every installed one)")
    parser.add_argument("--shard-size", type=int, default=100_000, help="positions per shard")
    parser.add_argument("--json", metavar="FILE", default=None, help="also write the results as JSON")
    parser.add_argument("--peer", action="store_true",
                        help="compare `convert --workers 1` with a dlshogi-style converter on cshogi "
                             "(see above)")
    parser.add_argument("--peer-script", metavar="PATH", default=None,
                        help="the peer to run instead of the built-in one: `PATH OUT FILES...`, printing "
                             "'N positions in S s' (e.g. a reference copy kept beside the repository)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each with --peer (default 3)")
    parser.add_argument("--copies", type=int, default=4,
                        help="with --peer: the CSA files given this many times to both (default 4; "
                             "convert then runs with --no-dedup)")
    parser.add_argument("--compression", choices=tuple(shards.COMPRESSIONS),
                        default=shards.DEFAULT_COMPRESSION,
                        help=f"convert's --compression for its shards (default {shards.DEFAULT_COMPRESSION}, "
                             "convert's default)")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)   # internal: one measurement
    return parser


def measure_once(corpus: list[str], backend: str, workers: int, shard_size: int,
                 compression: str = shards.DEFAULT_COMPRESSION) -> dict[str, Any]:
    """Convert `corpus` into a temp folder in this process; timings and peak memory (MiB)."""
    from shogi_dnn.convert.run import ConvertSettings, run_convert
    _warm_imports(backend)
    cpu_before = _cpu_seconds()
    with tempfile.TemporaryDirectory(prefix="bench-convert-") as out:
        start = time.perf_counter()
        report = run_convert(corpus, Path(out) / "data",
                             ConvertSettings(shard_size=shard_size, compression=compression),
                             workers=workers or None, backend=backend)
        wall = time.perf_counter() - start
    cpu = _cpu_seconds() - cpu_before + report.timings.get("worker_cpu_s", 0.0)
    positions = sum(report.positions.values())
    self_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024       # Linux: KiB
    # RUSAGE_CHILDREN would also count helper processes (h5py's import spawns one of ~40 MiB), so
    # each worker reports its own peak with its results.
    child_rss = report.peak_rss_worker_mib if report.worker_plan != "in-process" else 0.0
    return {"backend": backend, "workers": workers or "auto", "plan": report.worker_plan,
            "files": report.files_read, "games": report.converted,
            "positions": positions, "seconds": round(wall, 3),
            "positions_per_s": round(positions / wall, 1),
            "positions_per_s_per_worker": round(positions / wall / report.workers, 1),
            "cpu_s": round(cpu, 4), "positions_per_cpu_s": round(positions / cpu, 1) if cpu else 0.0,
            "parse_s": round(report.timings.get("parse_s", 0.0), 4),
            "encode_s": round(report.timings.get("encode_s", 0.0), 4),
            "write_s": round(report.timings.get("write_s", 0.0), 4),
            "peak_rss_parent_mib": round(self_rss, 1), "peak_rss_worker_mib": round(child_rss, 1)}


def _warm_imports(backend: str) -> None:
    """Import what the job imports on first use, so a measurement counts converting, not importing
    (as the peer's: its rate starts after its imports)."""
    import multiprocessing.synchronize  # noqa: F401  (tqdm's lock, on the first bar)

    import tqdm  # noqa: F401

    import shogi_dnn.kifu.csa  # noqa: F401  (the readers: read_record_bytes imports them on first use)
    import shogi_dnn.kifu.ki2  # noqa: F401
    import shogi_dnn.kifu.kif  # noqa: F401
    import shogi_dnn.kifu.sfen  # noqa: F401
    import shogi_dnn.rules.native  # noqa: F401
    if backend == "cshogi":
        import shogi_dnn.rules.cshogi_backend  # noqa: F401


def _cpu_seconds() -> float:
    """CPU time of this process. The workers (children of multiprocessing's fork server, not of this
    process) report theirs with their results. On a shared machine positions per CPU-second says
    what one core does, whatever else runs."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def _run_child(corpus: list[str], backend: str, workers: int, shard_size: int,
               compression: str = shards.DEFAULT_COMPRESSION) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "shogi_dnn.bench.convert", "--one", "--workers", str(workers or "auto"),
           "--backends", backend, "--shard-size", str(shard_size), "--compression", compression, *corpus]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        tail = re.sub(r"^[\w.]*(Error|Exception): ", "", tail)        # never an internal class name
        raise ConfigError(f"bench convert ({backend}, {plural(workers, 'worker') if workers else 'auto'}) "
                          f"failed: {tail}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def format_table(results: list[dict[str, Any]]) -> str:
    head = (f"{'backend':<13}{'workers':>8}{'positions':>10}{'seconds':>9}{'pos/s':>10}{'pos/s/worker':>13}"
            f"{'pos/cpu-s':>10}"
            f"{'parse s':>9}{'encode s':>9}{'write s':>8}{'peak MiB parent/worker':>24}")
    rows = [f"{r['backend']:<13}{r['workers']:>8}{r['positions']:>10}{r['seconds']:>9.2f}"
            f"{r['positions_per_s']:>10,.0f}{r['positions_per_s_per_worker']:>13,.0f}"
            f"{r['positions_per_cpu_s']:>10,.0f}{r['parse_s']:>9.2f}"
            f"{r['encode_s']:>9.2f}{r['write_s']:>8.2f}"
            f"{r['peak_rss_parent_mib']:>15.0f} / {r['peak_rss_worker_mib']:<6.0f}  {r.get('plan', '')}"
            for r in results]
    return "\n".join([head + "  plan", *rows])


# The peer's last line: its positions.
_PEER_LINE = re.compile(r"(\d+) positions in ([\d.]+) s")


def _child_usage(cmd: list[str]) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run `cmd`; its completed process, CPU seconds (user + system, of the child and whatever it
    waited for: getrusage(RUSAGE_CHILDREN) before and after, one child at a time) and wall seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done, cpu, wall


def _last_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or ["no output"]
    return re.sub(r"^[\w.]*(Error|Exception): ", "", lines[-1])        # never an internal class name


def _run_peer(files: list[str], script: str | None) -> dict[str, Any]:
    """One run of the peer on `files`, a process of its own: its positions, CPU and wall seconds."""
    with tempfile.TemporaryDirectory(prefix="bench-peer-") as out:
        target = str(Path(out) / "out.hcpe")
        cmd = ([sys.executable, script, target, *files] if script
               else [sys.executable, "-m", "shogi_dnn.bench.peer_hcpe", target, *files])
        done, cpu, wall = _child_usage(cmd)
    found = _PEER_LINE.search(done.stdout)
    if done.returncode != 0 or found is None:
        raise ConfigError(f"bench convert --peer: the peer failed: {_last_line(done)}")
    return {"positions": int(found.group(1)), "cpu_s": cpu, "wall_s": wall}


def _run_convert(files: list[str], shard_size: int, dedup: bool = True,
                 compression: str = shards.DEFAULT_COMPRESSION) -> dict[str, Any]:
    """One `shogi-dnn convert FILES --workers 1` (every default: legality, repetition, dedup, checksummed
    shards; `dedup` False: --no-dedup; `compression`: its --compression) in a process of its own: the
    positions it wrote, its CPU and wall seconds, the bytes of its shards."""
    with tempfile.TemporaryDirectory(prefix="bench-ours-") as out:
        data = Path(out) / "data"
        cmd = [sys.executable, "-m", "shogi_dnn", "convert", *files, "--out", str(data), "--workers", "1",
               "--backend", "cshogi", "--shard-size", str(shard_size), "--no-progress", "--quiet",
               "--compression", compression, *([] if dedup else ["--no-dedup"])]
        done, cpu, wall = _child_usage(cmd)
        if done.returncode != 0:
            raise ConfigError(f"bench convert --peer: convert --workers 1 failed: {_last_line(done)}")
        from shogi_dnn.convert.writer import REPORT_NAME
        report = json.loads((data / REPORT_NAME).read_text())
        shard_bytes = sum(s.bytes for s in shards.read_manifest(data).shards)
    return {"positions": sum(report["positions"].values()), "cpu_s": cpu, "wall_s": wall,
            "shard_bytes": shard_bytes}


def _csa_corpus(corpus: list[str], scratch: Path) -> list[str]:
    """The CSA files of the corpus, as paths both converters can read: files, the CSA files under
    folders, and the CSA members of archives (extracted under `scratch`)."""
    from shogi_dnn.bench.peer_hcpe import csa_files
    from shogi_dnn.convert.sources import is_archive, iter_sources
    files: list[str] = []
    for item in corpus:
        if is_archive(item):
            for k, source in enumerate(iter_sources([item])):
                name = getattr(source, "name", "")
                if name.lower().endswith(".csa"):
                    path = scratch / f"{k:06d}-{Path(name).name}"
                    path.write_bytes(source.data)
                    files.append(str(path))
        else:
            files += [str(p) for p in csa_files([item]) if p.suffix.lower() == ".csa"]
    if not files:
        raise ConfigError(f"bench convert --peer: no CSA file in {', '.join(corpus)} "
                          "(the peer reads CSA only)")
    return files


_GAME_END = re.compile(rb"\n/\r?\n")


def _one_game(files: list[str], scratch: Path) -> str:
    """A CSA file holding the corpus's first game: the start-up run (interpreter, imports, one small
    conversion) whose CPU time is subtracted from each full run's."""
    data = Path(files[0]).read_bytes()
    cut = _GAME_END.search(data)
    path = scratch / "one-game.csa"
    path.write_bytes(data[:cut.start() + 1] if cut else data)
    return str(path)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _net(full: dict[str, Any], one: dict[str, Any]) -> dict[str, Any]:
    """A full run less its start-up run: positions, CPU and wall seconds and their rates."""
    positions = full["positions"] - one["positions"]
    cpu, wall = full["cpu_s"] - one["cpu_s"], full["wall_s"] - one["wall_s"]
    return {"positions": positions, "cpu_s": round(cpu, 6), "wall_s": round(wall, 6),
            "startup_cpu_s": round(one["cpu_s"], 4), "startup_wall_s": round(one["wall_s"], 4),
            "positions_per_cpu_s": round(positions / cpu, 1) if cpu > 0 else 0.0,
            "positions_per_s": round(positions / wall, 1) if wall > 0 else 0.0}


def _summary(runs: list[dict[str, Any]], side: str) -> dict[str, float]:
    cpu = [r[side]["positions_per_cpu_s"] for r in runs]
    wall = [r[side]["positions_per_s"] for r in runs]
    return {"min": min(cpu), "median": _median(cpu), "wall_min": min(wall), "wall_median": _median(wall)}


def compare_with_peer(corpus: list[str], script: str | None, repeats: int, shard_size: int,
                      copies: int = 1, compression: str = shards.DEFAULT_COMPRESSION) -> dict[str, Any]:
    """Alternate the peer and `convert --workers 1` (cshogi backend) on the same CSA files, each in a
    process of its own, and each round also on the corpus's first game alone (the start-up run):
    positions per CPU-second (user + system) of a full run less its start-up run, wall time beside; the
    size of convert's shards in bytes a position."""
    if "cshogi" not in available_backends():
        raise ConfigError("bench convert --peer needs cshogi (pip install 'shogi-dnn[fast]')")
    with tempfile.TemporaryDirectory(prefix="bench-peer-corpus-") as scratch:
        files = _csa_corpus(corpus, Path(scratch))
        one = _one_game(files, Path(scratch))
        distinct, files = len(files), files * copies
        runs, bytes_per_position = [], 0.0
        for _ in range(repeats):
            peer_one, peer = _run_peer([one], script), _run_peer(files, script)
            ours_one = _run_convert([one], shard_size, dedup=copies == 1, compression=compression)
            ours = _run_convert(files, shard_size, dedup=copies == 1, compression=compression)
            runs.append({"peer": _net(peer, peer_one), "ours": _net(ours, ours_one)})
            bytes_per_position = ours["shard_bytes"] / ours["positions"] if ours["positions"] else 0.0
    peer, ours = _summary(runs, "peer"), _summary(runs, "ours")
    return {"files": distinct, "copies": copies, "runs": runs, "peer": peer, "ours": ours,
            "ours_bytes_per_position": round(bytes_per_position, 2),
            "ratio_of_medians": round(ours["median"] / peer["median"], 3) if peer["median"] else 0.0,
            "ratio_of_mins": round(ours["min"] / peer["min"], 3) if peer["min"] else 0.0,
            "wall_ratio_of_medians": (round(ours["wall_median"] / peer["wall_median"], 3)
                                      if peer["wall_median"] else 0.0)}


def _ratio(ours: float, peer: float) -> float:
    return ours / peer if peer else 0.0


def format_peer(result: dict[str, Any], script: str | None) -> str:
    peer_name = script or "dlshogi-style on cshogi (shogi_dnn/bench/peer_hcpe.py)"
    lines = [f"{'run':>4}{'peer positions':>16}{'peer cpu s':>11}{'pos/cpu-s':>11}{'wall s':>8}"
             f"{'ours positions':>16}{'ours cpu s':>11}{'pos/cpu-s':>11}{'wall s':>8}{'cpu ratio':>10}"
             f"{'wall ratio':>11}"]
    for i, run in enumerate(result["runs"], 1):
        peer, ours = run["peer"], run["ours"]
        cpu_ratio = _ratio(ours["positions_per_cpu_s"], peer["positions_per_cpu_s"])
        wall_ratio = _ratio(ours["positions_per_s"], peer["positions_per_s"])
        lines.append(f"{i:>4}{peer['positions']:>16,}{peer['cpu_s']:>11.3f}"
                     f"{peer['positions_per_cpu_s']:>11,.0f}"
                     f"{peer['wall_s']:>8.3f}{ours['positions']:>16,}{ours['cpu_s']:>11.3f}"
                     f"{ours['positions_per_cpu_s']:>11,.0f}{ours['wall_s']:>8.3f}{cpu_ratio:>10.2f}"
                     f"{wall_ratio:>11.2f}")
    first = result["runs"][0]
    lines += [f"start-up subtracted (one-game runs, first round): peer {first['peer']['startup_cpu_s']:.3f} "
              f"CPU-s, ours {first['ours']['startup_cpu_s']:.3f} CPU-s",
              f"peer ({peer_name}): min {result['peer']['min']:,.0f}, median {result['peer']['median']:,.0f} "
              f"positions per CPU-second (wall: median {result['peer']['wall_median']:,.0f}/s)",
              f"shogi-dnn convert --workers 1: min {result['ours']['min']:,.0f}, median "
              f"{result['ours']['median']:,.0f} positions per CPU-second "
              f"(wall: median {result['ours']['wall_median']:,.0f}/s); its shards "
              f"{result['ours_bytes_per_position']:.2f} bytes a position",
              (f"ours / peer in CPU time: {result['ratio_of_medians']:.2f} (medians), "
               f"{result['ratio_of_mins']:.2f} (mins); in wall time {result['wall_ratio_of_medians']:.2f} "
               "(medians; meaningless on a busy machine)")]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    corpus = args.corpus or [str(DEFAULT_CORPUS)]
    missing = [c for c in corpus if not Path(c).exists()]
    if missing:
        raise ConfigError(f"{missing[0]}: no such file or folder "
                          f"(CORPUS defaults to the bundled {DEFAULT_CORPUS.name})")
    try:      # 0: `auto`, convert's own choice (convert.worker.plan_workers)
        workers = [0 if w.strip() == "auto" else int(w) for w in args.workers.split(",") if w.strip()]
    except ValueError as exc:
        raise ConfigError(f"--workers {args.workers!r}: expected comma-separated integers or auto") from exc
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in backends if b not in available_backends()]
    if unknown or not backends or not workers or min(workers) < 0 or "0" in args.workers.split(","):
        raise ConfigError(f"--backends {args.backends!r} / --workers {args.workers!r}: installed backends "
                          f"are {', '.join(available_backends())}; workers must be >= 1 or auto")
    if args.one:
        print(json.dumps(measure_once(corpus, backends[0], workers[0], args.shard_size, args.compression)))
        return 0
    if args.peer:
        if args.repeats < 1:
            raise ConfigError(f"--repeats {args.repeats}: must be at least 1")
        if args.copies < 1:
            raise ConfigError(f"--copies {args.copies}: must be at least 1")
        result = compare_with_peer(corpus, args.peer_script, args.repeats, args.shard_size, args.copies,
                                   args.compression)
        copies = (f", each given {args.copies} times (convert with --no-dedup)" if args.copies > 1 else "")
        copies += f"; convert --compression {args.compression}"
        print(f"bench convert --peer: {result['files']} CSA files of {', '.join(corpus)}{copies}; "
              f"{plural(args.repeats, 'round')} of each, alternating, each with a one-game start-up run")
        print(format_peer(result, args.peer_script))
        if args.json:
            Path(args.json).write_text(json.dumps({"corpus": corpus, **result}, indent=2) + "\n")
        return 0
    results = [_run_child(corpus, b, w, args.shard_size, args.compression) for b in backends for w in workers]
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
