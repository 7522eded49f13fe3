"""model.mixed_precision = "auto": the compute dtype a run's devices are fastest in, chosen once per run.

| the towers                                         | choice           | why                                |
|----------------------------------------------------|------------------|------------------------------------|
| GPUs, every one of compute capability >= 8.0       | mixed_bfloat16   | bfloat16 tensor cores, no scaling  |
| GPUs of compute capability 7.x (V100, T4)          | mixed_float16    | float16 tensor cores, loss scaling |
| older GPUs                                         | none (float32)   | no tensor cores                    |
| CPUs whose flags have amx_bf16 or avx512_bf16      | mixed_bfloat16   | oneDNN's bfloat16 kernels          |
| other CPUs                                         | none (float32)   | bfloat16 would be emulated         |

Weights, optimizer state and checkpoints stay float32 under every policy (Keras' mixed policies keep
float32 variables); the logits are float32 (model.py), and so are exported models (export.py casts).
A resumed run keeps the choice written in its RUN/config.json, whatever machine it resumes on.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import tensorflow as tf

from shogi_dnn.config import Config
from shogi_dnn.folders import run_files

AUTO = "auto"
CPU_BF16_FLAGS = ("amx_bf16", "avx512_bf16")
CPUINFO = Path("/proc/cpuinfo")


@dataclasses.dataclass(frozen=True)
class Precision:
    """The policy a run trains in ("none", "mixed_float16", "mixed_bfloat16") and why, in words."""

    policy: str
    why: str

    def to_dict(self) -> dict[str, str]:
        return {"policy": self.policy, "why": self.why}


def cpu_flags(path: Path = CPUINFO) -> set[str]:
    """The first processor's flags in /proc/cpuinfo; empty where there is no such file."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "flags":
            return set(value.split())
    return set()


def choose(device_kinds: Sequence[str], gpu_capabilities: Sequence[tuple[int, int] | None],
           flags: set[str]) -> Precision:
    """The table above. device_kinds: "GPU" or "CPU" per tower; gpu_capabilities: each GPU tower's
    (major, minor), None where TensorFlow does not say."""
    if any(kind == "GPU" for kind in device_kinds):
        known = [c for c in gpu_capabilities if c is not None]
        if not known or len(known) < len(gpu_capabilities):
            return Precision("none", "auto: a GPU of unknown compute capability, float32")
        low = min(known)
        if low >= (8, 0):
            return Precision("mixed_bfloat16", f"auto: GPUs of compute capability {low[0]}.{low[1]}+ "
                             "compute bfloat16 on tensor cores")
        if low >= (7, 0):
            return Precision("mixed_float16", f"auto: GPUs of compute capability {low[0]}.{low[1]} have "
                             "float16 tensor cores (dynamic loss scaling)")
        return Precision("none", f"auto: GPUs of compute capability {low[0]}.{low[1]} have no tensor "
                         "cores, float32")
    have = [f for f in CPU_BF16_FLAGS if f in flags]
    if have:
        return Precision("mixed_bfloat16", f"auto: the CPU computes bfloat16 in hardware ({', '.join(have)})")
    return Precision("none", "auto: the CPU has no bfloat16 instructions (amx_bf16, avx512_bf16), float32")


def saved_policy(run_dir: Path) -> str | None:
    """model.mixed_precision in RUN/config.json when the run has one (a resumed run's choice)."""
    try:
        saved = json.loads((Path(run_dir) / run_files.CONFIG_JSON).read_text())
        policy = saved["model"]["mixed_precision"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return policy if isinstance(policy, str) and policy != AUTO else None


def device_precision(device_names: Sequence[str]) -> Precision:
    """choose() for these TensorFlow device names ("/job:.../device:GPU:0", "/cpu:0")."""
    kinds: list[str] = []
    capabilities: list[tuple[int, int] | None] = []
    physical = tf.config.list_physical_devices("GPU")
    for name in device_names:
        kind = "GPU" if "GPU" in name.upper().rsplit("/", 1)[-1] else "CPU"
        kinds.append(kind)
        if kind == "GPU":
            tail = name.rsplit(":", 1)[-1]
            index = int(tail) if tail.isdigit() else 0
            details = tf.config.experimental.get_device_details(physical[index]) \
                if index < len(physical) else {}
            capability = details.get("compute_capability")
            capabilities.append((int(capability[0]), int(capability[1])) if capability else None)
    return choose(kinds, capabilities, cpu_flags())


def local_precision() -> Precision:
    """device_precision() of the towers a run gets by default: every visible GPU, else the CPU."""
    gpus = tf.config.list_logical_devices("GPU")
    return device_precision([d.name for d in gpus] or [tf.config.list_logical_devices("CPU")[0].name])


def resolve(config: Config, device_names: Sequence[str],
            run_dir: Path | None = None) -> tuple[Config, Precision]:
    """The config with model.mixed_precision concrete, and the choice: an explicit value as given; "auto"
    as the run's RUN/config.json has it (a resume), else device_precision()."""
    policy = config.model.mixed_precision
    if policy != AUTO:
        return config, Precision(policy, "set in the config")
    saved = saved_policy(run_dir) if run_dir is not None else None
    if saved:
        choice = Precision(saved, "auto: the run's choice (RUN/config.json)")
    else:
        choice = device_precision(device_names) if device_names else local_precision()
    model = dataclasses.replace(config.model, mixed_precision=choice.policy)
    return dataclasses.replace(config, model=model), choice
