"""``Toolset.replay``: a resumed job's toolset told the calls its kept history made, as if it had run
them: the ids are taken, the repeat guard counts the calls, a caught repeat names the result on
record, memory writes advance the generation, and a batch cut off at max_tokens counts for nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runner.config import Limits
from runner.protocol import CUT_OFF
from runner.rundir.store import JobStore
from runner.tools.toolset import Toolset

pytestmark = pytest.mark.anyio


def use(id: str, name: str, input: dict[str, Any]) -> dict[str, Any]:  # noqa: A002
    return {"type": "tool_use", "id": id, "name": name, "input": input}


def result(id: str, text: str, *, error: bool = False) -> dict[str, Any]:  # noqa: A002
    return {
        "type": "tool_result",
        "tool_use_id": id,
        "content": text,
        **({"is_error": True} if error else {}),
    }


def turn(calls: list[dict[str, Any]], results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": calls}, {"role": "user", "content": results}]


async def test_a_replayed_call_counts_as_made(tmp_path: Path, store: JobStore) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    read = {"file_path": "a.txt"}
    history = [
        {"role": "user", "content": "go"},
        *turn([use("t1", "read", read)], [result("t1", "1\thello")]),
    ]
    async with Toolset(str(tmp_path), ("read",), store, limits=Limits(max_repeated_calls=1)) as tools:
        await tools.replay(history)
        again = await tools.run_batch([use("t1", "read", read), use("t2", "read", read)], turn=2)
    assert "already used" in again[0]["content"]  # the id was taken by the kept call
    assert again[1].get("is_error") and "already made 1 times" in again[1]["content"], again[1]
    assert "first at turn 1" in again[1]["content"]


async def test_replay_follows_the_turns_on_record_and_skips_a_cut_batch(
    tmp_path: Path, store: JobStore
) -> None:
    read = {"file_path": "a.txt"}
    history = [
        {"role": "user", "content": "go"},
        *turn([use("t1", "read", read)], [result("t1", f"{CUT_OFF} by the output token limit", error=True)]),
        *turn([use("t2", "read", read)], [result("t2", "1\thello")]),
    ]
    async with Toolset(str(tmp_path), ("read",), store, limits=Limits(max_repeated_calls=1)) as tools:
        await tools.replay(history, turns={3: 7})
        other = {"file_path": "b.txt"}
        caught = await tools.run_batch([use("t1", "read", other), use("t3", "read", read)], turn=8)
    assert "already" not in caught[0]["content"], caught[0]  # the cut call's id and input never counted
    assert "first at turn 7" in caught[1]["content"], caught[1]


async def test_replayed_memory_writes_advance_the_generation(tmp_path: Path, store: JobStore) -> None:
    create = {"command": "create", "path": "/memories/a.md", "file_text": "x\n"}
    history = [
        {"role": "user", "content": "go"},
        *turn(
            [use("t1", "memory", create), use("t2", "memory", {"command": "delete", "path": "/memories/b"})],
            [
                result("t1", "File created successfully at: /memories/a.md"),
                result("t2", "no such", error=True),
            ],
        ),
    ]
    async with Toolset(str(tmp_path), (), store) as tools:
        await tools.replay(history)
        assert tools.memory.generation == 1  # the failed delete changed nothing
