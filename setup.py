"""The optional C extension shogi_dnn.dataset._encode (everything else is in pyproject.toml). `optional=True`:
without a C compiler the install still succeeds and features.py uses its numpy path (same output)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("shogi_dnn.dataset._encode", ["shogi_dnn/dataset/_encode.c"], optional=True,
                             extra_compile_args=["-O2"])])
