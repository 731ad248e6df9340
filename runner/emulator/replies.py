"""What the emulator answers to a valid request, and the usage it bills.

Guarantees:
- The reply is, in this order: the next scripted reply (``config.script``, served once each, in
  order); for a request whose system prompt is the runner's Summarizer prompt, the deterministic
  fallback summary of the conversation it carries; else the state's ``replies`` model (by default
  the backend switch's stand-in, asked through the ``Model`` protocol) over the messages the API
  reads (without ``cache_control`` markers, so the reply does not depend on where a client put its
  breakpoints).
- Server-side compaction comes first when its trigger is passed (see :mod:`.compaction`); its cost
  is an entry of ``usage.iterations``, and the top-level usage is the message's alone.
- A request with a ``clear_tool_uses_20250919`` edit is answered from, and billed for, the messages
  as edited; its reply has ``context_management.applied_edits`` (empty when nothing was cleared).
- With ``enforce_max_tokens``, a reply longer than ``max_tokens`` is cut (stop_reason ``max_tokens``).
- Usage has the API's fields; prompt caching is accounted by the state's :class:`runner.billing.PromptCache`.
  A scripted reply's ``usage`` replaces fields of the usage sent (not of what is billed).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from ..billing import without_cache_control
from ..compaction.clearing import clear_edits
from ..compaction.fallback import fallback_summary
from ..compaction.summarizer import SYSTEM_PROMPT
from ..messages import Message, blocks
from ..models.base import Request
from ..pricing import USAGE_KEYS
from .compaction import server_compaction
from .faults import message_body
from .state import EmulatorState
from .tokens import CHARS_PER_TOKEN, estimate, input_tokens

Content = list[dict[str, Any]]


def system_text(system: Any) -> str:
    if isinstance(system, str):
        return system
    return "".join(b.get("text", "") for b in system or [] if isinstance(b, dict))


def conversation_of(view: list[Message]) -> list[Message]:
    """The history a Summarizer request carries as JSON lines in ``<conversation>`` tags."""
    text = "\n".join(
        b.get("text", "")
        for m in view
        if m.get("role") == "user"
        for b in blocks(m)
        if b.get("type") == "text"
    )
    start = text.find("<conversation>\n")
    end = text.rfind("\n</conversation>")
    if start < 0 or end < start:
        return []
    out = []
    for line in text[start + len("<conversation>\n") : end].split("\n"):
        try:
            item = json.loads(line)
        except ValueError:
            continue  # a cut marker
        if isinstance(item, dict) and item.get("role") in ("user", "assistant"):
            out.append(item)
    return out


def without_breakpoints(messages: list[Message]) -> list[Message]:
    """``messages`` without cache_control markers: the policy's answer (its tool_use ids included)
    must not depend on where a client put its breakpoints."""

    def clean(block: Any) -> Any:
        if not isinstance(block, dict):
            return block
        block = without_cache_control(block)
        if isinstance(block.get("content"), list):
            block["content"] = [clean(item) for item in block["content"]]
        return block

    return [
        {**m, "content": [clean(b) for b in m["content"]]} if isinstance(m.get("content"), list) else m
        for m in messages
    ]


def truncate(content: Content, max_tokens: int) -> tuple[Content, bool]:
    """Blocks that fit in ``max_tokens`` (a text block may be cut); True when something was cut."""
    if estimate(content) <= max_tokens:
        return content, False
    budget, out = max_tokens * CHARS_PER_TOKEN, []
    for block in content:
        size = len(json.dumps(block, ensure_ascii=False))
        if size <= budget:
            out.append(block)
            budget -= size
        elif block.get("type") == "text" and budget > 40:
            out.append({**block, "text": block["text"][: budget - 40]})
            break
        else:
            break
    return out, True


async def answer(state: EmulatorState, body: dict[str, Any], view: list[Message]) -> tuple[Content, str]:
    """The reply's content and stop reason: the script, a Summarizer summary, or the replier."""
    config = state.config
    if state.script_position < len(config.script):
        scripted = config.script[state.script_position]
        state.script_position += 1
        return copy.deepcopy(scripted.content), scripted.stop_reason
    if system_text(body.get("system")) == SYSTEM_PROMPT:
        state.summary_requests += 1
        # a summary as long as the request's max_tokens allows (4 characters per token)
        budget = max(2_000, int(body.get("max_tokens", 0)) * 4 - 4_000)
        return [{"type": "text", "text": fallback_summary(conversation_of(view), budget)}], "end_turn"
    request = Request(
        model=str(body["model"]),
        messages=without_breakpoints(view),
        tools=[t for t in body.get("tools") or [] if isinstance(t, dict)],
        max_tokens=int(body.get("max_tokens", 0)),
        tool_choice=body.get("tool_choice"),
    )
    reply = await state.replies(config.batch_size).create(request)
    return reply.content, reply.stop_reason


async def build_message(
    state: EmulatorState,
    body: dict[str, Any],
    view: list[Message],
    total: int,
    *,
    applied: list[dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The response body and the usages to bill (one per iteration); ``view`` is what the model reads
    (context editing applied), ``applied`` the edits that cleared something."""
    config = state.config
    model, system, tools = body["model"], body.get("system"), body.get("tools") or []
    prefix: Content = []
    iterations: list[dict[str, Any]] = []
    compaction = server_compaction(body, view, total, config.compaction_default_trigger)
    if compaction is not None:
        prefix, iterations = [compaction.block], [compaction.usage]
        state.compactions += 1
        view = compaction.view
        total = input_tokens(system, view, tools)
        if compaction.pause:
            paused = {**dict.fromkeys(USAGE_KEYS, 0), "iterations": iterations}
            return message_body(model, prefix, "compaction", paused), iterations
    scripted = config.script[state.script_position] if state.script_position < len(config.script) else None
    content, stop_reason = await answer(state, body, view)
    if config.enforce_max_tokens:
        content, cut = truncate(content, body["max_tokens"])
        stop_reason = "max_tokens" if cut else stop_reason
    read, creation, long = state.cache.account(
        model, system, tools, view, total, config, body.get("cache_control")
    )
    usage: dict[str, Any] = {
        "input_tokens": total - read - creation,
        "output_tokens": estimate(content),
        "cache_creation_input_tokens": creation,
        "cache_read_input_tokens": read,
        "cache_creation": {"ephemeral_5m_input_tokens": creation - long, "ephemeral_1h_input_tokens": long},
    }
    billed = [*iterations, {"type": "message", **usage}]
    if iterations:
        usage["iterations"] = billed
    if scripted is not None and scripted.usage:  # a hostile model's numbers: sent, never billed
        usage = {**usage, **copy.deepcopy(scripted.usage)}
    message = message_body(model, prefix + content, stop_reason, {**usage, "service_tier": "standard"})
    if clear_edits(body.get("context_management")):
        message["context_management"] = {"applied_edits": applied or []}
        state.clearings += bool(applied)
    return message, billed
