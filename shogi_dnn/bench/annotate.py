"""`shogi-dnn bench annotate [DATA] [--nodes N] [--repeats R]`: annotate's positions per CPU-second against
the engine's own.

Three cases on the same positions (those of DATA whose `eval` is missing: what `annotate --no-off-path`
searches), alternated over `--repeats` rounds so that load from other jobs falls on each alike, each
counted in CPU seconds (user + system) of every process it runs, the engines' included:

  annotate         the whole job, `shogi-dnn annotate DATA --out TMP --nodes N --workers W` in a child
                   process: start-up, reading, searching, writing the shards
  engine_newgame   one engine, Threads 1, Contempt 0 and annotate's Hash (usi_client.sized_options: 1 MB
                   up to 16,000 nodes), and for each position `usinewgame`,
                   `position sfen S`, `go nodes N`, read to `bestmove`: the least that labels independent
                   of the positions searched before cost (usinewgame clears the engine's tables)
  engine_alone     the same loop without `usinewgame`: the engine's own speed

Prints one key=value line per case and round, then each case's median CPU seconds, positions per
CPU-second and its ratio to engine_alone, where a position's CPU goes (per_position), and the load
average. Without DATA, the first `--games`
games of the bundled datasets/gnushogi.tar.xz are converted first (the figures of docs/annotate.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, cast

from shogi_dnn.annotate.output import REPORT_NAME
from shogi_dnn.annotate.usi_client import DEFAULT_ENGINE, find_engine, sized_options
from shogi_dnn.dataset import features, shards
from shogi_dnn.errors import RunError, ShogiDnnError

BUNDLED = Path(__file__).resolve().parents[2] / "datasets" / "gnushogi.tar.xz"
BUNDLED_MEMBER = "gnushogi/gnushogi-0000.csa"       # 100 games; the first --games are converted
ANNOTATE, ENGINE_NEWGAME, ENGINE_ALONE = "annotate", "engine_newgame", "engine_alone"
CASES = (ANNOTATE, ENGINE_NEWGAME, ENGINE_ALONE)


@dataclasses.dataclass(frozen=True)
class Measurement:
    """One case's run in one round: `positions` searched for `cpu_s` CPU seconds (every process)."""

    case: str
    round: int
    positions: int
    cpu_s: float

    def line(self) -> str:
        return (f"round={self.round} case={self.case} positions={self.positions} cpu_s={self.cpu_s:.2f} "
                f"positions_per_cpu_s={self.positions / self.cpu_s:.1f}")


@dataclasses.dataclass(frozen=True)
class Row:
    """A case over every round: the median CPU seconds, and its speed relative to engine_alone's."""

    case: str
    rounds: int
    cpu_s: float
    positions_per_cpu_s: float
    ratio: float


def summarize(measurements: Sequence[Measurement]) -> list[Row]:
    """One Row per case (CASES order, those measured): medians over rounds, ratio to engine_alone
    (NaN without it)."""
    rows = []
    for case in (c for c in CASES if any(m.case == c for m in measurements)):
        runs = [m for m in measurements if m.case == case]
        cpu = statistics.median(m.cpu_s for m in runs)
        rows.append(Row(case, len(runs), cpu, runs[0].positions / cpu, float("nan")))
    alone = next((row.positions_per_cpu_s for row in rows if row.case == ENGINE_ALONE), float("nan"))
    return [dataclasses.replace(row, ratio=row.positions_per_cpu_s / alone) for row in rows]


def format_table(rows: Sequence[Row]) -> str:
    """The summary table: one line per case."""
    lines = [f"{'case':<16} {'rounds':>6} {'CPU-s':>9} {'positions/CPU-s':>16} {'vs engine_alone':>16}"]
    lines += [f"{row.case:<16} {row.rounds:>6} {row.cpu_s:>9.2f} {row.positions_per_cpu_s:>16.1f} "
              f"{row.ratio:>16.2f}" for row in rows]
    return "\n".join(lines)


def per_position(rows: Sequence[Row]) -> str:
    """Where a position's CPU goes, in ms: the engine's search (engine_alone), its usinewgame
    (engine_newgame - engine_alone) and the rest of annotate (annotate - engine_newgame: our process,
    the engines' start-ups); empty without the three cases."""
    ms = {row.case: 1000 / row.positions_per_cpu_s for row in rows}
    if any(case not in ms for case in CASES):
        return ""
    search, newgame, annotate = ms[ENGINE_ALONE], ms[ENGINE_NEWGAME], ms[ANNOTATE]
    return (f"ms_per_position: search={search:.2f} usinewgame={newgame - search:.2f} "
            f"annotate_rest={annotate - newgame:.2f} annotate={annotate:.2f}")


def cpu_seconds(who: int) -> float:
    """User + system CPU seconds of this process (RUSAGE_SELF) or of its waited-for children."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def measured(run: Callable[[], int]) -> tuple[int, float]:
    """`run()`'s result and the CPU seconds it took: this process's and its children's (engines, jobs)."""
    before = cpu_seconds(resource.RUSAGE_SELF) + cpu_seconds(resource.RUSAGE_CHILDREN)
    result = run()
    return result, cpu_seconds(resource.RUSAGE_SELF) + cpu_seconds(resource.RUSAGE_CHILDREN) - before


def unlabelled_sfens(data: Path) -> list[str]:
    """The SFEN of every position of DATA without an evaluation, in manifest order (annotate's order)."""
    manifest = shards.read_manifest(data)
    keys = (shards.KEY_BOARD, shards.KEY_HANDS, shards.KEY_TURN, shards.KEY_PLY, shards.KEY_EVAL)
    sfens = []
    for info in manifest.shards:
        with shards.open_shard(manifest.shard_path(info)) as f:
            rows = shards.read_rows(f, 0, info.positions, keys)
        board, hands, turn, ply = (rows[key] for key in keys[:4])
        for i in (i for i, value in enumerate(rows[shards.KEY_EVAL]) if value == features.EVAL_NONE):
            sfens.append(features.decode_position(board[i], hands[i], int(turn[i]), int(ply[i])))
    return sfens


def engine_loop(engine: str, sfens: Sequence[str], nodes: int, newgame: bool) -> int:
    """Search every position with one engine, as a user's shortest loop would; the positions searched."""
    proc = subprocess.Popen([engine], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, bufsize=1)
    stdin, stdout = cast(IO[str], proc.stdin), cast(IO[str], proc.stdout)     # both pipes

    def until(word: str) -> None:
        for line in stdout:
            if line.split(" ", 1)[0].strip() == word:
                return
        raise RunError(f"engine {engine} exited before '{word}'")

    stdin.write("usi\n")
    until("usiok")
    options = sized_options(nodes)               # as annotate sets them
    stdin.write("".join(f"setoption name {k} value {v}\n" for k, v in options) + "isready\n")
    until("readyok")
    first = "usinewgame\n" if newgame else ""
    for sfen in sfens:
        stdin.write(f"{first}position sfen {sfen}\ngo nodes {nodes}\n")
        until("bestmove")
    stdin.write("quit\n")
    stdin.close()
    proc.wait()
    return len(sfens)


def annotate_job(data: Path, out: Path, engine: str, nodes: int, workers: int) -> int:
    """The whole `annotate` job in a child process, into `out` (emptied first); the positions it searched.

    Raises:
        RunError: the job failed, or left positions without a label.
    """
    shutil.rmtree(out, ignore_errors=True)       # else the job would find itself done and do nothing
    argv = [sys.executable, "-m", "shogi_dnn", "annotate", str(data), "--out", str(out),
            "--nodes", str(nodes), "--workers", str(workers), "--engine", engine, "--no-progress"]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RunError(f"annotate exited with {done.returncode}: {done.stderr.strip()[-500:]}")
    report = json.loads((out / REPORT_NAME).read_text(encoding="utf-8"))
    if report["failed"]:
        raise RunError(f"annotate left {report['failed']} positions without a label: not comparable")
    return int(report["positions_searched"])


def bundled_dataset(folder: Path, games: int) -> Path:
    """The first `games` games of the bundled GNU Shogi archive, converted with convert's defaults."""
    from shogi_dnn.convert.run import ConvertSettings, run_convert
    with tarfile.open(BUNDLED) as archive:
        member = archive.extractfile(BUNDLED_MEMBER)
        if member is None:
            raise RunError(f"{BUNDLED}: no {BUNDLED_MEMBER}")
        text = member.read().decode("utf-8")
    records = folder / "records"
    records.mkdir()
    (records / "games.csa").write_text("\n/\n".join(text.split("\n/\n")[:games]) + "\n", encoding="utf-8")
    run_convert([records], folder / "data", ConvertSettings(), workers=1)
    return folder / "data"


def run_rounds(data: Path, scratch: Path, engine: str, nodes: int, workers: int, repeats: int
               ) -> list[Measurement]:
    """Every case once per round, the order rotated each round; each Measurement printed as it ends.

    Raises:
        RunError: annotate searched other positions than the loops (a failure, another dataset).
    """
    sfens = unlabelled_sfens(data)
    runs: dict[str, Callable[[], int]] = {
        ANNOTATE: lambda: annotate_job(data, scratch / "out", engine, nodes, workers),
        ENGINE_NEWGAME: lambda: engine_loop(engine, sfens, nodes, newgame=True),
        ENGINE_ALONE: lambda: engine_loop(engine, sfens, nodes, newgame=False),
    }
    measurements = []
    for round_ in range(1, repeats + 1):
        for k in range(len(CASES)):
            case = CASES[(k + round_ - 1) % len(CASES)]
            positions, cpu = measured(runs[case])
            if positions != len(sfens):
                raise RunError(f"{case} searched {positions} positions, the loops {len(sfens)}")
            measurements.append(Measurement(case, round_, positions, cpu))
            print(measurements[-1].line(), flush=True)
    return measurements


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="shogi-dnn bench annotate", description=__doc__.split("\n\n")[0])
    parser.add_argument("data", nargs="?", type=Path, default=None, metavar="DATA",
                        help="a dataset folder (default: --games games of the bundled GNU Shogi archive)")
    parser.add_argument("--games", type=int, default=20, help="games converted without DATA (default 20)")
    parser.add_argument("--engine", default=DEFAULT_ENGINE, help=f"the USI engine (default {DEFAULT_ENGINE})")
    parser.add_argument("--nodes", type=int, default=1000, help="node budget per search (default 1000)")
    parser.add_argument("--workers", type=int, default=1, help="annotate's --workers (default 1)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds, the cases alternated (default 3)")
    args = parser.parse_args(argv)
    load = os.getloadavg()
    try:
        engine = find_engine(args.engine)
        with tempfile.TemporaryDirectory(prefix="bench-annotate-") as tmp:
            data = args.data or bundled_dataset(Path(tmp), args.games)
            measurements = run_rounds(data, Path(tmp), engine, args.nodes, args.workers, args.repeats)
    except ShogiDnnError as exc:
        print(f"shogi-dnn bench annotate: error: {exc}", file=sys.stderr)
        return 2
    rows = summarize(measurements)
    print(format_table(rows))
    print(per_position(rows))
    end = os.getloadavg()
    print(f"nodes={args.nodes} workers={args.workers} positions={measurements[0].positions} "
          f"load_avg_1min={load[0]:.2f}..{end[0]:.2f} load_avg_5min={load[1]:.2f}..{end[1]:.2f}")
    return 0
