"""Shared by every test module: async tests run on asyncio (aiofiles is asyncio-only); a job store;
the environment a ``runner`` subprocess gets."""

import os
from pathlib import Path

import pytest

from runner.store import JobStore


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
async def store(tmp_path: Path) -> JobStore:
    s = JobStore(tmp_path / "run" / "job")
    await s.open()
    return s


def runner_env(**extra: str) -> dict[str, str]:
    """This process's environment without the API's and the runner's variables (a subprocess sees
    only what a test gives it), unbuffered, with ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "RUNNER_"))}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}
