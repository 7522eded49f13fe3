"""Typed config: defaults, preset base chains, typed overrides and one-line errors."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from shogi_dnn import config as cfg
from shogi_dnn.errors import ConfigError


def write(path, text: str):
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_and_json_round_trip() -> None:
    config = cfg.load_config()
    assert config == cfg.Config()
    assert cfg.from_dict(json.loads(config.to_json())) == config


def test_base_chain_and_overrides(tmp_path) -> None:
    write(tmp_path / "base.toml", "[model]\nblocks = 5\nfilters = 64\n[optim]\nlr = 0.1\n")
    child = write(tmp_path / "child.toml", 'base = "base.toml"\n[model]\nfilters = 16\n')
    config = cfg.load_config(child, ["optim.optimizer=adam", "train.seed=7", "data.mirror=true",
                                     "optim.lr=1"])
    assert (config.model.blocks, config.model.filters) == (5, 16)
    assert config.optim.optimizer == "adam" and config.optim.lr == 1.0 and isinstance(config.optim.lr, float)
    assert config.train.seed == 7 and config.data.mirror is True


@pytest.mark.parametrize("overrides, message", [
    (["model.nope=1"], "unknown key model.nope"),
    (["nosection.x=1"], r"unknown section \[nosection\]"),
    (["model.blocks=two"], "model.blocks = 'two' must be int"),
    (["optim.optimizer=rmsprop"], "must be one of sgd, adam"),
    (["train.per_replica_batch=0"], "train.per_replica_batch = 0 must be positive"),
    (["seed=3"], "expected section.key=value"),
    (["data.read_lanes=-1"], "data.read_lanes = -1 must be >= 0"),
])
def test_bad_overrides_are_one_line_errors(overrides, message) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        cfg.load_config(None, overrides)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("item, message", [
    ("optim.learning_rate=0.1", "--set optim.learning_rate=0.1: unknown key optim.learning_rate"),
    ("optim.lr=-1", "--set optim.lr=-1: optim.lr = -1.0 must be positive"),
    ("model.blocks=two", "--set model.blocks=two: model.blocks = 'two' must be int"),
])
def test_set_errors_name_set_not_the_preset(tmp_path, item, message) -> None:
    preset = write(tmp_path / "p.toml", "[optim]\nlr = 0.1\n")
    with pytest.raises(ConfigError) as info:
        cfg.load_config(preset, ["train.seed=2", item])
    assert str(info.value).startswith(message) and "p.toml" not in str(info.value)
    bad = write(tmp_path / "bad.toml", "[optim]\nlearning_rate = 0.1\n")
    with pytest.raises(ConfigError, match=r"bad.toml: unknown key optim.learning_rate"):
        cfg.load_config(bad, ["train.seed=2"])        # the preset's own mistake still names the preset


def test_bad_files(tmp_path) -> None:
    with pytest.raises(ConfigError, match="no such config file"):
        cfg.load_config(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="invalid TOML"):
        cfg.load_config(write(tmp_path / "bad.toml", "[model\n"))
    loop = write(tmp_path / "loop.toml", 'base = "loop.toml"\n')
    with pytest.raises(ConfigError, match="loops"):
        cfg.load_config(loop)


def test_a_config_is_a_regular_file_of_bounded_size(tmp_path) -> None:
    # `base = "/dev/zero"` was read without limit (19.5 GB before the kernel killed the process).
    with pytest.raises(ConfigError, match=r"^/dev/zero: not a regular file"):
        cfg.load_config(write(tmp_path / "zero.toml", 'base = "/dev/zero"\n'))
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)                                  # opening it for reading would wait for a writer
    with pytest.raises(ConfigError, match=r"fifo.toml: not a regular file"):
        cfg.load_config(fifo)
    with pytest.raises(ConfigError, match=r"big.toml: over 1 MiB"):
        cfg.load_config(write(tmp_path / "big.toml", "# padding\n" * 110_000))
    with pytest.raises(ConfigError, match=r"latin.toml: not UTF-8"):
        (tmp_path / "latin.toml").write_bytes(b"# caf\xe9\n")
        cfg.load_config(tmp_path / "latin.toml")
    with pytest.raises(ConfigError, match=r"int.toml: base must be a path"):
        cfg.load_config(write(tmp_path / "int.toml", "base = 3\n"))


def test_global_batch_divisibility() -> None:
    config = cfg.load_config(None, ["train.per_replica_batch=16"])
    assert cfg.global_batch(config, 4) == 64
    fixed = cfg.load_config(None, ["train.global_batch=96"])
    assert cfg.global_batch(fixed, 3) == 96
    with pytest.raises(ConfigError, match="96 is not divisible by 5 towers"):
        cfg.global_batch(fixed, 5)


def test_architecture_mismatch_ignores_schedule() -> None:
    a = cfg.load_config(None, ["model.filters=32", "optim.lr=0.1"])
    b = cfg.load_config(None, ["model.filters=64", "optim.lr=0.2"])
    assert cfg.architecture_mismatch(a, b) == ["model.filters: 32 -> 64"]
    assert cfg.architecture_mismatch(a, a) == []


def test_eval_target_keys_defaults_and_validation(tmp_path) -> None:
    config = cfg.load_config()
    assert (config.train.eval_weight, config.train.eval_scale) == (0.0, 756.0)
    config = cfg.load_config(None, ["train.eval_weight=1", "train.eval_scale=600"])
    assert (config.train.eval_weight, config.train.eval_scale) == (1.0, 600.0)
    assert isinstance(config.train.eval_weight, float)
    fitted = cfg.load_config(None, ["train.eval_scale=0", "train.eval_weighting=trust"]).train
    assert (fitted.eval_scale, fitted.eval_weighting) == (0.0, "trust")     # 0 = fit a on the training split
    preset = write(tmp_path / "evals.toml", "[train]\neval_weight = 1.5\n")
    with pytest.raises(ConfigError, match=r"evals\.toml: train\.eval_weight = 1\.5 must be in \[0, 1\]"):
        cfg.load_config(preset)
    for overrides, message in ((["train.eval_weight=-0.1"], r"train\.eval_weight = -0\.1 must be in \[0, 1\]"),
                               (["train.eval_weight=nan"], r"train\.eval_weight = nan must be a finite number"),
                               (["train.eval_scale=-756"], r"train\.eval_scale = -756\.0 must be >= 0"),
                               (["train.eval_weighting=ply"], r"train\.eval_weighting = 'ply' must be one of "
                                                              r"constant, trust"),
                               (["train.eval_scale=inf"], r"train\.eval_scale = inf must be a finite number"),
                               (["train.eval_weight=much"], r"train\.eval_weight = 'much' must be float")):
        with pytest.raises(ConfigError, match=message) as info:
            cfg.load_config(None, overrides)
        assert "\n" not in str(info.value) and str(info.value).startswith(f"--set {overrides[0]}: ")


@pytest.mark.parametrize("section, line, message", [
    ("optim", "lr = nan", "optim.lr = nan must be a finite number"),
    ("optim", "lr = inf", "optim.lr = inf must be a finite number"),
    ("optim", "momentum = 1.5", r"optim.momentum = 1.5 must be in \[0, 1\]"),
    ("optim", "weight_decay = -0.1", "optim.weight_decay = -0.1 must be >= 0"),
    ("train", "checkpoint_every_steps = -1", "train.checkpoint_every_steps = -1 must be >= 0"),
    ("train", "global_batch = -64", "train.global_batch = -64 must be >= 0"),
    ("train", "seed = -3", "train.seed = -3 must be >= 0"),
    ("data", "shuffle_buffer = 0", "data.shuffle_buffer = 0 must be positive"),
    ("model", "value_hidden = 0", "model.value_hidden = 0 must be positive"),
])
def test_numbers_that_cannot_work_name_the_file_and_key(tmp_path, section, line, message) -> None:
    preset = tmp_path / "bad.toml"
    preset.write_text(f"[{section}]\n{line}\n")
    with pytest.raises(ConfigError, match=f"^{preset}: {message}") as info:
        cfg.load_config(preset)
    assert "\n" not in str(info.value)


def test_every_numeric_key_has_a_range() -> None:
    numeric = {f"{s}.{f.name}" for s, c in cfg.SECTIONS.items() for f in dataclasses.fields(c)
               if f.type in ("int", "float", int, float)}
    assert numeric == set(cfg.RANGES)


def test_choices_and_ranges_are_written_on_their_fields() -> None:
    fields = {f"{s}.{f.name}": f for s, c in cfg.SECTIONS.items() for f in dataclasses.fields(c)}
    assert cfg.CHOICES and all(fields[key].metadata["choices"] == cfg.CHOICES[key] for key in cfg.CHOICES)
    assert all(fields[key].metadata["range"] == cfg.RANGES[key] for key in cfg.RANGES)
    textual = {key for key, f in fields.items() if f.type in ("str", str)}
    assert textual == set(cfg.CHOICES)                   # every str key has its choices


def test_presets_are_found_by_name_from_any_folder(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)                          # not the clone: train/ is not here
    small = cfg.PRESETS_DIR / "cpu-small.toml"
    for name in ("cpu-small", "cpu-small.toml", "train/cpu-small.toml"):
        assert cfg.find_preset(name) == small
    assert cfg.load_config("cpu-small") == cfg.load_config(small)
    names = sorted(p.stem for p in cfg.PRESETS_DIR.glob("*.toml"))
    assert "cpu-small" in names and cfg.preset_names() == names
    with pytest.raises(ConfigError) as typo:
        cfg.load_config("cpu-smal")
    assert str(typo.value) == (f"cpu-smal: no such config file; presets: {', '.join(names)} (--config NAME, or "
                               "a path to a .toml file)")
    with pytest.raises(ConfigError, match=r"^elsewhere/cpu-small.toml: no such config file$"):
        cfg.load_config("elsewhere/cpu-small.toml")      # a path in another folder is not a name


@pytest.mark.slow
def test_a_wheel_carries_the_presets_and_finds_them_by_name(tmp_path) -> None:
    import subprocess
    import sys

    from tests.support.paths import REPO

    build = subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation",
                            "-q", "-w", str(tmp_path / "wheel")], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next((tmp_path / "wheel").glob("shogi_dnn-*.whl"))
    site = tmp_path / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
                              str(wheel)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr[-2000:]
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from shogi_dnn import config; "
            "print(config.find_preset('cpu-small')); print(config.load_config('cpu-small').model.features)")
    found = subprocess.run([sys.executable, "-c", code, str(site)], capture_output=True, text=True, cwd=tmp_path,
                           env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, timeout=120)
    assert found.stdout.splitlines() == [str(site / "shogi_dnn" / "presets" / "cpu-small.toml"),
                                         cfg.load_config(cfg.PRESETS_DIR / "cpu-small.toml").model.features], \
        found.stderr[-2000:]
