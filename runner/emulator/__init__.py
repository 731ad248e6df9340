"""A local Messages-API emulator that the real ``anthropic`` SDK talks to over HTTP.

Start one in tests with :func:`running_emulator` (a context manager; a free loopback port)::

    with running_emulator(EmulatorConfig(record_requests=True)) as emu:
        client = anthropic.AsyncAnthropic(base_url=emu.base_url, api_key="test-key")
        ...
        emu.state.outcomes["429"], emu.stats()

or from the shell with ``runner emulate [--port N] [--config emulator.toml]``.
"""

from .app import create_app
from .config import EmulatorConfig, Fault, Faults, Latency, ScriptedReply
from .server import EmulatorHandle, running_emulator
from .state import EmulatorState

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
