"""The pooled value head: same interface as the flatten head, far fewer weights, a saved model reloads."""

from __future__ import annotations

import numpy as np

from shogi_dnn.config import ModelConfig
from shogi_dnn.training import model as model_lib


def batch(n: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"board": rng.integers(0, 29, (n, 81)).astype(np.uint8),
            "hands": rng.integers(0, 3, (n, 14)).astype(np.uint8)}


def test_pool_head_shapes_and_size(tmp_path) -> None:
    flat = model_lib.build_model(ModelConfig(blocks=1, filters=16, value_hidden=32), seed=1)
    pool = model_lib.build_model(ModelConfig(blocks=1, filters=16, value_hidden=32, value_head="pool"), seed=1)
    assert any(layer.name == "value_pool" for layer in pool.layers)
    assert not any(layer.name == "value_pool" for layer in flat.layers)
    out = pool(batch(), training=False)
    assert tuple(out.shape) == (3, 1) and out.dtype == "float32"
    # pooling keeps 16 inputs to the dense layer instead of 81 squares x the head's planes
    dense_in = pool.get_layer("value_dense").kernel.shape[0]
    assert dense_in == 16
    pool.save(tmp_path / "m.keras")
    back = model_lib.load_model(tmp_path / "m.keras")
    assert np.allclose(back(batch(), training=False), out, atol=1e-6)
