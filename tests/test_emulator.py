"""The Messages-API emulator, driven by the real ``anthropic`` SDK over loopback HTTP."""

from __future__ import annotations

import json
import math
import os
import re
import socket
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from argparse import Namespace
from pathlib import Path

import anthropic
import anyio
import pytest
from pydantic import ValidationError
from scripted import ScriptedModel, answer_with

from runner.compaction.fallback import fallback_summary
from runner.compaction.summarizer import Summarizer
from runner.config import ConfigError
from runner.emulator.cli import serve
from runner.emulator.compaction import SERVER_SUMMARY_CHARS, compacted_view, effective_view, summary_input
from runner.emulator.config import EmulatorConfig, Fault
from runner.emulator.faults import fires
from runner.emulator.server import running_emulator
from runner.emulator.tokens import input_tokens
from runner.messages import request_problems
from runner.models.anthropic import AnthropicModel, is_prompt_too_long
from runner.models.base import PromptTooLong, Request
from runner.protocol import COMPACTION_BLOCK_HEAD

pytestmark = pytest.mark.anyio

TOOLS = [
    {"name": n, "description": n, "input_schema": {"type": "object", "properties": {}}}
    for n in ("glob", "read", "grep")
]
HELLO = [{"role": "user", "content": "Survey the workspace."}]
ROOT = "/ws"
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def server():
    with running_emulator(EmulatorConfig()) as handle:
        yield handle


GLOB = {"type": "tool_use", "id": "toolu_sc0000_0", "name": "glob", "input": {"pattern": "*"}}
FIRST = [{"type": "text", "text": "Turn 1."}, GLOB]  # the replier's answer to a request without its calls
REPORT = "Surveyed: nothing to note."  # ... to one that carries them, or whose tool_choice is none


@pytest.fixture
def replier() -> ScriptedModel:
    """What answers a request no script or summary answers (the emulator's replier): one glob, then
    its report."""
    return ScriptedModel([("glob", {"pattern": "*"})], final=REPORT)


@pytest.fixture
def emu(server, replier):
    """The module's emulator, with a fresh config and zeroed counters for each test, answering with
    this test's :func:`replier`."""
    server.reconfigure(EmulatorConfig(record_requests=True))
    answer_with(server, replier)
    return server


def client(handle, **kwargs) -> anthropic.AsyncAnthropic:
    kwargs.setdefault("max_retries", 0)
    return anthropic.AsyncAnthropic(base_url=handle.base_url, api_key="test-key", **kwargs)


async def create(c: anthropic.AsyncAnthropic, messages=HELLO, **kwargs):
    kwargs.setdefault("tools", TOOLS)
    return await c.messages.create(model="emu-model", max_tokens=1000, messages=messages, **kwargs)


def survey_history(files: dict[str, int], turns: int) -> list[dict]:
    """A survey of a fake workspace (file name -> size in characters) for ``turns`` (at most 3) turns,
    ending with the last turn's tool results: a glob, a read of every file, a grep for TODO. Its ids
    (``toolu_h<turn>_<k>``) are not the replier's, which answers it as a request without its calls."""
    calls = [
        [("glob", {"pattern": "**/*.py"})],
        [("read", {"file_path": f"{ROOT}/{name}"}) for name in files],
        [("grep", {"pattern": "TODO"})],
    ]
    history = list(HELLO)
    for turn, step in enumerate(calls[:turns]):
        uses = [
            {"type": "tool_use", "id": f"toolu_h{turn}_{k}", "name": name, "input": args}
            for k, (name, args) in enumerate(step)
        ]
        history.append({"role": "assistant", "content": [{"type": "text", "text": f"Step {turn}."}, *uses]})
        results = []
        for use in uses:
            if use["name"] == "glob":
                output = "\n".join(f"{ROOT}/{name}" for name in files)
            elif use["name"] == "read":
                output = '"""Module doc."""\n' + "x = 1\n" * (
                    files[use["input"]["file_path"][len(ROOT) + 1 :]] // 6
                )
            else:
                output = "no matches"
            results.append({"type": "tool_result", "tool_use_id": use["id"], "content": output})
        history.append({"role": "user", "content": results})
    return history


BIG_WORKSPACE = {
    "a0.py": 60_000,
    "a1.py": 60_000,
    "a2.py": 60_000,
    "a3.py": 60_000,
    "b0.py": 600,
    "b1.py": 600,
}


def plain(content) -> list[dict]:
    return [b.model_dump(mode="json", exclude_none=True) for b in content]


# --- replies ------------------------------------------------------------------------------------


async def test_valid_request_gets_the_repliers_reply(emu, replier):
    async with client(emu) as c:
        response = await create(c)
    content = FIRST
    assert response.id.startswith("msg_") and response.role == "assistant" and response.type == "message"
    assert response.model == "emu-model" and response.stop_sequence is None
    assert response.stop_reason == "tool_use" and plain(response.content) == content
    [asked] = replier.requests  # the replier was asked the request as sent
    assert (asked.model, asked.messages, asked.tools, asked.max_tokens) == ("emu-model", HELLO, TOOLS, 1000)
    expected_in = math.ceil(len(json.dumps([None, HELLO, TOOLS], ensure_ascii=False)) / 4)
    assert response.usage.input_tokens == expected_in
    assert response.usage.output_tokens == math.ceil(len(json.dumps(content, ensure_ascii=False)) / 4)
    assert response.usage.cache_read_input_tokens == 0 and response.usage.cache_creation_input_tokens == 0
    stats = emu.stats()
    assert stats["outcomes"] == {"ok": 1} and stats["tokens"]["input_tokens"] == expected_in


async def test_count_tokens_matches_the_estimate(emu):
    async with client(emu) as c:
        counted = await c.messages.count_tokens(model="emu-model", messages=HELLO, tools=TOOLS)
    assert counted.input_tokens == input_tokens(None, HELLO, TOOLS)


async def test_scripted_replies_are_served_in_order_then_the_replier(emu, replier):
    emu.set_script(
        [
            {"content": "first", "stop_reason": "end_turn"},
            {"content": [{"type": "text", "text": "second"}], "stop_reason": "max_tokens"},
        ]
    )
    async with client(emu) as c:
        replies = [await create(c) for _ in range(3)]
    assert [r.content[0].text for r in replies[:2]] == ["first", "second"]
    assert [r.stop_reason for r in replies] == ["end_turn", "max_tokens", "tool_use"]
    assert plain(replies[2].content) == FIRST and len(replier.requests) == 1  # asked by the third alone


async def test_enforced_max_tokens_cuts_the_reply(emu):
    emu.config.enforce_max_tokens = True
    emu.set_script([{"content": "word " * 400}])
    async with client(emu) as c:
        response = await c.messages.create(model="m", max_tokens=50, messages=HELLO)
    assert response.stop_reason == "max_tokens" and 0 < len(response.content[0].text) <= 200


# --- validation ---------------------------------------------------------------------------------

ORPHAN = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "?"}]}]
TWO_USERS = [*HELLO, {"role": "user", "content": "again"}]
ASSISTANT_FIRST = [{"role": "assistant", "content": "hello"}, *HELLO]
UNANSWERED = [
    *HELLO,
    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "glob", "input": {}}]},
    {"role": "user", "content": "no result"},
]
NULL_CALLER = [
    *HELLO,
    {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "t1", "name": "glob", "input": {}, "caller": None}],
    },
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
]
EMPTY_TEXT = [{"role": "user", "content": [{"type": "text", "text": ""}]}]


@pytest.mark.parametrize(
    ("messages", "needle"),
    [
        (ORPHAN, "has no matching tool_use"),
        (TWO_USERS, "roles must alternate"),
        (ASSISTANT_FIRST, "first message must use the user role"),
        (UNANSWERED, "without tool_result blocks"),
        (NULL_CALLER, "caller"),
        (EMPTY_TEXT, "must be non-empty"),
    ],
)
async def test_invalid_messages_are_a_400(emu, messages, needle):
    async with client(emu) as c:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await create(c, messages)
    assert caught.value.status_code == 400 and caught.value.type == "invalid_request_error"
    assert needle in caught.value.api_message
    assert emu.state.outcomes["400"] == 1


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"model": "m", "messages": HELLO}, "max_tokens: Field required"),
        (
            {"model": "m", "messages": HELLO, "max_tokens": 0},
            "max_tokens: Input should be greater than or equal to 1",
        ),
        ({"messages": HELLO, "max_tokens": 10}, "model: Field required"),
        ({"model": "m", "messages": HELLO, "max_tokens": 10, "surprise": 1}, "surprise: Extra inputs"),
        (
            {"model": "m", "messages": HELLO, "max_tokens": 10, "tools": [{"name": "t"}]},
            "tools.0.custom.input_schema: Field required",
        ),
        (
            {
                "model": "m",
                "messages": HELLO,
                "max_tokens": 10,
                "tools": [{"input_schema": {"type": "object"}}],
            },
            "tools.0.custom.name: Field required",
        ),
        (
            {"model": "m", "messages": HELLO, "max_tokens": 10, "system": [{"type": "image", "source": {}}]},
            "system.0",
        ),
        (
            {"model": "m", "messages": HELLO, "max_tokens": 10, "system": 5},
            "system: Input should be a valid list",
        ),
        (
            {
                "model": "m",
                "messages": HELLO,
                "max_tokens": 10,
                "system": [{"type": "text", "text": "s", "cache_control": {"type": "forever"}}],
            },
            "cache_control",
        ),
        (
            {"model": "m", "max_tokens": 10, "context_management": {"edits": []}, "messages": HELLO},
            "context_management: needs the anthropic-beta header",
        ),
    ],
)
async def test_invalid_bodies_are_a_400(emu, body, needle):
    async with client(emu) as c:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await c.post("/v1/messages", cast_to=object, body=body)
    assert needle in caught.value.api_message


async def test_cache_control_is_allowed_on_blocks_but_at_most_four(emu):
    cc = {"type": "ephemeral"}
    system = [{"type": "text", "text": "sys", "cache_control": cc}]
    tools = [{**TOOLS[0], "cache_control": cc}, *TOOLS[1:]]
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "a", "cache_control": cc},
                {"type": "text", "text": "b", "cache_control": {**cc, "ttl": "1h"}},
            ],
        }
    ]
    async with client(emu) as c:
        assert (await create(c, messages, system=system, tools=tools)).stop_reason == "tool_use"
        messages[0]["content"].append({"type": "text", "text": "c", "cache_control": cc})
        with pytest.raises(anthropic.BadRequestError, match="A maximum of 4 blocks"):
            await create(c, messages, system=system, tools=tools)


def test_a_missing_api_key_is_a_401(emu):
    request = urllib.request.Request(
        emu.base_url + "/v1/messages",
        data=b"{}",
        method="POST",
        headers={"content-type": "application/json", "anthropic-version": "2023-06-01"},
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=5)
    assert caught.value.code == 401
    assert json.loads(caught.value.read())["error"]["type"] == "authentication_error"
    assert emu.state.outcomes["401"] == 1 and emu.state.requests == 0


async def test_a_configured_api_key_must_match(emu):
    emu.config.api_key = "right"
    async with client(emu) as c:
        with pytest.raises(anthropic.AuthenticationError):
            await create(c)


def test_a_body_over_the_byte_limit_is_a_413(emu):
    emu.config.max_request_bytes = 10
    request = urllib.request.Request(
        emu.base_url + "/v1/messages",
        data=json.dumps({"x": "y" * 20}).encode(),
        method="POST",
        headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=5)
    assert caught.value.code == 413
    assert json.loads(caught.value.read())["error"]["type"] == "request_too_large"


async def test_over_the_context_window_is_prompt_too_long(emu):
    emu.config.context_window_tokens = 50
    async with client(emu) as c:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await create(c)
    total = input_tokens(None, HELLO, TOOLS)
    assert caught.value.api_message == f"prompt is too long: {total} tokens > 50 maximum"
    assert is_prompt_too_long(caught.value)
    model = AnthropicModel(base_url=emu.base_url, api_key="test-key", max_retries=0)
    with pytest.raises(PromptTooLong):
        await model.create(Request(model="m", messages=HELLO, tools=TOOLS, max_tokens=100))
    await model.aclose()


# --- faults and rate limits ---------------------------------------------------------------------


async def test_429_with_retry_after_is_retried_by_the_sdk(emu):
    emu.config.faults.rate_limit.schedule = [1, 2]
    emu.config.retry_after_s = 0.3
    emu.config.retry_after_ms = True
    async with client(emu, max_retries=3) as c:
        started = time.monotonic()
        response = await create(c)
        waited = time.monotonic() - started
    assert response.stop_reason == "tool_use"
    assert emu.state.outcomes["429"] == 2 and emu.state.outcomes["ok"] == 1
    assert waited >= 0.6  # two retry-after waits of 0.3 s were honoured


async def test_429_carries_the_api_headers(emu):
    emu.config.faults.rate_limit.schedule = [1]
    emu.config.rpm = 50
    async with client(emu) as c:
        with pytest.raises(anthropic.RateLimitError) as caught:
            await create(c)
    headers = caught.value.response.headers
    assert headers["retry-after"] == "1" and headers["x-should-retry"] == "true"
    assert headers["anthropic-ratelimit-requests-limit"] == "50"
    assert caught.value.type == "rate_limit_error"


@pytest.mark.parametrize(
    ("fault", "outcome", "error"),
    [
        ("overloaded", "529", anthropic.OverloadedError),
        ("server_error", "500", anthropic.InternalServerError),
        ("drop", "dropped", anthropic.APIConnectionError),
    ],
)
async def test_transient_faults_are_retried_and_succeed(emu, fault, outcome, error):
    getattr(emu.config.faults, fault).schedule = [1, 3]
    async with client(emu) as c:
        with pytest.raises(error):
            await create(c)  # request 1, no retries
    async with client(emu, max_retries=2) as c:
        response = await create(c)  # request 2 succeeds
        response = await create(c)  # request 3 fails, its retry (4) succeeds
    assert response.stop_reason == "tool_use"
    assert emu.state.outcomes[outcome] == 2 and emu.state.outcomes["ok"] == 2


async def test_a_response_slower_than_the_client_timeout_is_retried(emu):
    emu.config.faults.slow.schedule = [1, 2]
    emu.config.slow_s = 10
    async with client(emu, timeout=0.5) as c:
        with pytest.raises(anthropic.APITimeoutError):
            await create(c)
    async with client(emu, timeout=0.5, max_retries=2) as c:
        assert (await create(c)).stop_reason == "tool_use"
    assert emu.state.outcomes["slow"] == 2 and emu.state.outcomes["ok"] == 1


async def test_faults_by_rate_are_reproducible():
    fault = Fault(rate=0.3)
    first = [fires(fault, 7, "overloaded", n) for n in range(1, 200)]
    assert first == [fires(fault, 7, "overloaded", n) for n in range(1, 200)]
    assert 30 < sum(first) < 90


async def test_rpm_is_enforced_over_a_sliding_window(emu):
    emu.config.rpm = 2
    emu.config.window_s = 1.0
    emu.config.retry_after_ms = True
    outcomes: list[str] = []
    async with client(emu) as c:

        async def one() -> None:
            try:
                await create(c)
                outcomes.append("ok")
            except anthropic.RateLimitError as e:
                assert e.response.headers["anthropic-ratelimit-requests-remaining"] == "0"
                assert 0 < float(e.response.headers["retry-after-ms"]) <= 1000
                outcomes.append("429")

        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(one)
    assert sorted(outcomes) == ["429"] * 3 + ["ok"] * 2
    assert emu.stats()["requests_in_window"] <= 2
    async with client(emu, max_retries=4) as c:  # the SDK waits out the window and gets through
        for _ in range(3):
            await create(c)
    assert emu.state.outcomes["ok"] == 5


async def test_input_tokens_per_minute_is_enforced(emu):
    tokens = input_tokens(None, HELLO, TOOLS)
    emu.config.input_tokens_per_minute = tokens + 10
    async with client(emu) as c:
        await create(c)
        with pytest.raises(anthropic.RateLimitError) as caught:
            await create(c)
    headers = caught.value.response.headers
    assert headers["anthropic-ratelimit-input-tokens-limit"] == str(tokens + 10)
    assert headers["anthropic-ratelimit-input-tokens-remaining"] == "10"


async def test_latency_and_peak_concurrency(emu):
    emu.config.latency.seconds = 0.3
    async with client(emu) as c, anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(create, c)
    stats = emu.stats()
    assert stats["peak_concurrent"] == 5 and stats["concurrent"] == 0 and stats["outcomes"]["ok"] == 5


def test_stats_endpoint(emu):
    with urllib.request.urlopen(emu.base_url + "/_emulator/stats", timeout=5) as response:
        stats = json.loads(response.read())
    assert {
        "requests",
        "outcomes",
        "peak_concurrent",
        "requests_in_window",
        "tokens",
        "compactions",
        "recorded_requests",
    } <= set(stats)


# --- prompt caching -----------------------------------------------------------------------------


async def test_an_identical_prefix_is_read_from_the_cache(emu):
    system = [{"type": "text", "text": "You survey code. " * 400, "cache_control": {"type": "ephemeral"}}]
    async with client(emu) as c:
        first = await create(c, system=system)
        second = await create(c, system=system)
        other_model = await c.messages.create(model="other", max_tokens=100, messages=HELLO, system=system)
    assert first.usage.cache_creation_input_tokens > 1024 and first.usage.cache_read_input_tokens == 0
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens == 0
    assert second.usage.input_tokens == first.usage.input_tokens
    assert other_model.usage.cache_read_input_tokens == 0  # the cache is per model
    small = [{"type": "text", "text": "short", "cache_control": {"type": "ephemeral"}}]
    async with client(emu) as c:
        for _ in range(2):
            assert (await create(c, system=small)).usage.cache_read_input_tokens == 0  # under 1024 tokens


async def test_the_runner_reads_the_prefix_its_previous_turn_wrote(emu):
    """AnthropicModel puts a breakpoint on the newest message: the next turn reads it (lookback)."""
    model = AnthropicModel(base_url=emu.base_url, api_key="test-key", max_retries=0)
    history = survey_history({"a.py": 3_000, "b.py": 3_000}, turns=2)
    first = await model.create(
        Request(model="m", messages=history, tools=TOOLS, max_tokens=1000, system="sys")
    )
    results = [
        {"type": "tool_result", "tool_use_id": b["id"], "content": "1"}
        for b in first.content
        if b["type"] == "tool_use"
    ]
    history = [*history, first.message(), {"role": "user", "content": results}]
    second = await model.create(
        Request(model="m", messages=history, tools=TOOLS, max_tokens=1000, system="sys")
    )
    await model.aclose()
    assert first.usage.cache_creation_input_tokens > 1024
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens > 0


# --- server-side compaction ---------------------------------------------------------------------

EDIT = {"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 50_000}}]}


async def test_server_compaction_returns_a_compaction_block_and_iterations(emu, replier):
    history = survey_history(BIG_WORKSPACE, turns=3)
    async with client(emu) as c:
        small = await c.beta.messages.create(
            model="m",
            max_tokens=1000,
            messages=HELLO,
            tools=TOOLS,
            context_management=EDIT,
            betas=["compact-2026-01-12"],
        )
        assert plain(small.content) == FIRST and small.usage.iterations is None
        response = await c.beta.messages.create(
            model="m",
            max_tokens=1000,
            messages=history,
            tools=TOOLS,
            context_management=EDIT,
            betas=["compact-2026-01-12"],
        )
    content = plain(response.content)
    assert content[0]["type"] == "compaction"
    assert content[0]["content"] == fallback_summary(summary_input(history), SERVER_SUMMARY_CHARS)
    iterations = [it.model_dump() for it in response.usage.iterations]
    assert [it["type"] for it in iterations] == ["compaction", "message"]
    assert iterations[0]["input_tokens"] > 50_000
    assert (
        response.usage.input_tokens == iterations[1]["input_tokens"] < 50_000
    )  # top level: the message only
    assert response.usage.output_tokens == iterations[1]["output_tokens"]
    # The replier answered from the compacted view: the summary as the first user turn, then the
    # last exchange (the grep and its result), nothing of the reads before it.
    asked = replier.requests[-1].messages
    assert asked == compacted_view(content[0]["content"], history) and len(asked) == 3
    assert asked[0]["content"] == COMPACTION_BLOCK_HEAD + content[0]["content"] and asked[1:] == history[-2:]
    assert content[1:] == FIRST and response.stop_reason == "tool_use"
    assert emu.state.compactions == 1

    # The next turn: the API reads from the compaction block on, so no new compaction, and the
    # replier is asked that view: the block's notes, then the exchange after it.
    calls = [b for b in content if b["type"] == "tool_use"]
    history = [
        *history,
        {"role": "assistant", "content": content},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": b["id"], "content": "no matches"} for b in calls
            ],
        },
    ]
    async with client(emu) as c:
        follow = await c.beta.messages.create(
            model="m",
            max_tokens=1000,
            messages=history,
            tools=TOOLS,
            context_management=EDIT,
            betas=["compact-2026-01-12"],
        )
    assert follow.content[0].type != "compaction" and emu.state.compactions == 1
    view = effective_view(history)
    assert view[0]["content"].startswith("[Compacted]\n") and len(view) == 3
    assert replier.requests[-1].messages == view and len(replier.requests) == 3
    assert plain(follow.content) == [{"type": "text", "text": REPORT}]  # the report, after its glob
    assert follow.stop_reason == "end_turn"
    assert follow.usage.input_tokens < 50_000


async def test_the_beta_path_is_served_with_or_without_the_query(emu):
    async with client(emu) as c:
        beta = await c.beta.messages.create(
            model="m", max_tokens=100, messages=HELLO, betas=["compact-2026-01-12"]
        )
        queried = await c.post(
            "/v1/messages?beta=true",
            cast_to=object,
            body={"model": "m", "max_tokens": 100, "messages": HELLO},
        )
    assert beta.type == "message" and queried["type"] == "message"


async def test_pause_after_compaction_returns_only_the_compaction(emu):
    edit = {
        "edits": [{**EDIT["edits"][0], "pause_after_compaction": True, "instructions": "Keep file notes."}]
    }
    async with client(emu) as c:
        response = await c.beta.messages.create(
            model="m",
            max_tokens=1000,
            messages=survey_history(BIG_WORKSPACE, 3),
            tools=TOOLS,
            context_management=edit,
            betas=["compact-2026-01-12"],
        )
    assert response.stop_reason == "compaction" and [b.type for b in response.content] == ["compaction"]
    assert [it.type for it in response.usage.iterations] == [
        "compaction"
    ] and response.usage.input_tokens == 0


async def test_compaction_settings_are_validated(emu):
    low = {"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 10_000}}]}
    async with client(emu) as c:
        with pytest.raises(anthropic.BadRequestError, match="at least 50000"):
            await c.beta.messages.create(
                model="m", max_tokens=10, messages=HELLO, context_management=low, betas=["compact-2026-01-12"]
            )
        with pytest.raises(anthropic.BadRequestError, match="anthropic-beta"):
            await c.beta.messages.create(model="m", max_tokens=10, messages=HELLO, context_management=EDIT)


async def test_the_runner_backend_sums_server_compaction_iterations(emu):
    model = AnthropicModel(base_url=emu.base_url, api_key="test-key", max_retries=0)
    reply = await model.create(
        Request(
            model="m",
            messages=survey_history(BIG_WORKSPACE, turns=3),
            tools=TOOLS,
            max_tokens=1000,
            context_management=EDIT,
        )
    )
    await model.aclose()
    assert reply.content[0]["type"] == "compaction"
    assert reply.usage.input_tokens > 50_000  # compaction + message iterations
    assert reply.usage.input_tokens == sum(emu.state.tokens[k] for k in ("input_tokens",))


# --- the runner's own calls ---------------------------------------------------------------------


async def test_the_runner_backend_gets_the_repliers_reply(emu, replier):
    model = AnthropicModel(base_url=emu.base_url, api_key="test-key", max_retries=2)
    emu.config.faults.overloaded.schedule = [1]
    reply = await model.create(
        Request(model="m", messages=HELLO, tools=TOOLS, max_tokens=1000, system="Be brief.")
    )
    await model.aclose()
    as_sent = [
        {"role": "user", "content": [{"type": "text", "text": HELLO[0]["content"]}]}
    ]  # cache_control dropped
    assert (reply.content, reply.stop_reason) == (FIRST, "tool_use")
    [asked] = replier.requests  # once: the 529 came before any reply
    assert asked.messages == as_sent and asked.tools == TOOLS
    assert reply.usage.input_tokens > 0 and reply.usage.output_tokens > 0 and not reply.estimated
    assert emu.state.outcomes["529"] == 1
    recorded = emu.stats()["recorded_requests"]
    assert len(recorded) == 2 and all(request_problems(r["messages"]) == [] for r in recorded)


async def test_summary_requests_get_the_fallback_summary(emu):
    model = AnthropicModel(base_url=emu.base_url, api_key="test-key", max_retries=0)
    history = survey_history({"a.py": 600, "b.py": 600}, turns=2)
    summary = await Summarizer(model, "summary-model").summarize(history, "Survey the workspace.")
    await model.aclose()
    assert summary.text == fallback_summary(history)
    assert emu.state.summary_requests == 1 and summary.usage.output_tokens > 0


async def test_cut_summary_input_skips_the_marker_line(emu):
    model = AnthropicModel(base_url=emu.base_url, api_key="test-key", max_retries=0)
    history = survey_history({"a.py": 3_000, "b.py": 3_000, "c.py": 3_000}, turns=2)
    summarizer = Summarizer(model, "summary-model", max_input_chars=4_000)
    summary = await summarizer.summarize(history, "Survey the workspace.")
    await model.aclose()
    assert summary.text.startswith("Summary built without a model from")


# --- the command line ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stats_when_up(url: str) -> dict:
    for _ in range(200):
        try:
            with urllib.request.urlopen(url + "/_emulator/stats", timeout=5) as response:
                return json.loads(response.read())
        except urllib.error.URLError:
            time.sleep(0.05)
    pytest.fail("runner emulate did not answer")


def test_runner_emulate_serves_until_terminated():
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "runner", "emulate", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        banner, env_line = process.stdout.readline(), process.stdout.readline()
        url = f"http://127.0.0.1:{port}"
        assert url in banner
        assert env_line.strip() == f"ANTHROPIC_BASE_URL={url} ANTHROPIC_API_KEY=emulator-key"
        assert stats_when_up(url)["requests"] == 0
    finally:
        process.terminate()
        assert process.wait(timeout=10) in (0, -15)  # uvicorn re-raises SIGTERM after a graceful stop


def test_the_readmes_emulator_commands_work_as_written(tmp_path):
    """The shipped ``emulator.toml`` (served in process; ``runner emulate`` itself is tested above),
    then ``runner run`` from the top of the repository against it, as the README says (one demo job,
    to keep it short): the shipped faults happen, the SDK retries them, the job succeeds."""
    with running_emulator(EmulatorConfig.from_toml(REPO / "emulator.toml")) as emu:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "RUNNER_"))}
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "runner",
                "run",
                "jobs/stdlib-json.toml",
                "--backend",
                "anthropic",
                "--output-dir",
                str(tmp_path),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            env={**env, "ANTHROPIC_BASE_URL": emu.base_url, "ANTHROPIC_API_KEY": "emulator"},
        )
        stats = emu.stats()
    assert done.returncode == 0, done.stderr
    [metrics] = [m for m in tmp_path.glob("*/stdlib-json/metrics.json") if not m.parent.parent.is_symlink()]
    assert json.loads(metrics.read_text())["status"] == "succeeded"
    # requests 3 and 10 (retries included) are 529s, as emulator.toml schedules them
    assert stats["outcomes"]["529"] == sum(1 for n in (3, 10) if n <= stats["requests"]) >= 1, stats
    assert set(stats["outcomes"]) <= {"ok", "429", "529"} and stats["outcomes"]["ok"] >= 5


def test_cli_refuses_bad_config_and_non_loopback_hosts(tmp_path):
    bad = tmp_path / "emu.toml"
    bad.write_text("rpm = -1\n")
    with pytest.raises(ConfigError) as caught:
        serve(Namespace(host="127.0.0.1", port=0, config=bad))
    assert caught.value.problems == [f"{bad}: rpm: Input should be greater than or equal to 1 (got -1)"]
    with pytest.raises(ConfigError) as caught:
        serve(Namespace(host="0.0.0.0", port=0, config=None))
    assert caught.value.problems[0].startswith("--host: the emulator binds only to loopback")
    good = tmp_path / "good.toml"
    good.write_text("rpm = 10\nwindow_s = 2\n[faults.overloaded]\nrate = 0.1\n")
    config = EmulatorConfig.from_toml(good)
    assert config.rpm == 10 and config.window_s == 2.0 and config.faults.overloaded.rate == 0.1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('rpm = "50"\n', "rpm: Input should be a valid integer (got '50')"),
        ("seed = true\n", "seed: Input should be a valid integer (got true)"),
        ('enforce_max_tokens = "yes"\n', "enforce_max_tokens: Input should be a valid boolean (got 'yes')"),
        ('[latency]\nseconds = "2"\n', "latency.seconds: Input should be a valid number (got '2')"),
        (
            '[faults.overloaded]\nschedule = [1, "3"]\n',
            "faults.overloaded.schedule.1: Input should be a valid integer (got '3')",
        ),
        ("rpn = 50\n", "rpn: unknown key"),
        ("[faults.overload]\nrate = 0.1\n", "faults.overload: unknown key"),
    ],
)
def test_config_values_are_strict_and_errors_name_file_and_key(tmp_path, text, expected):
    path = tmp_path / "emulator.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        EmulatorConfig.from_toml(path)
    assert caught.value.problems == [f"{path}: {expected}"]


def test_config_values_are_strict_when_set_at_run_time_too(emu):
    with pytest.raises(ValidationError):
        emu.config.rpm = "50"
    emu.config.slow_s = 10  # a whole number is a number
    assert emu.config.slow_s == 10.0


def run_emulate(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "runner", "emulate", "--port", "0", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_runner_emulate_with_a_bad_config_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "emulator.toml"
    bad.write_text('rpm = "50"\n[latency]\nsecond = 1\n')
    done = run_emulate("--config", str(bad))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"error: {bad}: latency.second: unknown key",
        f"error: {bad}: rpm: Input should be a valid integer (got '50')",
    ]
    for path, expected in [
        (tmp_path / "none.toml", "config file not found"),
        (tmp_path, "config file is a directory, expected a TOML file"),
    ]:
        done = run_emulate("--config", str(path))
        assert (done.returncode, done.stderr) == (2, f"error: {path}: {expected}\n")
    (tmp_path / "broken.toml").write_text("rpm = \n")
    done = run_emulate("--config", str(tmp_path / "broken.toml"))
    assert done.returncode == 2 and done.stderr.startswith(
        f"error: {tmp_path / 'broken.toml'}: TOML syntax error"
    )
    assert len(done.stderr.splitlines()) == 1


def test_runner_emulate_checks_its_config_before_it_loads_the_sdk(tmp_path):
    """A bad config is refused before the server and the anthropic SDK are imported (their import
    costs about 1.5 s): the command's answer comes at once."""
    bad = tmp_path / "emulator.toml"
    bad.write_text("rpm = -1\n")
    probe = (
        "import sys\nfrom runner.cli import main\n"
        "code = main(['emulate', '--port', '0', '--config', sys.argv[1]])\n"
        "print(code, 'anthropic' in sys.modules, 'runner.emulator.server' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(bad)], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["2", "False", "False"], done.stderr
    assert done.stderr.startswith(f"error: {bad}: rpm: ")


def test_the_shipped_emulator_toml_and_the_readmes_example_load():
    """The README's ``runner emulate --config emulator.toml`` names a file that ships, and its TOML
    example is a valid config."""
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## The emulator") :]
    section = section[: section.index("\n## ", 1)]
    assert "--config emulator.toml" in section
    shipped = EmulatorConfig.from_toml(REPO / "emulator.toml")
    assert shipped.faults.overloaded.schedule and shipped.rpm
    examples = re.findall(r"```toml\n(.*?)```", section, re.S)
    assert examples
    for example in examples:
        EmulatorConfig.model_validate(tomllib.loads(example))
