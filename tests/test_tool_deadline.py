"""A file tool that does not come back (a hung network mount, say) is abandoned at its deadline: the
call gets an error result, and the event loop, which every job shares, is never held up meanwhile.

Nothing on this machine hangs a file read once FIFOs are refused, so the hang is simulated: the
function the toolset runs on its worker thread blocks in a real ``time.sleep``."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import anyio
import pytest

from runner.rundir.store import JobStore
from runner.tools import file_calls as tools_module
from runner.tools.toolset import Toolset


@pytest.mark.anyio
async def test_a_hung_file_tool_is_abandoned_at_its_deadline_while_the_loop_runs_on(
    tmp_path: Path, monkeypatch
) -> None:
    release = threading.Event()

    def hung(*args: object, **kwargs: object) -> str:
        release.wait(30)  # blocks its worker thread, as a read on a dead mount would
        return "too late"

    monkeypatch.setattr(tools_module, "_run_file_tool", hung)
    monkeypatch.setattr(tools_module, "local_disk", lambda path: False)  # a network mount: never inline
    monkeypatch.setattr(tools_module, "FILE_TOOL_DEADLINE_S", 0.5)
    store = JobStore(tmp_path / "job")
    await store.open()
    (tmp_path / "ws").mkdir()
    ticks = 0

    async def ticker() -> None:  # the shared loop keeps running while the tool hangs
        nonlocal ticks
        while True:
            await anyio.sleep(0.05)
            ticks += 1

    try:
        async with Toolset(str(tmp_path / "ws"), ("read", "glob", "grep"), store) as toolset:
            async with anyio.create_task_group() as tg:
                tg.start_soon(ticker)
                started = time.monotonic()
                result = await toolset.run(
                    {"type": "tool_use", "id": "toolu_1", "name": "glob", "input": {"pattern": "**/*"}}
                )
                took = time.monotonic() - started
                tg.cancel_scope.cancel()
    finally:
        release.set()
    assert result["is_error"] and "did not finish within 0.5 s" in result["content"], result
    assert took < 10  # abandoned at the deadline, not after the 30 s the thread would take
    assert ticks >= 5  # about 10 ticks in 0.5 s: the loop was free while the tool hung
