"""Executors other than the local one (``runner.execution.scheduler``). Importing this package imports no engine."""

from __future__ import annotations

import importlib.util

RAY_MISSING = "executor = \"ray\" needs Ray, which is not installed: pip install 'runner[ray]' (or pip install ray)"


def ray_available() -> bool:
    """Whether ``import ray`` would find a package (without importing it: that takes seconds)."""
    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):  # ``sys.modules["ray"] = None`` blocks it
        return False
