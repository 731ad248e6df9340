"""``runner emulate``: serve the emulator in the foreground until interrupted.

Prints the base URL and the environment line that points the runner (or any SDK client) at it.
Exit codes: 0 after a clean stop, 2 for a bad config file or a non-loopback host.
"""

from __future__ import annotations

import argparse
import sys

from pydantic import ValidationError

from .app import EmulatorState
from .config import EmulatorConfig
from .server import base_url_of, build_server


def serve(args: argparse.Namespace) -> int:
    try:
        config = EmulatorConfig.from_toml(args.config) if args.config else EmulatorConfig()
    except (OSError, ValueError, ValidationError) as e:
        print(f"error: {args.config}: {e}".replace("\n", " "), file=sys.stderr)
        return 2
    try:
        server = build_server(EmulatorState(config), args.host, args.port, log_level="info")
    except ValueError as e:
        print(f"error: --host: {e}", file=sys.stderr)
        return 2
    url = base_url_of(args.host, args.port)
    print(f"Messages-API emulator on {url} (stats: {url}/_emulator/stats)")
    print(f"ANTHROPIC_BASE_URL={url} ANTHROPIC_API_KEY={config.api_key or 'emulator-key'}", flush=True)
    server.run()
    return 0
