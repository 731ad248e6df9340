"""Is a request body one the Messages API would take? Every problem, in the API's words.

Two steps:
1. The shape, by pydantic (:mod:`.schema`): field types (strict), required and unknown fields,
   block types, id and tool name patterns, ``cache_control`` values, tool schemas, ``tool_choice``,
   ``context_management`` and the beta header it and compaction blocks need. With an
   ``anthropic-beta`` header, what the schema refuses only as unknown (a key, a ``Literal`` value, a
   block or config type) is taken when the installed SDK's beta request type takes it there
   (:mod:`.sdk_types`, read from the SDK's TypedDicts): every field a stock client may send. The
   SDK's types do not say which beta each field belongs to, so any beta header opens them all.
2. Only for a well-shaped body, the rules across blocks and messages, as small pure functions: the
   first message is from the user (or is the assistant message holding a compaction block: the API
   reads from that block on, as a user turn, so a client may drop what came before it, as the API
   documents and inspect_ai does), roles alternate, every tool_result answers a tool_use of the
   message before and comes before its message's other blocks, and every tool_use is answered
   (:func:`runner.messages.request_problems`), only
   the last message may be an empty assistant message, each role sends only its own block types,
   text blocks are non-empty (except inside a tool_result), at most :data:`MAX_BREAKPOINTS`
   ``cache_control`` breakpoints. The API reports these with a coarser location (``messages:``,
   ``messages.3:``), and so does the emulator.

Guarantees: :func:`validate` never raises for any JSON value; each problem is one
``location: message`` string (the location as the API writes it, e.g.
``messages.1.content.0.tool_use.id``); an empty list means the request is valid.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from anthropic.types.beta import message_count_tokens_params, message_create_params
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from ..messages import Message, blocks, request_problems
from .schema import BRANCH_TAGS, CountTokensRequest, MessagesRequest, blocks_with_cache_control
from .sdk_types import hint_at
from .sdk_types import problems as sdk_problems

MAX_BREAKPOINTS = 4
FIRST_MESSAGE_USER = "messages.0: the first message must use the user role"
# the request types of the installed SDK's beta endpoint: what a client may send with a beta header
SDK_MESSAGES = message_create_params.MessageCreateParamsBase
SDK_COUNT_TOKENS = message_count_tokens_params.MessageCountTokensParams
SDK_EXCUSES = frozenset({"extra_forbidden", "literal_error", "union_tag_invalid"})
HEADER_PARAMS = frozenset({"betas"})  # the SDK sends these as headers, never in the body
ROLE_OF_BLOCK = {
    "tool_use": "assistant",
    "thinking": "assistant",
    "redacted_thinking": "assistant",
    "compaction": "assistant",
    "tool_result": "user",
    "image": "user",
    "document": "user",
}


def validate(body: Any, *, betas: Iterable[str], count_tokens: bool, min_trigger: int) -> list[str]:
    """Every problem of a request body. ``betas``: the ``anthropic-beta`` header's values;
    ``min_trigger``: the smallest compaction trigger the server accepts."""
    if not isinstance(body, dict):
        return ["The request body must be a JSON object."]
    betas = set(betas)
    model = CountTokensRequest if count_tokens else MessagesRequest
    try:
        model.model_validate(body, context={"betas": betas, "min_trigger": min_trigger})
    except ValidationError as e:
        sdk = SDK_COUNT_TOKENS if count_tokens else SDK_MESSAGES
        errors = [error for error in e.errors() if not (betas and sdk_takes(body, error, sdk))]
        if errors:
            return [describe(error) for error in errors]
    problems = conversation_problems(body["messages"])
    problems += empty_text("system", [body.get("system")])
    breakpoints = blocks_with_cache_control(body)
    if breakpoints > MAX_BREAKPOINTS:
        problems.append(
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {breakpoints}."
        )
    return problems


def body_path(body: Any, loc: tuple[str | int, ...]) -> list[str | int]:
    """The path into ``body`` of a pydantic error's location: the union tags (a block's type, a
    string-or-blocks branch) that pydantic puts between the keys are left out."""
    path: list[str | int] = []
    value = body
    for i, part in enumerate(loc):
        if isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):
            path.append(part)
            value = value[part]
        elif isinstance(value, dict) and isinstance(part, str):
            after = loc[i + 1] if i + 1 < len(loc) else None
            tag = part == value.get("type") and after is not None and after in value
            if part in value and not tag:
                path.append(part)
                value = value[part]
            elif part not in value and i == len(loc) - 1:  # the error names a key that is not there
                path.append(part)
    return path


def sdk_takes(body: dict[str, Any], error: ErrorDetails, sdk: type) -> bool:
    """Whether the installed SDK's beta types take what the emulator's schema refused with ``error``:
    a key it does not know, a value outside its ``Literal``, a block or config of a type it does not
    know (never a broken rule: a pattern, a minimum, a missing beta header)."""
    if error["type"] not in SDK_EXCUSES:
        return False
    path = body_path(body, tuple(error["loc"]))
    if path and path[0] in HEADER_PARAMS:
        return False
    found = hint_at(sdk, body, path)
    if found is None:
        return False
    hint, value = found
    return not sdk_problems(value, hint)


def describe(error: ErrorDetails) -> str:
    """One pydantic error as the API writes it: ``messages.0.content.1.text.text: Field required``."""
    where = ".".join(str(part) for part in error["loc"] if part not in BRANCH_TAGS)
    message = error["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def conversation_problems(messages: list[Message]) -> list[str]:
    """The rules across the messages of a well-shaped request (see the module's docstring)."""
    problems = request_problems(messages)
    if opens_with_compaction(messages):
        problems = [p for p in problems if p != FIRST_MESSAGE_USER]
    for i, message in enumerate(messages):
        problems += empty_content(i, message, last=i == len(messages) - 1)
        problems += misplaced_blocks(i, message)
    return problems + empty_text("messages", [m["content"] for m in messages])


def opens_with_compaction(messages: list[Message]) -> bool:
    """Whether the first message is an assistant message holding a (non-null) compaction block: the
    history a client sends after dropping what that block summarizes, which the API reads as
    starting with a user turn (see :func:`.compaction.effective_view`)."""
    first = messages[0] if messages else {}
    return first.get("role") == "assistant" and any(
        b.get("type") == "compaction" and b.get("content") for b in blocks(first)
    )


def empty_content(i: int, message: Message, *, last: bool) -> list[str]:
    if message["content"] == "" and not (last and message["role"] == "assistant"):
        return [
            f"messages.{i}: all messages must have non-empty content except for the optional "
            "final assistant message"
        ]
    return []


def misplaced_blocks(i: int, message: Message) -> list[str]:
    """Blocks of a type the message's role may not send (a tool_result from the assistant, ...)."""
    role, content = message["role"], message["content"]
    return [
        f"messages.{i}.content.{j}: {block['type']} blocks are not allowed in {role} messages"
        for j, block in enumerate(content if isinstance(content, list) else [])
        if ROLE_OF_BLOCK.get(block["type"], role) != role
    ]


def empty_text(field: str, contents: list[Any]) -> list[str]:
    """One problem when a text block in ``contents`` (each a string, a list of blocks or None) is
    empty; the items inside a tool_result may be."""
    if any(
        isinstance(content, list) and any(b["type"] == "text" and not b["text"] for b in content)
        for content in contents
    ):
        return [f"{field}: text content blocks must be non-empty"]
    return []
