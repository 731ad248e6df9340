"""A TCP socket bound and listening before a server says where it is (``runner emulate``, ``runner view
--serve``): the URL it prints answers, and a port it cannot have is said, never a URL of another's.

Guarantees:
- :func:`listening_socket` returns a socket that listens (connections wait in its backlog until the
  server takes them); port 0 is a free one, which ``getsockname`` tells.
- A port in use or not allowed is a :class:`ListenError`, one line naming ``host:port`` and why, the
  socket closed.
"""

from __future__ import annotations

import socket


class ListenError(Exception):
    """The server cannot listen where it was asked to: one line naming ``host:port`` and why."""


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` and listening; a :class:`ListenError` when it cannot be."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as e:
        sock.close()
        shown = f"[{host}]" if ":" in host else host
        raise ListenError(f"{shown}:{port}: cannot listen there: {e.strerror or e}") from None
    return sock
