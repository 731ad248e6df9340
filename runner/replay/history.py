"""A recorded agent history, read from disk: the neutral Messages-API JSONL of ``shared/trajectories/``
(line 1 a header with ``system``, ``task``, ``source``..., then one message a line) or a runner job's
own ``transcript.jsonl`` (one message a line; the system prompt from ``job.json`` beside it).

Guarantees:
- A history is data from anywhere. What cannot be replayed is a :class:`HistoryError` naming the file
  and the line (not JSON, not an object, no role, a role other than user and assistant, content that
  is neither a string nor a list, a tool call without an id, a name or an object input, a history
  that does not start with the user, an empty file); what can be replayed without changing what was
  said is a counted skip (:attr:`History.skipped`): an unknown block type (thinking, image...), a
  tool result answering no call of the message before it, a call left without a result (answered
  with an empty error result so every request stays valid), consecutive messages of one role
  (merged, as the API would need them).
- The returned messages alternate roles, start with the user, and every ``tool_use`` of an assistant
  message is answered in the next user message.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..messages import Message

KNOWN_BLOCKS = {"user": {"text", "tool_result"}, "assistant": {"text", "tool_use"}}
MISSING_RESULT = "[no result was recorded for this call]"


class HistoryError(ValueError):
    """A history that cannot be replayed: the message names the file and the line."""


@dataclass
class History:
    path: Path
    system: str
    messages: list[Message]
    header: dict[str, Any] = field(default_factory=dict)
    skipped: Counter[str] = field(default_factory=Counter)

    @property
    def turns(self) -> int:
        return sum(1 for m in self.messages if m["role"] == "assistant")


def load_history(path: Path) -> History:
    """The history in ``path`` (see the module's guarantees)."""
    try:
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
    except OSError as e:
        raise HistoryError(f"{path}: cannot read it: {e.strerror or e}") from None
    header: dict[str, Any] = {}
    records: list[tuple[int, dict[str, Any]]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as e:
            raise HistoryError(f"{path}:{number}: not a JSON line ({str(e)[:80]})") from None
        if not isinstance(value, dict):
            raise HistoryError(f"{path}:{number}: expected a JSON object, got {type(value).__name__}")
        if not records and not header and "role" not in value:
            header = value
            continue
        records.append((number, value))
    if not records:
        raise HistoryError(f"{path}: no messages (a history is one JSON message a line)")
    system = header.get("system") if header else _job_system(path)
    if not isinstance(system, str):
        raise HistoryError(f"{path}:1: header field system: expected a string")
    history = History(path=path, system=system, messages=[], header=header)
    for number, record in records:
        _add(history, number, record)
    if history.messages[0]["role"] != "user":
        raise HistoryError(
            f"{path}:{records[0][0]}: the first message is the assistant's; a history starts with the user"
        )
    _answer_every_call(history)
    return history


def _job_system(path: Path) -> str:
    """A runner transcript's system prompt: ``system`` of the ``job.json`` beside it ("" when none)."""
    try:
        job = json.loads((path.parent / "job.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return ""
    system = job.get("system") if isinstance(job, dict) else None
    return system if isinstance(system, str) else ""


def _add(history: History, number: int, record: dict[str, Any]) -> None:
    where = f"{history.path}:{number}"
    role = record.get("role")
    if role not in KNOWN_BLOCKS:
        raise HistoryError(f'{where}: role: expected "user" or "assistant", got {str(role)[:40]!r}')
    content = record.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise HistoryError(f"{where}: content: expected a string or a list of blocks")
    kept = []
    for i, block in enumerate(content):
        if not isinstance(block, dict):
            raise HistoryError(f"{where}: content.{i}: expected a block (an object)")
        kind = block.get("type")
        if kind not in KNOWN_BLOCKS[role]:
            history.skipped[f"{role} block {str(kind)[:30]}"] += 1
            continue
        kept.append(_checked(block, f"{where}: content.{i}"))
    if role == "user":
        kept = _answers_only(history, kept)
    if not kept:
        history.skipped[f"empty {role} message"] += 1
        return
    messages = history.messages
    if messages and messages[-1]["role"] == role:
        history.skipped[f"consecutive {role} messages merged"] += 1
        messages[-1] = {"role": role, "content": [*messages[-1]["content"], *kept]}
    else:
        messages.append({"role": role, "content": kept})


def _checked(block: dict[str, Any], where: str) -> dict[str, Any]:
    kind = block["type"]
    if kind == "text":
        if not isinstance(block.get("text"), str):
            raise HistoryError(f"{where}.text: expected a string")
        return {"type": "text", "text": block["text"]}
    if kind == "tool_use":
        for key, expected in (("id", str), ("name", str), ("input", dict)):
            if not isinstance(block.get(key), expected):
                raise HistoryError(
                    f"{where}.{key}: expected {'an object' if expected is dict else 'a string'}"
                )
        return {"type": "tool_use", "id": block["id"], "name": block["name"], "input": block["input"]}
    if not isinstance(block.get("tool_use_id"), str):
        raise HistoryError(f"{where}.tool_use_id: expected a string")
    content = block.get("content", "")
    if isinstance(content, list):
        parts = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        if len(parts) != len(content) or not all(isinstance(p, str) for p in parts):
            raise HistoryError(f"{where}.content: expected a string or a list of text blocks")
        content = "\n".join(str(p) for p in parts)
    if not isinstance(content, str):
        raise HistoryError(f"{where}.content: expected a string or a list of text blocks")
    out: dict[str, Any] = {"type": "tool_result", "tool_use_id": block["tool_use_id"], "content": content}
    if block.get("is_error") is True:
        out["is_error"] = True
    return out


def _answers_only(history: History, blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``blocks`` without the tool results that answer no call of the assistant message before them."""
    previous = history.messages[-1] if history.messages else None
    calls = (
        {b["id"] for b in previous["content"] if b["type"] == "tool_use"}
        if previous and previous["role"] == "assistant"
        else set()
    )
    kept = []
    for block in blocks:
        if block["type"] == "tool_result" and block["tool_use_id"] not in calls:
            history.skipped["tool result answering no call"] += 1
            continue
        if block["type"] == "tool_result":
            calls.discard(block["tool_use_id"])  # a second answer to one call is no answer either
        kept.append(block)
    return kept


def _answer_every_call(history: History) -> None:
    """Every call of an assistant message answered in the next user message (an empty error result
    for a call without one), the results first, as the API wants them."""
    messages = history.messages
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        calls = [b["id"] for b in message["content"] if b["type"] == "tool_use"]
        if not calls:
            continue
        if i + 1 == len(messages):  # the history ends on a call: its last turn needs no results
            return
        nxt = messages[i + 1]["content"]
        answered = {b["tool_use_id"] for b in nxt if b["type"] == "tool_result"}
        missing = [c for c in calls if c not in answered]
        if not missing:
            continue
        history.skipped["call without a recorded result"] += len(missing)
        filled = [
            {"type": "tool_result", "tool_use_id": c, "content": MISSING_RESULT, "is_error": True}
            for c in missing
        ]
        results = [b for b in nxt if b["type"] == "tool_result"] + filled
        messages[i + 1] = {
            "role": "user",
            "content": results + [b for b in nxt if b["type"] != "tool_result"],
        }
