"""Each compaction strategy behind the one interface: what it adds to a request, and how it prepares
a history, through the real Compactor and a real JobStore."""

from __future__ import annotations

import pytest
from anthropic.types.beta import BetaClearToolUses20250919EditParam

from runner.agent.history import History
from runner.compaction.compactor import CompactionState, Compactor
from runner.compaction.strategies import STRATEGIES, strategy_for
from runner.compaction.summarizer import Summarizer
from runner.config import Limits
from runner.emulator.sdk_types import problems as sdk_problems
from runner.messages import request_problems, tool_results
from runner.protocol import PLACEHOLDER_PREFIX, saved_path
from runner.rundir.store import JobStore

REQUEST = "Survey the package."
LIMITS = dict(context_char_limit=20_000, batch_char_limit=200_000, snip_trigger=50)


def turn(i: int, size: int) -> list[dict]:
    use = {"type": "tool_use", "id": f"toolu_{i:03d}", "name": "read", "input": {"file_path": f"m{i}.py"}}
    result = {"type": "tool_result", "tool_use_id": use["id"], "content": f"{i} " + "x" * size}
    return [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]


async def prepared(tmp_path, mode: str, turns: int = 12, size: int = 4_000, server_side: bool = True):
    """A history of ``turns`` read calls, each result seen by the model before the next turn."""
    store = JobStore(tmp_path / mode)
    await store.open()
    limits = Limits(compaction=mode, **LIMITS)
    state = CompactionState(limits=limits, active_request=REQUEST, strategy=strategy_for(limits, server_side))
    history = History(store, state)
    compactor = Compactor(Summarizer(None, "none"))
    history.add({"role": "user", "content": REQUEST})
    for i in range(turns):
        await compactor.prepare(state, store)
        state.window.mark_seen()
        history.add(*turn(i, size))
    messages = await compactor.prepare(state, store)
    return state, messages


def result_texts(messages: list[dict]) -> list[str]:
    return [b["content"] for m in messages for b in tool_results(m)]


def test_every_mode_of_the_config_has_a_strategy():
    assert set(STRATEGIES) == {"client", "server", "clear", "mask", "off"}
    for name, cls in STRATEGIES.items():
        assert cls.name == name
        assert strategy_for(Limits(compaction=name)).name == name


def test_only_the_client_pipeline_offers_the_compact_tool():
    assert {n for n, cls in STRATEGIES.items() if cls.offers_compact_tool} == {"client"}


def test_only_server_and_clear_send_context_management():
    for name in STRATEGIES:
        if name == "clear":
            continue
        edit = strategy_for(
            Limits(compaction=name, server_trigger_tokens=60_000, server_instructions="Keep file names.")
        ).context_management()
        if name == "server":
            assert edit == {
                "edits": [
                    {
                        "type": "compact_20260112",
                        "trigger": {"type": "input_tokens", "value": 60_000},
                        "instructions": "Keep file names.",
                    }
                ]
            }
        else:
            assert edit is None


def test_clear_sends_the_apis_context_editing_edit_from_its_limits():
    assert strategy_for(Limits(compaction="clear")).context_management() == {
        "edits": [
            {
                "type": "clear_tool_uses_20250919",
                "trigger": {"type": "input_tokens", "value": 100_000},
                "keep": {"type": "tool_uses", "value": 3},
            }
        ]
    }
    limits = Limits(
        compaction="clear",
        clear_trigger="tool_uses",
        clear_trigger_value=12,
        clear_keep_tool_uses=5,
        clear_at_least_tokens=2_000,
        clear_exclude_tools=("memory",),
        clear_tool_inputs=("bash",),
    )
    (edit,) = strategy_for(limits).context_management()["edits"]
    assert edit == {
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "tool_uses", "value": 12},
        "keep": {"type": "tool_uses", "value": 5},
        "clear_at_least": {"type": "input_tokens", "value": 2_000},
        "exclude_tools": ["memory"],
        "clear_tool_inputs": ["bash"],
    }
    assert not sdk_problems(edit, BetaClearToolUses20250919EditParam)  # the SDK's own parameter type


@pytest.mark.anyio
async def test_clear_leaves_the_history_to_the_api(tmp_path):
    state, messages = await prepared(tmp_path, "clear")
    assert sum(state.record.compactions.values()) == 0
    assert all(text.endswith("x" * 100) for text in result_texts(messages))


def test_server_runs_its_fallback_where_the_backend_cannot_compact():
    assert strategy_for(Limits(compaction="server"), server_side=False).name == "client"
    assert strategy_for(Limits(compaction="clear"), server_side=False).name == "client"
    for name in ("client", "mask", "off"):
        assert strategy_for(Limits(compaction=name), server_side=False).name == name


@pytest.mark.anyio
async def test_off_sends_the_history_unchanged(tmp_path):
    state, messages = await prepared(tmp_path, "off")
    assert sum(state.record.compactions.values()) == 0
    assert state.window.total > 40_000
    assert all(text.endswith("x" * 100) for text in result_texts(messages))


@pytest.mark.anyio
async def test_client_brings_the_history_under_its_limit_and_keeps_every_output_on_disk(tmp_path):
    state, messages = await prepared(tmp_path, "client")
    assert state.window.total <= LIMITS["context_char_limit"]
    assert state.record.compactions["micro_compact"] >= 1
    assert request_problems(messages) == []
    placeholders = [t for t in result_texts(messages) if t.startswith(PLACEHOLDER_PREFIX)]
    assert placeholders
    for text in placeholders:
        saved = (tmp_path / "client" / saved_path(text)).read_text()
        assert saved.startswith(tuple(f"{i} " for i in range(12)))


@pytest.mark.anyio
async def test_mask_masks_every_seen_result_but_the_newest(tmp_path):
    state, messages = await prepared(tmp_path, "mask", turns=8, size=500)
    texts = result_texts(messages)
    keep = Limits().keep_recent_results
    # small results, far under the limit: masking does not wait for a limit
    assert state.window.total < LIMITS["context_char_limit"]
    assert all(t.startswith(PLACEHOLDER_PREFIX) for t in texts[: -(keep + 1)])
    assert not any(t.startswith(PLACEHOLDER_PREFIX) for t in texts[-(keep + 1) :])
    assert set(state.record.compactions) == {"observation_mask"}


@pytest.mark.anyio
async def test_server_leaves_the_history_to_the_api_but_persists_an_oversized_batch(tmp_path):
    state, messages = await prepared(tmp_path, "server")
    assert sum(state.record.compactions.values()) == 0
    assert state.window.total > 40_000
    state, messages = await prepared(tmp_path / "big", "server", turns=1, size=250_000)
    assert set(state.record.compactions) == {"tool_result_budget"}
    assert saved_path(result_texts(messages)[-1])
