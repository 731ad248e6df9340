"""Token counts as the emulator bills them: ceil(characters of the JSON text / 4), as the offline
model counts, so the runner's estimates and the emulator's usage agree."""

from __future__ import annotations

import json
import math
from typing import Any

from ..messages import Message
from ..models.offline import CHARS_PER_TOKEN


def estimate(obj: Any) -> int:
    """Tokens of a JSON value: ceil(characters of its JSON text / 4)."""
    return math.ceil(len(json.dumps(obj, ensure_ascii=False)) / CHARS_PER_TOKEN)


def input_tokens(system: Any, messages: list[Message], tools: list[dict[str, Any]]) -> int:
    """The input tokens of a request: the system prompt, the messages the API reads, the tools."""
    return estimate([system, messages, tools])


def over_the_window(total: int, window: int) -> str | None:
    """The API's 400 message for a prompt of ``total`` tokens over a context window of ``window``, or None."""
    return f"prompt is too long: {total} tokens > {window} maximum" if total > window else None
