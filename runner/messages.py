"""Plain-JSON message helpers and the request invariants the Messages API enforces.

History is a list of dicts in the API's parameter shape. These helpers never mutate their input.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

Message = dict[str, Any]


def blocks(message: Message) -> list[dict[str, Any]]:
    """The content of a message as a list of blocks (a string becomes one text block)."""
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def tool_uses(message: Message) -> list[dict[str, Any]]:
    if message.get("role") != "assistant":
        return []
    return [b for b in blocks(message) if b.get("type") == "tool_use"]


def tool_results(message: Message) -> list[dict[str, Any]]:
    if message.get("role") != "user":
        return []
    return [b for b in blocks(message) if b.get("type") == "tool_result"]


def has_tool_use(message: Message) -> bool:
    return bool(tool_uses(message))


def is_tool_result_message(message: Message) -> bool:
    return bool(tool_results(message))


def text_of(message: Message) -> str:
    return "\n".join(b.get("text", "") for b in blocks(message) if b.get("type") == "text")


def result_text(block: dict[str, Any]) -> str:
    """A tool_result's content as text (list content: its text blocks joined)."""
    content = block.get("content", "")
    if isinstance(content, str):
        return content
    parts = []
    for item in content or []:
        if isinstance(item, dict):
            parts.append(item.get("text", "") if item.get("type") == "text" else f"[{item.get('type')}]")
    return "\n".join(parts)


def measure(message: Message) -> int:
    """A message's size in characters, as the seeds count it (its JSON text)."""
    return len(json.dumps(message, ensure_ascii=False))


def with_content(message: Message, content: Any) -> Message:
    return {**message, "content": content}


def one_line(text: str, limit: int = 300) -> str:
    """``text`` on one line, cut to ``limit`` characters: for errors and summaries meant for people."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def user_text(text: str) -> Message:
    return {"role": "user", "content": text}


def merge_adjacent(messages: list[Message]) -> list[Message]:
    """Merge neighbours with the same role into one message, so roles alternate."""
    merged: list[Message] = []
    for message in messages:
        if merged and merged[-1]["role"] == message["role"]:
            merged[-1] = with_content(merged[-1], blocks(merged[-1]) + blocks(message))
        else:
            merged.append(message)
    return merged


def request_problems(messages: list[Message], active_request: str | None = None) -> list[str]:
    """Every way ``messages`` breaks the API's rules (empty list: a valid request).

    Checks: the first message is from the user; roles alternate; every tool_result answers a
    tool_use of the assistant message right before it and comes before the message's other blocks;
    every tool_use is answered in the next user message; tool_use ids are unique; with
    ``active_request``, that text appears exactly once.
    """
    problems = list(_problems(messages))
    if active_request is not None:
        count = sum(_count_text(m, active_request) for m in messages)
        if count != 1:
            problems.append(f"the current user request appears {count} times, expected exactly once")
    return problems


def _count_text(message: Message, needle: str) -> int:
    return sum(b.get("text", "").count(needle) for b in blocks(message) if b.get("type") == "text")


def _problems(messages: list[Message]) -> Iterator[str]:
    if not messages:
        yield "messages: at least one message is required"
        return
    if messages[0].get("role") != "user":
        yield "messages.0: the first message must use the user role"
    seen_ids: set[str] = set()
    for i, message in enumerate(messages):
        role = message.get("role")
        if role not in ("user", "assistant"):
            yield f"messages.{i}.role: expected 'user' or 'assistant', got {role!r}"
            continue
        content = message.get("content")
        if not isinstance(content, (str, list)) or (isinstance(content, list) and not content):
            yield f"messages.{i}.content: expected a string or a non-empty list of blocks"
        if i and messages[i - 1].get("role") == role:
            yield f"messages.{i}: roles must alternate, two {role} messages in a row"
        if role == "user":
            yield from _unmatched_results(messages, i)
            yield from _results_after_other_blocks(message, i)
        else:
            yield from _repeated_uses(message, i, seen_ids)
            seen_ids |= {str(b.get("id")) for b in tool_uses(message)}
            yield from _unanswered_uses(messages, i)


def _unmatched_results(messages: list[Message], i: int) -> list[str]:
    """The tool_results of user message ``i`` that answer no tool_use of the message before it."""
    previous_uses = {str(b.get("id")) for b in tool_uses(messages[i - 1])} if i else set()
    return [
        f"messages.{i}: tool_result {block.get('tool_use_id')!r} has no matching tool_use "
        "in the previous message"
        for block in tool_results(messages[i])
        if str(block.get("tool_use_id")) not in previous_uses
    ]


def _results_after_other_blocks(message: Message, i: int) -> list[str]:
    """A tool_result of user ``message`` (number ``i``) after a block of another type: the API takes the
    results first, then any text."""
    kinds = [b.get("type") for b in blocks(message)]
    first_other = next((j for j, kind in enumerate(kinds) if kind != "tool_result"), len(kinds))
    late = [j for j, kind in enumerate(kinds) if kind == "tool_result" and j > first_other]
    where = f"messages.{i}.content.{late[0] if late else 0}"
    return [f"{where}: tool_result blocks must come first in the content"] if late else []


def _repeated_uses(message: Message, i: int, seen_ids: set[str]) -> list[str]:
    """The tool_use ids of assistant ``message`` (number ``i``) already in ``seen_ids`` or earlier in it."""
    problems, seen = [], set(seen_ids)
    for block in tool_uses(message):
        if str(block.get("id")) in seen:
            problems.append(f"messages.{i}: tool_use id {block.get('id')!r} is not unique")
        seen.add(str(block.get("id")))
    return problems


def _unanswered_uses(messages: list[Message], i: int) -> list[str]:
    """The tool_use ids of assistant message ``i`` that the next message does not answer (none when it
    is the last)."""
    uses = {str(b.get("id")) for b in tool_uses(messages[i])}
    if not uses or i + 1 >= len(messages):
        return []
    answered = {str(b.get("tool_use_id")) for b in tool_results(messages[i + 1])}
    missing = uses - answered
    if not missing:
        return []
    return [
        f"messages.{i}: tool_use ids {sorted(missing)} were found without tool_result "
        "blocks immediately after"
    ]
