"""A local Messages-API emulator that the real ``anthropic`` SDK talks to over HTTP.

Start one in tests with :func:`.server.running_emulator` (a context manager; a free loopback port)::

    from runner.emulator.config import EmulatorConfig
    from runner.emulator.server import running_emulator

    with running_emulator(EmulatorConfig(record_requests=True)) as emu:
        client = anthropic.AsyncAnthropic(base_url=emu.base_url, api_key="test-key")
        ...
        emu.state.outcomes["429"], emu.stats()

or from the shell with ``runner emulate [--port N] [--config emulator.toml]``.

The package itself imports nothing: ``runner emulate`` reads and checks its config (:mod:`.config`)
before it imports the server and, with it, the anthropic SDK, so a bad config is one line at once.
"""
