"""Small file work on a local disk runs on the event loop, without a thread hand-off (the small reads and
globs, a turn's flush that makes no file); what may take long, makes a file, or lies on a file system
that can hang, goes to a worker thread."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import runner.rundir.store as store_module
from runner.rundir.store import INLINE_FLUSH_CHARS, JobStore, dumps, local_disk, read_jsonl
from runner.tools import file_calls as tools_module
from runner.tools.toolset import Toolset


def test_local_disk_knows_this_machines_mounts(tmp_path: Path) -> None:
    assert local_disk(str(tmp_path))  # the test's temporary directory: a local file system here
    assert not local_disk("/proc/self")  # proc is no disk: never written on the loop


def counting_threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The file tools' calls that went to a worker thread."""
    threaded: list[str] = []
    run = tools_module._run_file_tool

    def counted(workspace: str, name: str, args: dict[str, Any], *, stop_at: float) -> Any:
        threaded.append(name)
        return run(workspace, name, args, stop_at=stop_at)

    monkeypatch.setattr(tools_module, "_run_file_tool", counted)
    return threaded


@pytest.mark.anyio
async def test_small_reads_and_globs_run_on_the_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    threaded = counting_threads(monkeypatch)
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.py").write_text("x = 1\n")
    store = JobStore(tmp_path / "job")
    await store.open()
    async with Toolset(str(tmp_path / "ws"), ("read", "glob", "write"), store) as toolset:
        read = await toolset.run({"id": "t1", "name": "read", "input": {"file_path": "a.py"}})
        found = await toolset.run({"id": "t2", "name": "glob", "input": {"pattern": "*.py"}})
        wrote = await toolset.run(
            {"id": "t3", "name": "write", "input": {"file_path": "b.py", "content": "y = 2\n"}}
        )
    assert "x = 1" in read["content"] and "a.py" in found["content"], (read, found)
    assert not wrote.get("is_error"), wrote
    assert threaded == ["write"]  # a write changes the workspace: always on a thread


@pytest.mark.anyio
async def test_a_call_over_the_budget_runs_again_on_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threaded = counting_threads(monkeypatch)
    monkeypatch.setattr(tools_module, "INLINE_BUDGET_S", -1.0)  # every clock check is past it
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(600):  # more entries than one clock check (256) covers
        (ws / f"f{i:03d}.txt").write_text(f"{i}\n")
    store = JobStore(tmp_path / "job")
    await store.open()
    async with Toolset(str(ws), ("read", "glob"), store) as toolset:
        found = await toolset.run({"id": "t1", "name": "glob", "input": {"pattern": "*.txt"}})
        (ws / "big.txt").write_text("line\n" * 60_000)  # past a whole-file read: paged, by chunks
        read = await toolset.run({"id": "t2", "name": "read", "input": {"file_path": "big.txt"}})
    assert threaded == ["glob", "read"]  # stopped on the loop, run whole on the thread
    assert not found.get("is_error") and "f599.txt" in found["content"], found
    assert not read.get("is_error") and "line" in read["content"], read


@pytest.mark.anyio
async def test_a_network_workspace_never_runs_a_tool_on_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threaded = counting_threads(monkeypatch)
    monkeypatch.setattr(tools_module, "local_disk", lambda path: False)
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.py").write_text("x = 1\n")
    store = JobStore(tmp_path / "job")
    await store.open()
    async with Toolset(str(tmp_path / "ws"), ("read", "glob"), store) as toolset:
        await toolset.run({"id": "t1", "name": "read", "input": {"file_path": "a.py"}})
        await toolset.run({"id": "t2", "name": "glob", "input": {"pattern": "*"}})
    assert threaded == ["read", "glob"]


@pytest.mark.anyio
async def test_a_small_flush_that_makes_no_file_is_written_inline_the_rest_in_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hops: list[int] = []
    save = store_module._save_in_thread

    async def counted(*args: Any, **kwargs: Any) -> None:
        hops.append(1)
        await save(*args, **kwargs)

    monkeypatch.setattr(store_module, "_save_in_thread", counted)
    store = JobStore(tmp_path / "job")
    await store.open()
    store.queue(lines={"transcript.jsonl": ['{"n": 1}']}, files={"metrics.json": "{}\n"})
    await store.flush()
    assert hops == []  # lines and a checkpoint: no hand-off
    rel = store.reserve("toolu_1", "small output")
    store.queue(outputs=[(rel, "small output")], lines={"transcript.jsonl": ['{"n": 2}']})
    await store.flush()
    assert hops == [1]  # an output is a new file: in a thread, however small
    big = "x" * (INLINE_FLUSH_CHARS + 1)
    store.queue(lines={"transcript.jsonl": ['{"n": 3}', dumps(big)]})
    await store.flush()
    assert hops == [1, 1]
    await store.write_text("final.md", "done\n")  # a whole file: in a thread (not a flush)
    assert hops == [1, 1]
    assert (tmp_path / "job" / rel).read_text() == "small output"
    assert (tmp_path / "job" / "final.md").read_text() == "done\n"
    records, warnings = read_jsonl(tmp_path / "job" / "transcript.jsonl")
    assert records == [{"n": 1}, {"n": 2}, {"n": 3}, big] and not warnings
    assert not [n for n in os.listdir(tmp_path / "job") if n.endswith(".tmp")]  # nothing left half-done
