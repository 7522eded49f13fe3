"""model.mixed_precision = "auto" (training/precision.py): the table, the CPU flags, a resumed run's choice."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from shogi_dnn.config import Config, ModelConfig, load_config
from shogi_dnn.errors import ConfigError
from shogi_dnn.training import precision


@pytest.mark.parametrize("kinds,capabilities,flags,want", [
    (["GPU"], [(9, 0)], set(), "mixed_bfloat16"),                     # H100
    (["GPU", "GPU"], [(8, 0), (8, 6)], set(), "mixed_bfloat16"),      # A100 + A40
    (["GPU"], [(7, 5)], set(), "mixed_float16"),                      # T4
    (["GPU", "GPU"], [(8, 0), (7, 0)], set(), "mixed_float16"),       # the slowest GPU decides
    (["GPU"], [(6, 1)], set(), "none"),                               # a GTX 1080: no tensor cores
    (["GPU"], [None], set(), "none"),                                 # unknown: float32
    (["CPU"], [], {"avx512f", "amx_bf16", "amx_tile"}, "mixed_bfloat16"),
    (["CPU", "CPU"], [], {"avx512_bf16"}, "mixed_bfloat16"),
    (["CPU"], [], {"avx2", "avx512f"}, "none"),
])
def test_the_table(kinds: list[str], capabilities: list, flags: set[str], want: str) -> None:
    chosen = precision.choose(kinds, capabilities, flags)
    assert chosen.policy == want and chosen.why.startswith("auto: ")


def test_cpu_flags_read_the_first_processor(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse avx512_bf16 amx_bf16\n\nprocessor\t: 1\n"
                       "flags\t\t: fpu\n")
    assert precision.cpu_flags(cpuinfo) == {"fpu", "sse", "avx512_bf16", "amx_bf16"}
    assert precision.cpu_flags(tmp_path / "absent") == set()


def _auto() -> Config:
    config = Config()
    return dataclasses.replace(config, model=dataclasses.replace(config.model, mixed_precision="auto"))


def test_an_explicit_value_is_kept_and_auto_resolves(tmp_path: Path) -> None:
    explicit = Config()
    assert precision.resolve(explicit, ["/cpu:0"]) == (explicit, precision.Precision("none", "set in the config"))
    resolved, chosen = precision.resolve(_auto(), ["/job:localhost/replica:0/task:0/device:CPU:0"])
    assert resolved.model.mixed_precision == chosen.policy != "auto"
    want = "mixed_bfloat16" if set(precision.CPU_BF16_FLAGS) & precision.cpu_flags() else "none"
    assert chosen.policy == want


def test_a_resumed_run_keeps_its_choice(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model": {"mixed_precision": "mixed_float16"}}))
    resolved, chosen = precision.resolve(_auto(), ["/cpu:0"], tmp_path)
    assert resolved.model.mixed_precision == "mixed_float16" and "the run's choice" in chosen.why
    (tmp_path / "config.json").write_text("{not json")                # unreadable: decided afresh
    assert precision.resolve(_auto(), ["/cpu:0"], tmp_path)[1].why != chosen.why


def test_the_presets_say_auto_and_bad_values_are_one_line() -> None:
    assert load_config("cpu-small").model.mixed_precision == "auto"
    assert load_config("cpu-medium").model.mixed_precision == "auto"
    assert ModelConfig().mixed_precision == "none"              # library configs: float32 unless asked
    with pytest.raises(ConfigError, match="mixed_precision"):
        load_config("cpu-small", ["model.mixed_precision=bfloat16"])
