"""The model's size and memory need, known from the config before TensorFlow builds anything (no TF).

A config that cannot fit is one line saying what to lower, before any allocation.

Parameters (exact: Keras' count_params, pinned by tests/training/test_memory.py), with P input planes
(42, 77 with model.features = "attacks", 81 with "tactics"), F filters, K blocks, H value_hidden, and a
convolution's bias replaced by batch norm's 4 per channel (gamma, beta, moving mean and variance) when
batch_norm != "none":

    N = conv(P -> F, 3x3) + 2K conv(F -> F, 3x3) [+ K block extras] + head + dense(H -> 1) [+ policy]
        block "se": dense(F -> S) + dense(S -> 2F), S = F / se_ratio;  block "gpool": dense(2F -> F)
        head "flatten": conv(F -> 1, 1x1) + dense(81 -> H);   head "pool": dense(F -> H)
        policy (model.policy_head): conv(F -> F, 1x1) + F x 27 + 27 (the last 1x1 conv keeps its bias)

Training memory of one device (bytes), for B positions per device per micro-batch:

    weights      4 N                      float32 variables (also under mixed precision)
    gradients    4 N (8 N with micro_batches > 1: the step's and their running sum)
    optimizer    4 N x slots              sgd: 1 (momentum), adam: 2 (first and second moments); + 1 for
                                          the weights' moving average (optim.ema > 0)
    activations  B x 81 x A x e           e = 4 bytes (2 under mixed precision), A = the channels kept
                 for the backward pass: P + 29 (the one-hot planes) + F x (2 (1 + 2K) + K): two tensors
                 per convolution (its output and its ReLU's), K residual sums
    total        (weights + gradients + optimizer + activations) x HEADROOM (1.5: TensorFlow's own
                 workspaces, the input pipeline and allocator fragmentation)

Measured on the development machine's CPU (train/cpu-smoke.toml, batch_norm = "local", F = 256, K = 6,
2 updates, peak RSS less the 737 MB of the same run with F = 16, K = 1): per-device batch 512: 1.42 GiB
used, 1.36 GiB estimated before the headroom; batch 1024: 2.68 GiB used, 2.63 GiB estimated. So the
total (x 1.5) refuses a run once it would use about two thirds of the memory. Not measured on a GPU
(cuDNN's workspaces are what the headroom is for).

checked against the memory of one device (GPU memory when TensorFlow reports its limit, else the
host's available RAM shared by every local tower; devices.device_memory). Models over MAX_PARAMETERS
are refused whatever the memory, before TensorFlow is imported; so is an address-space limit (`ulimit -v`)
below MIN_ADDRESS_SPACE (check_address_space).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from shogi_dnn.config import Config, ModelConfig
from shogi_dnn.errors import ConfigError

SQUARES = 81
POLICY_DIRECTIONS = 27               # dataset/policy.py's NUM_DIRECTIONS: the policy head's last planes
PIECE_PLANES = 29                    # ExpandPlanes' one-hot of the 29 piece codes (then sliced)
# model.INPUT_PLANES (model.py imports TensorFlow; a test pins them equal)
PLANES = {"pieces": 42, "attacks": 77, "tactics": 81}
MAX_PARAMETERS = 500_000_000         # a sanity limit: 2 GB of float32 weights, before the optimizer's copies
OPTIMIZER_SLOTS = {"sgd": 1, "adam": 2}
HEADROOM = 1.5
FLOAT32 = 4
MEMINFO = Path("/proc/meminfo")
CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
# The least address space (RLIMIT_AS, `ulimit -v`) `train` starts TensorFlow and trains in:
# train/cpu-smoke.toml on 128 games, 2 CPU cores, finished under `ulimit -v 2750000` (KiB) and failed
# under 2625000 (a oneDNN error; 2000000: LLVM's pthread_create abort, exit 134). TensorFlow's thread
# pools grow with the cores (each thread reserves its stack): a floor with a margin, not a guarantee.
MIN_ADDRESS_SPACE = 3 * 2**30


def parameter_count(cfg: ModelConfig) -> int:
    """Weights of training.model.build_model(cfg), non-trainable batch-norm statistics included."""
    def conv(inputs: int, outputs: int, kernel: int) -> int:
        per_channel = 4 if cfg.batch_norm != "none" else 1          # batch norm's 4, or the bias
        return kernel * kernel * inputs * outputs + per_channel * outputs

    filters, hidden = cfg.filters, cfg.value_hidden
    body = conv(PLANES[cfg.features], filters, 3) + 2 * cfg.blocks * conv(filters, filters, 3)
    if cfg.block == "se":
        squeeze = max(1, filters // cfg.se_ratio)        # model.se_units
        body += cfg.blocks * (filters * squeeze + squeeze + squeeze * 2 * filters + 2 * filters)
    elif cfg.block == "gpool":
        body += cfg.blocks * (2 * filters * filters + filters)
    if cfg.value_head == "pool":
        head = filters * hidden + hidden
    else:
        head = conv(filters, 1, 1) + SQUARES * hidden + hidden
    policy = (conv(filters, filters, 1) + filters * POLICY_DIRECTIONS + POLICY_DIRECTIONS
              if cfg.policy_head else 0)
    return body + head + hidden + 1 + policy


def forward_macs(cfg: ModelConfig) -> int:
    """Multiply-accumulates of one position's forward pass: every convolution (81 squares x kernel area x
    inputs x outputs) and dense layer (inputs x outputs) of build_model(cfg); batch norm, ReLU, pooling
    and the residual sums (a few operations per activation) are left out."""
    filters, hidden = cfg.filters, cfg.value_hidden
    body = SQUARES * 9 * (PLANES[cfg.features] * filters + 2 * cfg.blocks * filters * filters)
    if cfg.block == "se":
        squeeze = max(1, filters // cfg.se_ratio)
        body += cfg.blocks * (filters * squeeze + squeeze * 2 * filters)
    elif cfg.block == "gpool":
        body += cfg.blocks * 2 * filters * filters
    head = filters * hidden if cfg.value_head == "pool" else SQUARES * filters + SQUARES * hidden
    policy = SQUARES * (filters * filters + filters * POLICY_DIRECTIONS) if cfg.policy_head else 0
    return body + head + hidden + policy


def training_flops(cfg: ModelConfig) -> int:
    """Floating-point operations to train on one position: 2 per multiply-accumulate, the backward pass
    twice the forward (gradients of the inputs and of the weights): 6 x forward_macs."""
    return 6 * forward_macs(cfg)


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one device needs to train (see the module docstring); `total` includes HEADROOM."""

    parameters: int
    weights: int
    gradients: int
    optimizer: int
    activations: int
    per_device_batch: int

    @property
    def total(self) -> int:
        return int((self.weights + self.gradients + self.optimizer + self.activations) * HEADROOM)

    def breakdown(self) -> str:
        """`weights 1.2 GiB + gradients ... + activations ... (batch 256) x 1.5 = 9.9 GiB`."""
        return (f"weights {gib(self.weights)} + gradients {gib(self.gradients)} "
                f"+ optimizer {gib(self.optimizer)} + activations {gib(self.activations)} "
                f"(batch {self.per_device_batch}) x {HEADROOM:g} headroom = {gib(self.total)}")


def training_memory(config: Config, per_device_batch: int) -> MemoryEstimate:
    """What one device needs to train `config.model` on `per_device_batch` positions per micro-batch."""
    cfg = config.model
    n = parameter_count(cfg)
    channels = PLANES[cfg.features] + PIECE_PLANES + cfg.filters * (2 * (1 + 2 * cfg.blocks) + cfg.blocks)
    element = FLOAT32 if cfg.mixed_precision == "none" else 2
    return MemoryEstimate(parameters=n, weights=FLOAT32 * n,
                          gradients=FLOAT32 * n * (2 if config.train.micro_batches > 1 else 1),
                          optimizer=FLOAT32 * n * (OPTIMIZER_SLOTS.get(config.optim.optimizer, 2)
                                                   + (config.optim.ema > 0)),
                          activations=per_device_batch * SQUARES * channels * element,
                          per_device_batch=per_device_batch)


def check_model_size(cfg: ModelConfig) -> int:
    """The parameter count; ConfigError (one line) above MAX_PARAMETERS."""
    n = parameter_count(cfg)
    if n > MAX_PARAMETERS:
        raise ConfigError(f"model.filters = {cfg.filters}, model.blocks = {cfg.blocks}: {n:,} parameters, "
                          f"over the limit of {MAX_PARAMETERS:,}; lower model.filters (the count grows "
                          f"with its square) or model.blocks")
    return n


def check_fits(config: Config, per_device_batch: int, available: int, where: str,
               sharing: int = 1) -> MemoryEstimate:
    """Raise ConfigError (one line: the estimate, the memory, what to lower) unless `sharing` towers of
    `per_device_batch` fit in `available` bytes (`where` names that memory)."""
    check_model_size(config.model)
    estimate = training_memory(config, per_device_batch)
    if estimate.total * sharing <= available:
        return estimate
    towers = f" x {sharing} towers" if sharing > 1 else ""
    lower = "train.per_replica_batch (or model.filters, model.blocks)" \
        if estimate.activations > estimate.weights + estimate.optimizer else \
        "model.filters or model.blocks (or train.per_replica_batch)"
    raise ConfigError(
        f"the model does not fit: model.filters = {config.model.filters}, "
        f"model.blocks = {config.model.blocks}, "
        f"{estimate.parameters:,} parameters need about {gib(estimate.total)}{towers} to train "
        f"({estimate.breakdown()}) but {where} has {gib(available)}; lower {lower}")


def host_memory() -> tuple[int, str]:
    """(bytes, words) of the RAM this process may use: /proc/meminfo's MemAvailable (else the physical
    pages from os.sysconf), capped by a cgroup limit when one is set."""
    available, words = 0, ""
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available, words = int(line.split()[1]) * 1024, "available RAM (/proc/meminfo)"
                break
    except (OSError, ValueError, IndexError):
        pass
    if not available:
        try:
            available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            words = "RAM (os.sysconf)"
        except (OSError, ValueError, AttributeError):
            return 0, "RAM (unknown)"
    for path in CGROUP_LIMITS:
        try:
            limit = int(path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        if 0 < limit < available:
            available, words = limit, f"the memory limit of this container ({path})"
    return available, words


def check_address_space(command: str, minimum: int = MIN_ADDRESS_SPACE) -> None:
    """Refuse to start TensorFlow under an address-space limit (RLIMIT_AS, `ulimit -v`) below `minimum`
    bytes: there it aborts (LLVM ERROR: pthread_create failed, exit 134) instead of failing in one line.

    Raises:
        ConfigError: `address-space limit (ulimit -v) N KiB (X GiB) is below the Y GiB ...`.
    """
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft >= minimum:
        return
    raise ConfigError(f"address-space limit (ulimit -v) {soft // 1024:,} KiB ({gib(soft)}) is below the "
                      f"{gib(minimum)} ({minimum // 1024:,} KiB) {command} needs to start TensorFlow "
                      "(measured: training.memory.MIN_ADDRESS_SPACE); raise it (ulimit -v unlimited)")


def gib(n: float) -> str:
    """Bytes as GiB (MiB below 1 GiB) for messages."""
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.0f} MiB"
