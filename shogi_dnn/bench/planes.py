"""`shogi-dnn bench planes`: time of attack_planes against model.expand_planes on one batch (CPU).

Each function runs on the same [batch, 81] uint8 boards (synthetic positions) in three modes: eager,
tf.function (graph) and tf.function(jit_compile=True) (XLA). Prints one key=value line per mode with
the median wall time of `--repeats` runs after one warm-up call (which traces and compiles), the copy
of the planes back to the host included.

Measured (2-core shared CPU VM, TF 2.21, load ~2 from other jobs, so +-50% between runs), batch 4096:
  eager  expand_planes 12-30 ms   attack_planes 185-305 ms   ratio 10-16
  graph  expand_planes 10-21 ms   attack_planes  65-135 ms   ratio  5-9
  xla    expand_planes  5-21 ms   attack_planes  41-160 ms   ratio  5-11
A first version on 28 one-hot planes per direction with 7 single ray steps took 380 ms (graph) and
110 ms (XLA); stacking the 12 directions into channels (one gather) was slower than the loop here.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from shogi_dnn.bench.synthetic import random_positions


def _median_ms(fn, args, repeats: int) -> float:
    np.asarray(fn(*args))                                  # warm-up: trace, compile
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.asarray(fn(*args))                              # includes the copy back to the host
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="shogi-dnn bench planes", description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4096, help="positions per call (default 4096)")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per mode (default 5)")
    args = parser.parse_args(argv)

    import tensorflow as tf

    from shogi_dnn.bench.synthetic import shards
    from shogi_dnn.training import attack_planes, model
    rows = random_positions(args.batch, np.random.default_rng(0))
    board = tf.constant(rows[shards.KEY_BOARD])
    hands = tf.constant(rows[shards.KEY_HANDS])
    targets = {"expand_planes": (model.expand_planes, (board, hands)),
               "attack_planes": (attack_planes.attack_planes, (board,))}
    with tf.device("/CPU:0"):
        for mode, wrap in (("eager", lambda f: f), ("graph", tf.function),
                           ("xla", lambda f: tf.function(f, jit_compile=True))):
            ms = {name: _median_ms(wrap(fn), fn_args, args.repeats)
                  for name, (fn, fn_args) in targets.items()}
            print(f"mode={mode} batch={args.batch} expand_planes_ms={ms['expand_planes']:.1f} "
                  f"attack_planes_ms={ms['attack_planes']:.1f} "
                  f"ratio={ms['attack_planes'] / ms['expand_planes']:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
