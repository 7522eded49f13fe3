"""The optional C parts (everything else is in pyproject.toml), both `optional=True`: without a C compiler
the install still succeeds.

- shogi_dnn.rules._native: the rules' and the CSA reader's kernels (CSA moves checked and played, runs of
  move lines and evaluation comments, in-check flags); without it the rules backends and the readers'
  regexes are used (same output).
- shogi_dnn.dataset._encode: the encoding extension; without it features.py uses its numpy path (same
  output). Both include rules/_pieces.h (the piece numbers).
- shogi_dnn.training._bindshim: not a Python module but an LD_PRELOAD library (a bind(2) wrapper) that
  keeps a cluster worker's TensorFlow server on its given host, and keeps SIGTERM's action while the
  cluster forms (training/bind_shim.py); without it that
  server listens on every interface and each worker says so.

The presets (train/*.toml) also go into the wheel, as shogi_dnn/presets/ (BuildWithPresets; MANIFEST.in
keeps them in the sdist)."""

import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py


class BuildWithPresets(build_py):
    """build_py, plus the presets (train/*.toml) as shogi_dnn/presets/ so that an installed wheel finds
    them by name (config.preset_folders)."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "shogi_dnn" / "presets"
        target.mkdir(parents=True, exist_ok=True)
        for preset in sorted(Path(__file__).resolve().parent.glob("train/*.toml")):
            shutil.copyfile(preset, target / preset.name)


PIECES_H = ["shogi_dnn/rules/_pieces.h"]
setup(cmdclass={"build_py": BuildWithPresets},
      ext_modules=[Extension("shogi_dnn.rules._native", ["shogi_dnn/rules/_native.c"], optional=True,
                             extra_compile_args=["-O2"], depends=PIECES_H),
                   Extension("shogi_dnn.dataset._encode", ["shogi_dnn/dataset/_encode.c"], optional=True,
                             extra_compile_args=["-O2"], depends=PIECES_H),
                   Extension("shogi_dnn.training._bindshim", ["shogi_dnn/training/_bindshim.c"],
                             optional=True, extra_compile_args=["-O2"], libraries=["dl"])])
