"""Prompt caching: where breakpoints go, the settled prefix, observation masking, and the events that
say when a compaction stage cost the cached prefix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scripted import ScriptedModel, files_under, reads, scripted_api

from runner.agent.history import History
from runner.agent.runjob import Services
from runner.agent.session import Session
from runner.compaction.compactor import CompactionState, Compactor
from runner.compaction.summarizer import Summarizer
from runner.compaction.window import Window
from runner.config import Limits
from runner.jobs import JobSpec
from runner.messages import tool_uses
from runner.models.anthropic import AnthropicModel, with_cache_breakpoint
from runner.rundir.store import JobStore, read_jsonl

pytestmark = pytest.mark.anyio


def call(i: int) -> dict:
    return {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": f"t{i}", "name": "read", "input": {}}],
    }


def result(i: int, text: str) -> dict:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": text}]}


def test_breakpoints_go_on_the_newest_message_and_the_given_points_without_touching_the_history():
    history = [{"role": "user", "content": "go"}, call(1), result(1, "x" * 50)]
    marked = with_cache_breakpoint(history, (0,))
    assert marked[0]["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert marked[2]["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in json.dumps(marked[1])
    assert "cache_control" not in json.dumps(history)  # the stored history stays plain


def test_the_settled_prefix_stops_at_the_first_result_micro_compact_would_still_rewrite():
    window = Window()
    window.append({"role": "user", "content": "go"})
    window.append(call(1))
    window.append(result(1, "[Earlier tool result saved at tool-results/t1.txt]"))
    window.append(call(2))
    window.append(result(2, "y" * 500))
    window.append(call(3))
    # before the model has seen them, only messages without a tool result are settled (fit_tool_results
    # may still rewrite an unseen result); the prompt and the first call are
    assert window.settled_prefix() == 2
    window.mark_seen()
    assert window.settled_prefix() == 4  # up to the unsettled 500-char result
    window.append(result(3, "short"))
    assert window.settled_prefix() == 4  # new (unseen) messages never count


async def test_observation_masking_keeps_only_the_newest_results(tmp_path: Path):
    store = JobStore(tmp_path / "job")
    await store.open()
    state = CompactionState(limits=Limits(compaction="mask", keep_recent_results=2), active_request="go")
    history = History(store, state)
    history.add({"role": "user", "content": "go"})
    for i in range(6):
        history.add(call(i))
        history.add(result(i, f"result {i} " + "z" * 300))
        await Compactor(Summarizer(None, "m")).prepare(state, store)
        state.window.mark_seen()
    contents = [
        m["content"][0]["content"]
        for m in state.window.messages
        if m["role"] == "user" and isinstance(m["content"], list)
    ]
    # the newest two seen results stay, and the newest result, which the model has not seen yet
    assert all(c.startswith("[Earlier tool result saved at") for c in contents[:-3])
    assert all(c.startswith("result") for c in contents[-3:])
    events, _ = read_jsonl(store.dir / "events.jsonl")
    assert {e["stage"] for e in events} == {"observation_mask"}
    assert all(
        e["cache_invalidated_from"] is not None for e in events
    )  # each rewrite was inside the sent prefix


async def test_a_cache_aware_session_reads_its_prefix_back_after_compaction(tmp_path: Path):
    """A read of each of 40 modules (3.6 to 13 KB) a turn, with 1,500 characters of notes a reply, in
    a 20,000-character window: tool results are micro-compacted and the history summarized, and each
    of the 41 calls still reads most of its prefix from the cache."""
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(40):
        (ws / f"m{i:02d}.py").write_text(f'"""Module {i}."""\n' + "x = 1\n" * (600 + 40 * i))
    limits = Limits(context_char_limit=20_000, compact_target_ratio=0.5, max_turns=200)
    spec = JobSpec(
        name="cached",
        source=Path("cached.toml"),
        prompt="Survey.",
        workspace=ws,
        model="claude-sonnet-5-5",
        system="You survey code. " * 600,
        tools=("read", "glob", "grep"),
        limits=limits,
    )
    modules = files_under(ws)
    script = ScriptedModel(reads(modules), "Surveyed.", notes=1500)
    with scripted_api(script, record_requests=True, min_cacheable_tokens=256) as api:
        model = AnthropicModel(base_url=api.emulator.base_url, api_key="k", max_retries=0)
        store = JobStore(tmp_path / "job")
        await store.open()
        summarizer = Summarizer(model, "claude-haiku-5-5")
        result_ = await Session(
            spec,
            services=Services(model=model, compactor=Compactor(summarizer), summary_model="claude-haiku-5-5"),
            store=store,
        ).run()
        await model.aclose()
        recorded = api.emulator.state.snapshot()["recorded_requests"]
    assert result_.status == "succeeded", result_.error
    assert result_.turns == len(script.requests) == 41  # each module read once, then the report
    transcript, _ = read_jsonl(store.dir / "transcript.jsonl")
    assert [u["input"]["file_path"] for m in transcript for u in tool_uses(m)] == modules
    job_requests = [r for r in recorded if r.get("tools")]
    assert len(job_requests) == 41
    breakpoints = [json.dumps(r).count('"cache_control"') for r in job_requests]
    assert breakpoints[0] == 2  # the system prompt (with the tools) and the prompt
    assert max(breakpoints) == 4 and min(breakpoints[1:]) >= 3  # tools, system, settled, newest: at most 4
    events, _ = read_jsonl(store.dir / "events.jsonl")
    summaries = [e for e in events if e["stage"] == "compact_history"]
    summary_requests = [r for r in recorded if not r.get("tools")]
    assert len(summary_requests) == len(summaries) == 4
    assert all('"cache_control"' not in json.dumps(r) for r in summary_requests)
    assert any(e["stage"] == "micro_compact" for e in events)
    assert result_.usage.cache_read_input_tokens > result_.usage.cache_creation_input_tokens


def test_a_prefix_cached_before_stays_a_breakpoint_until_a_stage_rewrites_inside_it():
    from runner.compaction.strategies import strategy_for
    from runner.compaction.window import Entry

    window = Window()
    window.append({"role": "user", "content": "go"})
    for i in range(4):
        window.append(call(i))
        window.append(result(i, "r" * 500))
    strategy = strategy_for(Limits())
    # the prompt and the first call are settled (no result), and the newest message
    assert strategy.cache_points(window) == (1, 8)
    window.mark_seen()
    window.append(call(4))
    window.append(result(4, "r" * 500))
    assert window.cached_points() == (1, 8)
    assert strategy.cache_points(window) == (1, 8, 10)  # the longest prefix cached before is read back
    window.mark_seen()
    # micro_compact rewrites result 1 (index 4): the prefixes cached up to 8 and 10 are gone, 1 stays
    entries = list(window.entries)
    entries[4] = Entry.of(result(1, "[Earlier tool result saved at tool-results/t1.txt]"), seen=True)
    window.replace(entries)
    assert window.kept() == 4
    assert window.cached_points() == (1,)
    assert strategy.cache_points(window) == (1, 10)  # settled: up to the unsettled result 0 (index 2)
    assert strategy_for(Limits(cache_aware=False)).cache_points(window) == ()


def test_no_write_past_the_settled_message_when_the_next_call_rewrites_it():
    from runner.compaction.strategies import strategy_for

    window = Window()
    window.append({"role": "user", "content": "go"})
    for i in range(5):
        window.append(call(i))
        window.append(result(i, "r" * 500))
    window.mark_seen()
    mask = strategy_for(Limits(compaction="mask", keep_recent_results=3))
    # five open results, the newest three kept: the next call masks result 0 (index 2) and all after it
    # is new again, so the prefix is cached up to the settled message (1) and no further
    assert mask.cache_points(window) == (1,)
    assert strategy_for(Limits(compaction="mask", keep_recent_results=5)).cache_points(window) == (1, 10)
    # the client pipeline cannot know whether the next call goes over the limit: it always writes
    assert strategy_for(Limits(context_char_limit=2_000)).cache_points(window) == (1, 10)


def test_the_system_prompt_breakpoint_caches_the_tools_and_a_request_sets_at_most_four():
    from runner.models.anthropic import request_params
    from runner.models.base import Request

    history = [{"role": "user", "content": "go"}, call(1), result(1, "x" * 50), call(2), result(2, "y")]
    tools = [{"name": "read", "input_schema": {"type": "object"}}, {"name": "glob", "input_schema": {}}]

    def marks(points: tuple[int, ...], system: str | None = "s") -> tuple[int, dict]:
        request = Request(
            model="m", messages=history, tools=tools, max_tokens=10, system=system, cache_points=points
        )
        params, _ = request_params(request)
        return json.dumps(params).count('"cache_control"'), params

    count, params = marks((0, 2, 4))
    assert count == 4  # system, two points, the newest message
    assert all("cache_control" not in t for t in params["tools"])
    count, params = marks((0, 2))  # the newest message not named: not marked
    assert count == 3 and "cache_control" not in json.dumps(params["messages"][4])
    count, params = marks((), None)  # no point named: the newest message; no system: the last tool
    assert count == 2 and params["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert params["messages"][4]["content"][0]["cache_control"] == {"type": "ephemeral"}
