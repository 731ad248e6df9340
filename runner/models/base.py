"""The small interface every model backend implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ..rundocs import USAGE_KEYS

# The anthropic-beta header that server-side compaction (``context_management``) needs: sent by the
# anthropic backend, required by the emulator.
COMPACTION_BETA = "compact-2026-01-12"


@dataclass
class Usage:
    """Billed tokens. ``context_tokens`` is what the model actually saw as input."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    @property
    def context_tokens(self) -> int:
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    def add(self, other: Usage) -> None:
        for name in USAGE_KEYS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def to_json(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in USAGE_KEYS}

    @classmethod
    def from_api(cls, usage: Any) -> Usage:
        """From an SDK ``usage`` object or dict; sums ``iterations`` when present (server compaction)."""
        data = usage if isinstance(usage, dict) else (usage.model_dump() if usage is not None else {})
        iterations = data.get("iterations") or []
        if iterations:
            total = cls()
            for it in iterations:
                total.add(cls(**{k: int(it.get(k) or 0) for k in USAGE_KEYS}))
            return total
        return cls(**{k: int(data.get(k) or 0) for k in USAGE_KEYS})


@dataclass
class Reply:
    """One model response, as plain JSON blocks."""

    content: list[dict[str, Any]]
    stop_reason: str
    usage: Usage = field(default_factory=Usage)
    estimated: bool = False  # usage was estimated, not reported by an API

    def message(self) -> dict[str, Any]:
        return {"role": "assistant", "content": self.content}


@dataclass
class Request:
    """Everything a model call needs; ``messages`` are already compacted."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    max_tokens: int
    system: str | None = None
    context_management: dict[str, Any] | None = None
    max_retries: int | None = None  # per-job override of the backend's retry count
    cache_points: tuple[int, ...] = ()  # messages after which a prompt-cache breakpoint pays off
    cache: bool = True  # False for one-off prompts (summaries): a cache write would cost 25% more for nothing
    tool_choice: dict[str, Any] | None = None  # {"type": "none"}: the tools are listed, none may be called


class BackendUnusable(Exception):
    """The backend cannot serve this batch at all (bad key, no permission, nothing listening at the base
    URL): the message is one line naming the base URL and the error. Stops the whole batch."""


class PromptTooLong(Exception):
    """The API refused the request as longer than the model's context window."""


class Model(Protocol):
    """A backend: given a request, return a reply. Raise :class:`PromptTooLong` for an overlong
    prompt; any other exception fails the job that made the call (after the backend's own retries)."""

    name: str
    server_compaction: bool  # the backend can send and answer the API's context_management edit

    async def create(self, request: Request) -> Reply: ...

    async def aclose(self) -> None: ...
