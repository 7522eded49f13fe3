"""`shogi-dnn bench startup`: seconds that `train` and `evaluate` take to refuse bad arguments (arguments
are checked before TensorFlow starts, so a refusal should take about a second, not a TensorFlow start-up).

Each case runs `python -m shogi_dnn train|evaluate ...` in a fresh process `--repeats` times and prints one
key=value line: the median wall seconds, the median CPU seconds of the child (user+sys), its exit code,
whether TensorFlow was imported before the refusal, and the refusal's text.

  missing_data   `train --data nope`: no manifest.json there
  finished_run   `train` (no --resume) into a run folder that already has checkpoints; by default a
                 synthetic dataset and a run folder holding two checkpoints' state.json (the refusal
                 reads nothing more), or `--data DIR --run-dir RUN` of a real finished run
  evaluate_missing_data   `evaluate --run-dir RUN --data nope` (RUN: the finished run above)

Measured (2-core shared CPU VM, load ~2-4 from other jobs, TF 2.21, --repeats 1; wall / CPU seconds):
                 synthetic       a real finished run (400k positions, 8,880 steps)
  before  missing_data   6.1 / 4.2   7.0 / 4.4    (the user saw 18.6 s)
          finished_run   6.0 / 4.3  13.5 / 4.9    (the user saw 30 s)
  after   missing_data   0.6 / 0.3   0.4 / 0.3    TensorFlow not imported
          finished_run   0.4 / 0.3   0.5 / 0.3    TensorFlow not imported
  evaluate_missing_data, synthetic, --repeats 3, load ~2.6: before 4.45 / 4.25 (TensorFlow imported; an
  overlap refusal on a real run 3.4 s), after 0.33 / 0.32 and 0.26 / 0.26 (not imported)
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from shogi_dnn.bench.synthetic import write_synthetic_dataset
from shogi_dnn.folders import run_files

SMOKE_PRESET = Path(__file__).resolve().parents[2] / "train" / "cpu-smoke.toml"
# The child reports whether TensorFlow was imported when main returned (stderr's last line).
_CHILD = ("import sys\nfrom shogi_dnn.cli import main\nrc = main(sys.argv[1:])\n"
          "print('tensorflow_loaded=%s' % ('tensorflow' in sys.modules), file=sys.stderr)\nsys.exit(rc)\n")


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_refusal(name: str, argv: list[str], repeats: int) -> str:
    """Run `shogi-dnn` with argv `repeats` times; the key=value line of the medians."""
    walls, cpus, out = [], [], None
    for _ in range(repeats):
        cpu, start = _child_cpu(), time.perf_counter()
        out = subprocess.run([sys.executable, "-c", _CHILD, *argv], capture_output=True, text=True,
                             env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
        walls.append(time.perf_counter() - start)
        cpus.append(_child_cpu() - cpu)
    assert out is not None
    lines = out.stderr.strip().splitlines() or [""]
    flag = "tensorflow_loaded="
    loaded = lines[-1].removeprefix(flag) if lines[-1].startswith(flag) else "?"
    message = next((line for line in lines if line.startswith("shogi-dnn")), lines[0])
    return (f"case={name} wall_s={statistics.median(walls):.2f} cpu_s={statistics.median(cpus):.2f} "
            f"rc={out.returncode} tensorflow_loaded={loaded} message={message.strip()!r}")


def finished_run(root: Path) -> tuple[Path, Path]:
    """A synthetic dataset and a run folder with two checkpoints (state.json is all the refusal reads)."""
    data = root / "data"
    write_synthetic_dataset(data, {"train": [256], "validation": [64]}, chunk_rows=64)
    run = root / "run"
    for step in (4, 8):
        checkpoint = run / run_files.CHECKPOINTS_DIR / f"ckpt-{step:08d}"
        checkpoint.mkdir(parents=True)
        run_files.write_json_atomic(checkpoint / run_files.CHECKPOINT_STATE, {"state": {}})
    return data, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="shogi-dnn bench startup", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs per case, median reported (default 3)")
    parser.add_argument("--config", default=str(SMOKE_PRESET), help="preset the commands name")
    parser.add_argument("--data", default=None, metavar="DIR", help="finished_run: a real dataset")
    parser.add_argument("--run-dir", default=None, metavar="RUN", help="finished_run: a real finished run")
    args = parser.parse_args(argv)
    if (args.data is None) != (args.run_dir is None):
        parser.error("--data and --run-dir go together (a real finished run and its dataset)")
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        root = Path(tmp)
        data, run = (Path(args.data), Path(args.run_dir)) if args.data else finished_run(root)
        cases = {
            "missing_data": ["train", "--config", args.config, "--data", str(root / "nope"),
                             "--run-dir", str(root / "new-run")],
            "finished_run": ["train", "--config", args.config, "--data", str(data), "--run-dir", str(run)],
            "evaluate_missing_data": ["evaluate", "--run-dir", str(run), "--data", str(root / "nope")],
        }
        for name, case_argv in cases.items():
            print(time_refusal(name, case_argv, args.repeats), flush=True)
    return 0
