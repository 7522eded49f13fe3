"""Mutation fuzzing of the record readers: every input gives records or the project's own errors, never
another exception and never a hang. Seeded mutations (byte flips, truncations, digit and token changes,
spliced lines) of the real records in tests/data and, when present, ../shared/kifu. A short run in the
suite; SHOGI_DNN_FUZZ=N runs N inputs per seed (e.g. 100000) for a longer search."""

from __future__ import annotations

import os
import random
import signal

import pytest

from shogi_dnn.errors import ShogiDnnError
from shogi_dnn.kifu import RECORD_SUFFIXES, read_record_bytes
from shogi_dnn.rules import BACKEND_ENV, available_backends
from tests.support.paths import DATA, SHARED

INPUTS = int(os.environ.get("SHOGI_DNN_FUZZ", "300"))
HANG_SECONDS = 20              # one input taking this long is a hang (the largest record reads in < 1 s)
TOKENS = (b"(09)", b"(00)", b"(99)", b"(10)", b"0", b"9", b"10", b"+", b"-", b"%TORYO", b"\x81", b"\x82\xa0",
          b"\xff", b"\n", b"P1", b"PI", b"'", b"*", b"\x93\xaf", b"99", b"OU", b"TO", b"\r\n", b"\t", b"/",
          "同".encode(), "成".encode(), "打".encode(), "投了".encode(), b"'** 123", "*評価値 -45".encode())


def corpus() -> list[tuple[str, bytes]]:
    roots = [DATA] + ([SHARED / "kifu"] if (SHARED / "kifu").is_dir() else [])
    files = sorted(p for root in roots for p in root.rglob("*")
                   if p.is_file() and p.suffix.lower() in RECORD_SUFFIXES and p.stat().st_size < 200_000)
    return [(p.name, p.read_bytes()) for p in files]


def mutate(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data or b"x")
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(out) or 1)
        op = rng.randrange(6)
        if op == 0 and out:
            out[i] = rng.randrange(256)
        elif op == 1:
            del out[i:i + rng.randint(1, 20)]
        elif op == 2:
            out[i:i] = rng.choice(TOKENS)
        elif op == 3 and out:
            out[i:i + 1] = str(rng.randrange(10)).encode() if chr(out[i]).isdigit() else rng.choice(TOKENS)
        elif op == 4:
            del out[i:]
        else:
            lines = bytes(out).split(b"\n")
            lines.insert(rng.randrange(len(lines)), lines[rng.randrange(len(lines))])
            out = bytearray(b"\n".join(lines))
    return bytes(out)


def _hang(signum, frame):
    raise TimeoutError(f"one input took over {HANG_SECONDS} s")


@pytest.mark.parametrize("backend", available_backends())
def test_readers_raise_only_project_errors(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BACKEND_ENV, backend)
    files = corpus()
    rng = random.Random(2026)
    previous = signal.signal(signal.SIGALRM, _hang)
    try:
        for n in range(INPUTS):
            name, data = rng.choice(files)
            mutated = mutate(data, rng)
            signal.alarm(HANG_SECONDS)
            try:
                for _ in read_record_bytes(mutated, name):
                    pass
            except ShogiDnnError:
                pass
            except Exception as exc:       # noqa: BLE001 - the point: anything else is a bug
                pytest.fail(f"input {n} ({name} mutated, {len(mutated)} bytes): {type(exc).__name__}: {exc}\n"
                            f"{mutated[:400]!r}")
            finally:
                signal.alarm(0)
    finally:
        signal.signal(signal.SIGALRM, previous)
