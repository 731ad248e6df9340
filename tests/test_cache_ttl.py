"""The prompt cache's 1-hour TTL for a job whose calls go by batch: the breakpoints it sends (and a
live job's, without), the emulator's cache keeping each entry its own TTL on a scaled clock, the split
it reports over real HTTP, and billing's price for 1-hour writes (2x input, against 1.25x)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import anyio
import pytest
from scripted import ScriptedModel, scripted_api

from runner.billing import PromptCache
from runner.models.anthropic import AnthropicModel, request_params
from runner.models.base import Reply, Request
from runner.models.batches import BatchModel
from runner.pricing import PriceTable, Usage

SYSTEM = "You survey code. " * 400  # over the cacheable minimum
REQUEST = Request(
    model="claude-sonnet-5-5",
    messages=[{"role": "user", "content": "Survey this workspace."}],
    tools=[],
    max_tokens=100,
    system=SYSTEM,
)


def breakpoints(params: dict[str, Any]) -> list[dict[str, Any]]:
    found = [b["cache_control"] for b in params.get("system", []) if "cache_control" in b]
    for message in params["messages"]:
        content = message["content"]
        found += [b["cache_control"] for b in content if isinstance(content, list) and "cache_control" in b]
    return found


def test_a_batch_jobs_calls_carry_the_1h_ttl_and_a_live_jobs_do_not() -> None:
    sent: list[tuple[str, Request]] = []

    class Batcher:
        async def create(self, request: Request, *, live: Any) -> Reply:
            sent.append(("batch", request))
            return Reply([], "end_turn")

    class Live:
        name, server_compaction = "live", False

        async def create(self, request: Request) -> Reply:
            sent.append(("live", request))
            return Reply([], "end_turn")

    model = BatchModel(Batcher(), Live(), default="live")  # type: ignore[arg-type]

    async def night() -> None:
        await model.create(replace(REQUEST, delivery="batch"))
        await model.create(replace(REQUEST, delivery="live"))
        await model.create(REQUEST)  # the run's default: live

    anyio.run(night)
    assert [(how, r.cache_ttl) for how, r in sent] == [("batch", "1h"), ("live", "5m"), ("live", "5m")]
    batch_points = breakpoints(request_params(sent[0][1])[0])
    live_points = breakpoints(request_params(sent[1][1])[0])
    assert batch_points and all(p == {"type": "ephemeral", "ttl": "1h"} for p in batch_points)
    assert live_points and all(p == {"type": "ephemeral"} for p in live_points)


def test_batch_cache_ttl_sets_the_ttl_of_a_batch_jobs_calls_as_every_executor_builds_them(
    monkeypatch,
) -> None:
    from runner.config import RunnerSection, SummarizerSection
    from runner.execution.backend import build_backend
    from runner.models.adaptive import AdaptiveLimit

    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")  # the SDK's client reads it; nothing is sent
    built = {}
    for ttl in ("1h", "5m"):
        runner = RunnerSection(delivery="batch", batch_cache_ttl=ttl)  # type: ignore[arg-type]
        model, summarizer = build_backend(  # the local executor's and each Ray worker's way
            "anthropic", runner=runner, summarizer=SummarizerSection(), max_retries=0, calls=AdaptiveLimit(2)
        )
        assert isinstance(model, BatchModel) and isinstance(summarizer.model, BatchModel)
        built[ttl] = (model.cache_ttl, summarizer.model.cache_ttl)
        anyio.run(model.aclose)
    assert built == {"1h": ("1h", "1h"), "5m": ("5m", "5m")}
    assert RunnerSection().batch_cache_ttl == "1h"

    sent: list[Request] = []

    class Batcher:
        async def create(self, request: Request, *, live: Any) -> Reply:
            sent.append(request)
            return Reply([], "end_turn")

    class Live:
        name, server_compaction = "live", False

    five = BatchModel(Batcher(), Live(), cache_ttl="5m")  # type: ignore[arg-type]
    anyio.run(five.create, REQUEST)
    assert [r.cache_ttl for r in sent] == ["5m"]
    points = breakpoints(request_params(sent[0])[0])
    assert points and all(p == {"type": "ephemeral"} for p in points)  # the same body as a live job's


@dataclass(frozen=True)
class Rules:
    cache_ttl_s: float = 300.0
    min_cacheable_tokens: int = 1024
    cache_lookback_blocks: int = 20


def test_the_emulators_cache_keeps_each_entry_its_own_ttl_on_a_scaled_clock() -> None:
    now = [0.0]
    rules = Rules(cache_ttl_s=2.0)  # the emulator's 5 minutes, scaled to 2 s: the hour is 24 s
    cache = PromptCache(clock=lambda: now[0])
    short = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "a" * 8000, "cache_control": {"type": "ephemeral"}}],
        }
    ]
    long = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "b" * 8000, "cache_control": {"type": "ephemeral", "ttl": "1h"}}
            ],
        }
    ]
    assert cache.account("m", None, [], short, 2100, rules) == (0, 2011, 0)
    assert cache.account("m", None, [], long, 2100, rules) == (0, 2011, 2011)
    now[0] = 1.5
    assert cache.account("m", None, [], short, 2100, rules)[0] == 2011  # read: refreshed for 2 s more
    now[0] = 3.6  # 2.1 s after that read: the 5-minute entry is gone, the hour's is not
    assert cache.account("m", None, [], short, 2100, rules) == (0, 2011, 0)
    assert cache.account("m", None, [], long, 2100, rules)[0] == 2011
    now[0] = 3.6 + 23.0  # its read refreshed it for the hour (24 s), not for 2 s
    assert cache.account("m", None, [], long, 2100, rules)[0] == 2011
    now[0] = 3.6 + 23.0 + 24.5
    assert cache.account("m", None, [], long, 2100, rules) == (0, 2011, 2011)


def test_the_emulator_reports_the_1h_writes_and_the_runner_counts_them() -> None:
    """Two calls, each with a prefix of its own (the system prompt differs by one character): each
    writes its whole prefix up to the newest message's breakpoint, 1,726 tokens (4 characters a
    token), the first with the hour's TTL, the second with 5 minutes; the script answers both."""
    script = ScriptedModel([], "Surveyed.")

    async def calls() -> tuple[Reply, Reply]:
        model = AnthropicModel(base_url=api.emulator.base_url, api_key="k", max_retries=0)
        try:
            long = await model.create(replace(REQUEST, cache_ttl="1h"))
            short = await model.create(replace(REQUEST, system=SYSTEM + "!", cache_ttl="5m"))
        finally:
            await model.aclose()
        return long, short

    with scripted_api(script, min_cacheable_tokens=1024) as api:
        long, short = anyio.run(calls)
        billed = api.emulator.stats()["tokens"]
    assert len(script.requests) == 2
    assert long.content == short.content == [{"type": "text", "text": "Surveyed."}]
    written = 1726
    assert (long.usage.cache_creation_input_tokens, long.usage.cache_creation_1h_input_tokens) == (
        written,
        written,
    )
    assert (short.usage.cache_creation_input_tokens, short.usage.cache_creation_1h_input_tokens) == (
        written,
        0,
    )
    assert long.usage.cache_read_input_tokens == short.usage.cache_read_input_tokens == 0
    assert billed["cache_creation_input_tokens"] == 2 * written
    assert billed["cache_creation_1h_input_tokens"] == written
    assert billed["input_tokens"] == long.usage.input_tokens + short.usage.input_tokens


def test_billing_prices_1h_writes_at_twice_the_input_price() -> None:
    table = PriceTable()
    rates = table.rates("claude-sonnet-5-5")
    five = Usage(cache_creation_input_tokens=1_000_000)
    hour = Usage(cache_creation_input_tokens=1_000_000, cache_creation_1h_input_tokens=1_000_000)
    mixed = Usage(cache_creation_input_tokens=1_000_000, cache_creation_1h_input_tokens=400_000)
    assert table.cost("claude-sonnet-5-5", five) == pytest.approx(1.25 * rates.input)
    assert table.cost("claude-sonnet-5-5", hour) == pytest.approx(2.0 * rates.input)
    assert table.cost("claude-sonnet-5-5", mixed) == pytest.approx((0.6 * 1.25 + 0.4 * 2.0) * rates.input)
    priced = PriceTable({"sonnet": {"input": 3.0, "output": 15.0, "cache_write_1h": 9.0}})
    assert priced.cost("claude-sonnet-5-5", hour) == pytest.approx(9.0)
    assert Usage().to_json() == {  # a document with no 1-hour write is written as before
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    assert hour.model_dump()["cache_creation_1h_input_tokens"] == 1_000_000
