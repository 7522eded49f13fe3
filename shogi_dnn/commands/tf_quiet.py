"""TensorFlow's start-up lines (absl's "All log messages before absl::InitializeLog()", oneDNN, CUDA
probing), printed by the C++ libraries while `import tensorflow` runs, once per library that bundles
absl, i.e. twice. TF_CPP_MIN_LOG_LEVEL does not reach them (they come before absl is initialised).

`install(verbose)` (called by cli.main) catches the first `import tensorflow`, wherever it happens, and
runs it with the process's stderr (file descriptor 2) sent to a temporary file; afterwards it prints
those lines once each (without their time stamps' duplicates) when `verbose`, nothing otherwise. An
import that fails prints everything it wrote, then raises as usual. No TensorFlow is imported here. It
also keeps the INFO lines of the Python loggers in CHATTY_LOGGERS (tf2onnx's conversion steps during
`export`) off unless `verbose`.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from types import ModuleType

CHATTY_LOGGERS = ("tf2onnx",)     # libraries whose INFO lines narrate their work: warnings only, or --verbose
_STAMP = re.compile(r"^[IWEF]\d{4} [\d:.]+\s+\d+ ")   # absl's "I0000 00:00:1795519827.453099   19837 "


def unique_lines(text: str) -> list[str]:
    """The lines of `text`, each printed once: a line repeated with another time stamp is the same line."""
    seen, out = set(), []
    for line in text.splitlines():
        key = _STAMP.sub("", line)
        if line.strip() and key not in seen:
            seen.add(key)
            out.append(line)
    return out


@contextlib.contextmanager
def captured_stderr(verbose: bool) -> Iterator[None]:
    """Run the body with fd 2 in a temporary file; then print its lines once each if `verbose` (all of
    them if the body raised)."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):          # no usable stderr (a daemon): nothing to silence
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        failed = True
        try:
            yield
            failed = False
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode("utf-8", "replace")
            if failed:
                sys.stderr.write(text)
            elif verbose and text.strip():
                sys.stderr.write("\n".join(unique_lines(text)) + "\n")
            sys.stderr.flush()


class _QuietLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader, verbose: bool) -> None:
        self.loader, self.verbose = loader, verbose

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        with captured_stderr(self.verbose):
            self.loader.exec_module(module)


class _QuietFinder(importlib.abc.MetaPathFinder):
    def __init__(self, verbose: bool) -> None:
        self.verbose = verbose

    def find_spec(self, name: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)            # once: the real finders answer from here on
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader, self.verbose)
        return spec


def install(verbose: bool) -> None:
    """Catch the process's first `import tensorflow` (nothing to do once it is imported); CHATTY_LOGGERS
    at WARNING unless `verbose`."""
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET if verbose else logging.WARNING)
    if "tensorflow" not in sys.modules and not any(isinstance(f, _QuietFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _QuietFinder(verbose))
