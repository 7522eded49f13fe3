"""Prose density of a Python package: docstring characters over the rest of the source, by package.

    python scripts/prose_density.py shogi_dnn                          # the table
    python scripts/prose_density.py shogi_dnn --check scripts/prose_baseline.json
    python scripts/prose_density.py shogi_dnn --write-baseline scripts/prose_baseline.json

Docstrings are the module, class and function docstrings found by Python's ast (their text); the rest is
the file less those characters (code, comments, blank space). A package is a folder directly under the
root; the root's own modules count as "(top)". `--check` exits 1 naming every package whose density is
above the baseline's (`make check` runs it: the baseline only goes down; lower it with --write-baseline).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

_DOCUMENTED = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
TOP = "(top)"
TOLERANCE = 0.0005          # a baseline is written to 4 decimals


@dataclass(frozen=True)
class Density:
    """Docstring characters and the rest of the source's characters."""

    doc: int
    rest: int

    @property
    def ratio(self) -> float:
        return self.doc / self.rest if self.rest else 0.0

    def __add__(self, other: Density) -> Density:
        return Density(self.doc + other.doc, self.rest + other.rest)


def measure_source(src: str) -> Density:
    """The docstring and rest counts of one module's source."""
    doc = 0
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, _DOCUMENTED) and node.body:
            first = node.body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                doc += len(first.value.value)
    return Density(doc, len(src) - doc)


def measure(root: Path) -> dict[str, Density]:
    """Package name (a folder under `root`, or TOP) -> the sum over its ``*.py`` files."""
    out: dict[str, Density] = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        package = parts[0] if len(parts) > 1 else TOP
        out[package] = out.get(package, Density(0, 0)) + measure_source(path.read_text(encoding="utf-8"))
    return out


def over_baseline(densities: dict[str, Density], baseline: dict[str, float]) -> list[str]:
    """One line per package above its baseline density (a package new to the baseline is held to the
    whole root's)."""
    whole = sum(densities.values(), Density(0, 0)).ratio
    limit_all = baseline.get("all", whole)
    lines = [f"{name}: prose density {d.ratio:.4f} is above its baseline {baseline.get(name, limit_all):.4f}"
             for name, d in sorted(densities.items()) if d.ratio > baseline.get(name, limit_all) + TOLERANCE]
    if whole > limit_all + TOLERANCE:
        lines.append(f"all: prose density {whole:.4f} is above its baseline {limit_all:.4f}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table, or check / write a baseline; 2 on a missing folder, bad source or baseline."""
    parser = argparse.ArgumentParser(prog="prose_density.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("root", help="the package folder, e.g. shogi_dnn")
    parser.add_argument("--check", metavar="BASELINE", help="exit 1 if a package is above this JSON's figure")
    parser.add_argument("--write-baseline", metavar="BASELINE", help="write today's figures there")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    root = Path(args.root)
    if not root.is_dir():
        print(f"prose_density: {root}: not a folder", file=sys.stderr)
        return 2
    try:
        densities = measure(root)
    except (SyntaxError, UnicodeDecodeError) as exc:
        print(f"prose_density: {root}: cannot parse: {exc}", file=sys.stderr)
        return 2
    whole = sum(densities.values(), Density(0, 0))
    figures = {name: round(d.ratio, 4) for name, d in sorted(densities.items())} | {"all": round(whole.ratio, 4)}
    if args.write_baseline:
        Path(args.write_baseline).write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    if args.check:
        try:
            baseline = json.loads(Path(args.check).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            print(f"prose_density: {args.check}: not a readable baseline ({exc})", file=sys.stderr)
            return 2
        problems = over_baseline(densities, baseline)
        for line in problems:
            print(f"prose_density: {line}", file=sys.stderr)
        return 1 if problems else 0
    for name, d in sorted(densities.items()):
        print(f"{name:<12} docstrings {d.doc:>8,}  rest {d.rest:>9,}  {d.ratio:.3f}")
    print(f"{'all':<12} docstrings {whole.doc:>8,}  rest {whole.rest:>9,}  {whole.ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
