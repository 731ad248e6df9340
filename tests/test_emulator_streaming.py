"""The emulator's streamed replies and the request fields of the SDK's ``MessageCreateParams``,
driven by the real ``anthropic`` SDK over loopback HTTP (the emulator as ``test_emulator`` starts it).

A stream must accumulate, in the SDK, to the message the non-streamed call gets from the same
request and emulator state; its raw events come in the API's order; a ``stream_error`` fault is the
API's mid-stream ``error`` event; every documented field is accepted with a valid value and
refused, naming it, with an invalid one.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import urllib.request

import anthropic
import pytest
import test_emulator
from conftest import runner_env
from test_emulator import BIG_WORKSPACE, EDIT, FIRST, HELLO, TOOLS, client, create, plain, survey_history

pytestmark = pytest.mark.anyio
server, replier, emu = (
    test_emulator.server,
    test_emulator.replier,
    test_emulator.emu,
)  # its fixtures: one emulator for this module, reset per test, answering with a scripted replier

CC = {"type": "ephemeral"}
LONG_SYSTEM = "You survey code, carefully and in order. " * 200  # over 1024 tokens: cacheable
TOOL_INPUT = {
    "file_path": "/ws/naïve/ünïcödé.py",
    "offset": 12,
    "limit": None,
    "flags": [True, False, 1.5],
    "nested": {"pattern": "x" * 300, "quote": 'a "quoted" \\ back\nslash'},
}
SCRIPTED = {
    "text": [{"content": "Long text, cut into many deltas: " + "ωord " * 100, "stop_reason": "end_turn"}],
    "blocks": [
        {
            "content": [
                {"type": "thinking", "thinking": "Let me think about this. " * 20, "signature": "sig-abc123"},
                {"type": "redacted_thinking", "data": "opaque-data"},
                {"type": "text", "text": "Reading one file."},
                {"type": "tool_use", "id": "toolu_emu_1", "name": "read", "input": TOOL_INPUT},
            ],
            "stop_reason": "tool_use",
        }
    ],
    "empty": [{"content": [], "stop_reason": "end_turn"}],
    "citations": [
        {
            "content": [
                {
                    "type": "text",
                    "text": "The file says hello.",
                    "citations": [
                        {
                            "type": "char_location",
                            "cited_text": "hello",
                            "document_index": 0,
                            "document_title": "a.txt",
                            "start_char_index": 0,
                            "end_char_index": 5,
                        }
                    ],
                }
            ],
            "stop_reason": "end_turn",
        }
    ],
}


def comparable(message) -> dict:
    """What a streamed and a non-streamed reply must share."""
    return {
        "content": plain(message.content),
        "stop_reason": message.stop_reason,
        "stop_sequence": message.stop_sequence,
        "usage": message.usage.model_dump(exclude_none=True),
        "model": message.model,
        "role": message.role,
        "type": message.type,
    }


async def both_ways(emu, kwargs: dict, script: list[dict] | None = None, beta: bool = False):
    """The non-streamed reply, then the streamed one (SDK-accumulated), each from a reset emulator."""
    replies = []
    for streamed in (False, True):
        emu.reset()
        if script is not None:
            emu.set_script(script)
        async with client(emu) as c:
            messages = c.beta.messages if beta else c.messages
            if streamed:
                async with messages.stream(**kwargs) as stream:
                    replies.append(await stream.get_final_message())
            else:
                replies.append(await messages.create(**kwargs))
    return replies


# --- the same message, streamed or not -----------------------------------------------------------


@pytest.mark.parametrize("script", [None, *SCRIPTED])
async def test_a_stream_accumulates_to_the_non_streamed_message(emu, script):
    kwargs = {"model": "emu-model", "max_tokens": 1000, "messages": HELLO, "tools": TOOLS}
    plain_reply, streamed = await both_ways(emu, kwargs, SCRIPTED.get(script or ""))
    assert comparable(streamed) == comparable(plain_reply)
    assert streamed.id.startswith("msg_") and streamed.id != plain_reply.id
    stats = emu.stats()
    assert stats["streamed_requests"] == 1 and stats["requests"] == 1 and stats["outcomes"] == {"ok": 1}
    assert stats["tokens"]["output_tokens"] == streamed.usage.output_tokens
    if script is None:  # the replier's
        assert plain(streamed.content) == FIRST


async def test_a_streamed_reply_with_cache_counts_has_them_in_its_usage(emu):
    system = [{"type": "text", "text": LONG_SYSTEM, "cache_control": CC}]
    kwargs = {"model": "m", "max_tokens": 1000, "messages": HELLO, "tools": TOOLS, "system": system}
    plain_reply, streamed = await both_ways(emu, kwargs)
    assert streamed.usage.cache_creation_input_tokens > 1024
    assert comparable(streamed) == comparable(plain_reply)
    async with client(emu) as c, c.messages.stream(**kwargs) as stream:  # the second: read from the cache
        again = await stream.get_final_message()
    assert again.usage.cache_read_input_tokens == streamed.usage.cache_creation_input_tokens


async def test_a_streamed_server_compaction_is_the_non_streamed_one(emu):
    kwargs = {
        "model": "m",
        "max_tokens": 1000,
        "messages": survey_history(BIG_WORKSPACE, turns=3),
        "tools": TOOLS,
        "context_management": EDIT,
        "betas": ["compact-2026-01-12"],
    }
    plain_reply, streamed = await both_ways(emu, kwargs, beta=True)
    assert streamed.content[0].type == "compaction" and streamed.content[0].content
    assert comparable(streamed) == comparable(plain_reply)
    assert plain(streamed.content)[1:] == FIRST
    assert [it.type for it in streamed.usage.iterations] == ["compaction", "message"]


async def test_the_runner_backend_is_unchanged_by_streaming(emu):
    """Streaming is opt-in per request: the runner's own calls stay non-streamed."""
    async with client(emu) as c:
        await create(c)
    assert emu.stats()["streamed_requests"] == 0 and emu.stats()["recorded_requests"][0].get("stream") is None


# --- the events ----------------------------------------------------------------------------------


async def events_of(emu, **kwargs) -> list:
    kwargs = {"model": "m", "max_tokens": 1000, "messages": HELLO, "tools": TOOLS, **kwargs}
    async with client(emu) as c:
        return [event async for event in await c.messages.create(stream=True, **kwargs)]


def check_nesting(events) -> None:
    """message_start first, message_delta then message_stop last; each block's start, deltas and
    stop in order, one block open at a time, indices counting up from 0."""
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds.count("message_start") == kinds.count("message_delta") == kinds.count("message_stop") == 1
    open_index, next_index = None, 0
    for event in events[1:-2]:
        if event.type == "content_block_start":
            assert open_index is None and event.index == next_index
            open_index, next_index = event.index, next_index + 1
        elif event.type in ("content_block_delta", "content_block_stop"):
            assert event.index == open_index
            open_index = None if event.type == "content_block_stop" else open_index
    assert open_index is None


async def test_raw_events_come_in_the_apis_order(emu):
    emu.set_script(SCRIPTED["blocks"])
    events = await events_of(emu)
    check_nesting(events)
    start = events[0].message
    assert start.content == [] and start.stop_reason is None and start.usage.output_tokens == 1
    assert start.usage.input_tokens > 0
    deltas = {e.index: [] for e in events if e.type == "content_block_delta"}
    for e in events:
        if e.type == "content_block_delta":
            deltas[e.index].append(e.delta.type)
    assert deltas[0][-1] == "signature_delta" and set(deltas[0][:-1]) == {"thinking_delta"}
    assert 1 not in deltas  # redacted_thinking comes whole in its content_block_start
    assert deltas[2] == ["text_delta"] and set(deltas[3]) == {"input_json_delta"}
    final = events[-2]
    assert final.delta.stop_reason == "tool_use" and final.usage.output_tokens > 1


async def test_tool_use_input_arrives_as_input_json_deltas(emu):
    emu.set_script(SCRIPTED["blocks"])
    events = await events_of(emu)
    [start] = [e for e in events if e.type == "content_block_start" and e.content_block.type == "tool_use"]
    assert start.content_block.input == {} and start.content_block.id == "toolu_emu_1"
    parts = [
        e.delta.partial_json for e in events if e.type == "content_block_delta" and e.index == start.index
    ]
    assert parts[0] == "" and len(parts) > 3 and all(len(p) <= emu.config.stream_chunk_chars for p in parts)
    assert json.loads("".join(parts)) == TOOL_INPUT
    emu.set_script(SCRIPTED["blocks"])
    async with client(emu) as c, c.messages.stream(model="m", max_tokens=1000, messages=HELLO) as stream:
        final = await stream.get_final_message()
    assert final.content[3].input == TOOL_INPUT


def test_the_wire_is_server_sent_events_with_pings(emu):
    """What the SDK hides: the content type, ``event:`` names matching each data's type, pings."""
    body = {"model": "m", "max_tokens": 1000, "messages": HELLO, "tools": TOOLS, "stream": True}
    request = urllib.request.Request(
        emu.base_url + "/v1/messages",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"x-api-key": "k", "anthropic-version": "2023-06-01", "content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["request-id"].startswith("req_")
        text = response.read().decode()
    frames = [f for f in text.split("\n\n") if f]
    names = []
    for frame in frames:
        event_line, data_line = frame.split("\n")
        name = event_line.removeprefix("event: ")
        assert json.loads(data_line.removeprefix("data: "))["type"] == name
        names.append(name)
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]


# --- faults --------------------------------------------------------------------------------------


async def test_a_mid_stream_error_is_the_apis_error_event(emu):
    emu.config.faults.stream_error.schedule = [1]
    async with client(emu) as c:
        with pytest.raises(anthropic.APIStatusError) as caught:
            async with c.messages.stream(model="m", max_tokens=1000, messages=HELLO, tools=TOOLS) as stream:
                await stream.get_final_message()
        assert caught.value.body["error"] == {"type": "overloaded_error", "message": "Overloaded"}
        assert caught.value.body["type"] == "error"
        events = await events_of(emu)  # request 2: whole
    check_nesting(events)
    stats = emu.stats()
    assert stats["outcomes"] == {"stream_error": 1, "ok": 1} and stats["streamed_requests"] == 2
    assert stats["tokens"]["output_tokens"] == events[-2].usage.output_tokens  # the broken one is not billed


async def test_a_mid_stream_error_comes_after_the_first_delta(emu):
    emu.config.faults.stream_error.schedule = [1]
    emu.config.stream_error_type = "api_error"
    seen = []
    async with client(emu) as c:
        with pytest.raises(anthropic.APIStatusError) as caught:
            async for event in await c.messages.create(
                model="m", max_tokens=1000, messages=HELLO, stream=True
            ):
                seen.append(event.type)
    assert seen == ["message_start", "content_block_start", "content_block_delta"]
    assert caught.value.body["error"]["type"] == "api_error"


async def test_a_stream_error_fault_does_not_touch_a_non_streamed_request(emu):
    emu.config.faults.stream_error.schedule = [1]
    async with client(emu) as c:
        reply = await create(c)
    assert plain(reply.content) == FIRST and reply.stop_reason == "tool_use"
    assert emu.stats()["outcomes"] == {"ok": 1}


async def test_a_fault_before_the_stream_is_an_http_status_the_sdk_retries(emu):
    emu.config.faults.overloaded.schedule = [1]
    async with client(emu) as c:
        with pytest.raises(anthropic.OverloadedError):
            async with c.messages.stream(model="m", max_tokens=1000, messages=HELLO) as stream:
                await stream.get_final_message()
    async with client(emu, max_retries=2) as c:
        emu.config.faults.overloaded.schedule = [2]
        async with c.messages.stream(model="m", max_tokens=1000, messages=HELLO) as stream:
            final = await stream.get_final_message()
    assert plain(final.content) == FIRST and final.stop_reason == "tool_use"  # the replier's
    assert emu.stats()["outcomes"] == {"529": 2, "ok": 1} and emu.stats()["streamed_requests"] == 3


# --- automatic caching (top-level cache_control) -------------------------------------------------


async def test_top_level_cache_control_caches_up_to_the_last_block(emu):
    auto = {"model": "m", "max_tokens": 100, "messages": HELLO, "system": LONG_SYSTEM, "cache_control": CC}
    async with client(emu) as c:
        first = await c.messages.create(**auto)
        second = await c.messages.create(**auto)
        emu.reset()
        system_only = await c.messages.create(
            model="m",
            max_tokens=100,
            messages=HELLO,
            system=[{"type": "text", "text": LONG_SYSTEM, "cache_control": CC}],
        )
        counted = await c.messages.count_tokens(model="m", messages=HELLO, system=LONG_SYSTEM)
        emu.reset()
        without = await c.messages.create(model="m", max_tokens=100, messages=HELLO, system=LONG_SYSTEM)
    assert first.usage.cache_creation_input_tokens > 1024 and first.usage.cache_read_input_tokens == 0
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens == 0
    # the breakpoint is on the last block: the whole prompt is written, more than a system breakpoint writes
    assert first.usage.cache_creation_input_tokens == counted.input_tokens and first.usage.input_tokens == 0
    assert 0 < system_only.usage.cache_creation_input_tokens < first.usage.cache_creation_input_tokens
    assert without.usage.cache_creation_input_tokens == without.usage.cache_read_input_tokens == 0


async def test_top_level_cache_control_takes_a_breakpoint_slot(emu):
    blocks = [{"type": "text", "text": t, "cache_control": CC} for t in "abcd"]
    async with client(emu) as c:
        await c.messages.create(
            model="m", max_tokens=100, messages=[{"role": "user", "content": blocks[:3]}], cache_control=CC
        )
        with pytest.raises(anthropic.BadRequestError, match="A maximum of 4 blocks with cache_control"):
            await c.messages.create(
                model="m", max_tokens=100, messages=[{"role": "user", "content": blocks}], cache_control=CC
            )


# --- every documented field ----------------------------------------------------------------------

MCP = {
    "type": "url",
    "url": "https://mcp.example.invalid/sse",
    "name": "docs",
    "tool_configuration": {"allowed_tools": ["search"], "enabled": True},
}
SKILLS = {"id": None, "skills": [{"type": "anthropic", "skill_id": "pptx", "version": "latest"}]}

VALID_FIELDS = [
    {"cache_control": CC},
    {"cache_control": {"type": "ephemeral", "ttl": "1h"}},
    {"metadata": {"user_id": "u" * 256}},
    {"metadata": {}},
    {"service_tier": "auto"},
    {"service_tier": "standard_only"},
    {"thinking": {"type": "enabled", "budget_tokens": 1024}},
    {"thinking": {"type": "disabled"}},
    {"thinking": {"type": "adaptive", "display": "omitted"}},
    {"stop_sequences": ["END", "\n\nHuman:"]},
    {"temperature": 0.0},
    {"temperature": 1},
    {"top_p": 0.9},
    {"top_k": 5},
    {"tool_choice": {"type": "auto", "disable_parallel_tool_use": True}},
    {"tool_choice": {"type": "any"}},
    {"tool_choice": {"type": "tool", "name": "glob", "disable_parallel_tool_use": False}},
    {"tool_choice": {"type": "none"}},
    {"container": "container_011"},
    {"container": SKILLS},
    {"mcp_servers": [MCP]},
    {"output_config": {"effort": "low"}},
    {"output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}},
    {"inference_geo": "us"},
    {"speed": "fast"},
    {"diagnostics": {"previous_message_id": None}},
    {"stream": False},
    {"metadata": None, "service_tier": None, "thinking": None},  # null: as if omitted
]

INVALID_FIELDS = [
    (
        {"cache_control": {"type": "ephemeral", "ttl": "2h"}},
        "cache_control.ttl: Input should be '5m' or '1h'",
    ),
    ({"cache_control": {"type": "persistent"}}, "cache_control.type: Input should be 'ephemeral'"),
    ({"metadata": {"user_id": "u" * 257}}, "metadata.user_id: String should have at most 256 characters"),
    ({"metadata": {"user_id": 7}}, "metadata.user_id: Input should be a valid string"),
    ({"metadata": {"session": "s"}}, "metadata.session: Extra inputs are not permitted"),
    ({"service_tier": "priority"}, "service_tier: Input should be 'auto' or 'standard_only'"),
    (
        {"thinking": {"type": "enabled", "budget_tokens": 1023}},
        "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024",
    ),
    (
        {"thinking": {"type": "enabled", "budget_tokens": 2000}},
        "thinking.enabled.budget_tokens: must be less than max_tokens (2000 >= 2000)",
    ),
    ({"thinking": {"type": "enabled"}}, "thinking.enabled.budget_tokens: Field required"),
    ({"thinking": {"type": "sometimes"}}, "thinking: Input tag 'sometimes' found using 'type'"),
    ({"stop_sequences": "END"}, "stop_sequences: Input should be a valid list"),
    ({"stop_sequences": [1]}, "stop_sequences.0: Input should be a valid string"),
    ({"temperature": 1.5}, "temperature: Input should be less than or equal to 1"),
    ({"temperature": "0.5"}, "temperature: Input should be a valid number"),
    ({"top_p": -0.1}, "top_p: Input should be greater than or equal to 0"),
    ({"top_k": 2.5}, "top_k: Input should be a valid integer"),
    (
        {"tool_choice": {"type": "none", "disable_parallel_tool_use": True}},
        "tool_choice.none.disable_parallel_tool_use: Extra inputs are not permitted",
    ),
    ({"tool_choice": {"type": "maybe"}}, "tool_choice.auto.type: Input should be 'auto' or 'any'"),
    (
        {"tool_choice": {"type": "auto", "disable_parallel_tool_use": "yes"}},
        "tool_choice.auto.disable_parallel_tool_use: Input should be a valid boolean",
    ),
    ({"container": 5}, "container: Input should be a valid dictionary"),
    ({"container": {"skills": [{"type": "custom"}]}}, "container.skills.0.skill_id: Field required"),
    ({"mcp_servers": [{**MCP, "url": None}]}, "mcp_servers.0.url: Input should be a valid string"),
    ({"mcp_servers": [{**MCP, "type": "stdio"}]}, "mcp_servers.0.type: Input should be 'url'"),
    (
        {"output_config": {"effort": "extreme"}},
        "output_config.effort: Input should be 'low', 'medium', 'high', ",
    ),
    ({"output_config": {"format": {"type": "json_schema"}}}, "output_config.format.schema: Field required"),
    (
        {"output_format": {"type": "json_schema", "schema": {}}},
        "output_format: Extra inputs are not permitted",
    ),
    ({"speed": "warp"}, "speed: Input should be 'standard' or 'fast'"),
    ({"inference_geo": 1}, "inference_geo: Input should be a valid string"),
    (
        {"diagnostics": {"previous_message_id": 1}},
        "diagnostics.previous_message_id: Input should be a valid string",
    ),
    ({"stream": "yes"}, "stream: Input should be a valid boolean"),
]


async def post(emu, fields: dict, betas: tuple[str, ...] = ("mcp-client-2025-04-04",)):
    body = {"model": "m", "max_tokens": 2000, "messages": HELLO, "tools": TOOLS, **fields}
    async with client(emu) as c:
        return await c.post(
            "/v1/messages",
            cast_to=object,
            body=body,
            options={"headers": {"anthropic-beta": ",".join(betas)}} if betas else {},
        )


@pytest.mark.parametrize("fields", VALID_FIELDS, ids=lambda f: "+".join(f))
async def test_each_documented_field_is_accepted(emu, fields):
    reply = await post(emu, fields)
    assert reply["type"] == "message" and emu.stats()["outcomes"] == {"ok": 1}


@pytest.mark.parametrize(
    ("fields", "expected"), INVALID_FIELDS, ids=[next(iter(f)) for f, _ in INVALID_FIELDS]
)
async def test_each_field_with_a_bad_value_is_a_400_naming_it(emu, fields, expected):
    with pytest.raises(anthropic.BadRequestError) as caught:
        await post(emu, fields)
    assert caught.value.api_message.startswith(expected), caught.value.api_message
    assert emu.stats()["outcomes"] == {"400": 1}


async def test_mcp_servers_need_the_mcp_client_beta(emu):
    with pytest.raises(anthropic.BadRequestError) as caught:
        await post(emu, {"mcp_servers": [MCP]}, betas=())
    assert caught.value.api_message.startswith("mcp_servers: needs an anthropic-beta header mcp-client-")


async def test_the_sdks_own_keyword_arguments_are_accepted(emu):
    """The fields as the SDK's ``messages.create`` sends them, streamed."""
    async with (
        client(emu) as c,
        c.messages.stream(
            model="m",
            max_tokens=2000,
            messages=HELLO,
            tools=TOOLS,
            cache_control=CC,
            metadata={"user_id": "u1"},
            service_tier="auto",
            thinking={"type": "enabled", "budget_tokens": 1024},
            stop_sequences=["END"],
            tool_choice={"type": "auto"},
            output_config={"effort": "medium"},
            container="c1",
            inference_geo="eu",
            extra_body={"temperature": 0.2, "top_p": 0.5, "top_k": 3},
        ) as stream,
    ):
        final = await stream.get_final_message()
    assert plain(final.content) == FIRST and final.stop_reason == "tool_use"


# --- a client of another project ------------------------------------------------------------------

INSPECT_SCRIPT = """
import asyncio, json, sys
from inspect_ai.model import GenerateConfig, get_model
from inspect_ai.tool import tool

@tool
def add():
    async def execute(x: int, y: int) -> int:
        \"\"\"Add two numbers.

        Args:
            x: First number.
            y: Second number.
        \"\"\"
        return x + y
    return execute

async def main():
    model = get_model("anthropic/claude-sonnet-4-5", base_url=sys.argv[1], api_key="emulator-key",
                      config=GenerateConfig(max_retries=1))
    output = await model.generate("What is 1 + 2?", tools=[add()])
    calls = [call.arguments for call in output.message.tool_calls or []]
    print(json.dumps({"stop_reason": output.stop_reason, "calls": calls}))
asyncio.run(main())
"""


def inspect_python() -> str | None:
    """An interpreter with inspect_ai: ``RUNNER_INSPECT_PYTHON``, else this one if it has it."""
    given = os.environ.get("RUNNER_INSPECT_PYTHON")
    if given:
        return given
    return sys.executable if importlib.util.find_spec("inspect_ai") else None


@pytest.mark.skipif(
    inspect_python() is None, reason="inspect_ai is not installed (set RUNNER_INSPECT_PYTHON)"
)
def test_inspect_ais_anthropic_provider_is_answered(emu):
    """inspect_ai's anthropic provider with its stock settings (it streams, and sends a top-level
    cache_control): its request is accepted and the streamed tool call reaches it whole."""
    emu.set_script(
        [
            {
                "content": [
                    {"type": "tool_use", "id": "toolu_emu_1", "name": "add", "input": {"x": 1, "y": 2}}
                ],
                "stop_reason": "tool_use",
            }
        ]
    )
    python = inspect_python()
    assert python is not None
    done = subprocess.run(
        [python, "-c", INSPECT_SCRIPT, emu.base_url],
        capture_output=True,
        text=True,
        timeout=180,
        env=runner_env(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {
        "stop_reason": "tool_calls",
        "calls": [{"x": 1, "y": 2}],
    }
    stats = emu.stats()
    assert stats["outcomes"] == {"ok": 1} and stats["streamed_requests"] == 1, stats
    assert {"stream", "cache_control"} <= set(stats["recorded_requests"][0])
