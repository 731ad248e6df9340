"""``runner emulate``: serve the emulator in the foreground until interrupted.

Guarantees:
- The socket is bound and listening before anything is printed; then the base URL and the environment
  line that points the runner (or any SDK client) at it.
- A bad config file, a non-loopback host or a port that cannot be listened on (in use, say) is a
  :class:`runner.config.ConfigError` (one line per problem, naming the file or option, the key or
  ``host:port`` and what was expected), which ``runner`` reports with exit code 2, as for its own
  configuration. Exit code 0 after a clean stop.
"""

from __future__ import annotations

import argparse

from ..config import ConfigError
from ..listen import ListenError
from .config import EmulatorConfig


def serve(args: argparse.Namespace) -> int:
    config = EmulatorConfig.from_toml(args.config) if args.config else EmulatorConfig()
    # the server (and with it the anthropic SDK) is imported only once the config is known good
    from .server import base_url_of, build_server, listening_socket
    from .state import EmulatorState

    try:
        sock = listening_socket(args.host, args.port)
    except ValueError as e:
        raise ConfigError([f"--host: {e}"]) from None
    except ListenError as e:
        raise ConfigError([f"{e} (--port chooses another)"]) from None
    with sock:
        port = sock.getsockname()[1]  # --port 0: the free port it was given
        server = build_server(EmulatorState(config), args.host, port, log_level="info")
        url = base_url_of(args.host, port)
        print(f"Messages-API emulator on {url} (stats: {url}/_emulator/stats)")
        print(f"ANTHROPIC_BASE_URL={url} ANTHROPIC_API_KEY={config.api_key or 'emulator-key'}", flush=True)
        server.run(sockets=[sock])
    return 0
