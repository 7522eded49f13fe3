"""wording.progress_bar, the one owner of progress bars: tqdm on a terminal, whole lines without '\\r' in
a redirected log; and evaluate says what it is doing before TensorFlow loads."""

from __future__ import annotations

import ast
import io
import logging
import sys
from pathlib import Path

import pytest

from shogi_dnn import wording

PACKAGE = Path(__file__).resolve().parent.parent / "shogi_dnn"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_redirected_bar_prints_whole_lines_without_carriage_returns(monkeypatch) -> None:
    monkeypatch.setattr(wording, "PLAIN_EVERY_S", 0.0)
    log = io.StringIO()
    items = list(wording.progress_bar(range(4), total=4, desc="evaluate", unit="batch", stream=log))
    assert items == [0, 1, 2, 3]
    text = log.getvalue()
    assert "\r" not in text and text.endswith("\n")
    lines = text.splitlines()
    want = [f"evaluate: {n}/4 batch ({25 * n}%)" for n in (1, 2, 3, 4)]
    assert [line.split(",")[0] for line in lines] == want


def test_a_redirected_bar_is_quiet_between_intervals_and_says_the_end() -> None:
    log = io.StringIO()
    with wording.progress_bar(total=1000, unit="file", stream=log) as bar:
        for _ in range(1000):
            bar.update()
        bar.set_postfix(games=12, refresh=False)
    assert log.getvalue().splitlines() == [log.getvalue().strip()]
    assert log.getvalue().startswith("1,000/1,000 file (100%), ")
    assert log.getvalue().rstrip().endswith("games=12")


def test_silent_and_disabled_bars_write_nothing_off_a_terminal() -> None:
    log = io.StringIO()
    for kwargs in ({"redirected": "silent"}, {"enabled": False}):
        with wording.progress_bar(total=3, stream=log, **kwargs) as bar:
            bar.update(3)
    assert log.getvalue() == ""


def test_a_terminal_gets_tqdm() -> None:
    from tqdm import tqdm
    terminal = _Terminal()
    with wording.progress_bar(total=3, desc="x", stream=terminal) as bar:
        assert isinstance(bar, tqdm)
        bar.update(3)
    assert "\r" in terminal.getvalue()


def test_every_bar_of_the_package_is_made_by_progress_bar() -> None:
    makers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "wording.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tqdm"):
                makers.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
            named = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            if named and node.value.id == "tqdm":
                makers.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not makers, f"progress bars made outside wording.progress_bar: {makers}"


def test_evaluate_says_what_it_does_before_loading_tensorflow(tmp_path, caplog, monkeypatch) -> None:
    import contextlib
    import types

    import shogi_dnn.analysis
    from shogi_dnn.commands import evaluate

    class Loaded(Exception):
        """Raised where TensorFlow and the model would start loading."""

    @contextlib.contextmanager
    def checked_split(*args, **kwargs):
        yield types.SimpleNamespace(split="test")        # the split the dataset has, picked by the check

    def evaluate_checked(*args, **kwargs):
        raise Loaded

    monkeypatch.setattr(evaluate.data_check, "checked_split", checked_split)
    fake = types.SimpleNamespace(evaluate_checked=evaluate_checked)
    monkeypatch.setitem(sys.modules, "shogi_dnn.analysis.evaluate", fake)
    monkeypatch.setattr(shogi_dnn.analysis, "evaluate", fake, raising=False)   # imported by an earlier test
    caplog.set_level(logging.INFO)
    with pytest.raises(Loaded):
        evaluate.main(["--run-dir", str(tmp_path / "run")])
    first = caplog.records[0].getMessage()
    assert first.startswith(f"evaluate: {tmp_path / 'run'} and its data checked; loading TensorFlow")
    assert "fitting the baselines" in first and "scoring the test split" in first
