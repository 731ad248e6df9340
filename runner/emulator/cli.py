"""``runner emulate``: serve the emulator in the foreground until interrupted.

Prints the base URL and the environment line that points the runner (or any SDK client) at it.
A bad config file or a non-loopback host is a :class:`runner.config.ConfigError` (one line per
problem, naming the file or option, the key and what was expected), which ``runner`` reports with
exit code 2, as for its own configuration. Exit code 0 after a clean stop.
"""

from __future__ import annotations

import argparse

from ..config import ConfigError
from .config import EmulatorConfig


def serve(args: argparse.Namespace) -> int:
    config = EmulatorConfig.from_toml(args.config) if args.config else EmulatorConfig()
    # the server (and with it the anthropic SDK) is imported only once the config is known good
    from .server import base_url_of, build_server
    from .state import EmulatorState

    try:
        server = build_server(EmulatorState(config), args.host, args.port, log_level="info")
    except ValueError as e:
        raise ConfigError([f"--host: {e}"]) from None
    url = base_url_of(args.host, args.port)
    print(f"Messages-API emulator on {url} (stats: {url}/_emulator/stats)")
    print(f"ANTHROPIC_BASE_URL={url} ANTHROPIC_API_KEY={config.api_key or 'emulator-key'}", flush=True)
    server.run()
    return 0
