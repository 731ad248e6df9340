"""The emulator's Message Batches API, driven by the real ``anthropic`` SDK over loopback HTTP."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import anthropic
import anyio
import pytest
from pydantic import ValidationError
from scripted import ScriptedModel, answer_with

from runner.compaction.summarizer import SYSTEM_PROMPT
from runner.config import ConfigError
from runner.emulator.batches import turnaround_of
from runner.emulator.config import Batches, EmulatorConfig
from runner.emulator.faults import fires
from runner.emulator.server import running_emulator
from runner.emulator.tokens import input_tokens

pytestmark = pytest.mark.anyio

TOOLS = [
    {"name": n, "description": n, "input_schema": {"type": "object", "properties": {}}}
    for n in ("glob", "read", "grep")
]
HELLO = [{"role": "user", "content": "Survey the workspace."}]
CACHED_SYSTEM = [{"type": "text", "text": "You survey code. " * 400, "cache_control": {"type": "ephemeral"}}]
CONVERSATION = [
    {"role": "user", "content": "Survey the workspace."},
    {"role": "assistant", "content": [{"type": "text", "text": "I read a.py: it parses flags."}]},
]
SUMMARY_ASK = "<conversation>\n" + "\n".join(json.dumps(m) for m in CONVERSATION) + "\n</conversation>"


def params(messages=HELLO, **extra) -> dict:
    return {"model": "emu-model", "max_tokens": 1000, "messages": messages, "tools": TOOLS, **extra}


# every kind of answer: the replier's, a cache write then a read, a summary, a partial report, too long
MIXED = [
    {"custom_id": "replier", "params": params()},
    {"custom_id": "cache-write", "params": params(system=CACHED_SYSTEM)},
    {"custom_id": "cache-read", "params": params(system=CACHED_SYSTEM)},
    {
        "custom_id": "summary",
        "params": {
            "model": "emu-model",
            "max_tokens": 4000,
            "system": SYSTEM_PROMPT,
            "messages": [{"role": "user", "content": SUMMARY_ASK}],
        },
    },
    {"custom_id": "report", "params": params(tool_choice={"type": "none"})},
    {"custom_id": "too-long", "params": params(messages=[{"role": "user", "content": "x" * 40_000}])},
]
WINDOW = 8_000  # tokens: only "too-long" is over it


def config(**batches) -> EmulatorConfig:
    batches.setdefault("turnaround_s", 0.3)
    return EmulatorConfig(
        record_requests=True, seed=5, context_window_tokens=WINDOW, batches=Batches(**batches)
    )


@pytest.fixture(scope="module")
def server():
    with running_emulator(EmulatorConfig()) as handle:
        yield handle


GLOB = {"type": "tool_use", "id": "toolu_sc0000_0", "name": "glob", "input": {"pattern": "*"}}
FIRST = [{"type": "text", "text": "Turn 1."}, GLOB]  # the replier's answer to a request with tools
REPORT = "Surveyed: nothing to note."  # ... and to one without tools to call (tool_choice none)


@pytest.fixture
def replier() -> ScriptedModel:
    """What answers a request no script or summary answers: one glob, then its report."""
    return ScriptedModel([("glob", {"pattern": "*"})], final=REPORT)


@pytest.fixture
def emu(server, replier):
    """The module's emulator, with a fresh config and zeroed state for each test, answering with
    this test's :func:`replier` (``reconfigure`` keeps it)."""
    server.reconfigure(config())
    answer_with(server, replier)
    return server


def client(handle) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=handle.base_url, api_key="test-key", max_retries=0)


async def ended(c: anthropic.AsyncAnthropic, batch_id: str, timeout: float = 10.0):
    """The batch once it has ended (polled every 20 ms)."""
    deadline = time.monotonic() + timeout
    while (batch := await c.messages.batches.retrieve(batch_id)).processing_status != "ended":
        assert time.monotonic() < deadline, f"batch {batch_id} did not end: {batch}"
        await anyio.sleep(0.02)
    return batch


async def results(c: anthropic.AsyncAnthropic, batch_id: str) -> dict:
    return {line.custom_id: line.result async for line in await c.messages.batches.results(batch_id)}


def answer(message) -> dict:
    """What a reply says, without its id (which is new for every reply)."""
    body = message.model_dump(mode="json", exclude_none=True)
    body.pop("id")
    body["usage"].pop("service_tier")
    return body


def plain(content) -> list[dict]:
    return [b.model_dump(mode="json", exclude_none=True) for b in content]


def requests_of(n: int, prefix: str = "r") -> list[dict]:
    return [
        {"custom_id": f"{prefix}{i}", "params": params([{"role": "user", "content": f"Task {i}."}])}
        for i in range(n)
    ]


# --- a batch answers as live calls do ---------------------------------------------------------------


async def test_a_batch_ends_after_its_turnaround_with_every_answer_a_live_call_gives(emu, replier):
    async with client(emu) as c:
        started = time.monotonic()
        created = await c.messages.batches.create(requests=MIXED)
        assert created.processing_status == "in_progress" and created.type == "message_batch"
        assert created.request_counts.processing == len(MIXED) and created.request_counts.succeeded == 0
        assert created.results_url is None and created.ended_at is None
        assert created.cancel_initiated_at is None
        assert (created.expires_at - created.created_at).total_seconds() == 24 * 3600
        with pytest.raises(anthropic.AnthropicError, match="No `results_url`"):
            await c.messages.batches.results(created.id)
        batch = await ended(c, created.id)
        waited = time.monotonic() - started
        got = await results(c, batch.id)
    assert waited >= 0.3
    assert batch.request_counts.model_dump() == {
        "processing": 0,
        "succeeded": 5,
        "errored": 1,
        "canceled": 0,
        "expired": 0,
    }
    assert batch.ended_at is not None
    assert batch.results_url.endswith(f"/v1/messages/batches/{batch.id}/results")
    assert set(got) == {r["custom_id"] for r in MIXED}
    batch_stats = emu.stats()

    emu.reconfigure(config())  # the same requests, live, in a fresh emulator with the same config
    live: dict = {}
    async with client(emu) as c:
        for request in MIXED:
            try:
                live[request["custom_id"]] = await c.messages.create(**request["params"])
            except anthropic.BadRequestError as e:
                live[request["custom_id"]] = e
    for custom_id, result in got.items():
        if custom_id == "too-long":
            assert result.type == "errored" and result.error.type == "error"
            assert result.error.error.type == "invalid_request_error"
            assert result.error.error.message == live[custom_id].api_message
            assert result.error.error.message.startswith("prompt is too long")
            continue
        assert result.type == "succeeded" and result.message.usage.service_tier == "batch"
        assert answer(result.message) == answer(live[custom_id]), custom_id
    assert got["cache-read"].message.usage.cache_read_input_tokens > 1024
    assert got["summary"].message.content[0].text.startswith("Summary")
    assert plain(got["replier"].message.content) == FIRST and got["replier"].message.stop_reason == "tool_use"
    assert plain(got["report"].message.content) == [{"type": "text", "text": REPORT}]
    assert got["report"].message.stop_reason == "end_turn"
    live_stats = emu.stats()
    # the same tokens as live, all billed at the batch rate
    assert batch_stats["tokens"] == batch_stats["batch_tokens"] == live_stats["tokens"]
    assert batch_stats["summary_requests"] == live_stats["summary_requests"] == 1
    assert batch_stats["batch_requests"] == len(MIXED) and batch_stats["requests"] == 0
    assert batch_stats["batch_outcomes"] == {"succeeded": 5, "errored": 1, "canceled": 0, "expired": 0}
    assert batch_stats["batches"] == {"created": 1, "ended": 1, "canceled": 0}
    assert batch_stats["recorded_requests"] == [r["params"] for r in MIXED]
    # the replier was asked the 4 requests no summary or window answers, in the batch, then live
    assert [r.messages for r in replier.requests] == [HELLO] * 8
    assert live_stats["batch_tokens"] == dict.fromkeys(live_stats["tokens"], 0)


async def test_results_are_computed_once_and_served_the_same_every_time(emu, replier):
    async with client(emu) as c:
        batch = await c.messages.batches.create(requests=requests_of(4))
        await ended(c, batch.id)
        first = await results(c, batch.id)
        after_first = emu.stats()
        second = await results(c, batch.id)
        await anyio.sleep(0.1)
        again = await c.messages.batches.retrieve(batch.id)
    assert {k: r.message.id for k, r in first.items()} == {k: r.message.id for k, r in second.items()}
    assert emu.stats() == after_first and after_first["batch_outcomes"]["succeeded"] == 4
    assert len(replier.requests) == 4 and all(plain(r.message.content) == FIRST for r in first.values())
    assert again.processing_status == "ended" and again.request_counts.succeeded == 4
    url = f"{emu.base_url}/v1/messages/batches/{batch.id}/results"
    raw = [get(url).read() for _ in range(2)]
    assert raw[0] == raw[1] and len(raw[0].splitlines()) == 4


async def test_live_and_batch_tokens_are_tallied_apart(emu):
    async with client(emu) as c:
        live = await c.messages.create(**params())
        batch = await c.messages.batches.create(requests=requests_of(2))
        await ended(c, batch.id)
        got = await results(c, batch.id)
    stats = emu.stats()
    batch_output = sum(r.message.usage.output_tokens for r in got.values())
    assert stats["batch_tokens"]["output_tokens"] == batch_output
    assert stats["tokens"]["output_tokens"] == live.usage.output_tokens + batch_output
    assert stats["requests"] == 1 and stats["outcomes"] == {"ok": 1}


async def test_the_beta_client_uses_the_same_batches(emu):
    async with client(emu) as c:
        batch = await c.beta.messages.batches.create(requests=requests_of(2), betas=["compact-2026-01-12"])
        assert (await c.messages.batches.retrieve(batch.id)).id == batch.id
        deadline = time.monotonic() + 10
        while (await c.beta.messages.batches.retrieve(batch.id)).processing_status != "ended":
            assert time.monotonic() < deadline
            await anyio.sleep(0.02)
        lines = [line async for line in await c.beta.messages.batches.results(batch.id)]
    assert sorted(line.custom_id for line in lines) == ["r0", "r1"]
    assert {line.result.type for line in lines} == {"succeeded"}


# --- validation ---------------------------------------------------------------------------------------


async def test_validation_errors_name_the_request_and_the_field(emu):
    bad = [
        {"custom_id": "ok", "params": params()},
        {"custom_id": "not ok!", "params": params()},
        {"custom_id": "missing", "params": {"model": "emu-model", "messages": HELLO}},
        {"custom_id": "ok", "params": params()},
        {"custom_id": "streamed", "params": params(stream=True)},
        {"custom_id": "x" * 65, "params": params(), "extra": 1},
        {"custom_id": "blocks", "params": params([{"role": "user", "content": [{"type": "text"}]}])},
        {"params": params()},
        "not a request",
    ]
    async with client(emu) as c:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await c.messages.batches.create(requests=bad)
    message = caught.value.api_message
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    for needle in [
        "requests.1.custom_id: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'",
        "requests.2.params.max_tokens: Field required",
        "requests.3.custom_id: custom_id 'ok' is not unique in the batch (also requests.0)",
        "requests.4.params.stream: streaming is not supported in a Message Batch",
        "requests.5.custom_id: String should match pattern",
        "requests.5.extra: Extra inputs are not permitted",
        "requests.6.params.messages.0.content.0.text.text: Field required",
        "requests.7.custom_id: Field required",
        "requests.8: Input should be a valid dictionary",
    ]:
        assert needle in message
    assert not message.startswith("requests.0") and "requests.0." not in message
    assert emu.stats()["batches"]["created"] == 0 and emu.stats()["batch_requests"] == 0


async def test_the_requests_list_is_bounded_in_count_and_bytes(emu):
    emu.config.batches.max_requests = 3
    async with client(emu) as c:
        with pytest.raises(anthropic.BadRequestError, match="at least 1 item"):
            await c.messages.batches.create(requests=[])
        with pytest.raises(anthropic.BadRequestError, match="requests: List should have at most 3 items"):
            await c.messages.batches.create(requests=requests_of(4))
        emu.config.batches.max_request_bytes = 1_000
        with pytest.raises(anthropic.APIStatusError) as caught:
            await c.messages.batches.create(requests=requests_of(3))
    assert caught.value.status_code == 413 and caught.value.body["error"]["type"] == "request_too_large"


def get(url: str, method: str = "GET", key: str | None = "test-key"):
    headers = {"anthropic-version": "2023-06-01", **({"x-api-key": key} if key else {})}
    return urllib.request.urlopen(urllib.request.Request(url, method=method, headers=headers), timeout=5)


def test_batches_need_a_key_and_a_known_id(emu):
    with pytest.raises(urllib.error.HTTPError) as caught:
        get(f"{emu.base_url}/v1/messages/batches", key=None)
    assert caught.value.code == 401
    with pytest.raises(urllib.error.HTTPError) as caught:
        get(f"{emu.base_url}/v1/messages/batches/msgbatch_nope")
    assert caught.value.code == 404 and json.loads(caught.value.read())["error"]["type"] == "not_found_error"


# --- turnaround ---------------------------------------------------------------------------------------


def test_a_random_turnaround_is_seeded_and_within_its_bounds():
    settings = EmulatorConfig(seed=9, batches=Batches(turnaround_s=10.0, turnaround_max_s=20.0))
    times = [turnaround_of(settings, n) for n in range(1, 50)]
    assert times == [turnaround_of(settings, n) for n in range(1, 50)]
    assert all(10.0 <= t <= 20.0 for t in times) and len(set(times)) == len(times)
    assert turnaround_of(EmulatorConfig(batches=Batches(turnaround_s=3.0)), 7) == 3.0
    with pytest.raises(ValidationError, match="turnaround_max_s"):
        Batches(turnaround_s=2.0, turnaround_max_s=1.0)


def test_the_batches_section_loads_from_toml_and_is_strict(tmp_path):
    path = tmp_path / "emulator.toml"
    path.write_text("[batches]\nturnaround_s = 2.5\nturnaround_max_s = 5.0\n[batches.errored]\nrate = 0.1\n")
    loaded = EmulatorConfig.from_toml(path)
    assert loaded.batches.turnaround_max_s == 5.0 and loaded.batches.errored.rate == 0.1
    path.write_text("[batches]\nturnaround = 2\n")
    with pytest.raises(ConfigError, match="batches.turnaround"):
        EmulatorConfig.from_toml(path)


async def test_a_random_turnaround_is_kept(emu):
    emu.reconfigure(config(turnaround_s=0.1, turnaround_max_s=0.6))
    async with client(emu) as c:
        started = time.monotonic()
        batch = await c.messages.batches.create(requests=requests_of(1))
        await ended(c, batch.id)
    assert time.monotonic() - started >= turnaround_of(emu.config, 1)


# --- faults by rate -----------------------------------------------------------------------------------


async def outcomes_with(handle, settings: EmulatorConfig, n: int) -> dict[str, str]:
    handle.reconfigure(settings)
    async with client(handle) as c:
        batch = await c.messages.batches.create(requests=requests_of(n))
        done = await ended(c, batch.id)
        got = await results(c, batch.id)
    counts = done.request_counts
    assert counts.succeeded + counts.errored + counts.expired + counts.canceled == n
    assert sum(r.type == "errored" for r in got.values()) == counts.errored
    return {k: r.type for k, r in got.items()} | {
        f"{k}.error": r.error.error.type for k, r in got.items() if r.type == "errored"
    }


async def test_errored_and_expired_requests_by_rate_are_reproducible(emu):
    settings = config(turnaround_s=0.05, errored={"rate": 0.3}, expired={"rate": 0.3})
    first = await outcomes_with(emu, settings, 30)
    assert first == await outcomes_with(
        emu, config(turnaround_s=0.05, errored={"rate": 0.3}, expired={"rate": 0.3}), 30
    )
    for i in range(30):
        number = i + 1  # the batch's requests are the emulator's first
        expected = (
            "errored"
            if fires(settings.batches.errored, 5, "batch_errored", number)
            else "expired"
            if fires(settings.batches.expired, 5, "batch_expired", number)
            else "succeeded"
        )
        assert first[f"r{i}"] == expected
    assert {"errored", "expired", "succeeded"} <= set(first.values())
    assert {v for k, v in first.items() if k.endswith(".error")} == {"overloaded_error"}
    stats = emu.stats()
    assert stats["batch_outcomes"]["errored"] == sum(v == "errored" for v in first.values())
    assert stats["batch_tokens"]["output_tokens"] > 0


async def test_errored_by_schedule_counts_requests_across_batches(emu):
    emu.reconfigure(config(turnaround_s=0.05, errored={"schedule": [4]}, errored_type="api_error"))
    async with client(emu) as c:
        first = await c.messages.batches.create(requests=requests_of(3, "a"))
        second = await c.messages.batches.create(requests=requests_of(3, "b"))
        await ended(c, first.id)
        await ended(c, second.id)
        got = {**await results(c, first.id), **await results(c, second.id)}
    assert [k for k, r in got.items() if r.type == "errored"] == ["b0"]
    assert got["b0"].error.error.type == "api_error"
    assert got["b0"].error.error.message == "Internal server error"


async def test_a_batch_that_cancels_itself_ends_via_canceling(emu):
    emu.reconfigure(config(turnaround_s=0.6, cancel_s=0.15, canceling={"schedule": [1]}))
    statuses = []
    async with client(emu) as c:
        batch = await c.messages.batches.create(requests=requests_of(20))
        deadline = time.monotonic() + 10
        while (seen := await c.messages.batches.retrieve(batch.id)).processing_status != "ended":
            statuses.append(seen.processing_status)
            assert time.monotonic() < deadline
            await anyio.sleep(0.02)
        got = await results(c, batch.id)
    assert "canceling" in statuses and statuses[0] == "in_progress"
    assert seen.cancel_initiated_at is not None and seen.ended_at >= seen.cancel_initiated_at
    counts = seen.request_counts
    assert 1 <= counts.canceled < 20 and counts.succeeded == 20 - counts.canceled
    answered = [f"r{i}" for i in range(20) if got[f"r{i}"].type == "succeeded"]
    assert answered == [f"r{i}" for i in range(len(answered))]  # worked through in order, the rest canceled
    assert emu.stats()["batches"] == {"created": 1, "ended": 1, "canceled": 1}
    assert emu.stats()["batch_outcomes"]["canceled"] == seen.request_counts.canceled


# --- cancel, delete, list, reset ----------------------------------------------------------------------


async def test_cancel_then_canceling_then_ended_with_unprocessed_requests_canceled(emu):
    emu.reconfigure(config(turnaround_s=2.0, cancel_s=0.2))
    async with client(emu) as c:
        batch = await c.messages.batches.create(requests=requests_of(10))
        with pytest.raises(anthropic.BadRequestError, match="cancel it before deleting it"):
            await c.messages.batches.delete(batch.id)
        with pytest.raises(anthropic.BadRequestError, match="has not finished processing"):
            await c.get(f"/v1/messages/batches/{batch.id}/results", cast_to=object)
        await anyio.sleep(0.6)  # about 3 of the 10 requests worked through
        canceling = await c.messages.batches.cancel(batch.id)
        assert canceling.processing_status == "canceling" and canceling.cancel_initiated_at is not None
        assert (await c.messages.batches.retrieve(batch.id)).processing_status == "canceling"
        again = await c.messages.batches.cancel(batch.id)  # already canceling: nothing changes
        assert again.cancel_initiated_at == canceling.cancel_initiated_at
        done = await ended(c, batch.id)
        got = await results(c, batch.id)
        with pytest.raises(anthropic.BadRequestError, match="has ended and cannot be canceled"):
            await c.messages.batches.cancel(batch.id)
        deleted = await c.messages.batches.delete(batch.id)
        with pytest.raises(anthropic.NotFoundError):
            await c.messages.batches.retrieve(batch.id)
    assert deleted.id == batch.id and deleted.type == "message_batch_deleted"
    assert (done.ended_at - done.cancel_initiated_at).total_seconds() == pytest.approx(0.2, abs=0.15)
    answered = [k for k, r in got.items() if r.type == "succeeded"]
    assert 1 <= len(answered) <= 8 and sorted(answered) == [f"r{i}" for i in range(len(answered))]
    assert done.request_counts.canceled == 10 - len(answered)
    assert {r.type for k, r in got.items() if k not in answered} == {"canceled"}


async def test_list_pages_newest_first_with_both_cursors(emu):
    emu.reconfigure(config(turnaround_s=60.0))
    async with client(emu) as c:
        ids = [(await c.messages.batches.create(requests=requests_of(1))).id for _ in range(5)]
        newest = ids[::-1]
        first = await c.messages.batches.list(limit=2)
        assert [b.id for b in first.data] == newest[:2] and first.has_more
        assert first.first_id == newest[0] and first.last_id == newest[1]
        assert [b.id async for b in await c.messages.batches.list(limit=2)] == newest  # the SDK pages on
        after = await c.messages.batches.list(after_id=newest[3], limit=5)
        assert [b.id for b in after.data] == newest[4:] and after.has_more is False
        before = await c.messages.batches.list(before_id=newest[3], limit=2)
        assert [b.id for b in before.data] == newest[1:3] and before.has_more
        assert [b.id for b in (await before.get_next_page()).data] == newest[:1]
        assert [b.id for b in (await c.messages.batches.list()).data] == newest
        with pytest.raises(anthropic.BadRequestError, match="limit"):
            await c.messages.batches.list(limit=0)
        with pytest.raises(anthropic.BadRequestError, match="after_id"):
            await c.messages.batches.list(after_id="msgbatch_nope")
        assert {b.processing_status for b in first.data} == {"in_progress"}


async def test_reset_forgets_batches_and_their_timers(emu):
    async with client(emu) as c:
        batch = await c.messages.batches.create(requests=requests_of(2))
        reset = urllib.request.Request(f"{emu.base_url}/_emulator/reset", method="POST")
        with urllib.request.urlopen(reset) as r:
            assert json.loads(r.read())["batches"] == {"created": 0, "ended": 0, "canceled": 0}
        await anyio.sleep(0.5)  # past the old batch's turnaround
        with pytest.raises(anthropic.NotFoundError):
            await c.messages.batches.retrieve(batch.id)
        assert (await c.messages.batches.list()).data == []
    stats = emu.stats()
    assert stats["batches"]["ended"] == 0 and stats["batch_outcomes"]["succeeded"] == 0
    assert stats["tokens"] == dict.fromkeys(stats["tokens"], 0)


def test_the_too_long_request_is_over_the_window():
    assert input_tokens(None, MIXED[-1]["params"]["messages"], TOOLS) > WINDOW
    assert all(
        input_tokens(r["params"].get("system"), r["params"]["messages"], r["params"].get("tools", []))
        <= WINDOW
        for r in MIXED[:-1]
    )
