"""What an agent needed from its tools, by one exact rule, and whether a request still holds it.

A *fact* is a match of :data:`FACT` (an identifier of six characters or more with its dotted parts,
or a path with a slash). A text *holds* a fact when the fact is one of that text's matches. The
texts of a message are its text blocks, its tool results' contents and its tool calls' inputs as
compact JSON (``json.dumps(input, separators=(",", ":"), ensure_ascii=False)``).

A *needed fact* at assistant turn t is a distinct match of the assistant message of turn t (its
text and tool inputs) that an earlier tool result holds and that neither the system prompt, nor an
earlier user text that is not a tool result, nor an earlier assistant message holds: a word the
agent could only have taken from what its tools returned.

Guarantees: pure functions; each text is matched once per call (callers cache by message).
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..messages import Message

FACT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{5,}(?:\.[A-Za-z_][A-Za-z0-9_]+)*|(?:[\w.-]+/)+[\w.-]+")


def facts_in(text: str) -> set[str]:
    """The distinct facts ``text`` holds."""
    return set(FACT.findall(text))


def tool_input_text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def said_texts(message: Message) -> list[str]:
    """What a message says that is not a tool result: its text blocks and its tool calls' inputs."""
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    out = []
    for block in content or ():
        if block.get("type") == "text":
            out.append(str(block.get("text", "")))
        elif block.get("type") == "tool_use":
            out.append(tool_input_text(block.get("input")))
    return out


def result_texts(message: Message) -> list[str]:
    """The contents of a message's tool results (a list of text blocks as their texts)."""
    content = message.get("content")
    if isinstance(content, str):
        return []
    out = []
    for block in content or ():
        if block.get("type") != "tool_result":
            continue
        inner = block.get("content")
        if isinstance(inner, str):
            out.append(inner)
        elif isinstance(inner, list):
            out += [str(b.get("text", "")) for b in inner if isinstance(b, dict) and b.get("type") == "text"]
    return out


def message_facts(message: Message) -> set[str]:
    """Every fact a message holds: its texts, tool inputs and tool results."""
    found: set[str] = set()
    for text in said_texts(message) + result_texts(message):
        found |= facts_in(text)
    return found


def needed_facts(system: str, messages: list[Message]) -> dict[int, set[str]]:
    """The needed facts of each assistant message, by its index in ``messages`` (see the module)."""
    from_results: set[str] = set()
    known = facts_in(system)  # held by the system prompt, a user's own text or the assistant before
    needed: dict[int, set[str]] = {}
    for index, message in enumerate(messages):
        said: set[str] = set()
        for text in said_texts(message):
            said |= facts_in(text)
        if message.get("role") == "assistant":
            needed[index] = {f for f in said if f in from_results and f not in known}
        else:
            for text in result_texts(message):
                from_results |= facts_in(text)
        known |= said
    return needed
