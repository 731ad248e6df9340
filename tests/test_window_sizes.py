"""``History.add`` serializes each message once: the transcript line it writes is the JSON the
window's size is taken from. Checked against ``measure`` (an independent ``json.dumps``) and against the
transcript read back from disk, for messages with non-ASCII text, escapes, list content and merges."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.agent.history import History
from runner.compaction.compactor import CompactionState
from runner.config import Limits
from runner.messages import measure
from runner.rundir.docs import TRANSCRIPT
from runner.rundir.store import JobStore, read_jsonl

MESSAGES = [
    {"role": "user", "content": 'Survey "this" — é 中文 \t tab \\ backslash \u2028 sep'},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "ok"},
            {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"file_path": "a/ü.py"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": [{"type": "text", "text": "x\n" * 50 + "\x00\x1f"}],
                "is_error": True,
            }
        ],
    },
    {"role": "user", "content": "a second user message: merged into the previous one in the window"},
]


@pytest.mark.anyio
async def test_add_measures_each_message_from_its_transcript_line(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "job")
    await store.open()
    state = CompactionState(limits=Limits(), active_request=MESSAGES[0]["content"])
    history = History(store, state)
    history.add(MESSAGES[0])
    history.add(*MESSAGES[1:])
    assert not (store.dir / TRANSCRIPT).exists()  # queued: the next call's flush writes the turn
    await store.flush()
    written, warnings = read_jsonl(store.dir / TRANSCRIPT)
    assert warnings == [] and written == MESSAGES  # every message on disk, as given, in order
    lines = (store.dir / TRANSCRIPT).read_text(encoding="utf-8").split("\n")[:-1]
    assert [len(line) for line in lines] == [measure(m) for m in MESSAGES]
    entries = state.window.entries
    assert len(entries) == 3  # the trailing user message was merged into the tool results
    assert [e.chars for e in entries[:2]] == [len(json.dumps(m, ensure_ascii=False)) for m in MESSAGES[:2]]
    assert entries[2].chars == measure(entries[2].message)
    assert state.window.total == sum(measure(e.message) for e in entries)
    assert [e.seq for e in entries] == [1, 2, 3]
