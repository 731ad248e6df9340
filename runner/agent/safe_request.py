"""The API-valid copy of a history: what a request carries when the model's own output was not.

The transcript keeps what the model sent. A request must not: the API answers 400 when a
``tool_use``'s input is not an object, its id is not a unique string of ``[A-Za-z0-9_-]``, or its
name is not a string. :func:`api_valid` fixes exactly those, in a copy, and renames the matching
``tool_result`` so every pair still matches. The tools already answered each such call with an
``is_error`` result saying what was wrong.

Pure: no I/O, never mutates its input; a valid history comes back equal (the same objects).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from ..messages import Message

_ID = re.compile(r"^[A-Za-z0-9_-]{1,200}$")
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _new_id(index: int, position: int, raw: Any) -> str:
    digest = hashlib.sha256(repr((index, position, raw)).encode("utf-8", "backslashreplace")).hexdigest()[:16]
    return f"toolu_fixed_{index}_{position}_{digest}"


def api_valid(messages: list[Message]) -> list[Message]:
    """``messages`` with every tool_use made acceptable to the API, its result renamed to match."""
    out: list[Message] = []
    seen: set[str] = set()
    renames: list[tuple[Any, str]] | None = None  # (id the model gave, id sent) for the next user message
    for index, message in enumerate(messages):
        content = message.get("content")
        if message.get("role") == "assistant" and isinstance(content, list):
            renames = []
            fixed: list[Any] = []
            changed = False
            for position, block in enumerate(content):
                if not isinstance(block, dict) or block.get("type") != "tool_use":
                    fixed.append(block)
                    continue
                raw_id, name, args = block.get("id"), block.get("name"), block.get("input")
                bad_id = not isinstance(raw_id, str) or not _ID.match(raw_id) or raw_id in seen
                bad_name = not isinstance(name, str) or not _NAME.match(name)
                if isinstance(raw_id, str) and not (
                    bad_id or bad_name or not isinstance(args, dict)
                ):  # no copy
                    seen.add(raw_id)
                    renames.append((raw_id, raw_id))
                    fixed.append(block)
                    continue
                new = dict(block)
                if bad_id:
                    new["id"] = _new_id(index, position, raw_id)
                if bad_name:
                    new["name"] = "invalid_tool_name"
                if not isinstance(args, dict):
                    new["input"] = {}
                seen.add(new["id"])
                renames.append((raw_id, new["id"]))
                changed = True
                fixed.append(new)
            out.append({**message, "content": fixed} if changed else message)
            if not changed:
                renames = None
            continue
        if renames and message.get("role") == "user" and isinstance(content, list):
            out.append({**message, "content": _rename_results(content, renames)})
        else:
            out.append(message)
        renames = None
    return out


def _rename_results(content: list[Any], renames: list[tuple[Any, str]]) -> list[Any]:
    """Each tool_result answers the first unanswered call with its id, else the next unanswered one
    in order (the tools answer in the calls' order)."""
    pending = list(renames)
    fixed: list[Any] = []
    for block in content:
        if not isinstance(block, dict) or block.get("type") != "tool_result" or not pending:
            fixed.append(block)
            continue
        match = next((k for k, (raw, _) in enumerate(pending) if raw == block.get("tool_use_id")), 0)
        _, new_id = pending.pop(match)
        fixed.append(block if block.get("tool_use_id") == new_id else {**block, "tool_use_id": new_id})
    return fixed
