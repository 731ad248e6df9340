"""Shared by every test module: async tests run on asyncio (aiofiles is asyncio-only)."""

import pytest


@pytest.fixture
def anyio_backend():
    return "asyncio"
