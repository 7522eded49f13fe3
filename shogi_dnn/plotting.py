"""The one plotting setup of shogi-dnn: fonts, new figures and atomic PNG files (matplotlib Agg; no pyplot,
no TensorFlow). Every module that draws (analysis/predict, analysis/report, training/plan, bench/scaling)
makes its figures with new_figure (or calls setup first) and writes them with save_png (the atomic write
of folders/run_files, one layer below).

Fonts: text is drawn with FONT_FAMILY, matplotlib's per-glyph font fallback (matplotlib >= 3.6):
  DejaVu Sans      matplotlib's own font, for Latin letters, digits and symbols (as before)
  IPAexGothic      every glyph DejaVu Sans lacks: kanji, kana, full-width digits (player names such as
                   渡辺明, moves such as ７六歩, KIF comments); the font file ships with the
                   `matplotlib-fontja` package (a dependency), so no system font is needed
The font file is registered from that package's folder without importing the package (importing it
would rewrite the global rcParams itself). A glyph that neither font has would be a matplotlib warning
("Glyph ... missing from font(s) ..."); missing_glyphs names such characters before drawing.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib import font_manager
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from shogi_dnn.folders import run_files

JAPANESE_FONT = "IPAexGothic"
JAPANESE_FONT_PACKAGE = "matplotlib_fontja"
JAPANESE_FONT_FILE = ("fonts", "ipaexg.ttf")        # inside the package folder
FONT_FAMILY = ("DejaVu Sans", JAPANESE_FONT)        # fallback order: the first font that has the glyph
DPI = 100

_ready = False


def japanese_font_path() -> Path:
    """The IPAex Gothic file of the matplotlib-fontja package.

    Raises:
        RuntimeError: the package is not installed (it is a dependency: `pip install matplotlib-fontja`).
    """
    spec = importlib.util.find_spec(JAPANESE_FONT_PACKAGE)     # locates the package without running it
    path = Path(spec.origin).parent.joinpath(*JAPANESE_FONT_FILE) if spec and spec.origin else None
    if path is None or not path.is_file():
        raise RuntimeError("the Japanese font of the plots is missing: pip install matplotlib-fontja")
    return path


def setup() -> None:
    """Register the Japanese font and make FONT_FAMILY matplotlib's font family (once per process)."""
    global _ready
    if _ready:
        return
    font_manager.fontManager.addfont(str(japanese_font_path()))
    matplotlib.rcParams["font.family"] = list(FONT_FAMILY)
    _ready = True


def new_figure(figsize: tuple[float, float], **kwargs: Any) -> Figure:
    """A Figure with an Agg canvas, its text in FONT_FAMILY (kwargs go to Figure, e.g. tight_layout)."""
    setup()
    fig = Figure(figsize=figsize, dpi=DPI, **kwargs)
    FigureCanvasAgg(fig)
    return fig


def save_png(fig: Figure, path: str | Path) -> Path:
    """Write the figure as PNG through a hidden temporary file and a rename (run_files.atomic_path): no
    half-written picture is left, and a full disk is one line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with run_files.atomic_path(path, tmp=path.with_name(f".{path.name}.tmp")) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI)
    return path


def count_label(value: float) -> str:
    """A tick label for a count: 950, 150k, 1.2M (six-digit numbers ran together on a half-width axis)."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:g}"


def count_axis(axis: Any, max_ticks: int = 6) -> None:
    """Label an axis of counts (samples seen, positions) as count_label does, with at most `max_ticks`
    round ticks (axis: ax.xaxis or ax.yaxis)."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    axis.set_major_locator(MaxNLocator(nbins=max_ticks, steps=[1, 2, 2.5, 5, 10]))
    axis.set_major_formatter(FuncFormatter(lambda value, _pos: count_label(value)))


def font_files() -> list[Path]:
    """The files of FONT_FAMILY, in fallback order."""
    setup()
    return [Path(font_manager.findfont(font_manager.FontProperties(family=name), fallback_to_default=False))
            for name in FONT_FAMILY]


def missing_glyphs(text: str) -> list[str]:
    """The characters of `text` (other than whitespace) that no font of FONT_FAMILY has a glyph for."""
    from matplotlib.ft2font import FT2Font

    fonts = [FT2Font(str(path)) for path in font_files()]
    return sorted({c for c in text if not c.isspace() and all(f.get_char_index(ord(c)) == 0 for f in fonts)})
