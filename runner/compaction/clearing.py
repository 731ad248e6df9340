"""The API's context editing ``clear_tool_uses_20250919``, as a pure function: the emulator serves it,
``runner replay`` replays the ``clear`` strategy with it.

Guarantees (of :func:`clear_tool_uses`, the API's documented behaviour):
- Nothing changes unless the edit's trigger is passed: ``input_tokens`` (the request's input tokens
  before editing, ``count(messages)``) over its value, or ``tool_uses`` (the tool_use blocks of the
  messages) over its value; without a trigger, :data:`DEFAULT_TRIGGER_TOKENS` input tokens.
- Then every tool use but the newest ``keep`` (default :data:`DEFAULT_KEEP`, whichever tools they
  called) and those of a tool named in ``exclude_tools`` is cleared, oldest first: its tool_result's
  content becomes :data:`runner.protocol.CLEARED_TOOL_RESULT` (the block's other fields kept), and
  with ``clear_tool_inputs`` (``true``, or a list naming its tool) its input becomes ``{}``. A result
  already cleared is not cleared, nor counted, again.
- With ``clear_at_least``, nothing changes unless the clearing frees at least that many input tokens.
- The messages given are never changed: an edited message is a copy, the others are the same objects.
- What was done is reported as the API reports it (``cleared_tool_uses``, ``cleared_input_tokens``:
  the input tokens before minus after), in the SDK's own response type.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from anthropic.types.beta import BetaClearToolUses20250919EditParam, BetaClearToolUses20250919EditResponse

from ..messages import Message, blocks
from ..protocol import CLEARED_TOOL_RESULT

CLEAR_TOOL_USES: Final = "clear_tool_uses_20250919"
DEFAULT_TRIGGER_TOKENS = 100_000
DEFAULT_KEEP = 3


@dataclass(frozen=True)
class Cleared:
    """The messages as the model reads them, and the edit's report (None: nothing was cleared)."""

    messages: list[Message]
    applied: BetaClearToolUses20250919EditResponse | None = None


def clear_edits(context_management: Any) -> list[BetaClearToolUses20250919EditParam]:
    """The ``clear_tool_uses_20250919`` edits of a request's ``context_management``, in order."""
    edits = context_management.get("edits") if isinstance(context_management, dict) else None
    return [e for e in edits or [] if isinstance(e, dict) and e.get("type") == CLEAR_TOOL_USES]  # type: ignore[misc]


def _uses(messages: list[Message]) -> list[dict[str, Any]]:
    return [
        b for m in messages if m.get("role") == "assistant" for b in blocks(m) if b.get("type") == "tool_use"
    ]


def triggered(edit: BetaClearToolUses20250919EditParam, messages: list[Message], tokens: int) -> bool:
    """Whether a request of ``tokens`` input tokens carrying ``messages`` passes the edit's trigger."""
    trigger = edit.get("trigger") or {"type": "input_tokens", "value": DEFAULT_TRIGGER_TOKENS}
    if trigger["type"] == "tool_uses":
        return len(_uses(messages)) > trigger["value"]
    return tokens > trigger["value"]


def _inputs_too(clear_tool_inputs: bool | Iterable[str] | None, name: str) -> bool:
    if isinstance(clear_tool_inputs, bool) or clear_tool_inputs is None:
        return bool(clear_tool_inputs)
    return name in set(clear_tool_inputs)


def clear_tool_uses(
    messages: list[Message],
    edit: BetaClearToolUses20250919EditParam,
    count: Callable[[list[Message]], int],
) -> Cleared:
    """``messages`` with the edit applied (see the module's guarantees); ``count(messages)`` is the
    input tokens of the request carrying them."""
    before = count(messages)
    if not triggered(edit, messages, before):
        return Cleared(messages)
    uses = _uses(messages)
    keep = (edit.get("keep") or {"value": DEFAULT_KEEP})["value"]
    excluded = set(edit.get("exclude_tools") or ())
    old = uses[: max(0, len(uses) - keep)]
    targets = {str(u.get("id")): u for u in old if u.get("name") not in excluded}
    if not targets:
        return Cleared(messages)
    inputs = edit.get("clear_tool_inputs")
    cleared: set[str] = set()
    out: list[Message] = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            out.append(message)
            continue
        new, changed = [], False
        for block in content:
            kind, key = block.get("type"), str(block.get("tool_use_id") or block.get("id"))
            if kind == "tool_result" and key in targets and block.get("content") != CLEARED_TOOL_RESULT:
                block, changed = {**block, "content": CLEARED_TOOL_RESULT}, True
                cleared.add(key)
            elif (
                kind == "tool_use"
                and key in targets
                and block.get("input")
                and _inputs_too(inputs, str(block.get("name")))
            ):
                block, changed = {**block, "input": {}}, True
                cleared.add(key)
            new.append(block)
        out.append({**message, "content": new} if changed else message)
    if not cleared:
        return Cleared(messages)
    freed = before - count(out)
    at_least = edit.get("clear_at_least")
    if at_least and freed < at_least["value"]:
        return Cleared(messages)
    return Cleared(
        out,
        BetaClearToolUses20250919EditResponse(
            type=CLEAR_TOOL_USES, cleared_tool_uses=len(cleared), cleared_input_tokens=freed
        ),
    )


def apply_clear_edits(
    messages: list[Message], context_management: Any, count: Callable[[list[Message]], int]
) -> tuple[list[Message], list[BetaClearToolUses20250919EditResponse]]:
    """Every ``clear_tool_uses_20250919`` edit of ``context_management``, in order: the messages as the
    model reads them and the edits applied."""
    applied = []
    for edit in clear_edits(context_management):
        result = clear_tool_uses(messages, edit, count)
        messages = result.messages
        if result.applied is not None:
            applied.append(result.applied)
    return messages, applied
