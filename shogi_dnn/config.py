"""Typed training configuration: frozen dataclasses, TOML presets in train/, `--set key=value` overrides.

A preset may name a `base` preset (a path relative to itself) that it derives from; keys it sets
override the base. Each file is read as a regular UTF-8 file of at most MAX_CONFIG_BYTES. The resolved
config is saved as RUN/config.json and in every checkpoint.
Architecture fields (ModelConfig) must match on resume; schedule fields may change.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import stat
import sys
import typing
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from shogi_dnn.errors import ConfigError

MAX_CONFIG_BYTES = 2**20        # a preset is a few KiB: a larger file is not a config


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Residual CNN shape. Changing any field changes the architecture (checked on resume)."""

    blocks: int = 2                 # residual blocks after the stem convolution
    filters: int = 32               # channels of every convolution
    value_hidden: int = 64          # units of the dense layer in the value head
    value_head: str = "flatten"     # "flatten" (every square to the dense layer, as dlshogi) or "pool"
                                    # (global average pooling: far fewer weights, resists memorising games)
    batch_norm: str = "none"        # "none", "local" (per tower) or "sync" (synchronised across towers)
    mixed_precision: str = "none"   # "none", "mixed_float16" (with loss scaling) or "mixed_bfloat16"
    features: str = "pieces"        # input planes: "pieces" (42: pieces and hands), "attacks" (77: those
                                    # plus 35 attack/check planes computed on the device,
                                    # training/attack_planes.py) or "tactics" (81: attacks plus 4 planes:
                                    # hanging pieces, pieces attacked by a cheaper piece, per side)
    policy_head: bool = False       # a second output, the move to play (docs/model.md): conv1x1(filters)
                                    # [BN] ReLU -> conv1x1(27) -> [B, 2187] logits over dataset/policy.py's
                                    # labels, trained on the move played (train.policy_weight)
    block: str = "residual"         # residual block: "residual" (two 3x3 convolutions + skip), "se"
                                    # (lc0's squeeze-excitation: a per-channel scale and bias from the
                                    # block's board-wide means) or "gpool" (KataGo's global pooling: the
                                    # first convolution's board-wide mean and max add a per-channel bias
                                    # before the second)
    se_ratio: int = 4               # with block = "se": the squeeze layer has filters / se_ratio units


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """Optimiser and learning-rate schedule."""

    optimizer: str = "sgd"          # "sgd" (with momentum, Nesterov) or "adam"
    lr: float = 0.01                # learning rate at base_global_batch, before scaling
    momentum: float = 0.9           # SGD momentum
    weight_decay: float = 1e-4      # decoupled weight decay (0 to disable)
    lr_scaling: str = "linear"      # scale lr for the global batch: "none", "linear" or "sqrt"
    base_global_batch: int = 256    # the global batch at which `lr` was tuned
    warmup_samples: int = 0         # linear warm-up from 0 over this many samples
    lr_decay: str = "none"          # after warm-up: "none" (constant) or "cosine" (to 0 at the run's last
                                    # update)
    clip_global_norm: float = 0.0   # clip the all-reduced gradient to this global norm (0 = off)
    ema: float = 0.0                # 0 = off; else the momentum m of an exponential moving average of the
                                    # weights (avg = m avg + (1 - m) w after each update, Keras' use_ema):
                                    # validation and the final model.keras use the average, checkpoints
                                    # hold both (e.g. 0.999: about the last 1,000 updates)


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Input pipeline."""

    num_groups: int = 4             # sample groups the training split is cut into (by shard); a stage = one
                                    # group
    shuffle_buffer: int = 16384     # positions in the shuffle buffer
    mirror: bool = False            # random left-right mirroring of the board (augmentation)
    validation_positions: int = 0   # cap on validation positions per stage (0 = the whole split)
    read_lanes: int = 0             # read lanes L the stream is cut into (pipeline.py): worker w of W reads
                                    # only lanes [wL/W, (w+1)L/W); 0 = one per worker (1 on one machine). The
                                    # data order depends on L: fix it (e.g. 8) to keep it on any worker count
                                    # dividing L


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Batching, schedule, checkpoints and logging. Progress is counted in samples."""

    per_replica_batch: int = 64     # positions per tower per micro-batch
    global_batch: int = 0           # 0: per_replica_batch * towers; else fixed (must divide by towers)
    micro_batches: int = 1          # gradient accumulation: micro-batches summed per optimizer update
    epochs: int = 1                 # passes over all sample groups
    seed: int = 1                   # data order and weight initialisation
    log_every_steps: int = 10       # console/metrics.jsonl/TensorBoard interval, in optimizer steps
    checkpoint_every_steps: int = 0 # extra checkpoints inside a stage (0 = only after each stage)
    keep_checkpoints: int = 3       # keep the last K checkpoints
    max_steps_per_stage: int = 0    # cap optimizer steps per stage (0 = the whole group); for smoke runs
    time_towers: bool = False       # log each tower's own compute time (per_gpu busy_s), which lets the
                                    # report flag a slow GPU; costs a timestamp pair and one scalar
                                    # device-to-host copy per tower and update (13-20% of the throughput
                                    # of tiny steps on simulated CPU towers, measured)
    jit_compile: bool = False       # XLA for each micro-batch's forward and backward pass (steps.py); not
                                    # with model.batch_norm = "sync" (its all-reduce stays outside XLA)
    eval_weight: float = 0.0        # λ in [0, 1]: a position with an engine evaluation in its record trains
                                    # on (1-λ)·BCE(result) + λ·BCE(sigmoid(eval / eval_scale));
                                    # 0 = results only
    eval_scale: float = 756.0       # a: centipawns per unit of logit, the target is sigmoid(eval / a);
                                    # 0 = fit a on the training split's results (evalfit.py: the engine
                                    # baseline's a)
    eval_weighting: str = "constant"  # "constant": λ everywhere; "trust": λ x the evaluations' trust at the
                                    # position's ply (evalfit.py: their gain over a coin on the training
                                    # split's results, 1 where most informative): weak opening evaluations
                                    # weigh little
    policy_weight: float = 1.0      # with model.policy_head: loss = the value loss above + policy_weight x
                                    # the cross-entropy of the move played (a position without one, the
                                    # last of a game, adds none)
    no_result_weight: float = 1.0   # factor on the whole loss of a position without a game result (win
                                    # NaN: off-path positions of `shogi-dnn annotate`, whose share is
                                    # what annotate made, --off-path N); such a position trains on its
                                    # evaluation target alone (+ the policy on the engine's best move)


@dataclasses.dataclass(frozen=True)
class Config:
    """The whole resolved configuration of a run."""

    model: ModelConfig = ModelConfig()
    optim: OptimConfig = OptimConfig()
    data: DataConfig = DataConfig()
    train: TrainConfig = TrainConfig()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


SECTIONS: dict[str, type] = {"model": ModelConfig, "optim": OptimConfig, "data": DataConfig,
                             "train": TrainConfig}
CHOICES: dict[str, tuple[str, ...]] = {
    "model.batch_norm": ("none", "local", "sync"),
    "model.value_head": ("flatten", "pool"),
    "model.mixed_precision": ("none", "mixed_float16", "mixed_bfloat16"),
    "model.features": ("pieces", "attacks", "tactics"),
    "model.block": ("residual", "se", "gpool"),
    "optim.optimizer": ("sgd", "adam"),
    "optim.lr_scaling": ("none", "linear", "sqrt"),
    "optim.lr_decay": ("none", "cosine"),
    "train.eval_weighting": ("constant", "trust"),
}


def load_config(path: str | Path | None = None, overrides: typing.Sequence[str] = ()) -> Config:
    """Resolve a preset (and its `base` chain) plus `section.key=value` overrides into a Config.

    Raises:
        ConfigError: unreadable file, unknown section or key, a value of the wrong type or choice.
    """
    raw = _read_preset(Path(path)) if path else {}
    if not overrides:
        return from_dict(raw, origin=str(path or "defaults"))
    from_dict(copy.deepcopy(raw), origin=str(path or "defaults"))     # the preset's errors name the preset
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or "." not in key:
            raise ConfigError(f"--set {item!r}: expected section.key=value, e.g. train.seed=3")
        section, name = key.strip().split(".", 1)
        raw.setdefault(section, {})[name] = _parse_override(value.strip())
        from_dict({section: {name: raw[section][name]}}, origin=f"--set {item}")   # this --set's own errors
    return from_dict(raw, origin=" ".join(f"--set {item}" for item in overrides))


def from_dict(raw: dict[str, Any], origin: str = "config") -> Config:
    """Build a Config from nested dicts (TOML or config.json), checking every key and type."""
    sections = {}
    for section, values in raw.items():
        if section not in SECTIONS:
            raise ConfigError(f"{origin}: unknown section [{section}] (known: {', '.join(SECTIONS)})")
        if not isinstance(values, dict):
            raise ConfigError(f"{origin}: [{section}] must be a table")
        cls = SECTIONS[section]
        fields = {f.name: f for f in dataclasses.fields(cls)}
        kwargs = {}
        for name, value in values.items():
            if name not in fields:
                raise ConfigError(f"{origin}: unknown key {section}.{name} (known: {', '.join(fields)})")
            kwargs[name] = _check_value(f"{section}.{name}", value, fields[name].type, origin)
        sections[section] = cls(**kwargs)
    config = Config(**sections)
    _check_ranges(config, origin)
    return config


def _read_preset(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    if path in seen:
        raise ConfigError(f"{path}: preset base chain loops")
    try:
        raw = tomllib.loads(read_config_text(path))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc
    base = raw.pop("base", None)
    if base is None:
        return raw
    if not isinstance(base, str):
        raise ConfigError(f"{path}: base must be a path (a string), not {base!r}")
    merged = _read_preset((path.parent / base).resolve(), seen + (path,))
    for section, values in raw.items():
        if isinstance(values, dict) and isinstance(merged.get(section), dict):
            merged[section].update(values)
        else:
            merged[section] = values
    return merged


def read_config_text(path: Path) -> str:
    """A config file's text: a regular file of at most MAX_CONFIG_BYTES, UTF-8 (a device, a FIFO or a
    folder is refused without being read or waited on).

    Raises:
        ConfigError: one line naming the file.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)     # a FIFO opens at once, then is refused
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: no such config file") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config ({exc.strerror or exc})") from exc
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"{path}: not a regular file (a config is a TOML file)")
        try:
            data = f.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read the config ({exc.strerror or exc})") from exc
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: over {MAX_CONFIG_BYTES // 2**20} MiB, not a config file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from exc


def _parse_override(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text          # a bare word: a string value such as optim.optimizer=adam


def _check_value(key: str, value: Any, annotation: Any, origin: str) -> Any:
    expected = {"int": int, "float": float, "bool": bool, "str": str}.get(
        annotation if isinstance(annotation, str) else getattr(annotation, "__name__", ""), None)
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if expected is None or type(value) is not expected:
        raise ConfigError(f"{origin}: {key} = {value!r} must be {getattr(expected, '__name__', annotation)}")
    if key in CHOICES and value not in CHOICES[key]:
        raise ConfigError(f"{origin}: {key} = {value!r} must be one of {', '.join(CHOICES[key])}")
    return value


# The most epochs a run may plan: far beyond any real run (a tiny dataset trains some thousands), low enough
# that the plan's arithmetic and the logs' counters stay small; 10**12 once went unnoticed for minutes.
MAX_EPOCHS = 1_000_000

# The range of every numeric key, checked when a config is read (files, --set, config.json, checkpoints):
# (lowest, highest, lowest allowed itself); every float must also be finite. One table, one owner.
RANGES: dict[str, tuple[float, float, bool]] = {
    "model.blocks": (0, math.inf, True), "model.filters": (0, math.inf, False),
    "model.value_hidden": (0, math.inf, False), "model.se_ratio": (0, math.inf, False),
    "optim.lr": (0, math.inf, False), "optim.momentum": (0, 1, True),
    "optim.weight_decay": (0, math.inf, True),
    "optim.base_global_batch": (0, math.inf, False), "optim.warmup_samples": (0, math.inf, True),
    "optim.clip_global_norm": (0, math.inf, True), "optim.ema": (0, 0.99999, True),
    "data.num_groups": (0, math.inf, False), "data.shuffle_buffer": (0, math.inf, False),
    "data.validation_positions": (0, math.inf, True), "data.read_lanes": (0, math.inf, True),
    "train.per_replica_batch": (0, math.inf, False), "train.global_batch": (0, math.inf, True),
    "train.micro_batches": (0, math.inf, False), "train.epochs": (0, MAX_EPOCHS, False),
    "train.seed": (0, math.inf, True), "train.log_every_steps": (0, math.inf, False),
    "train.checkpoint_every_steps": (0, math.inf, True), "train.keep_checkpoints": (0, math.inf, False),
    "train.max_steps_per_stage": (0, math.inf, True),
    "train.eval_weight": (0, 1, True), "train.eval_scale": (0, math.inf, True),
    "train.policy_weight": (0, math.inf, True), "train.no_result_weight": (0, math.inf, True),
}
_RANGE_TEXT = {"data.read_lanes": " (0 = one per worker)",
               "train.global_batch": " (0 = per_replica_batch x towers)",
               "train.eval_scale": " (centipawns per unit of logit; 0 = fitted)",
               "train.epochs": " (the most epochs a run may plan)"}


def _check_ranges(config: Config, origin: str) -> None:
    """Refuse numbers that cannot work (NaN, inf, negatives, zero where it divides), naming the key."""
    for key, (low, high, low_ok) in RANGES.items():
        section, name = key.split(".")
        value = getattr(getattr(config, section), name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{origin}: {key} = {value} must be a finite number")
        if value < low or (value == low and not low_ok) or value > high:
            bound = (f"in {'[' if low_ok else '('}{_number(low)}, {_number(high)}]" if high < math.inf
                     else ">= 0" if low_ok else "positive")
            raise ConfigError(f"{origin}: {key} = {value} must be {bound}{_RANGE_TEXT.get(key, '')}")


def _number(value: float) -> str:
    """A bound as a message shows it: 1,000,000 rather than 1e+06."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


def global_batch(config: Config, num_replicas: int) -> int:
    """Positions per micro-batch over all towers; checks divisibility once, with the numbers.

    Raises:
        ConfigError: train.global_batch is not divisible by the number of towers.
    """
    if config.train.global_batch == 0:
        return config.train.per_replica_batch * num_replicas
    if config.train.global_batch % num_replicas:
        raise ConfigError(f"train.global_batch = {config.train.global_batch} is not divisible by "
                          f"{num_replicas} towers")
    return config.train.global_batch


def scaled_lr(cfg: OptimConfig, update_batch: int) -> float:
    """Peak learning rate for `update_batch` samples per update (global batch x micro-batches).

    cfg.lr was tuned at cfg.base_global_batch; "linear" scales by update_batch / base, "sqrt" by its
    square root, "none" keeps cfg.lr. (TensorFlow-free, for `plan`; training.optimizer re-exports it.)
    """
    ratio = update_batch / cfg.base_global_batch
    factor = {"none": 1.0, "linear": ratio, "sqrt": math.sqrt(ratio)}[cfg.lr_scaling]
    return cfg.lr * factor


def architecture_mismatch(saved: Config, current: Config) -> list[str]:
    """Model fields that differ between a checkpoint's config and the current one."""
    return [f"model.{f.name}: {getattr(saved.model, f.name)!r} -> {getattr(current.model, f.name)!r}"
            for f in dataclasses.fields(ModelConfig)
            if getattr(saved.model, f.name) != getattr(current.model, f.name)]


