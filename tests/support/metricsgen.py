"""A synthetic RUN/metrics.jsonl in the trainer's format (see the run-directory contract), for report
tests."""

from __future__ import annotations

import json
import math
from pathlib import Path


def write_metrics(run_dir: Path, gpus: int = 2, steps: int = 20, slow_gpu: int | None = None,
                  diverging_gpu: int | None = None, truncated_tail: bool = False,
                  short_gpu: int | None = None, busy: bool = False, compute_slow_gpu: int | None = None,
                  policy: bool = False) -> Path:
    """Train records every step (2 stages) and a validation record after each stage.

    policy: the policy_loss and policy_acc of a run with a policy head (overall and per GPU).

    busy (or compute_slow_gpu): per-GPU busy_s and compute_positions_per_s as the trainer logs them now;
    compute_slow_gpu computes 3x slower on its own (its interval positions_per_s stays like the others').
    """
    lines = []
    for step in range(1, steps + 1):
        stage = 0 if step <= steps // 2 else 1
        per_gpu = []
        for g in range(gpus):
            loss = 0.69 - 0.01 * step + 0.002 * g
            if g == diverging_gpu:
                loss += 0.05 * step
            speed = 1000.0 * (0.4 if g == slow_gpu else 1.0)
            per_gpu.append({"device": f"/job:localhost/replica:0/task:0/device:GPU:{g}", "loss": loss,
                            "accuracy": 0.5 + 0.01 * step, "positions_per_s": speed,
                            "positions": 16 if g == short_gpu else 32})
            if busy or compute_slow_gpu is not None:
                busy_s = 0.01 * (3.0 if g == compute_slow_gpu else 1.0)
                per_gpu[-1].update(busy_s=busy_s, compute_positions_per_s=per_gpu[-1]["positions"] / busy_s)
        lines.append({"kind": "train", "step": step, "samples": 64 * step, "epoch": 0, "stage": stage,
                      "group": stage, "loss": sum(p["loss"] for p in per_gpu) / gpus,
                      "accuracy": 0.5 + 0.01 * step,
                      "positions_per_s": sum(p["positions_per_s"] for p in per_gpu),
                      "lr": 0.01 * min(1.0, step / 5) * math.cos(step / 40), "per_gpu": per_gpu})
        if policy:
            for record in [lines[-1], *per_gpu]:
                record.update(policy_loss=7.6 - 0.1 * step, policy_acc=0.01 * step)
        if step in (steps // 2, steps):
            lines.append({"kind": "validation", "step": step, "samples": 64 * step, "epoch": 0,
                          "stage": stage, "group": stage, "loss": 0.68 - 0.005 * step, "accuracy": 0.55,
                          "per_gpu": [{"device": p["device"], "loss": 0.68, "accuracy": 0.55}
                                      for p in per_gpu]})
            if policy:
                for record in [lines[-1], *lines[-1]["per_gpu"]]:
                    record.update(policy_loss=7.0 - 0.1 * step, policy_acc=0.012 * step)
    path = run_dir / "metrics.jsonl"
    text = "".join(json.dumps(r) + "\n" for r in lines)
    path.write_text(text + ('{"kind": "train", "st' if truncated_tail else ""))
    return path
