"""What a long job keeps in memory: bounded by its window where only the window needs it, and per
distinct call where the repeat guard's promise (a repeat is caught anywhere in the job) needs it."""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

import pytest

from runner.compaction.context import Recorder
from runner.compaction.window import Entry
from runner.execution.backend import YOUNG_COLLECTION_EVERY, settled_heap
from runner.protocol import placeholder
from runner.rundir.store import JobStore
from runner.tools.repeats import RepeatGuard, call_key


def _turn(t: int) -> tuple[dict, dict]:
    """Turn ``t``'s assistant message (two reads) and the user message answering it."""
    ids = [f"toolu_{t}_{k}" for k in range(2)]
    assistant = {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": i, "name": "read", "input": {"file_path": f"/w/{i}.py"}} for i in ids
        ],
    }
    user = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": i, "content": f"text of {i} " * 20} for i in ids],
    }
    return assistant, user


@pytest.mark.anyio
async def test_the_recorder_forgets_results_that_left_the_window(tmp_path: Path) -> None:
    """3,000 turns through a window of the newest 20 messages, the oldest result in view replaced by
    its placeholder each turn (as micro_compact does): the recorder holds the results in view, not every
    result of the job, and still encodes a replaced one by reference (so resume rebuilds it)."""
    store = JobStore(tmp_path / "job")
    await store.open()
    recorder = Recorder()
    messages: list[dict] = [{"role": "user", "content": "Survey this package."}]
    recorder.added(messages[0], 1)
    window: list[Entry] = [Entry.of(messages[0], 1)]
    largest = 0
    for t in range(1, 3_001):
        for message in _turn(t):
            messages.append(message)
            recorder.added(message, len(messages))
            window.append(Entry.of(message, len(messages)))
        window = window[:1] + window[1:][-20:]  # the snip: the prompt and the newest messages
        oldest = next(e for e in window[1:] if e.message["role"] == "user")
        block = oldest.message["content"][0]
        path = f"tool-results/{block['tool_use_id']}.txt"
        replaced = {"role": "user", "content": [{**block, "content": placeholder(path)}]}
        window[window.index(oldest)] = Entry.of(replaced, oldest.seq)
        refs = recorder.encode(window)
        ref = next(r for r in refs if r.get("seq") == oldest.seq)
        assert ref["c"][0] == {"t": oldest.seq, "b": 0, "saved": path}  # by reference, not inline
        largest = max(largest, len(recorder._results), len(recorder._by_id))
    in_view = sum(len(e.message["content"]) for e in window[1:]) + len(window)
    assert largest <= 2 * in_view + 32  # bounded by the window (the old recorder: 6,000 results)
    # and what it kept decodes: the window comes back as it was, the replaced block as its placeholder
    decoded = Recorder().decode(refs, messages, store, active_request="Survey this package.")
    assert [e.message for e in decoded] == [e.message for e in window]


def test_the_repeat_guard_keeps_a_bounded_record_per_distinct_call_and_still_catches_the_first() -> None:
    """The guard must remember every distinct call of the job (a repeat 30 turns or 3,000 turns apart is
    caught). 20,000 distinct calls, each made three times: each distinct call costs a bounded record (a
    16-byte hash, never the call's input, and its count, first turn, first and last ids), a repeat past
    the second adds nothing, and the
    very first call is still caught, with when and by which id it was first made."""
    calls = [call_key("read", {"file_path": f"/ws/pkg{i // 100:03d}/mod{i:05d}.py"}) for i in range(20_000)]
    guard = RepeatGuard(max_repeated=3)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        grown = []
        for made in range(3):
            for i, key in enumerate(calls):
                guard.remember(key, 1_000 * made + i, f"toolu_{made}_{i:020d}")
            grown.append(tracemalloc.get_traced_memory()[0] - before)
    finally:
        tracemalloc.stop()
    assert grown[1] < 20_000 * 400, grown  # a record per distinct call (its first and last ids), any input
    assert grown[2] < grown[1] + 64 * 1024, grown  # a further repeat replaces the record: nothing grows
    found = guard.check(calls[0], 90_000)
    assert found is not None
    assert (found[0], found[1].turn, found[1].tool_use_id) == (3, 0, f"toolu_0_{0:020d}")
    assert guard.check(call_key("read", {"file_path": "/ws/new.py"}), 90_000) is None


def test_a_settled_heap_is_given_back_as_it_was_even_when_the_batch_fails() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), settled_heap():
        assert gc.get_threshold()[0] == YOUNG_COLLECTION_EVERY and gc.get_freeze_count() > 0
        raise RuntimeError("the batch failed")
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0  # nothing stays frozen


def test_a_settled_heap_leaves_what_its_host_froze_frozen() -> None:
    gc.freeze()
    frozen = gc.get_freeze_count()
    try:
        with settled_heap():
            with settled_heap():  # nested: the inner one gives back only what it took
                pass
            # (frozen objects can still be freed by their counts: the count may fall a little, not to 0)
            assert gc.get_freeze_count() > frozen // 2 and gc.get_threshold()[0] == YOUNG_COLLECTION_EVERY
        assert gc.get_freeze_count() > frozen // 2  # the host's freeze is the host's to undo
    finally:
        gc.unfreeze()
