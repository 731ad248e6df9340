"""The emulator's request validation, in process: every problem, worded and located as the API does.

The expected texts are the API's own where it is known (messages the API returned, as quoted in
public bug reports): ``messages.1.content.0.tool_use.id: Field required``, ``tools.0.custom.name:
String should match pattern '^[a-zA-Z0-9_-]{1,128}$'``, ``messages: text content blocks must be
non-empty``, ``messages.1: all messages must have non-empty content except for the optional final
assistant message``, ``messages.0.content.1.text.text: Input should be a valid string``.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.emulator.validation import validate

HELLO = [{"role": "user", "content": "Survey the workspace."}]
TOOL = {"name": "glob", "description": "glob", "input_schema": {"type": "object", "properties": {}}}
USE = {"type": "tool_use", "id": "toolu_1", "name": "glob", "input": {}}
RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py"}
CC = {"type": "ephemeral"}
BETA = "compact-2026-01-12"
EDIT = {"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 60_000}}]}


def body(**fields):
    return {"model": "m", "max_tokens": 100, "messages": HELLO, **fields}


def without(name: str) -> dict:
    return {k: v for k, v in body().items() if k != name}


def turn(*assistant_blocks, results=(RESULT,)) -> list[dict]:
    return [
        *HELLO,
        {"role": "assistant", "content": list(assistant_blocks)},
        {"role": "user", "content": list(results)},
    ]


def problems(request, *, betas=(), count_tokens=False) -> list[str]:
    return validate(request, betas=betas, count_tokens=count_tokens, min_trigger=50_000)


VALID = [
    body(),
    body(tools=[TOOL], messages=turn(USE), system="sys", temperature=0, stop_sequences=["END"]),
    body(messages=[*HELLO, {"role": "assistant", "content": ""}]),  # an empty final assistant message
    body(messages=turn(USE, results=[{**RESULT, "content": [{"type": "text", "text": ""}]}])),
    body(tools=[TOOL, {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]),
    body(tool_choice={"type": "tool", "name": "glob"}, tools=[TOOL]),
    body(system=[{"type": "text", "text": "s", "cache_control": {**CC, "ttl": "1h"}}], temperature=1),
    body(
        messages=[
            *HELLO,
            {"role": "assistant", "content": [{"type": "compaction", "content": "notes"}]},
            {"role": "user", "content": "go on"},
        ]
    ),  # with the beta header, below
]


@pytest.mark.parametrize("request_body", VALID)
def test_valid_requests_have_no_problems(request_body):
    assert problems(request_body, betas=[BETA]) == []


@pytest.mark.parametrize(
    ("request_body", "expected"),
    [
        (without("max_tokens"), "max_tokens: Field required"),
        (body(max_tokens=0), "max_tokens: Input should be greater than or equal to 1"),
        (body(max_tokens="100"), "max_tokens: Input should be a valid integer"),  # strict: no coercion
        (body(max_tokens=True), "max_tokens: Input should be a valid integer"),
        (without("model"), "model: Field required"),
        (body(surprise=1), "surprise: Extra inputs are not permitted"),
        (body(stream="yes"), "stream: Input should be a valid boolean"),
        (body(temperature=2), "temperature: Input should be less than or equal to 1"),
        (body(stop_sequences="END"), "stop_sequences: Input should be a valid list"),
        (body(tools=[{"name": "t"}]), "tools.0.custom.input_schema: Field required"),
        (
            body(tools=[{**TOOL, "name": "a.b"}]),
            "tools.0.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'",
        ),
        (
            body(tools=[{**TOOL, "input_schema": {"type": "array"}}]),
            "tools.0.custom.input_schema.type: Input should be 'object'",
        ),
        (body(tools=[TOOL, TOOL]), "tools: Tool names must be unique."),
        (body(tool_choice={"type": "tool"}), "tool_choice.tool.name: Field required"),
        (
            body(system=[{"type": "text", "text": "s", "source": {}}]),
            "system.0.source: Extra inputs are not permitted",
        ),
        (body(system=5), "system: Input should be a valid list"),
        (body(system=[{"type": "text", "text": ""}]), "system: text content blocks must be non-empty"),
        (
            body(system=[{"type": "text", "text": "s", "cache_control": {"type": "forever"}}]),
            "system.0.cache_control.type: Input should be 'ephemeral'",
        ),
        (
            body(messages=[{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text"}]}]),
            "messages.0.content.1.text.text: Field required",
        ),
        (
            body(
                messages=[
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": "a"}, {"type": "text", "text": None}],
                    }
                ]
            ),
            "messages.0.content.1.text.text: Input should be a valid string",
        ),
        (
            body(messages=[{"role": "user", "content": [{"type": "text", "text": ""}]}]),
            "messages: text content blocks must be non-empty",
        ),
        (body(messages=[{"role": "user", "content": 5}]), "messages.0.content: Input should be a valid list"),
        (
            body(messages=[{"role": "system", "content": "hi"}]),
            "messages.0.role: Input should be 'user' or 'assistant'",
        ),
        (
            body(messages=[{"role": "user", "content": "hi", "name": "x"}]),
            "messages.0.name: Extra inputs are not permitted",
        ),
        (
            body(messages=[{"role": "user", "content": [{"type": "video"}]}]),
            "messages.0.content.0: Input tag 'video' found using 'type' does not match any of the expected "
            "tags: 'text', "
            "'image', 'document', 'tool_use', 'tool_result', 'thinking', 'redacted_thinking', 'compaction'",
        ),
        (
            body(messages=turn({k: v for k, v in USE.items() if k != "id"})),
            "messages.1.content.0.tool_use.id: Field required",
        ),
        (
            body(messages=turn({**USE, "id": "toolu:1"})),
            "messages.1.content.0.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'",
        ),
        (
            body(messages=turn({**USE, "caller": None})),
            "messages.1.content.0.tool_use.caller: Input should be a valid dictionary",
        ),
        (
            body(messages=turn(USE, results=[{**RESULT, "is_error": "yes"}])),
            "messages.2.content.0.tool_result.is_error: Input should be a valid boolean",
        ),
        (
            body(
                messages=[*HELLO, {"role": "assistant", "content": ""}, {"role": "user", "content": "again"}]
            ),
            "messages.1: all messages must have non-empty content except for the optional final assistant "
            "message",
        ),
        (
            body(messages=[*HELLO, {"role": "assistant", "content": [{"type": "image", "source": {}}]}]),
            "messages.1.content.0: image blocks are not allowed in assistant messages",
        ),
        (
            body(
                messages=[
                    *HELLO,
                    {"role": "assistant", "content": [{"type": "compaction", "content": "notes"}]},
                ]
            ),
            "messages.1.content.0.compaction: compaction blocks need the anthropic-beta header "
            "compact-2026-01-12",
        ),
        (
            body(context_management=EDIT),
            "context_management: needs the anthropic-beta header compact-2026-01-12",
        ),
    ],
)
def test_each_problem_is_one_line_in_the_apis_words(request_body, expected):
    assert problems(request_body) == [expected]


@pytest.mark.parametrize(
    ("trigger", "expected"),
    [
        (10_000, "context_management.edits.0.trigger.value: must be an integer of at least 50000"),
        ("60000", "context_management.edits.0.trigger.value: Input should be a valid integer"),
    ],
)
def test_compaction_triggers_are_checked_against_the_minimum(trigger, expected):
    edit = {"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": trigger}}]}
    assert problems(body(context_management=edit), betas=[BETA]) == [expected]
    assert problems(body(context_management=EDIT), betas=[BETA]) == []


def test_every_shape_problem_is_reported_at_once():
    assert problems(body(system=[{"type": "image", "source": {}}])) == [
        "system.0.type: Input should be 'text'",
        "system.0.text: Field required",
        "system.0.source: Extra inputs are not permitted",
    ]
    request = body(max_tokens="1", surprise=1, tools=[{"name": "a b", "input_schema": {"type": "object"}}])
    assert problems(request) == [
        "tools.0.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'",
        "max_tokens: Input should be a valid integer",
        "surprise: Extra inputs are not permitted",
    ]


def test_rules_across_messages_come_from_the_runners_own_invariants():
    orphan = body(messages=[{"role": "user", "content": [RESULT]}])
    assert problems(orphan) == [
        "messages.0: tool_result 'toolu_1' has no matching tool_use in the previous message"
    ]
    assert problems(body(messages=[*HELLO, *HELLO])) == [
        "messages.1: roles must alternate, two user messages in a row"
    ]
    assert problems(body(messages=[])) == ["messages: at least one message is required"]


def test_a_user_messages_tool_results_come_before_its_text():
    use = {"role": "assistant", "content": [USE]}
    note = {"type": "text", "text": "Here is what it found."}
    text_first = body(messages=[*HELLO, use, {"role": "user", "content": [note, RESULT]}], tools=[TOOL])
    assert problems(text_first) == ["messages.2.content.1: tool_result blocks must come first in the content"]
    results_first = body(messages=[*HELLO, use, {"role": "user", "content": [RESULT, note]}], tools=[TOOL])
    assert problems(results_first) == []


COMPACTED = {"role": "assistant", "content": [{"type": "compaction", "content": "notes"}]}


def test_a_history_may_open_with_its_compaction_block():
    """The API reads a history from its last compaction block on, as a user turn, so a client may drop
    what came before (inspect_ai does, after a native compaction): the first message may then be the
    assistant message holding that block; any other assistant message first is still refused."""
    assert problems(body(messages=[COMPACTED, {"role": "user", "content": "go on"}]), betas=[BETA]) == []
    first = "messages.0: the first message must use the user role"
    null = {"role": "assistant", "content": [{"type": "compaction", "content": None}]}
    text = {"role": "assistant", "content": [{"type": "text", "text": "hi"}]}
    for opening in (null, text):
        assert problems(body(messages=[opening, *HELLO]), betas=[BETA]) == [first]
    # the other rules still hold after it: a user message must answer it
    assert problems(body(messages=[COMPACTED, COMPACTED]), betas=[BETA]) == [
        "messages.1: roles must alternate, two assistant messages in a row"
    ]


def test_at_most_four_cache_control_breakpoints_anywhere():
    four = body(
        tools=[{**TOOL, "cache_control": CC}],
        system=[{"type": "text", "text": "s", "cache_control": CC}],
        messages=turn(
            {**USE, "cache_control": CC},
            results=[{**RESULT, "content": [{"type": "text", "text": "a", "cache_control": CC}]}],
        ),
    )
    assert problems(four) == []
    five = {
        **four,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "q", "cache_control": CC}]},
            *four["messages"][1:],
        ],
    }
    assert problems(five) == ["A maximum of 4 blocks with cache_control may be provided. Found 5."]


def test_count_tokens_takes_no_generation_settings():
    counted = {"model": "m", "messages": HELLO}
    assert problems(counted, count_tokens=True) == []
    assert problems({**counted, "max_tokens": 5}, count_tokens=True) == [
        "max_tokens: Extra inputs are not permitted"
    ]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
KEYS = st.sampled_from(
    [
        "model",
        "max_tokens",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "context_management",
        "role",
        "content",
        "type",
        "text",
        "id",
        "name",
        "input",
        "tool_use_id",
        "cache_control",
    ]
)
REQUESTISH = st.recursive(
    JSON, lambda inner: st.dictionaries(KEYS, inner, max_size=5) | st.lists(inner, max_size=3), max_leaves=30
)


@settings(max_examples=300, deadline=None)
@given(REQUESTISH)
def test_any_json_value_gets_an_answer_never_an_exception(value):
    found = problems(value, betas=[BETA])
    assert isinstance(found, list) and all(isinstance(p, str) and p for p in found)
    json.dumps(found)


# --- what the installed SDK's beta types take, with a beta header --------------------------------

BINDING_BETA = "thinking-binding-controls-2026-08-01"
BOUND = {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}


@pytest.mark.parametrize(
    "fields",
    [
        {"thinking": BOUND},  # inspect_ai's request for claude-sonnet-5-5
        {"thinking": {"type": "adaptive", "display": "updates"}},  # a value only the beta type has
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "citations": None}]}]},
        {"context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}},
    ],
)
def test_a_field_the_sdks_beta_types_take_is_taken_with_a_beta_header(fields):
    request = body(**fields)
    assert validate(request, betas=[BINDING_BETA], count_tokens=False, min_trigger=50_000) == []
    counted = {k: v for k, v in request.items() if k != "max_tokens"}
    assert validate(counted, betas=[BINDING_BETA], count_tokens=True, min_trigger=50_000) == []


def test_without_a_beta_header_or_beyond_the_sdks_types_it_is_refused():
    assert problems(body(thinking=BOUND)) == [
        "thinking.adaptive.block_binding: Extra inputs are not permitted"
    ]
    for thinking, expected in (
        ({**BOUND, "block_binding": {"prefix_mismatch_behavior": "ignore"}}, "block_binding"),
        ({**BOUND, "block_binding": {"surprise": 1}}, "block_binding"),
        ({**BOUND, "surprise": True}, "thinking.adaptive.surprise: Extra inputs are not permitted"),
        ({"type": "adaptive", "display": "loud"}, "thinking.adaptive.display"),
    ):
        found = problems(body(thinking=thinking), betas=[BINDING_BETA])
        assert len(found) == 1 and expected in found[0], found
    # a rule of the API is never waived: the SDK's types take any id, the API does not
    bad_id = turn({**USE, "id": "bad id!"}, results=({**RESULT, "tool_use_id": "bad id!"},))
    assert problems(body(messages=bad_id, thinking=BOUND), betas=[BINDING_BETA])
    assert problems(body(betas=[BINDING_BETA]), betas=[BINDING_BETA]) == [
        "betas: Extra inputs are not permitted"
    ]


def test_a_stock_clients_beta_request_is_answered_over_http():
    """The real SDK, as inspect_ai's provider calls it for claude-sonnet-5-5."""
    import anthropic
    from scripted import ScriptedModel, scripted_api

    replier = ScriptedModel([], final="Answered.")
    with scripted_api(replier) as api:
        with anthropic.Anthropic(base_url=api.emulator.base_url, api_key="k", max_retries=0) as client:
            answered = client.beta.messages.create(
                model="claude-sonnet-5-5",
                max_tokens=2_000,
                messages=HELLO,
                thinking=BOUND,
                betas=[BINDING_BETA],
            )
            with pytest.raises(anthropic.BadRequestError, match="block_binding"):
                client.messages.create(
                    model="claude-sonnet-5-5",
                    max_tokens=2_000,
                    messages=HELLO,
                    thinking=BOUND,  # type: ignore[arg-type]  # not a field of the GA type
                )
    assert answered.type == "message" and answered.stop_reason == "end_turn"
    assert [(b.type, b.text) for b in answered.content] == [("text", "Answered.")]
    assert [r.messages for r in replier.requests] == [HELLO]  # the refused request reached no replier


def test_a_history_opening_with_its_compaction_block_is_answered_over_http():
    """The real SDK sends the history from the compaction block on (create and count_tokens): the
    emulator answers both, reading the block's notes as the first user turn."""
    import anthropic
    from scripted import ScriptedModel, scripted_api

    from runner.protocol import COMPACTION_BLOCK_HEAD

    messages = [COMPACTED, {"role": "user", "content": "go on"}]
    replier = ScriptedModel([], final="Going on.")
    with scripted_api(replier) as api:
        with anthropic.Anthropic(base_url=api.emulator.base_url, api_key="k", max_retries=0) as client:
            answered = client.beta.messages.create(
                model="claude-sonnet-5-5", max_tokens=2_000, messages=messages, betas=[BETA]
            )
            counted = client.beta.messages.count_tokens(
                model="claude-sonnet-5-5", messages=messages, betas=[BETA]
            )
    assert answered.type == "message" and answered.content[0].text == "Going on."
    assert len(answered.content) == 1 and answered.stop_reason == "end_turn"
    # the replier read the block's notes as the first user turn, joined by the turn after it
    [asked] = replier.requests
    first = [{"type": "text", "text": COMPACTION_BLOCK_HEAD + "notes"}, {"type": "text", "text": "go on"}]
    assert asked.messages == [{"role": "user", "content": first}]
    assert counted.input_tokens > 0
