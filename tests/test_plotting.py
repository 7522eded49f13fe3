"""plotting: Japanese text (a real KIF game's players, event and moves) is drawn without a font warning,
with glyphs the chosen fonts really have; every module that draws uses this one setup."""

from __future__ import annotations

import ast
import io
import warnings

import pytest

from shogi_dnn import kifu, plotting
from shogi_dnn.kifu.kif import move_text
from shogi_dnn.rules import new_position
from tests.support.paths import DATA, REPO

KIF = DATA / "kif" / "jt201409130101.kif"         # 渡辺明 vs 佐藤康光, 第３５回将棋日本シリーズ...


def real_title() -> str:
    record = next(kifu.read_record_file(KIF))
    first = move_text(new_position(record.start_sfen), record.moves[0], "")
    return f"{record.black} vs {record.white} ({record.event}) 1 ▲{first}"


def render(title: str, family: tuple[str, ...] | None = None) -> list[warnings.WarningMessage]:
    """Draw a figure with `title` to PNG bytes; the warnings emitted while drawing."""
    fig = plotting.new_figure((8, 2))
    ax = fig.add_subplot()
    ax.set_title(title, **({"fontfamily": list(family)} if family else {}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig.savefig(io.BytesIO(), format="png")
    return caught


def test_a_real_kif_title_renders_without_warnings_and_its_glyphs_exist() -> None:
    from matplotlib.ft2font import FT2Font

    title = real_title()
    assert "渡辺明" in title and "佐藤康光" in title and "２六歩" in title
    with warnings.catch_warnings():
        warnings.simplefilter("error")                  # any warning fails the test
        assert render(title) == []
    fonts = [FT2Font(str(path)) for path in plotting.font_files()]
    assert [path.name for path in plotting.font_files()] == ["DejaVuSans.ttf", "ipaexg.ttf"]
    for char in set(title) - {" "}:
        assert any(font.get_char_index(ord(char)) != 0 for font in fonts), char
    assert plotting.missing_glyphs(title) == []
    # Each kanji is the Japanese font's: DejaVu Sans has none of them (the fallback is what draws them).
    assert all(fonts[0].get_char_index(ord(c)) == 0 and fonts[1].get_char_index(ord(c)) != 0 for c in "渡辺明将棋")


def test_without_the_japanese_font_the_same_title_warns() -> None:
    """The check above can fail: DejaVu Sans alone misses the glyphs and matplotlib says so."""
    caught = render(real_title(), family=("DejaVu Sans",))
    assert any("missing from font" in str(w.message) for w in caught)
    assert plotting.missing_glyphs("한 ก 歩") == ["ก", "한"]      # Hangul and Thai: in neither font


def test_save_png_is_atomic(tmp_path) -> None:
    fig = plotting.new_figure((2, 2))
    fig.add_subplot().plot([0, 1])
    path = plotting.save_png(fig, tmp_path / "sub" / "a.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and [p.name for p in path.parent.iterdir()] == ["a.png"]

    def broken(tmp, **kwargs) -> None:               # a write that fails half-way (a full disk)
        tmp.write_bytes(b"\x89PNG half")
        raise OSError(28, "No space left on device")
    fig.savefig = broken
    with pytest.raises(OSError):
        plotting.save_png(fig, tmp_path / "b.png")
    assert not (tmp_path / "b.png").exists() and not list(tmp_path.glob(".*tmp"))


def imports(path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def test_every_module_that_draws_uses_the_one_setup() -> None:
    package = REPO / "shogi_dnn"
    drawing = {}
    for path in sorted(package.rglob("*.py")):
        names = imports(path)
        if path.name != "plotting.py" and (any(n.split(".")[0] == "matplotlib" for n in names) or
                                           "shogi_dnn.plotting" in names):
            drawing[path.relative_to(package).as_posix()] = names
    assert set(drawing) >= {"analysis/predict.py", "analysis/report_plots.py", "training/plan.py",
                            "bench/scaling.py"}
    for name, names in drawing.items():
        assert "shogi_dnn.plotting" in names, f"{name} draws without shogi_dnn.plotting"
        assert "matplotlib.pyplot" not in names and "matplotlib.figure.Figure" not in names, name
