"""A local Messages-API emulator that the real ``anthropic`` SDK talks to over HTTP.

Start one in tests with :func:`running_emulator` (a context manager; a free loopback port)::

    with running_emulator(EmulatorConfig(record_requests=True)) as emu:
        client = anthropic.AsyncAnthropic(base_url=emu.base_url, api_key="test-key")
        ...
        emu.state.outcomes["429"], emu.stats()

or from the shell with ``runner emulate [--port N] [--config emulator.toml]``.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_app
    from .config import EmulatorConfig, Fault, Faults, Latency, ScriptedReply
    from .server import EmulatorHandle, running_emulator
    from .state import EmulatorState

# Loaded on first use (PEP 562): the app imports the anthropic SDK (~1.5 s), which ``runner emulate``
# need not pay before it has read and checked its config file (a bad one is exit 2 at once).
_WHERE = {
    "create_app": ".app",
    "EmulatorConfig": ".config",
    "Fault": ".config",
    "Faults": ".config",
    "Latency": ".config",
    "ScriptedReply": ".config",
    "EmulatorHandle": ".server",
    "running_emulator": ".server",
    "EmulatorState": ".state",
}

__all__ = [
    "EmulatorConfig",
    "EmulatorHandle",
    "EmulatorState",
    "Fault",
    "Faults",
    "Latency",
    "ScriptedReply",
    "create_app",
    "running_emulator",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_WHERE[name], __name__), name)
    globals()[name] = value
    return value
