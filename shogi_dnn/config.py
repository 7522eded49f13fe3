"""Typed training configuration: frozen dataclasses, TOML presets in train/, `--set key=value` overrides.
A preset is a path or a name (`cpu-small`: train/cpu-small.toml, find_preset).

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
PRESET_SUFFIX = ".toml"
PRESETS_DIR = Path(__file__).resolve().parent.parent / "train"   # the presets beside the package (a clone)
INSTALLED_PRESETS_DIR = Path(__file__).resolve().parent / "presets"   # their copy in a wheel (setup.py)

# The most epochs a run may plan: far beyond any real run (a tiny dataset trains some thousands), low enough
# that the plan's arithmetic and the logs' counters stay small.
MAX_EPOCHS = 1_000_000


def _one_of(default: str, choices: tuple[str, ...]) -> Any:
    """A str field that takes one of `choices` (CHOICES, checked when a config is read)."""
    assert default in choices
    return dataclasses.field(default=default, metadata={"choices": choices})


def _within(default: float, high: float = math.inf, *, zero_ok: bool = True, note: str = "") -> Any:
    """A number field in [0, high] ((0, high] when not zero_ok; RANGES, checked when a config is read);
    `note` follows the bound in a refusal."""
    return dataclasses.field(default=default, metadata={"range": (0, high, zero_ok), "note": note})


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Residual CNN shape. Changing any field changes the architecture (checked on resume)."""

    # residual blocks after the stem convolution
    blocks: int = _within(2)
    # channels of every convolution
    filters: int = _within(32, zero_ok=False)
    # units of the dense layer in the value head
    value_hidden: int = _within(64, zero_ok=False)
    # "flatten" (every square to the dense layer, as dlshogi) or "pool" (global average pooling: far fewer
    # weights, resists memorising games)
    value_head: str = _one_of("flatten", ("flatten", "pool"))
    # "none", "local" (per tower) or "sync" (synchronised across towers)
    batch_norm: str = _one_of("none", ("none", "local", "sync"))
    # "none", "mixed_float16" (with loss scaling), "mixed_bfloat16", or "auto": the one the towers compute
    # fastest in, chosen when the run starts and kept on resume (training/precision.py)
    mixed_precision: str = _one_of("none", ("none", "mixed_float16", "mixed_bfloat16", "auto"))
    # input planes: "pieces" (42: pieces and hands), "attacks" (77: those plus 35 attack/check planes computed
    # on the device, training/attack_planes.py) or "tactics" (81: attacks plus 4 planes: hanging pieces,
    # pieces attacked by a cheaper piece, per side)
    features: str = _one_of("pieces", ("pieces", "attacks", "tactics"))
    # a second output, the move to play (docs/model.md): conv1x1(filters) [BN] ReLU -> conv1x1(27) -> [B,
    # 2187] logits over dataset/policy.py's labels, trained on the move played (train.policy_weight)
    policy_head: bool = False
    # residual block: "residual" (two 3x3 convolutions + skip), "se" (lc0's squeeze-excitation: a per-channel
    # scale and bias from the block's board-wide means) or "gpool" (KataGo's global pooling: the first
    # convolution's board-wide mean and max add a per-channel bias before the second)
    block: str = _one_of("residual", ("residual", "se", "gpool"))
    # with block = "se": the squeeze layer has filters / se_ratio units
    se_ratio: int = _within(4, zero_ok=False)


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """Optimiser and learning-rate schedule."""

    # "sgd" (with momentum, Nesterov) or "adam"
    optimizer: str = _one_of("sgd", ("sgd", "adam"))
    # learning rate at base_global_batch, before scaling
    lr: float = _within(0.01, zero_ok=False)
    # SGD momentum
    momentum: float = _within(0.9, 1)
    # decoupled weight decay (0 to disable)
    weight_decay: float = _within(1e-4)
    # scale lr for the global batch: "none", "linear" or "sqrt"
    lr_scaling: str = _one_of("linear", ("none", "linear", "sqrt"))
    # the global batch at which `lr` was tuned
    base_global_batch: int = _within(256, zero_ok=False)
    # linear warm-up from 0 over this many samples
    warmup_samples: int = _within(0)
    # after warm-up: "none" (constant) or "cosine" (to 0 at the run's last update)
    lr_decay: str = _one_of("none", ("none", "cosine"))
    # clip the all-reduced gradient to this global norm (0 = off)
    clip_global_norm: float = _within(0.0)
    # 0 = off; else the momentum m of an exponential moving average of the weights (avg = m avg + (1 - m) w
    # after each update, Keras' use_ema): validation and the final model.keras use the average, checkpoints
    # hold both (e.g. 0.999: about the last 1,000 updates)
    ema: float = _within(0.0, 0.99999)


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Input pipeline."""

    # sample groups the training split is cut into (by shard); a stage = one group
    num_groups: int = _within(4, zero_ok=False)
    # positions in the shuffle buffer
    shuffle_buffer: int = _within(16384, zero_ok=False)
    # random left-right mirroring of the board (augmentation)
    mirror: bool = False
    # cap on validation positions per stage (0 = the whole split)
    validation_positions: int = _within(0)
    # read lanes L the stream is cut into (pipeline.py): worker w of W reads only lanes [wL/W, (w+1)L/W); 0 =
    # one per worker (1 on one machine). The data order depends on L: fix it (e.g. 8) to keep it on any worker
    # count dividing L
    read_lanes: int = _within(0, note=" (0 = one per worker)")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Batching, schedule, checkpoints and logging. Progress is counted in samples."""

    # positions per tower per micro-batch
    per_replica_batch: int = _within(64, zero_ok=False)
    # 0: per_replica_batch * towers; else fixed (must divide by towers)
    global_batch: int = _within(0, note=" (0 = per_replica_batch x towers)")
    # gradient accumulation: micro-batches summed per optimizer update
    micro_batches: int = _within(1, zero_ok=False)
    # passes over all sample groups
    epochs: int = _within(1, MAX_EPOCHS, zero_ok=False, note=" (the most epochs a run may plan)")
    # data order and weight initialisation
    seed: int = _within(1)
    # threads of each TensorFlow op on the CPU (0 = TensorFlow's default, one per core); a CPU op splits its
    # sums by this count, so a fixed count gives the same numbers on machines with other core counts
    cpu_threads: int = _within(0)
    # console/metrics.jsonl/TensorBoard interval, in optimizer steps
    log_every_steps: int = _within(10, zero_ok=False)
    # extra checkpoints inside a stage (0 = only after each stage)
    checkpoint_every_steps: int = _within(0)
    # keep the last K checkpoints
    keep_checkpoints: int = _within(3, zero_ok=False)
    # cap optimizer steps per stage (0 = the whole group); for smoke runs
    max_steps_per_stage: int = _within(0)
    # log each tower's own compute time (per_gpu busy_s), which lets the report flag a slow GPU; costs a
    # timestamp pair and one scalar device-to-host copy per tower and update (13-20% of the throughput of tiny
    # steps on simulated CPU towers, measured)
    time_towers: bool = False
    # XLA for each micro-batch's forward and backward pass (steps.py); not with model.batch_norm = "sync" (its
    # all-reduce stays outside XLA); train/base.toml, and so every preset, turns it on
    jit_compile: bool = False
    # λ in [0, 1]: a position with an engine evaluation in its record trains on (1-λ)·BCE(result) +
    # λ·BCE(sigmoid(eval / eval_scale)); 0 = results only
    eval_weight: float = _within(0.0, 1)
    # a: centipawns per unit of logit, the target is sigmoid(eval / a); 0 = fit a on the training split's
    # results (evalfit.py: the engine baseline's a)
    eval_scale: float = _within(756.0, note=" (centipawns per unit of logit; 0 = fitted)")
    # "constant": λ everywhere; "trust": λ x the evaluations' trust at the position's ply (evalfit.py: their
    # gain over a coin on the training split's results, 1 where most informative): weak opening evaluations
    # weigh little
    eval_weighting: str = _one_of("constant", ("constant", "trust"))
    # with model.policy_head: loss = the value loss above + policy_weight x the cross-entropy of the move
    # played (a position without one, the last of a game, adds none)
    policy_weight: float = _within(1.0)
    # factor on the whole loss of a position without a game result (win NaN: off-path positions of `shogi-dnn
    # annotate`, whose share is what annotate made, --off-path N); such a position trains on its evaluation
    # target alone (+ the policy on the engine's best move)
    no_result_weight: float = _within(1.0)


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
# The choices of every str key and the range of every numeric key (lowest 0; the lowest allowed itself or
# not; every float must also be finite), from the fields (_one_of, _within): one table each, one owner.
CHOICES: dict[str, tuple[str, ...]] = {f"{s}.{f.name}": f.metadata["choices"] for s, c in SECTIONS.items()
                                       for f in dataclasses.fields(c) if "choices" in f.metadata}
RANGES: dict[str, tuple[float, float, bool]] = {f"{s}.{f.name}": f.metadata["range"]
                                                for s, c in SECTIONS.items() for f in dataclasses.fields(c)
                                                if "range" in f.metadata}
_RANGE_TEXT = {f"{s}.{f.name}": f.metadata["note"] for s, c in SECTIONS.items() for f in dataclasses.fields(c)
               if f.metadata.get("note")}


def load_config(path: str | Path | None = None, overrides: typing.Sequence[str] = ()) -> Config:
    """Resolve a preset (and its `base` chain) plus `section.key=value` overrides into a Config.

    Raises:
        ConfigError: unreadable file, unknown section or key, a value of the wrong type or choice.
    """
    path = find_preset(path) if path else None
    raw = _read_preset(path) if path else {}
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


def preset_folders() -> list[Path]:
    """Where presets are found by name: ./train, the train/ folder beside the package (a clone), the
    package's presets/ (an installed wheel)."""
    folders = (Path("train").resolve(), PRESETS_DIR, INSTALLED_PRESETS_DIR)
    return list(dict.fromkeys(p for p in folders if p.is_dir()))


def preset_names() -> list[str]:
    """The names of the presets in preset_folders(), sorted (cpu-small for train/cpu-small.toml)."""
    return sorted({p.stem for folder in preset_folders() for p in folder.glob(f"*{PRESET_SUFFIX}")})


def find_preset(path: str | Path) -> Path:
    """A preset file: `path` when it exists, else a preset of that name (`cpu-small`, `cpu-small.toml`,
    `train/cpu-small.toml`) in preset_folders(); a path in another folder is returned as given.

    Raises:
        ConfigError: neither: one line naming `path` and the presets there are.
    """
    given = Path(path)
    if given.exists() or given.parent not in (Path("."), Path("train")):    # a path elsewhere: as given
        return given
    name = given.name[:-len(PRESET_SUFFIX)] if given.name.endswith(PRESET_SUFFIX) else given.name
    for folder in preset_folders():
        if (folder / f"{name}{PRESET_SUFFIX}").is_file():
            return folder / f"{name}{PRESET_SUFFIX}"
    names = preset_names()
    known = (f"presets: {', '.join(names)} (--config NAME, or a path to a .toml file)" if names else
             "no presets found (train/ is beside the package in a clone of the repository)")
    raise ConfigError(f"{path}: no such config file; {known}")


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


