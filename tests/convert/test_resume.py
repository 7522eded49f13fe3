"""Resume checkpoints (convert/resume.py): a rerun after an interruption does not parse or encode the
pieces before the last checkpoint again, and still writes the same shards, manifest and report counts as
an uninterrupted run; a checkpoint that cannot be trusted is not used."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest

from shogi_dnn.convert import resume
from shogi_dnn.convert import worker as convert_worker
from shogi_dnn.convert.run import REPORT_NAME, STATE_NAME, ConvertSettings, run_convert
from shogi_dnn.dataset import shards
from shogi_dnn.dataset.features import EncodedGame
from tests.support.kifugen import write_corpus

SETTINGS = ConvertSettings(val_fraction=0.2, test_fraction=0.1, shard_size=120)
COUNTERS = ("files_read", "files_unreadable", "games_found", "converted", "skipped", "errors", "positions",
            "positions_with_eval", "games", "shards")


@pytest.fixture(autouse=True)
def checkpoint_after_every_shard(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs here take a second: a checkpoint after every piece that finished a shard, not 10 s apart."""
    monkeypatch.setattr(resume, "CHECKPOINT_SECONDS", 0.0)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Ten files of 1-4 games, and one of them copied again at the end (duplicates after any checkpoint)."""
    root = tmp_path_factory.mktemp("corpus")
    for i in range(10):
        write_corpus(root / f"part-{i}", seed=20 + i, files=1, per_file=1 + i % 4)
    shutil.copy(root / "part-1" / "games-00.csa", root / "part-9" / "zz-copy.csa")
    return root


def _reference(corpus: Path, out: Path, settings: ConvertSettings = SETTINGS) -> dict:
    run_convert([corpus], out, settings, workers=1)
    return json.loads((out / REPORT_NAME).read_text())


def _h5(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("*.h5"))}


def _interrupt_after(corpus: Path, out: Path, shard_count: int, settings: ConvertSettings = SETTINGS) -> None:
    seen: list[str] = []

    def stop(info: shards.ShardInfo) -> None:
        seen.append(info.path)
        if len(seen) == shard_count:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_convert([corpus], out, settings, workers=1, on_shard=stop)


def _count_pieces(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The pieces this process parses from now on (workers=1 runs them in-process)."""
    parsed: list[str] = []
    real = convert_worker.process_file

    def spy(source, *args):
        parsed.append(getattr(source, "name", "?"))
        return real(source, *args)

    monkeypatch.setattr(convert_worker, "process_file", spy)
    return parsed


@pytest.mark.parametrize("row_order", ["game", "shuffled"])
def test_resume_skips_converted_pieces_and_writes_the_same_dataset(corpus: Path, tmp_path: Path, row_order: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    settings = dataclasses.replace(SETTINGS, row_order=row_order)
    expected = _reference(corpus, tmp_path / "ref", settings)
    counted = _count_pieces(monkeypatch)
    _reference(corpus, tmp_path / "count", settings)
    all_pieces = list(counted)
    monkeypatch.undo()
    assert expected["shards"]["train"] >= 4 and expected["skipped"].get("duplicate") == 2
    out = tmp_path / "out"
    _interrupt_after(corpus, out, 4, settings)
    checkpoint = json.loads((out / STATE_NAME).read_text())["checkpoint"]
    assert checkpoint and (out / checkpoint["file"]).is_file() and (out / resume.DEDUP_NAME).is_file()
    parsed = _count_pieces(monkeypatch)
    report = run_convert([corpus], out, settings, workers=1)
    # the pieces before the checkpoint are not parsed again, the rest are, once
    assert parsed == all_pieces[checkpoint["pieces"]:] and checkpoint["pieces"] >= 3
    assert report.resumed["pieces"] == checkpoint["pieces"] and report.resumed["games"] > 0
    assert _h5(out) == _h5(tmp_path / "ref")
    assert shards.read_manifest(out).shards == shards.read_manifest(tmp_path / "ref").shards
    assert shards.read_manifest(out).totals == shards.read_manifest(tmp_path / "ref").totals
    saved = json.loads((out / REPORT_NAME).read_text())
    assert {k: saved[k] for k in COUNTERS} == {k: expected[k] for k in COUNTERS}
    assert "resumed after" in report.summary()
    # a finished conversion keeps no checkpoint files
    assert not [p for p in out.iterdir() if resume.is_checkpoint_file(p.name)]
    assert json.loads((out / STATE_NAME).read_text())["checkpoint"] is None


def test_resume_with_another_worker_count(corpus: Path, tmp_path: Path) -> None:
    _reference(corpus, tmp_path / "ref")
    out = tmp_path / "out"
    _interrupt_after(corpus, out, 3)
    report = run_convert([corpus], out, SETTINGS, workers=2)
    assert report.resumed and _h5(out) == _h5(tmp_path / "ref")


def test_a_second_interruption_resumes_from_the_later_checkpoint(corpus: Path, tmp_path: Path) -> None:
    _reference(corpus, tmp_path / "ref")
    out = tmp_path / "out"
    _interrupt_after(corpus, out, 2)
    first = json.loads((out / STATE_NAME).read_text())["checkpoint"]
    _interrupt_after(corpus, out, 3)           # the resumed run writes 3 more shards, then stops
    second = json.loads((out / STATE_NAME).read_text())["checkpoint"]
    assert second["pieces"] > first["pieces"] and not (out / first["file"]).exists()
    report = run_convert([corpus], out, SETTINGS, workers=1)
    assert report.resumed["pieces"] == second["pieces"] and _h5(out) == _h5(tmp_path / "ref")


@pytest.mark.parametrize("damage", ["payload", "payload-missing", "shard", "dedup-short", "code"])
def test_an_untrustworthy_checkpoint_is_not_used(corpus: Path, tmp_path: Path, damage: str,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    _reference(corpus, tmp_path / "ref")
    out = tmp_path / "out"
    _interrupt_after(corpus, out, 4)
    checkpoint = json.loads((out / STATE_NAME).read_text())["checkpoint"]
    payload = out / checkpoint["file"]
    if damage == "payload":
        data = bytearray(payload.read_bytes())
        data[len(data) // 2] ^= 0x10
        payload.write_bytes(bytes(data))
    elif damage == "payload-missing":
        payload.unlink()
    elif damage == "shard":
        first = sorted(out.glob("train-*.h5"))[0]
        first.write_bytes(first.read_bytes()[:-10] + b"0123456789")
    elif damage == "dedup-short":
        dedup = out / resume.DEDUP_NAME
        dedup.write_bytes(dedup.read_bytes()[:-3])
    else:
        monkeypatch.setattr(resume, "code_digest", lambda: "another version")
    parsed = _count_pieces(monkeypatch)
    report = run_convert([corpus], out, SETTINGS, workers=1)
    assert not report.resumed and parsed and "resume checkpoint not used" in caplog.text
    assert _h5(out) == _h5(tmp_path / "ref")


def test_bytes_a_kill_left_after_the_valid_dedup_keys_are_ignored(corpus: Path, tmp_path: Path) -> None:
    _reference(corpus, tmp_path / "ref")
    out = tmp_path / "out"
    _interrupt_after(corpus, out, 4)
    with open(out / resume.DEDUP_NAME, "ab") as f:           # a kill between appending keys and the state
        f.write(b"\xff" * 8 * 5 + b"\x01\x02")
    report = run_convert([corpus], out, SETTINGS, workers=1)
    assert report.resumed and report.skipped["duplicate"] == 2 and _h5(out) == _h5(tmp_path / "ref")


def test_payload_matches_its_schema_table(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    _interrupt_after(corpus, out, 4)
    checkpoint = json.loads((out / STATE_NAME).read_text())["checkpoint"]
    with np.load(out / checkpoint["file"], allow_pickle=False) as npz:
        arrays = {key: npz[key] for key in npz.files}
    assert set(arrays) == set(resume.PAYLOAD_SCHEMA)
    games = len(arrays["game_id"])
    assert games > 0 and arrays["key"].shape == (games, 20)
    for key, (shape, dtype, _) in resume.PAYLOAD_SCHEMA.items():
        if dtype not in ("as EncodedGame",):
            assert arrays[key].dtype == np.dtype(dtype), key
        if shape == "[G]":
            assert arrays[key].shape == (games,), key
    positions = int(arrays["length"].sum())
    fields = [f.name for f in dataclasses.fields(EncodedGame) if f.default is dataclasses.MISSING]
    assert {f"pos_{f}" for f in fields} <= set(arrays)
    assert all(len(arrays[f"pos_{f}"]) == positions for f in fields)
    assert arrays["pos_board"].shape[1:] == (81,) and arrays["pos_hands"].shape[1:] == (14,)
    report = json.loads(arrays["report"].tobytes())
    assert report["converted"] >= games and len(json.loads(arrays["rows"].tobytes())) == games
    written = [s["path"] for s in json.loads(arrays["written"].tobytes())]
    on_disk = {p.name for p in out.glob("*.h5")}      # and the shard written in the interrupted piece
    assert len(written) == 3 and set(written) < on_disk and len(on_disk) == 4
    assert int(arrays["version"]) == resume.CHECKPOINT_VERSION


def test_other_inputs_do_not_resume(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    _interrupt_after(corpus, out, 3)
    with pytest.raises(Exception, match="--overwrite"):
        run_convert([corpus / "part-1"], out, SETTINGS, workers=1)
    run_convert([corpus / "part-1"], out, SETTINGS, workers=1, overwrite=True)
    assert not [p for p in out.iterdir() if resume.is_checkpoint_file(p.name)]


def test_ctrl_c_between_pieces_saves_a_checkpoint_of_everything_added(corpus: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _reference(corpus, tmp_path / "ref")
    out = tmp_path / "out"
    real, calls = convert_worker.process_file, []

    def interrupted(source, *args):
        calls.append(source)
        if len(calls) == 9:                      # Ctrl-C while the 9th piece is being parsed
            os.kill(os.getpid(), signal.SIGINT)
        return real(source, *args)

    monkeypatch.setattr(convert_worker, "process_file", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_convert([corpus], out, SETTINGS, workers=1)
    checkpoint = json.loads((out / STATE_NAME).read_text())["checkpoint"]
    assert checkpoint["pieces"] == 8                 # every piece added before the interruption
    monkeypatch.setattr(convert_worker, "process_file", real)
    parsed = _count_pieces(monkeypatch)
    report = run_convert([corpus], out, SETTINGS, workers=1)
    all_pieces = json.loads((tmp_path / "ref" / REPORT_NAME).read_text())["files_read"]   # one piece a file
    assert report.resumed["pieces"] == 8 and len(parsed) == all_pieces - 8 == 3
    assert _h5(out) == _h5(tmp_path / "ref")


def test_checkpoints_are_at_least_checkpoint_seconds_apart(corpus: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    saved: list[int] = []
    real = resume.Checkpointer.save
    monkeypatch.setattr(resume.Checkpointer, "save", lambda self, pieces, *a: (saved.append(pieces),
                                                                               real(self, pieces, *a)))
    run_convert([corpus], tmp_path / "every", SETTINGS, workers=1)
    every = list(saved)
    saved.clear()
    monkeypatch.setattr(resume, "CHECKPOINT_SECONDS", 3600.0)
    run_convert([corpus], tmp_path / "hourly", SETTINGS, workers=1)
    assert len(every) >= 4 and saved == every[:1]         # the first, then none within the hour
    assert _h5(tmp_path / "every") == _h5(tmp_path / "hourly")
