"""training/memory.py: the parameter count is Keras' own, a model too big for the device is one line
before TensorFlow allocates anything (fast), and a run-time out-of-memory error is one line too."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shogi_dnn import errors
from shogi_dnn.config import Config, ModelConfig, OptimConfig, TrainConfig
from shogi_dnn.training import memory
from tests.support.cli import one_error_line
from tests.support.paths import REPO
from tests.support.shardgen import make_dataset

SMOKE = str(REPO / "train" / "cpu-smoke.toml")


@pytest.mark.parametrize("cfg", [
    ModelConfig(),
    ModelConfig(blocks=3, filters=16, value_head="pool", batch_norm="local", features="attacks"),
    ModelConfig(blocks=0, filters=8, value_hidden=5, batch_norm="sync"),
    ModelConfig(blocks=2, filters=24, value_hidden=7, mixed_precision="mixed_float16"),
    ModelConfig(blocks=1, filters=8, value_hidden=5, batch_norm="local", policy_head=True),
    ModelConfig(blocks=1, filters=12, value_head="pool", policy_head=True),
    ModelConfig(blocks=2, filters=12, value_head="pool", policy_head=True, block="se"),
    ModelConfig(blocks=2, filters=10, se_ratio=3, batch_norm="local", block="se"),
    ModelConfig(blocks=2, filters=12, value_head="pool", block="gpool", batch_norm="sync"),
])
def test_parameter_count_is_keras_count(cfg: ModelConfig) -> None:
    pytest.importorskip("tensorflow")
    from shogi_dnn.training import model as model_lib

    assert memory.PLANES == model_lib.INPUT_PLANES
    assert memory.POLICY_DIRECTIONS == model_lib.policy.NUM_DIRECTIONS
    assert memory.parameter_count(cfg) == model_lib.build_model(cfg).count_params()


def test_estimate_follows_the_stated_formula() -> None:
    cfg = ModelConfig(blocks=2, filters=10, value_hidden=4)
    n = memory.parameter_count(cfg)
    config = Config(model=cfg, optim=OptimConfig(optimizer="adam"), train=TrainConfig(micro_batches=2))
    estimate = memory.training_memory(config, 8)
    assert (estimate.weights, estimate.gradients, estimate.optimizer) == (4 * n, 8 * n, 8 * n)
    assert estimate.activations == 8 * 81 * (42 + 29 + 10 * (2 * 5 + 2)) * 4
    assert estimate.total == int(1.5 * (20 * n + estimate.activations))
    half = memory.training_memory(Config(model=ModelConfig(blocks=2, filters=10, value_hidden=4,
                                                           mixed_precision="mixed_bfloat16")), 8)
    assert half.activations * 2 == estimate.activations and half.optimizer == 4 * n


def test_parameter_limit_names_the_count() -> None:
    with pytest.raises(errors.ConfigError, match=r"model.filters = 15000, model.blocks = 2: 8,[0-9,]+ "
                                                 r"parameters, over the limit of 500,000,000; "
                                                 r"lower model.filters"):
        memory.check_model_size(ModelConfig(filters=15000))
    assert memory.check_model_size(ModelConfig(filters=192, blocks=10)) > 0      # train/home-1gpu.toml


def test_check_fits_says_what_to_lower() -> None:
    small = Config(model=ModelConfig(filters=64, blocks=2), train=TrainConfig(per_replica_batch=64))
    estimate = memory.check_fits(small, 64, 2**30, "test memory")
    assert estimate.total < 2**30
    with pytest.raises(errors.ConfigError, match="lower train.per_replica_batch"):
        memory.check_fits(small, 65536, 2**30, "test memory")            # the activations dominate
    wide = Config(model=ModelConfig(filters=2048, blocks=2))
    with pytest.raises(errors.ConfigError,
                       match="test memory has 1.0 GiB; lower model.filters or model.blocks"):
        memory.check_fits(wide, 1, 2**30, "test memory")                  # the weights dominate
    with pytest.raises(errors.ConfigError, match=r"x 4 towers"):             # CPU towers share the RAM
        memory.check_fits(small, 64, estimate.total * 3, "RAM", sharing=4)


def test_host_memory_reads_meminfo_and_cgroup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16000000 kB\nMemAvailable:    8000000 kB\n")
    monkeypatch.setattr(memory, "MEMINFO", meminfo)
    monkeypatch.setattr(memory, "CGROUP_LIMITS", (tmp_path / "absent",))
    assert memory.host_memory() == (8000000 * 1024, "available RAM (/proc/meminfo)")
    limit = tmp_path / "memory.max"
    limit.write_text("1073741824\n")
    monkeypatch.setattr(memory, "CGROUP_LIMITS", (limit,))
    assert memory.host_memory()[0] == 2**30
    limit.write_text("max\n")                                               # no limit set
    assert memory.host_memory()[0] == 8000000 * 1024
    monkeypatch.setattr(memory, "MEMINFO", tmp_path / "absent")            # not Linux: os.sysconf
    assert memory.host_memory()[1] == "RAM (os.sysconf)"


def test_train_refuses_an_oversized_model_before_tensorflow() -> None:
    """filters = 15000 once grew past 8 GB until the system killed it: now one line, TF never imported."""
    code = ("import sys\nfrom shogi_dnn.cli import main\n"
            f"rc = main(['train', '--config', {SMOKE!r}, '--data', '/nonexistent', "
            "'--run-dir', '/nonexistent/run', "
            "'--set', 'model.filters=15000'])\n"
            "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules, 'TensorFlow was imported'\n"
            "sys.exit(rc)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [(
        "shogi-dnn train: error: model.filters = 15000, model.blocks = 1: 4,055,732,658 parameters, over the "
        "limit of 500,000,000; lower model.filters (the count grows with its square) or model.blocks")]


def test_train_refuses_an_address_space_limit_before_tensorflow_and_leaves_no_run(tmp_path: Path) -> None:
    """Under `ulimit -v 2000000` TensorFlow aborted (exit 134) after the run folder was made: now one
    line naming the limit and the minimum, TensorFlow never imported, no folder left."""
    data = tmp_path / "data"
    make_dataset(data, train=[256], validation=[64])
    run_dir = tmp_path / "new" / "run"
    limit = 2_000_000 * 1024                                          # `ulimit -v 2000000` (KiB)

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    code = ("import sys\nfrom shogi_dnn.cli import main\n"
            f"rc = main(['train', '--config', {SMOKE!r}, '--data', {str(data)!r}, '--run-dir', {str(run_dir)!r}])\n"
            "assert 'tensorflow' not in sys.modules, 'TensorFlow was imported'\nsys.exit(rc)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                            preexec_fn=limited)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        "shogi-dnn train: error: address-space limit (ulimit -v) 2,000,000 KiB (1.9 GiB) is below the 3.0 GiB "
        "(3,145,728 KiB) train needs to start TensorFlow (measured: training.memory.MIN_ADDRESS_SPACE); raise it "
        "(ulimit -v unlimited)"]
    assert not (tmp_path / "new").exists()


def test_check_address_space_passes_without_a_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resource, "getrlimit", lambda _: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    memory.check_address_space("train")
    monkeypatch.setattr(resource, "getrlimit", lambda _: (memory.MIN_ADDRESS_SPACE, resource.RLIM_INFINITY))
    memory.check_address_space("train")
    monkeypatch.setattr(resource, "getrlimit", lambda _: (memory.MIN_ADDRESS_SPACE - 1, resource.RLIM_INFINITY))
    with pytest.raises(errors.ConfigError, match="is below the 3.0 GiB"):
        memory.check_address_space("train")


def test_train_refuses_a_batch_too_big_for_the_device_before_building(
        capsys: pytest.CaptureFixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the parameter limit but over the device's memory (here 1 GiB of host RAM): refused before
    the model is built or any of its memory allocated."""
    pytest.importorskip("tensorflow")
    from shogi_dnn.training import assembly

    # two sample groups of at least one update of 4,096 (checked before TensorFlow loads)
    make_dataset(tmp_path / "data", train=[4200, 4200], validation=[120], chunk_rows=256)
    monkeypatch.setattr(memory, "host_memory", lambda: (2**30, "available RAM (test)"))

    def never(*args, **kwargs):
        raise AssertionError("the model was built")

    monkeypatch.setattr(assembly, "build_model", never)
    started = time.perf_counter()
    line = one_error_line(capsys, ["train", "--config", SMOKE, "--data", str(tmp_path / "data"),
                                   "--run-dir", str(tmp_path / "run"), "--set", "model.filters=256",
                                   "--set", "model.blocks=6", "--set", "train.global_batch=0",
                                   "--set", "train.per_replica_batch=4096"])
    assert time.perf_counter() - started < 30
    assert "the model does not fit: model.filters = 256, model.blocks = 6, 7,180,898 parameters" in line
    assert "but available RAM (test) has 1.0 GiB; lower train.per_replica_batch" in line
    # nothing of a run written (the run folder holds at most train's writer lock, taken before TensorFlow)
    run = tmp_path / "run"
    assert not run.exists() or {p.name for p in run.iterdir()} <= {"writer.lock"}


@pytest.mark.parametrize("command", ["train", "evaluate", "predict"])
def test_out_of_memory_at_run_time_is_one_line(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch,
                                                command: str) -> None:
    """A ResourceExhaustedError (OOM) left at run time: one line naming it and what to lower."""
    tf = pytest.importorskip("tensorflow")
    from shogi_dnn import cli
    from shogi_dnn.commands import evaluate, predict, train

    def oom(argv):
        raise tf.errors.ResourceExhaustedError(None, None,
                                               "OOM when allocating tensor with shape[512,9,9,256]\n"
                                               "Hint: more lines")

    module = {"train": train, "evaluate": evaluate, "predict": predict}[command]
    monkeypatch.setattr(module, "main", oom)
    assert cli.main([command]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert err.startswith(f"shogi-dnn {command}: error: out of memory (OOM when allocating tensor with shape")
    assert ("lower train.per_replica_batch" in err) == (command == "train")


def test_other_errors_and_a_full_disk_are_not_memory() -> None:
    assert errors.is_out_of_memory(MemoryError())
    assert not errors.is_out_of_memory(ValueError("x"))
    tf = pytest.importorskip("tensorflow")
    assert not errors.is_out_of_memory(
        tf.errors.ResourceExhaustedError(None, None, "No space left on device"))
    assert errors.is_out_of_memory(
        tf.errors.InternalError(None, None, "CUDA_ERROR_OUT_OF_MEMORY: out of memory"))
