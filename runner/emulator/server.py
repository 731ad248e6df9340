"""Run the emulator with uvicorn on a loopback address, in a background thread or in the foreground.

Guarantees:
- Binds only to a loopback host (127.0.0.1, ::1, localhost); anything else is a ``ValueError``.
- ``runner emulate`` and ``running_emulator()`` bind their socket (:func:`listening_socket`) before the
  server starts; ``runner emulate`` prints its URL only then.
- ``running_emulator()`` binds its socket before the server starts (port 0: a free port, no race),
  returns once the server accepts connections, and on exit stops it within a few seconds (requests
  still sleeping in a latency or slow fault are cancelled).
- ``handle.config`` is the live config: changes apply to the next request.
- Uvicorn's "returned without completing response" log line, which every injected dropped
  connection causes, is filtered out while an emulator runs; nothing else is.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import uvicorn

from .. import listen
from .app import create_app
from .config import EmulatorConfig, ScriptedReply
from .faults import DROP_LOG_MESSAGE
from .state import EmulatorState

LOOPBACK = {"127.0.0.1", "::1", "localhost"}


class _DropFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != DROP_LOG_MESSAGE


_DROP_FILTER = _DropFilter()


def check_host(host: str) -> None:
    if host not in LOOPBACK:
        raise ValueError(f"the emulator binds only to loopback (127.0.0.1, ::1, localhost), not {host!r}")


def build_server(state: EmulatorState, host: str, port: int, log_level: str = "warning") -> uvicorn.Server:
    check_host(host)
    config = uvicorn.Config(
        create_app(state),
        host=host,
        port=port,
        log_config=None,
        log_level=log_level,
        access_log=False,
        lifespan="off",
        http="h11",
        loop="asyncio",
        timeout_graceful_shutdown=1,
    )
    logging.getLogger("uvicorn.error").addFilter(_DROP_FILTER)
    return uvicorn.Server(config)


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket on a host the emulator may serve on (:func:`check_host`), bound to ``host:port`` and
    listening (:func:`runner.listen.listening_socket`)."""
    check_host(host)
    return listen.listening_socket(host, port)


def base_url_of(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


@dataclass
class EmulatorHandle:
    """A running emulator: where it listens and what it has counted."""

    base_url: str
    state: EmulatorState

    @property
    def config(self) -> EmulatorConfig:
        return self.state.config

    def stats(self) -> dict[str, Any]:
        return self.state.snapshot()

    def set_script(self, replies: list[ScriptedReply | dict[str, Any]]) -> None:
        """Replace the script and serve it from its start."""
        self.state.config.script = [
            r if isinstance(r, ScriptedReply) else ScriptedReply.model_validate(r) for r in replies
        ]
        self.state.script_position = 0

    def reset(self) -> None:
        """Zero the counters, the rate-limit window, the cache and the script position; forget the batches."""
        self.state.reset()

    def reconfigure(self, config: EmulatorConfig | None = None) -> None:
        """Start over with ``config`` (default: a default config) and zeroed state, on the same port."""
        self.state.config = config or EmulatorConfig()
        self.state.reset()


@contextmanager
def running_emulator(
    config: EmulatorConfig | None = None, *, host: str = "127.0.0.1", port: int = 0
) -> Iterator[EmulatorHandle]:
    """Serve the emulator in a daemon thread for the duration of the ``with`` block."""
    state = EmulatorState(config or EmulatorConfig())
    sock = listening_socket(host, port)
    bound_port = sock.getsockname()[1]
    server = build_server(state, host, bound_port)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="runner-emulator", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise RuntimeError("the emulator did not start")
        time.sleep(0.01)
    try:
        yield EmulatorHandle(base_url_of(host, bound_port), state)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
