"""What a tool of a job is (:class:`Tool`), and the tool_result shapes every tool shares.

Guarantees:

- Every result built with :func:`safe_text` or :func:`safe_content` is valid UTF-8: undecodable file
  names and bytes (lone surrogates) are escaped (``\\xNN``).
"""

from __future__ import annotations

from typing import Any, Protocol


class Tool(Protocol):
    """One tool a model may call: its name, the definition the API is sent, and how a call runs (one
    tool_result, never an exception for a model's mistake)."""

    @property
    def name(self) -> str: ...

    @property
    def definition(self) -> dict[str, Any]: ...

    async def run(self, tool_use_id: str, args: dict[str, Any]) -> dict[str, Any]: ...


def error_result(tool_use_id: str, text: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": text, "is_error": True}


def safe_text(text: str) -> str:
    """``text`` as valid UTF-8: a lone surrogate (an undecodable byte of a file name or file, or
    one from JSON) is escaped as ``\\xNN`` (the byte) or ``\\uNNNN``."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return "".join(_escape(c) for c in text)


def _escape(c: str) -> str:
    code = ord(c)
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{code:04x}" if 0xD800 <= code <= 0xDFFF else c


def safe_content(content: Any) -> Any:
    """A tool_result's content (a string or blocks) with every text made :func:`safe_text`."""
    if isinstance(content, str):
        return safe_text(content)
    return [
        {**b, "text": safe_text(b["text"])} if isinstance(b, dict) and isinstance(b.get("text"), str) else b
        for b in content
    ]
