"""One owner per fact: each fact below is written in one module of the package and
imported everywhere else. Read from the source: a second copy anywhere fails, naming its lines."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "shogi_dnn"

# fact -> (a regular expression matching a line that writes it, the one module allowed to write it)
FACTS: dict[str, tuple[str, str]] = {
    "the lock files' names": (r"^\s*\w*LOCK\w*\s*=\s*$", "folders/locks.py"),   # NAME = "<blanked>"
    "the piece values": (r"PROM_ROOK:\s*1395", "rules/pieces.py"),
    "the USI square -> index formula": (r"\*\s*9\s*\+\s*\(?9\s*-|\(int\(\w+\[\d\]\)\s*-\s*1\)\s*\*\s*9",
                                        "rules/position.py"),
    "the index -> USI square formula": (r"9\s*-\s*\w+\s*%\s*9|9\s*-\s*col\b", "rules/position.py"),
    "the batch's policy label key": (r"^KEY_POLICY\s*=", "training/schedule.py"),
    "the type of a step's metric sums": (r"^Sums\s*=", "training/losses.py"),
    "the seed-stream numbers": (r"SEED_\w+(,\s*[\w.]+)*\s*=\s*\d", "training/schedule.py"),
    "the CPU split into logical devices": (r"set_logical_device_configuration\(", "training/cluster.py"),
    "the piece numbers": (r"\bking\s*=\s*8\b|frozenset\(\((\d+,\s*)+\d+\)\)", "rules/pieces.py"),
}


@functools.cache
def _code_lines(path: Path) -> list[str]:
    """The lines of a module file with its plain string constants (docstrings, messages) blanked: prose that
    describes a fact is not a copy of it (f-strings stay: they compute)."""
    text = path.read_text(encoding="utf-8")
    lines = [line.encode("utf-8") for line in text.splitlines()]
    tree = ast.parse(text)
    in_fstring = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in in_fstring:
            for row in range(node.lineno - 1, node.end_lineno):
                begin = node.col_offset if row == node.lineno - 1 else 0
                end = node.end_col_offset if row == node.end_lineno - 1 else len(lines[row])
                lines[row] = lines[row][:begin] + b" " * (end - begin) + lines[row][end:]
    return [line.decode("utf-8", "replace").split("#")[0] for line in lines]


def _lines(pattern: str) -> list[str]:
    """'path:line' of every package line of code matching `pattern`."""
    regex = re.compile(pattern)
    hits = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for number, line in enumerate(_code_lines(path), start=1):
            if regex.search(line):
                hits.append(f"{path.relative_to(PACKAGE).as_posix()}:{number}")
    return hits


@pytest.mark.parametrize("fact", sorted(FACTS))
def test_each_fact_has_one_owner(fact: str) -> None:
    pattern, owner = FACTS[fact]
    hits = _lines(pattern)
    others = [hit for hit in hits if not hit.startswith(owner + ":")]
    assert not others, f"{fact} is written outside {owner}: {others}"


def test_the_patterns_find_the_owners() -> None:
    # The check itself: the owners' lines are found, so an empty result is not a broken pattern.
    for fact, (pattern, owner) in FACTS.items():
        if fact != "the piece numbers":              # written once as PieceType's members, by name
            assert _lines(pattern), f"{fact}: no line of {owner} matches {pattern!r}"
