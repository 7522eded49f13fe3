"""`shogi-dnn bench convert|train|scaling|planes|games|startup|evaluator|annotate ...`: dispatch to
shogi_dnn.bench.<name>.main(argv)."""

from __future__ import annotations

import importlib
import sys

BENCHES = {
    "convert": "positions/s and peak memory of `convert` on a corpus folder",
    "train": "positions/s of the input pipeline, the tower step (1/2/4 devices) and model.fit",
    "scaling": "per-GPU batch x device-count sweep and the fitted v0/t throughput model",
    "planes": "time of attack_planes against expand_planes on one [4096, 81] batch (CPU)",
    "games": "the USI engine's W/D/L and Elo in games against a reference player (ShogiArena)",
    "startup": "seconds `train` takes to refuse bad arguments (they are checked before TensorFlow)",
    "evaluator": "positions per CPU-second of ONNX exports at batch 8 and 64, and their held-out scores",
    "annotate": "annotate's positions per CPU-second (ours + the engine's) against the engine alone",
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in BENCHES:
        lines = ["usage: shogi-dnn bench {" + "|".join(BENCHES) + "} [options]", ""]
        lines += [f"  {k:<9} {v}" for k, v in BENCHES.items()]
        print("\n".join(lines), file=sys.stdout if argv and argv[0] in ("-h", "--help") else sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    module = importlib.import_module(f"shogi_dnn.bench.{argv[0]}")
    return int(module.main(argv[1:]))
