"""The package's import rules (docs/architecture.md): dependencies point down the layers, there is no
import cycle, and the data side never imports TensorFlow. Read from the source (every import statement,
including those inside functions, and every string naming a module, as importlib takes it; the C
extensions are modules too, named by their sources), and checked once more by importing the data side
for real. Also: no source line is longer than pyproject.toml's line-length."""

from __future__ import annotations

import ast
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "shogi_dnn"

# Layers, bottom first: a module may import its own layer or lower ones, never a higher one. Every
# module is named by its own package or module path: the package itself ("shogi_dnn") is a layer only for
# its __init__, so a new top-level module or folder that no layer lists fails test_every_module_has_a_layer.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("shogi_dnn", "shogi_dnn.errors", "shogi_dnn.config", "shogi_dnn.wording"),
    ("shogi_dnn.folders",           # run and dataset folders on disk: run files, locks, the atomic write
     "shogi_dnn.packaged"),         # the network shipped with the package (finds and checks its files)
    ("shogi_dnn.plotting",),        # figures and fonts; its PNGs go through the atomic write below
    ("shogi_dnn.rules",),
    ("shogi_dnn.kifu",),
    ("shogi_dnn.dataset",),         # the dataset format and what is computed from it
    ("shogi_dnn.convert", "shogi_dnn.annotate",      # annotate: a USI engine's labels for a dataset
     "shogi_dnn.selfplay"),                          # selfplay: its games (annotate's USI client)
    ("shogi_dnn.training",),
    ("shogi_dnn.analysis",),
    ("shogi_dnn.engine", "shogi_dnn.bench"),     # bench/games.py runs engine/arena.py; engine never
                                                 # imports bench
    ("shogi_dnn.commands",),
    ("shogi_dnn.cli", "shogi_dnn.__main__"),
)
# What may stay at the top of the package: the CLI, config, errors, wording and plotting.
TOP_LEVEL = {"shogi_dnn", "shogi_dnn.__main__", "shogi_dnn.cli", "shogi_dnn.config", "shogi_dnn.errors",
             "shogi_dnn.wording", "shogi_dnn.plotting"}
# The data side: fast to start and to test, never TensorFlow (nor Keras, nor the training side).
DATA_SIDE = ("shogi_dnn.rules", "shogi_dnn.kifu", "shogi_dnn.dataset", "shogi_dnn.folders", "shogi_dnn.packaged",
             "shogi_dnn.convert", "shogi_dnn.annotate", "shogi_dnn.selfplay", "shogi_dnn.analysis.inspect",
             "shogi_dnn.analysis.report",
             "shogi_dnn.analysis.report_plots", "shogi_dnn.analysis.report_checks",
             "shogi_dnn.analysis.tower_diagnosis", "shogi_dnn.analysis.eval_rows",
             "shogi_dnn.analysis.summary", "shogi_dnn.analysis.tactics", "shogi_dnn.analysis.data_check",
             "shogi_dnn.analysis.scoring", "shogi_dnn.training.schedule", "shogi_dnn.training.throughput",
             "shogi_dnn.training.plan", "shogi_dnn.training.memory", "shogi_dnn.training.gpus",
             "shogi_dnn.plotting")
TENSORFLOW = ("tensorflow", "keras", "tensorboard")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
# The C extensions (setup.py), by their sources: they import no module of the package.
C_MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.c"))}
MODULES.update(C_MODULES)
# The upward imports the layers allow, each with its reason (none: nothing may point up).
UPWARD_ALLOWED: dict[tuple[str, str], str] = {}


def imports_of(name: str) -> set[str]:
    """Every module `name` imports (package-internal ones resolved to modules, external ones by their
    top-level name), from module level and from inside functions."""
    if name in C_MODULES:
        return set()
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in MODULES:
            found.add(node.value)                   # importlib.import_module("shogi_dnn....")
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from shogi_dnn.training import steps` imports the module shogi_dnn.training.steps;
            # `from shogi_dnn.rules import BLACK` the package shogi_dnn.rules itself.
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in MODULES else node.module)
    internal = {m for m in found if m in MODULES}
    external = {m.split(".")[0] for m in found if not m.startswith("shogi_dnn")}
    return internal | external


GRAPH = {name: imports_of(name) for name in MODULES}


def layer_of(name: str) -> int:
    """The layer of a module: the longest listed prefix other than the bare package (which names only
    shogi_dnn/__init__.py). Raises LookupError for a module that no layer places."""
    prefixes = [p for layer in LAYERS for p in layer
                if name == p or (p != "shogi_dnn" and name.startswith(p + "."))]
    if not prefixes:
        raise LookupError(f"{name} is in no layer of docs/architecture.md (add it to LAYERS)")
    best = max(prefixes, key=len)
    return next(i for i, layer in enumerate(LAYERS) if best in layer)


def test_every_module_has_a_layer() -> None:
    for name in MODULES:
        layer_of(name)


def test_an_unplaced_module_has_no_layer() -> None:
    with pytest.raises(LookupError, match="shogi_dnn.utils"):
        layer_of("shogi_dnn.utils")
    with pytest.raises(LookupError, match="shogi_dnn.newfolder.thing"):
        layer_of("shogi_dnn.newfolder.thing")


def test_the_top_level_holds_only_the_cli_config_errors_wording_and_plotting() -> None:
    top = {name for name in MODULES if name.count(".") <= 1 and not (PACKAGE / name.split(".")[-1]).is_dir()}
    assert top <= TOP_LEVEL, f"loose modules at the top: {sorted(top - TOP_LEVEL)}"
    assert len(top) <= 8


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_point_down(name: str) -> None:
    upward = [m for m in GRAPH[name] if m in MODULES and layer_of(m) > layer_of(name)
              and (name, m) not in UPWARD_ALLOWED]
    assert not upward, f"{name} (layer {layer_of(name)}) imports higher layers: {upward}"


def test_each_allowed_upward_import_is_still_there() -> None:
    for importer, imported in UPWARD_ALLOWED:
        assert imported in GRAPH[importer] and layer_of(imported) > layer_of(importer), \
            f"{importer} -> {imported} is no longer an upward import: drop it from UPWARD_ALLOWED"


def test_c_extensions_are_seen() -> None:
    # C extensions are modules of their folder's layer, and an import of one (a from-import of its
    # names, or the extension itself) is an edge of the graph.
    assert {"shogi_dnn.dataset._encode", "shogi_dnn.rules._native"} <= set(C_MODULES)
    assert "shogi_dnn.dataset._encode" in GRAPH["shogi_dnn.dataset.fast_encoding"]
    assert "shogi_dnn.rules._native" in GRAPH["shogi_dnn.rules.native"]
    assert layer_of("shogi_dnn.rules._native") < layer_of("shogi_dnn.dataset._encode")


def test_no_import_cycle() -> None:
    state: dict[str, int] = {}          # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        stack.append(name)
        for dep in sorted(GRAPH[name]):
            if dep not in MODULES or dep == name:
                continue
            if state.get(dep) == 1:
                cycle = stack[stack.index(dep):] + [dep]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep)
        stack.pop()
        state[name] = 2

    for name in sorted(MODULES):
        if name not in state:
            visit(name)


def closure(name: str) -> set[str]:
    seen, todo = set(), [name]
    while todo:
        for dep in GRAPH.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.startswith(DATA_SIDE)))
def test_data_side_never_reaches_tensorflow(name: str) -> None:
    reached = closure(name)
    bad = sorted(m for m in reached if m in TENSORFLOW
                 or (m.startswith("shogi_dnn.training") and not m.startswith(DATA_SIDE)))
    assert not bad, f"{name} reaches {bad}"


def test_data_side_imports_without_tensorflow() -> None:
    names = sorted(n for n in MODULES if n.startswith(DATA_SIDE) and n not in C_MODULES)   # optional
    code = (f"import importlib, sys\nfor n in {names!r}: importlib.import_module(n)\n"
            f"print(sorted(set({TENSORFLOW!r}) & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# Data-side test files: collecting them (and running one) never imports TensorFlow (tests/conftest.py
# splits the CPU only once something imports it).
DATA_SIDE_TESTS = ("tests/rules", "tests/kifu", "tests/convert", "tests/dataset/test_shards.py",
                   "tests/dataset/test_features.py", "tests/dataset/test_fast_encoding.py",
                   "tests/dataset/test_identity.py", "tests/folders/test_locks.py", "tests/test_plotting.py",
                   "tests/test_datasets.py", "tests/folders/test_atomic_write.py", "tests/analysis/test_inspect.py",
                   "tests/analysis/test_scoring.py")


def test_data_side_tests_run_without_tensorflow() -> None:
    args = ["-q", "-p", "no:cacheprovider"]
    code = (f"import sys, pytest\n"
            f"collected = pytest.main({[*args, '--co', *DATA_SIDE_TESTS]!r})\n"
            f"ran = pytest.main({[*args, 'tests/kifu/test_sfen.py']!r})\n"
            f"print('loaded', sorted(set({TENSORFLOW!r}) & set(sys.modules)))\n"
            f"sys.exit(int(collected) or int(ran))")
    done = subprocess.run([sys.executable, "-c", code], cwd=PACKAGE.parent, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "loaded []"


def test_the_rules_reject_an_upward_import_and_a_cycle() -> None:
    # The checks themselves: a data module importing training is caught, and so is a two-module cycle.
    GRAPH["shogi_dnn.kifu.record"].add("shogi_dnn.training.model")
    GRAPH["shogi_dnn.errors"].add("shogi_dnn.config")
    try:
        with pytest.raises(AssertionError, match="imports higher layers"):
            test_imports_point_down("shogi_dnn.kifu.record")
        with pytest.raises(AssertionError, match="import cycle"):
            test_no_import_cycle()
        with pytest.raises(AssertionError, match="reaches"):
            test_data_side_never_reaches_tensorflow("shogi_dnn.kifu.record")
    finally:
        GRAPH["shogi_dnn.kifu.record"].discard("shogi_dnn.training.model")
        GRAPH["shogi_dnn.errors"].discard("shogi_dnn.config")


def _folder_map() -> dict[str, set[str]]:
    """docs/architecture.md's folder map: folder ('' for the top) -> the module files it names there."""
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = text.split("## Folder map", 1)[1].split("```", 2)[1]
    named: dict[str, set[str]] = {}
    folder = ""
    for line in block.splitlines()[2:]:
        head = line[:15]
        if line.startswith("  ") and head.strip().endswith("/"):
            folder = head.strip().rstrip("/")
        elif line.startswith("  ") and not line.startswith("   ") and head.strip():
            folder = ""
        for word in line[2:].split():
            if word.endswith((".py", ".c")):
                named.setdefault(folder, set()).add(word)
    return named


def test_the_folder_map_names_every_module_where_it_lives() -> None:
    named = _folder_map()
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")) + sorted(PACKAGE.rglob("*.c")):
        rel = path.relative_to(PACKAGE)
        if rel.name == "__init__.py" and len(rel.parts) > 1:
            continue
        folder = "/".join(rel.parts[:-1])
        if rel.name not in named.get(folder, set()):
            missing.append(str(rel))
    assert not missing, f"docs/architecture.md's folder map does not name: {missing}"


# Files allowed lines over the limit (none: every module of the package is within it).
LONG_LINES_ALLOWED: frozenset[str] = frozenset()


def _line_width(line: str) -> int:
    """A line's length as ruff's E501 counts it: East Asian wide and full-width characters count 2."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)


def test_no_line_over_the_configured_length() -> None:
    try:
        import tomllib
    except ModuleNotFoundError:     # Python 3.10: pytest's own dependency
        import tomli as tomllib
    pyproject = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))
    limit = pyproject["tool"]["ruff"]["line-length"]
    too_long = []
    for path in sorted(PACKAGE.rglob("*.py")) + sorted(PACKAGE.rglob("*.c")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in LONG_LINES_ALLOWED:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if _line_width(line) > limit:
                too_long.append(f"shogi_dnn/{rel}:{number} ({_line_width(line)})")
    assert not too_long, f"lines longer than pyproject.toml's line-length = {limit}: {too_long}"
