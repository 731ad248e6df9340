"""What an agent needed from its tools, by one exact rule, and whether a request still holds it.

A *fact* is a match of :data:`FACT` (an identifier of six characters or more with its dotted parts,
or a path with a slash). A text *holds* a fact when the fact is one of that text's matches. The
texts of a message are its text blocks, its tool results' contents and its tool calls' inputs as
compact JSON (``json.dumps(input, separators=(",", ":"), ensure_ascii=False)``).

A *needed fact* at assistant turn t is a distinct match of the assistant message of turn t (its
text and tool inputs) that an earlier tool result holds and that neither the system prompt, nor an
earlier user text that is not a tool result, nor an earlier assistant message holds: a word the
agent could only have taken from what its tools returned.

Guarantees: pure functions; each text is matched once per call (callers cache by message);
:func:`facts_in` is ``set(FACT.findall(text))`` exactly, in time linear in the text (the regular
expression alone takes time quadratic in a long run of the characters a path may hold, e.g. 100,000 digits).
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..messages import Message

IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]{5,}(?:\.[A-Za-z_][A-Za-z0-9_]+)*"
FACT = re.compile(IDENTIFIER + r"|(?:[\w.-]+/)+[\w.-]+")
LONG_RUN = 32  # a run of FACT's characters at least this long is matched by :func:`_run_facts`
_LONG = re.compile(r"[\w./-]{" + str(LONG_RUN) + ",}")
_IDENTIFIER = re.compile(IDENTIFIER)


def facts_in(text: str) -> set[str]:
    """The distinct facts ``text`` holds: ``set(FACT.findall(text))``, in linear time."""
    if len(text) < LONG_RUN or not _LONG.search(text):
        return set(FACT.findall(text))
    found: set[str] = set()
    start = 0
    for run in _LONG.finditer(text):  # a match never crosses a character outside [\w./-]
        found.update(FACT.findall(text, start, run.start()))
        found |= _run_facts(run.group())
        start = run.end()
    found.update(FACT.findall(text, start))
    return found


def _run_facts(run: str) -> set[str]:
    """``set(FACT.findall(run))`` of a run of the characters a path may hold, by its ``/``-parts.

    findall tries the identifier first at each position, then the path, which there is the rest of
    the part, ``/`` and every following non-empty part (greedy); the path matches only when the next
    part is not empty. A part after which no path can start holds the identifier matches only."""
    parts = run.split("/")
    reach = [0] * len(parts)  # the index of the last part of a path going on from each part
    for i in range(len(parts) - 1, -1, -1):
        reach[i] = reach[i + 1] if i + 1 < len(parts) and parts[i + 1] else i
    found: set[str] = set()
    i = 0
    while i < len(parts):
        part = parts[i]
        if not part or i + 1 == len(parts) or not parts[i + 1]:
            found.update(_IDENTIFIER.findall(part))
            i += 1
            continue
        pos = 0
        while pos < len(part):
            match = _IDENTIFIER.match(part, pos)
            if match is None:
                found.add("/".join([part[pos:], *parts[i + 1 : reach[i] + 1]]))
                break
            found.add(match.group())
            pos = match.end()
        else:  # the identifiers took the whole part: the next part starts afresh
            i += 1
            continue
        i = reach[i] + 1
    return found


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
    return set[str]().union(*map(facts_in, said_texts(message) + result_texts(message)))


def needed_facts(system: str, messages: list[Message]) -> dict[int, set[str]]:
    """The needed facts of each assistant message, by its index in ``messages`` (see the module)."""
    from_results: set[str] = set()
    known = facts_in(system)  # held by the system prompt, a user's own text or the assistant before
    needed: dict[int, set[str]] = {}
    for index, message in enumerate(messages):
        said = set[str]().union(*map(facts_in, said_texts(message)))
        if message.get("role") == "assistant":
            needed[index] = {f for f in said if f in from_results and f not in known}
        else:
            from_results.update(*map(facts_in, result_texts(message)))
        known |= said
    return needed
