"""The value network: a residual CNN over the 9x9 input planes, giving one win logit.

    board [B, 81] uint8, hands [B, 14] uint8           compact positions (pipeline batches)
      -> ExpandPlanes                                  [B, 9, 9, features.NUM_PLANES = 42] one-hot + hand
      [model.features = "attacks": concatenated with
       AttackPlanes(board)                             [B, 9, 9, attack_planes.NUM_ATTACK_PLANES = 35]
                                                       -> [B, 9, 9, 77] (input_planes(cfg));
       "tactics": AttackPlanes(board, tactics=True)    [B, 9, 9, 35 + attack_planes.NUM_TACTIC_PLANES = 39]
                                                       -> [B, 9, 9, 81]]
      -> stem: conv3x3(filters) [-> BN] -> ReLU
      -> blocks x residual block: conv3x3 [BN] ReLU conv3x3 [BN] + skip -> ReLU
         (model.block "se" / "gpool": a board-wide channel scale and bias, _residual_block)
      -> value head: conv1x1(VALUE_HEAD_PLANES) [BN] ReLU -> flatten -> dense(value_hidden) ReLU
      -> dense(1)                                      [B, 1] float32 logit of "side to move wins"
      [model.policy_head: from the same trunk output,
       policy head: conv1x1(filters) [BN] ReLU -> conv1x1(27) with bias   [B, 9, 9, 27] float32
       -> transpose, reshape                           [B, 2187] float32 logits in dataset/policy.py's label
                                                       order (label = direction * 81 + row * 9 + col);
       the model's output is then {"value": [B, 1], "policy": [B, 2187]} (OUTPUT_VALUE, OUTPUT_POLICY)]

The plane expansion runs on the device, inside the model (ExpandPlanes and AttackPlanes are registered
Keras layers, so `keras.models.load_model("RUN/model.keras")` works after `import shogi_dnn.training.model`);
the host only moves the compact uint8 encoding. Batch norm: "none" (use for tower-count-independent results),
"local" (statistics per tower) or "sync" (statistics all-reduced across towers,
BatchNormalization(synchronized=True)). Mixed precision sets a per-layer dtype policy (no global state); the
planes come in the compute dtype and the logit layer stays float32. Loss scaling for mixed_float16 belongs to
the optimizer (optimizer.build_optimizer).

Mirror averaging (value_logits(..., mirror_average=True), used by evaluate and predict): shogi's rules and
the game value are invariant under the left-right mirror (features.mirror_board: file f <-> 10 - f, hands
unchanged), so the win probability can be taken as the mean of sigmoid(model(x)) and
sigmoid(model(mirror(x))); value_logits returns the logit of that mean so that every metric on logits stays.
policy_logits(..., mirror_average=True) likewise takes the mean of softmax(policy(x)) and the mirrored
position's softmax with its labels mapped back (policy.mirror_labels: the mirror of a move), and returns
its log (log-probabilities: valid logits for softmax, argmax and top-k, which all stay as they were).

Outputs: a model without a policy head (every model.keras written before it existed) gives the [B, 1]
value logit alone; with one, the dict above. value_logits and policy_logits read either, so callers
never look at the model's raw output (has_policy_head tells which kind a model is).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import keras
import numpy as np
from keras import layers, ops

from shogi_dnn.config import ModelConfig
from shogi_dnn.dataset import features, policy
from shogi_dnn.errors import RunError
from shogi_dnn.rules import NUM_SQUARES
from shogi_dnn.training import attack_planes, precision

BOARD_SIDE = 9                    # the board is BOARD_SIDE x BOARD_SIDE squares
VALUE_HEAD_PLANES = 1             # 1x1-conv planes before the value head's dense layers (as AlphaZero)
CONV_KERNEL = 3
INPUT_BOARD, INPUT_HANDS = "board", "hands"
OUTPUT_VALUE, OUTPUT_POLICY = "value", "policy"     # the outputs of a model with a policy head
POLICY_LAYER = "policy_logits"                      # the policy head's last layer
# features.HAND_MAX for own then opponent hands: hand plane = count / max.
_HAND_SCALE = np.asarray(features.HAND_MAX * 2, np.float32)
# model.features -> input planes of the stem convolution.
INPUT_PLANES = {"pieces": features.NUM_PLANES,
                "attacks": features.NUM_PLANES + attack_planes.NUM_ATTACK_PLANES,
                "tactics": (features.NUM_PLANES + attack_planes.NUM_ATTACK_PLANES
                            + attack_planes.NUM_TACTIC_PLANES)}


def input_planes(cfg: ModelConfig) -> int:
    """Planes the stem convolution sees: 42 ("pieces"), 77 ("attacks") or 81 ("tactics")."""
    return INPUT_PLANES[cfg.features]


def expand_planes(board, hands, dtype: str = "float32"):
    """On-device twin of features.expand_planes (a test pins them equal).

    Args:
        board: [B, 81] integer piece codes; hands: [B, 14] integer hand counts.
        dtype: float dtype of the planes.
    Returns:
        [B, 9, 9, features.NUM_PLANES] tensor of `dtype`: one-hot own/opponent pieces, then hand
        counts / features.HAND_MAX broadcast over the board.
    """
    onehot = ops.one_hot(ops.cast(board, "int32"), features.NUM_PIECE_CODES, dtype=dtype)[..., 1:]
    hand = ops.cast(hands, dtype) / ops.convert_to_tensor(_HAND_SCALE, dtype=dtype)      # [B, 14]
    hand = ops.repeat(ops.expand_dims(hand, 1), NUM_SQUARES, axis=1)                   # [B, 81, 14]
    planes = ops.concatenate([onehot, hand], axis=-1)                                  # [B, 81, 42]
    return ops.reshape(planes, (-1, BOARD_SIDE, BOARD_SIDE, features.NUM_PLANES))


@keras.saving.register_keras_serializable(package="shogi_dnn")
class ExpandPlanes(layers.Layer):
    """Keras layer: (board [B, 81] uint8, hands [B, 14] uint8) -> [B, 9, 9, NUM_PLANES] planes
    in the layer's compute dtype (float16/bfloat16 under mixed precision)."""

    def call(self, board, hands):
        return expand_planes(board, hands, dtype=self.compute_dtype)

    def compute_output_shape(self, board_shape, hands_shape):
        return (board_shape[0], BOARD_SIDE, BOARD_SIDE, features.NUM_PLANES)


class _LayerFactory:
    """Makes the network's layers with one dtype policy, one batch-norm mode and seeded initialisers."""

    def __init__(self, cfg: ModelConfig, seed: int | None) -> None:
        self.cfg = cfg
        policy = precision.local_precision().policy if cfg.mixed_precision == precision.AUTO \
            else cfg.mixed_precision
        self.dtype = "float32" if policy == "none" else policy
        self._seed = seed
        self._count = 0

    def initializer(self, kind: str) -> keras.initializers.Initializer:
        self._count += 1
        seed = None if self._seed is None else self._seed * 1000 + self._count
        return keras.initializers.get({"class_name": kind, "config": {"seed": seed}})

    def conv(self, x, filters: int, kernel: int, name: str):
        """Convolution (no bias before batch norm), then batch norm if enabled, no activation."""
        use_bn = self.cfg.batch_norm != "none"
        x = layers.Conv2D(filters, kernel, padding="same", use_bias=not use_bn, dtype=self.dtype,
                          kernel_initializer=self.initializer("HeNormal"), name=name)(x)
        if use_bn:
            x = layers.BatchNormalization(synchronized=self.cfg.batch_norm == "sync", dtype=self.dtype,
                                          name=f"{name}_bn")(x)
        return x

    def relu(self, x, name: str):
        return layers.ReLU(dtype=self.dtype, name=name)(x)


def se_units(cfg: ModelConfig) -> int:
    """Units of a squeeze-excitation block's squeeze layer: filters / se_ratio, at least 1."""
    return max(1, cfg.filters // cfg.se_ratio)


def _residual_block(make: _LayerFactory, x, index: int):
    """[B, 9, 9, F] -> [B, 9, 9, F]: two 3x3 convolutions plus the identity (cfg.block):

        residual  relu(x + conv2(relu(conv1(x))))
        gpool     y = relu(conv1(x)); y + dense([mean(y), max(y)] over the squares) [B, F] per channel;
                  then as residual (KataGo's global pooling bias, here on every channel)
        se        y = conv2(...); s = [B, F] mean of y over the squares -> dense(F / se_ratio) ReLU
                  -> dense(2F) = (gamma, beta); relu(x + sigmoid(gamma) y + beta) (lc0's SE unit)
    """
    name, cfg = f"block{index}", make.cfg
    y = make.relu(make.conv(x, cfg.filters, CONV_KERNEL, f"{name}_conv1"), f"{name}_relu1")
    if cfg.block == "gpool":
        pooled = layers.Concatenate(dtype=make.dtype, name=f"{name}_gpool")(
            [layers.GlobalAveragePooling2D(dtype=make.dtype, name=f"{name}_gpool_mean")(y),
             layers.GlobalMaxPooling2D(dtype=make.dtype, name=f"{name}_gpool_max")(y)])     # [B, 2F]
        bias = layers.Dense(cfg.filters, dtype=make.dtype, kernel_initializer=make.initializer("HeNormal"),
                            name=f"{name}_gpool_dense")(pooled)
        y = layers.Add(dtype=make.dtype, name=f"{name}_gpool_add")(
            [y, layers.Reshape((1, 1, cfg.filters), dtype=make.dtype, name=f"{name}_gpool_bias")(bias)])
    y = make.conv(y, cfg.filters, CONV_KERNEL, f"{name}_conv2")
    if cfg.block == "se":
        y = SqueezeExcite(dtype=make.dtype, name=f"{name}_se")(
            y, layers.Dense(2 * cfg.filters, dtype=make.dtype, name=f"{name}_se_expand",
                            kernel_initializer=make.initializer("GlorotUniform"))(
                make.relu(layers.Dense(se_units(cfg), dtype=make.dtype, name=f"{name}_se_squeeze",
                                       kernel_initializer=make.initializer("HeNormal"))(
                    layers.GlobalAveragePooling2D(dtype=make.dtype, name=f"{name}_se_pool")(y)),
                    f"{name}_se_relu")))
    y = layers.Add(dtype=make.dtype, name=f"{name}_add")([x, y])
    return make.relu(y, f"{name}_relu2")


@keras.saving.register_keras_serializable(package="shogi_dnn")
class SqueezeExcite(layers.Layer):
    """Keras layer: (planes [B, 9, 9, F], excitation [B, 2F]) -> sigmoid(gamma) * planes + beta, where
    (gamma, beta) are the excitation's halves broadcast over the squares."""

    def call(self, planes, excitation):
        gamma, beta = ops.split(ops.expand_dims(ops.expand_dims(excitation, 1), 1), 2, axis=-1)
        return ops.sigmoid(gamma) * planes + beta

    def compute_output_shape(self, planes_shape, excitation_shape):
        return planes_shape


def _value_head(make: _LayerFactory, x):
    """[B, 9, 9, F] -> [B, 1] float32 logit (cfg.value_head: "flatten" or "pool")."""
    if make.cfg.value_head == "pool":
        # Mean over the squares of each feature: counts of learned patterns (material is one of them).
        x = layers.GlobalAveragePooling2D(dtype=make.dtype, name="value_pool")(x)
    else:
        x = make.relu(make.conv(x, VALUE_HEAD_PLANES, 1, "value_conv"), "value_relu1")
        x = layers.Flatten(dtype=make.dtype, name="value_flatten")(x)
    x = layers.Dense(make.cfg.value_hidden, dtype=make.dtype, kernel_initializer=make.initializer("HeNormal"),
                     name="value_dense")(x)
    x = make.relu(x, "value_relu2")
    # float32 even under mixed precision: the loss and the sigmoid need the range.
    return layers.Dense(1, dtype="float32", kernel_initializer=make.initializer("GlorotUniform"),
                        name="value_logit")(x)


def _policy_head(make: _LayerFactory, x):
    """[B, 9, 9, F] -> [B, 2187] float32 policy logits, label = direction * 81 + row * 9 + col."""
    x = make.relu(make.conv(x, make.cfg.filters, 1, "policy_conv"), "policy_relu")
    # float32 even under mixed precision, as the value logit: the softmax needs the range.
    x = layers.Conv2D(policy.NUM_DIRECTIONS, 1, use_bias=True, dtype="float32",
                      kernel_initializer=make.initializer("GlorotUniform"), name="policy_directions")(x)
    x = layers.Permute((3, 1, 2), dtype="float32", name="policy_transpose")(x)       # [B, 27, 9, 9]
    return layers.Reshape((policy.NUM_MOVE_LABELS,), dtype="float32", name=POLICY_LAYER)(x)


def build_model(cfg: ModelConfig, seed: int | None = None) -> keras.Model:
    """Build the value network (call inside strategy.scope() for training).

    Args:
        cfg: blocks, filters, value_hidden, value_head, batch_norm, mixed_precision, features.
        seed: seeds every initialiser (None: Keras' global seed, see keras.utils.set_random_seed).
    Returns:
        keras.Model with inputs {"board": [B, 81] uint8, "hands": [B, 14] uint8} and output the
        [B, 1] float32 logit that the side to move wins; with cfg.policy_head the output is
        {"value": that logit, "policy": [B, 2187] float32 move logits}.
    """
    make = _LayerFactory(cfg, seed)
    board = keras.Input((NUM_SQUARES,), dtype="uint8", name=INPUT_BOARD)
    hands = keras.Input((features.HAND_SIZE,), dtype="uint8", name=INPUT_HANDS)
    x = ExpandPlanes(dtype=make.dtype, name="planes")(board, hands)
    if cfg.features in ("attacks", "tactics"):
        attacks = attack_planes.AttackPlanes(tactics=cfg.features == "tactics", dtype=make.dtype,
                                             name="attack_planes")(board)
        x = layers.Concatenate(dtype=make.dtype, name="input_planes")([x, attacks])
    x = make.relu(make.conv(x, cfg.filters, CONV_KERNEL, "stem_conv"), "stem_relu")
    for index in range(cfg.blocks):
        x = _residual_block(make, x, index)
    logit = _value_head(make, x)
    if cfg.policy_head:     # the policy head's initialisers are drawn after the value head's
        return keras.Model({INPUT_BOARD: board, INPUT_HANDS: hands},
                           {OUTPUT_VALUE: logit, OUTPUT_POLICY: _policy_head(make, x)},
                           name=f"shogi_value_policy_{cfg.blocks}x{cfg.filters}")
    return keras.Model({INPUT_BOARD: board, INPUT_HANDS: hands}, logit,
                       name=f"shogi_value_{cfg.blocks}x{cfg.filters}")


def has_policy_head(model: keras.Model) -> bool:
    """Whether the model gives policy logits besides the value (build_model with cfg.policy_head)."""
    return len(model.outputs) > 1


def mirror_board(board):
    """On-device twin of features.mirror_board: [B, 81] boards mirrored left-right (file f <-> 10 - f)."""
    return ops.reshape(ops.flip(ops.reshape(board, (-1, BOARD_SIDE, BOARD_SIDE)), axis=2), (-1, NUM_SQUARES))


def value_logits(model: keras.Model, board, hands, mirror_average: bool = False, training: bool = False):
    """[B] float32 win logits of the side to move, optionally mirror-averaged (the one place for it).

    Args:
        board: [B, 81] uint8; hands: [B, 14] uint8 (numpy or tensors).
        mirror_average: run the model on the boards and their mirrors in one batch of 2B and return
            logit((sigmoid(a) + sigmoid(b)) / 2), computed stably as
            logaddexp(log_sigmoid(a), log_sigmoid(b)) - logaddexp(log_sigmoid(-a), log_sigmoid(-b)).
    """
    if not mirror_average:
        return _value_output(model({INPUT_BOARD: board, INPUT_HANDS: hands}, training=training))
    return average_value(_value_output(model(_with_mirrors(board, hands), training=training)))


def _with_mirrors(board, hands) -> dict:
    """The model's inputs for a batch and its mirrors: [2B, 81] boards (the B mirrors after), [2B, 14]."""
    return {INPUT_BOARD: ops.concatenate([board, mirror_board(board)], axis=0),
            INPUT_HANDS: ops.concatenate([hands, hands], axis=0)}


def _value_output(outputs):
    """[N] float32 value logits of a model's raw output (a [N, 1] tensor, or the dict of a policy model)."""
    value = outputs[OUTPUT_VALUE] if isinstance(outputs, dict) else outputs
    return ops.reshape(ops.cast(value, "float32"), (-1,))


def average_value(logits):
    """[B] logit((sigmoid(a) + sigmoid(b)) / 2) of [2B] logits: a the positions', b their mirrors'."""
    logits = ops.reshape(logits, (2, -1))
    a, b = logits[0], logits[1]
    log_sigmoid = ops.log_sigmoid
    return (ops.logaddexp(log_sigmoid(a), log_sigmoid(b)) - ops.logaddexp(log_sigmoid(-a), log_sigmoid(-b)))


_MIRROR_LABELS = policy.mirror_labels(np.arange(policy.NUM_MOVE_LABELS)).astype(np.int32)


def policy_logits(model: keras.Model, board, hands, mirror_average: bool = False, training: bool = False):
    """[B, 2187] float32 move logits of the side to move (dataset/policy.py's labels).

    Args:
        model: a model with a policy head (has_policy_head).
        board: [B, 81] uint8; hands: [B, 14] uint8 (numpy or tensors).
        mirror_average: run the model on the boards and their mirrors in one batch of 2B and return the
            log of the mean of softmax(a) and softmax(b) with b's labels mapped back through the mirror
            (policy.mirror_labels): log-probabilities, whose softmax is that mean.
    Raises:
        ValueError: the model has no policy head.
    """
    return value_and_policy_logits(model, board, hands, mirror_average, training)[1]


def value_and_policy_logits(model: keras.Model, board, hands, mirror_average: bool = False,
                            training: bool = False):
    """(value_logits [B] float32, policy_logits [B, 2187] float32) from one forward pass (as the two
    functions above, with the same mirror averaging). Raises ValueError without a policy head."""
    if not has_policy_head(model):
        raise ValueError(f"model {model.name} has no policy head (model.policy_head = false)")
    if not mirror_average:
        outputs = model({INPUT_BOARD: board, INPUT_HANDS: hands}, training=training)
        return _value_output(outputs), ops.cast(outputs[OUTPUT_POLICY], "float32")
    outputs = model(_with_mirrors(board, hands), training=training)
    return average_value(_value_output(outputs)), average_policy(ops.cast(outputs[OUTPUT_POLICY], "float32"))


def average_policy(logits):
    """[B, 2187] log((softmax(a) + softmax(b)[:, mirror]) / 2) of [2B, 2187] logits: a the positions',
    b their mirrors' (whose label l is the move mirror_labels(l) of the position)."""
    a, b = ops.split(logits, 2, axis=0)
    a = ops.log_softmax(a, axis=-1)
    b = ops.take(ops.log_softmax(b, axis=-1), ops.convert_to_tensor(_MIRROR_LABELS), axis=1)
    # logaddexp(a, b) - log 2 from Max, Exp and Log alone (export: tf2onnx converts no Log1p); the sum
    # of the exponentials is >= 1, so the log is stable.
    top = ops.maximum(a, b)
    return top + ops.log((ops.exp(a - top) + ops.exp(b - top)) * np.float32(0.5))


def mirror_averaged(model: keras.Model):
    """model wrapped as a callable of the model's signature, inputs -> [B, 1] float32 mirror-averaged logits
    (value_logits), for code that calls a model as is (analysis/predict.py); a model with a policy head
    gives {"value": those, "policy": [B, 2187] mirror-averaged policy_logits}, as the model's dict."""

    def averaged(inputs, training: bool = False):
        if has_policy_head(model):
            value, moves = value_and_policy_logits(model, inputs[INPUT_BOARD], inputs[INPUT_HANDS],
                                                   mirror_average=True, training=training)
            return {OUTPUT_VALUE: ops.expand_dims(value, -1), OUTPUT_POLICY: moves}
        logits = value_logits(model, inputs[INPUT_BOARD], inputs[INPUT_HANDS], mirror_average=True,
                              training=training)
        return ops.expand_dims(logits, -1)

    return averaged


def load_model(path: str | Path) -> keras.Model:
    """Load a model saved with model.save("....keras").

    Raises:
        RunError: the file is missing or not a readable Keras model (one-line message).
    """
    path = Path(path)
    if not path.is_file():
        raise RunError(f"{path}: no such model file")
    if not zipfile.is_zipfile(path):
        raise RunError(f"{path}: not a Keras model file (a .keras file is a zip archive)")
    try:
        return keras.models.load_model(path)
    except (ValueError, OSError, KeyError, TypeError, zipfile.BadZipFile) as exc:
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise RunError(f"{path}: not a readable Keras model ({first_line})") from exc
