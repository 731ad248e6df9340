"""Server-side compaction (``context_management`` edit ``compact_20260112``), as the API does it.

Guarantees:
- What the API reads of a history (:func:`effective_view`): everything from the last non-null
  ``compaction`` block on, that block as a user message (:data:`runner.protocol.COMPACTION_BLOCK_HEAD`
  and its content); a history without one is read whole.
- A request whose input is over the edit's trigger (default ``compaction_default_trigger``) is
  compacted first (:func:`server_compaction`): the summary is the deterministic fallback summary
  of the whole request (earlier compaction blocks as text, so their notes survive), at most
  :data:`SERVER_SUMMARY_CHARS` characters; the reply is then answered from the summary plus the
  last exchange (pair-safe). Its optional ``instructions`` are accepted but cannot be followed.
- Context editing (``clear_tool_uses_20250919``) is applied to what the API reads, after the last
  compaction block (:func:`edited_view`), by the runner's own pure function
  (:func:`runner.compaction.clearing.clear_tool_uses`), so ``runner replay`` clears as the emulator does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..compaction.clearing import apply_clear_edits
from ..compaction.fallback import fallback_summary
from ..messages import Message, blocks, merge_adjacent, tool_results
from ..protocol import COMPACTION_BLOCK_HEAD
from .tokens import estimate, input_tokens

SERVER_SUMMARY_CHARS = 40_000  # about 10,000 tokens: the server's summary of a long context


def compaction_edit(body: dict[str, Any]) -> dict[str, Any] | None:
    """The request's ``compact_20260112`` edit, if it has one."""
    edits = (body.get("context_management") or {}).get("edits") or []
    return next((e for e in edits if e.get("type") == "compact_20260112"), None)


def _last_compaction(messages: list[Message]) -> tuple[int, int] | None:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") != "assistant":
            continue
        content = blocks(messages[i])
        for j in range(len(content) - 1, -1, -1):
            if content[j].get("type") == "compaction" and content[j].get("content"):
                return i, j
    return None


def effective_view(messages: list[Message]) -> list[Message]:
    """What the API reads: everything from the last (non-null) compaction block on, that block as a
    user message (``COMPACTION_BLOCK_HEAD`` and its content). Without a compaction block: ``messages``
    itself."""
    found = _last_compaction(messages)
    if found is None:
        return messages
    i, j = found
    content = blocks(messages[i])
    view: list[Message] = [{"role": "user", "content": COMPACTION_BLOCK_HEAD + content[j]["content"]}]
    rest = [b for b in content[j + 1 :] if b.get("type") != "compaction"]
    if rest:
        view.append({"role": "assistant", "content": rest})
    return merge_adjacent(view + messages[i + 1 :])


def summary_input(messages: list[Message]) -> list[Message]:
    """The whole request for a compaction summary, earlier compaction blocks as assistant text (so the
    fallback summary keeps their notes)."""
    out = []
    for message in messages:
        content = []
        for block in blocks(message):
            if block.get("type") == "compaction":
                if block.get("content"):
                    content.append({"type": "text", "text": COMPACTION_BLOCK_HEAD + block["content"]})
            else:
                content.append(block)
        if content:
            out.append({**message, "content": content})
    return out


def compacted_view(summary: str, view: list[Message]) -> list[Message]:
    """After a compaction: the summary as a user message, then the last exchange (pair-safe)."""
    tail = view[-2:] if len(view) >= 2 and tool_results(view[-1]) else view[-1:]
    return merge_adjacent([{"role": "user", "content": COMPACTION_BLOCK_HEAD + summary}, *tail])


@dataclass(frozen=True)
class ServerCompaction:
    """A compaction the server made before answering."""

    block: dict[str, Any]  # the ``compaction`` content block that opens the reply
    usage: dict[str, Any]  # its ``usage.iterations`` entry
    view: list[Message]  # what the reply is then answered from
    pause: bool  # ``pause_after_compaction``: the reply is the compaction alone


def server_compaction(
    body: dict[str, Any], view: list[Message], total: int, default_trigger: int
) -> ServerCompaction | None:
    """The compaction a request of ``total`` input tokens gets, or None (no edit, or under its trigger)."""
    edit = compaction_edit(body)
    if edit is None:
        return None
    trigger = (edit.get("trigger") or {}).get("value") or default_trigger
    if total <= trigger:
        return None
    summary = fallback_summary(summary_input(body["messages"]), SERVER_SUMMARY_CHARS)
    usage = {
        "type": "compaction",
        "input_tokens": total,
        "output_tokens": estimate(summary),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    return ServerCompaction(
        {"type": "compaction", "content": summary},
        usage,
        compacted_view(summary, view),
        bool(edit.get("pause_after_compaction")),
    )


def edited_view(body: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What the model reads of a request (from the last compaction block on, then the request's
    context editing applied, see :mod:`runner.compaction.clearing`) and the edits applied, as the
    response's ``context_management.applied_edits`` lists them."""
    system, tools = body.get("system"), body.get("tools") or []
    view, applied = apply_clear_edits(
        effective_view(body["messages"]),
        body.get("context_management"),
        lambda messages: input_tokens(system, messages, tools),
    )
    return view, [edit.model_dump(mode="json") for edit in applied]
