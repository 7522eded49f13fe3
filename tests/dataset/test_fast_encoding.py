"""The C extension (fast_encoding, rules.native) and the paths without it give the same arrays, the same
errors and the same shard bytes: features.encode_game, features.pack_positions and a whole convert."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import numpy as np
import pytest

from shogi_dnn.convert.run import ConvertSettings, run_convert
from shogi_dnn.dataset import fast_encoding, features
from shogi_dnn.errors import KifuError
from shogi_dnn.kifu import read_record_bytes
from shogi_dnn.rules import native
from tests.support.paths import DATA, SHARED

pytestmark = pytest.mark.skipif(not fast_encoding.AVAILABLE, reason="the C extension is not built")
REQUIRED = [f.name for f in dataclasses.fields(features.EncodedGame) if f.default is dataclasses.MISSING]


def _records() -> list:
    files = sorted((DATA / "csa").rglob("*.csa")) + sorted((DATA / "kif").rglob("*.kif"))
    if SHARED.is_dir():
        files += sorted((SHARED / "kifu-gnushogi").glob("*.csa"))[:1]
    records = [r for path in files for r in read_record_bytes(path.read_bytes(), str(path))
               if not isinstance(r, KifuError) and r.has_result]
    assert len(records) >= 20
    return records


def test_encode_game_gives_the_same_arrays_with_and_without_the_extension(
        monkeypatch: pytest.MonkeyPatch) -> None:
    records = _records()
    compiled = [features.encode_game(r) for r in records]
    monkeypatch.setattr(fast_encoding, "AVAILABLE", False)
    reference = [features.encode_game(r) for r in records]
    handicapped = 0
    for record, fast, slow in zip(records, compiled, reference):
        handicapped += not record.start_sfen.startswith("lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/")
        for name in REQUIRED:
            a, b = getattr(fast, name), getattr(slow, name)
            assert a.dtype == b.dtype and np.array_equal(a, b), (record.source, name)
        # the encoder's packed rows are what pack_positions (numpy path here) makes of its boards
        assert fast.pieces is not None and fast.promoted is not None
        pieces, promoted = features.pack_positions(fast.board, fast.hands)
        assert np.array_equal(fast.pieces, pieces) and np.array_equal(fast.promoted, promoted), record.source
    assert handicapped >= 1


def _error(board: np.ndarray, hands: np.ndarray) -> str:
    with pytest.raises(ValueError) as caught:
        features.pack_positions(board, hands)
    return str(caught.value)


def test_pack_positions_refuses_the_same_rows_with_the_same_words(monkeypatch: pytest.MonkeyPatch) -> None:
    board = features.encode_game(_records()[0]).board[:3].copy()
    hands = np.zeros((3, 14), np.uint8)
    bad_code, overfull, too_many_in_hand = board.copy(), board.copy(), hands.copy()
    bad_code[1, 40] = 29                                    # no such piece code
    overfull[2, np.flatnonzero(overfull[2] == 0)[:3]] = 8   # three more own kings
    too_many_in_hand[0, 0] = 19                             # 19 own pawns in hand: more than a set
    cases = [(bad_code, hands), (overfull, hands), (board, too_many_in_hand)]
    compiled = [_error(b, h) for b, h in cases]
    monkeypatch.setattr(fast_encoding, "AVAILABLE", False)
    assert [_error(b, h) for b, h in cases] == compiled
    assert compiled[0].startswith("row 1: a piece code") and "kind K" in compiled[1] and "kind P" in compiled[2]


def _shards(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("*.h5"))}


def test_a_conversion_writes_the_same_bytes_without_the_extension(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = [DATA / "csa", DATA / "kif"]
    settings = ConvertSettings(val_fraction=0.3, shard_size=200)
    run_convert(inputs, tmp_path / "compiled", settings, workers=1)
    monkeypatch.setattr(fast_encoding, "AVAILABLE", False)
    for kernel in ("fourfold_rows", "in_check_rows"):          # the repetition check's kernels too
        monkeypatch.setattr(fast_encoding, kernel, None)
    monkeypatch.setenv(native.NATIVE_ENV, "0")
    run_convert(inputs, tmp_path / "reference", settings, workers=1, backend="python-shogi")
    compiled = _shards(tmp_path / "compiled")
    assert len(compiled) >= 2 and compiled == _shards(tmp_path / "reference")
