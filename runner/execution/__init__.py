"""Running a batch (layer 5 of ARCHITECTURE.md): the local executor (:mod:`.scheduler`), the Ray one
(``ray_*``), the wiring every command shares (:mod:`.batch`) and ``runner resume`` (:mod:`.resume`).

Imports every layer below it, ``ui`` included (a batch drives the live display it is given); imported
by the command line (``cli``, ``commands``), which reads the flags and prints (and by the emulator, for
the backend switch). No module here
imports ``argparse``. Importing this package imports no engine: Ray is imported only when
a batch runs on it (:func:`ray_available` only looks for it).
"""

from __future__ import annotations

import importlib.util

RAY_MISSING = (
    "executor = \"ray\" needs Ray, which is not installed: pip install 'runner[ray]' (or pip install ray)"
)


def ray_available() -> bool:
    """Whether ``import ray`` would find a package (without importing it: that takes seconds)."""
    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):  # ``sys.modules["ray"] = None`` blocks it
        return False
