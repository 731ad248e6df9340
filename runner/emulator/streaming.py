"""A reply as the Messages API streams it (``stream: true``): server-sent events in the API's order.

Guarantees:
- :func:`message_events` turns a message body (what the non-streamed path answers, unchanged) into
  the API's events (the shapes of the SDK's ``RawMessageStreamEvent`` and beta equivalents):
  ``message_start`` (the message with empty content, null stop_reason and stop_sequence, its usage
  with the input and cache counts and ``output_tokens`` 1), a ``ping`` after the first
  ``content_block_start`` and after every :data:`PING_EVERY` deltas, then for each block
  ``content_block_start`` / ``content_block_delta``... / ``content_block_stop``, then
  ``message_delta`` (stop_reason, stop_sequence, the cumulative usage: input, cache and output
  counts, ``iterations`` when the message has them) and ``message_stop``.
- What the SDK accumulates from them (``client.messages.stream(...).get_final_message()``) has the
  non-streamed body's content, stop_reason, stop_sequence and usage (and its ``context_management``,
  sent in ``message_delta`` as the API sends it).
- Deltas (:func:`block_events`): text as ``text_delta`` pieces of at most ``chunk`` characters
  (citations as one ``citations_delta`` each); ``tool_use``, ``server_tool_use`` and
  ``mcp_tool_use`` input as ``input_json_delta`` pieces of its JSON text (an empty one first, as the
  API sends); thinking as ``thinking_delta`` pieces then one ``signature_delta``; a compaction block
  as one ``compaction_delta``; any other block (redacted thinking, server tool results) whole in its
  ``content_block_start``, with no delta (so is a scripted block whose text is not a string).
- :func:`broken` cuts a stream as the API does when it fails mid-way: after the first
  ``content_block_delta`` (or before ``message_delta`` when there is none) comes one ``error``
  event, ``{"type": "error", "error": {"type", "message"}}``, and nothing after it.
- :func:`sse` writes one event as the API frames it: ``event: NAME\\ndata: JSON\\n\\n``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

Event = dict[str, Any]

PING_EVERY = 50  # deltas between two pings
INPUT_JSON_BLOCKS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})
PING: Event = {"type": "ping"}
ERROR_MESSAGES = {"overloaded_error": "Overloaded", "api_error": "Internal server error"}


def sse(event: Event) -> bytes:
    """One server-sent event: its ``type`` is the event name, the whole event its data."""
    return f"event: {event['type']}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n".encode()


def pieces(text: str, chunk: int) -> list[str]:
    """``text`` cut into pieces of at most ``chunk`` characters (none for an empty text)."""
    return [text[i : i + chunk] for i in range(0, len(text), chunk)]


def _delta(index: int, delta: dict[str, Any]) -> Event:
    return {"type": "content_block_delta", "index": index, "delta": delta}


def _text_events(index: int, block: dict[str, Any], chunk: int) -> tuple[dict[str, Any], list[Event]]:
    citations = block.get("citations")
    start = {k: v for k, v in block.items() if k != "citations"} | {"text": ""}
    deltas = [
        _delta(index, {"type": "text_delta", "text": piece}) for piece in pieces(block.get("text", ""), chunk)
    ]
    if isinstance(citations, list):
        deltas += [_delta(index, {"type": "citations_delta", "citation": c}) for c in citations]
    return start, deltas


def _input_events(index: int, block: dict[str, Any], chunk: int) -> tuple[dict[str, Any], list[Event]]:
    text = json.dumps(block.get("input", {}), ensure_ascii=False)
    return {**block, "input": {}}, [
        _delta(index, {"type": "input_json_delta", "partial_json": piece})
        for piece in ["", *pieces(text, chunk)]
    ]


def _thinking_events(index: int, block: dict[str, Any], chunk: int) -> tuple[dict[str, Any], list[Event]]:
    deltas = [
        _delta(index, {"type": "thinking_delta", "thinking": piece})
        for piece in pieces(block.get("thinking", ""), chunk)
    ]
    deltas.append(_delta(index, {"type": "signature_delta", "signature": block.get("signature", "")}))
    return {**block, "thinking": "", "signature": ""}, deltas


def _compaction_events(index: int, block: dict[str, Any], chunk: int) -> tuple[dict[str, Any], list[Event]]:
    carried: dict[str, Any] = {k: block[k] for k in ("content", "encrypted_content") if k in block}
    start = {k: v for k, v in block.items() if k not in carried} | {"content": None}
    return start, [_delta(index, {"type": "compaction_delta", **carried})]


def _streamable(block: dict[str, Any]) -> bool:
    """False for a (scripted, hostile) block whose text or thinking is not a string: it is sent whole."""
    field = {"text": "text", "thinking": "thinking"}.get(str(block.get("type")))
    return field is None or isinstance(block.get(field, ""), str)


def block_events(index: int, block: dict[str, Any], chunk: int) -> list[Event]:
    """The start, deltas and stop of content block ``index`` (see the module's guarantees)."""
    kind = block.get("type") if _streamable(block) else None
    if kind == "text":
        start, deltas = _text_events(index, block, chunk)
    elif kind in INPUT_JSON_BLOCKS:
        start, deltas = _input_events(index, block, chunk)
    elif kind == "thinking":
        start, deltas = _thinking_events(index, block, chunk)
    elif kind == "compaction":
        start, deltas = _compaction_events(index, block, chunk)
    else:
        start, deltas = block, []
    return [
        {"type": "content_block_start", "index": index, "content_block": start},
        *deltas,
        {"type": "content_block_stop", "index": index},
    ]


def message_events(message: dict[str, Any], chunk: int) -> Iterator[Event]:
    """Every event of ``message`` streamed, in the API's order (see the module's guarantees)."""
    usage = message.get("usage") or {}
    head = {
        **{k: v for k, v in message.items() if k != "context_management"},
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1},  # the first token
    }
    yield {"type": "message_start", "message": head}
    deltas = 0
    for index, block in enumerate(message.get("content") or []):
        for event in block_events(index, block, chunk):
            yield event
            if event["type"] == "content_block_delta":
                deltas += 1
                if deltas % PING_EVERY == 0:
                    yield PING
            elif event["type"] == "content_block_start" and index == 0:
                yield PING
    if not message.get("content"):
        yield PING
    yield {
        "type": "message_delta",
        "delta": {"stop_reason": message.get("stop_reason"), "stop_sequence": message.get("stop_sequence")},
        "usage": {k: v for k, v in usage.items() if k != "service_tier"},  # service_tier: message_start's
        **({"context_management": message["context_management"]} if "context_management" in message else {}),
    }
    yield {"type": "message_stop"}


def error_event(error_type: str) -> Event:
    """The ``error`` event the API sends when a stream fails mid-way."""
    return {
        "type": "error",
        "error": {"type": error_type, "message": ERROR_MESSAGES.get(error_type, error_type)},
    }


def broken(events: Iterator[Event], error_type: str) -> Iterator[Event]:
    """``events`` up to the first ``content_block_delta`` (or to ``message_delta``), then an error."""
    for event in events:
        if event["type"] == "message_delta":
            break
        yield event
        if event["type"] == "content_block_delta":
            break
    yield error_event(error_type)
