"""The emulator's settings: one pydantic model, loadable from TOML, mutable while it runs.

Guarantees:
- Unknown keys and out-of-range values are rejected (``extra="forbid"``, field bounds), also on
  assignment at run time (``validate_assignment=True``), so a typo never silently disables a fault.
- The running app reads its config on every request: tests may change faults, limits or the script
  between calls (``handle.config.faults.overloaded.schedule = [5]``).
- Request numbers in fault ``schedule`` lists are 1-based and count every authenticated
  ``POST /v1/messages`` (retries included), in arrival order.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class Fault(_Strict):
    """Fires on request number ``n`` when ``n`` is in ``schedule``, or with probability ``rate``
    (decided by a random generator seeded with ``(seed, fault kind, n)``: reproducible)."""

    rate: float = Field(0.0, ge=0.0, le=1.0)
    schedule: list[int] = Field(default_factory=list)


class Latency(_Strict):
    """Added before every messages request: ``seconds`` plus a seeded uniform jitter in [0, jitter_s)."""

    seconds: float = Field(0.0, ge=0.0)
    jitter_s: float = Field(0.0, ge=0.0)


class Faults(_Strict):
    """At most one fault per request, checked in this order."""

    rate_limit: Fault = Field(default_factory=Fault)  # 429 rate_limit_error, retry-after = retry_after_s
    overloaded: Fault = Field(default_factory=Fault)  # 529 overloaded_error
    server_error: Fault = Field(default_factory=Fault)  # 500 api_error
    drop: Fault = Field(default_factory=Fault)  # headers and part of the body, then the connection closes
    slow: Fault = Field(default_factory=Fault)  # the answer comes after slow_s seconds


class ScriptedReply(_Strict):
    """One canned reply; a string ``content`` becomes one text block."""

    content: list[dict[str, Any]]
    stop_reason: str = "end_turn"

    @field_validator("content", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return [{"type": "text", "text": value}] if isinstance(value, str) else value


class EmulatorConfig(_Strict):
    """Everything the emulator does; the defaults behave like a healthy API with no limits."""

    api_key: str | None = None  # None: any non-empty x-api-key is accepted
    context_window_tokens: int = Field(200_000, ge=1)
    max_request_bytes: int = Field(32_000_000, ge=1)  # larger bodies get 413 request_too_large
    batch_size: int = Field(4, ge=1)  # the policy's parallel reads per turn
    script: list[ScriptedReply] = Field(default_factory=list)  # served in order, then the policy answers
    enforce_max_tokens: bool = False  # cut replies longer than max_tokens (stop_reason "max_tokens")

    seed: int = 0
    latency: Latency = Field(default_factory=Latency)
    faults: Faults = Field(default_factory=Faults)
    slow_s: float = Field(30.0, ge=0.0)
    retry_after_s: float = Field(1.0, gt=0.0)  # for injected 429s
    retry_after_ms: bool = False  # also send ``retry-after-ms`` (exact; the SDK prefers it)

    rpm: int | None = Field(None, ge=1)  # enforced requests per window
    input_tokens_per_minute: int | None = Field(None, ge=1)  # enforced input tokens per window
    window_s: float = Field(60.0, gt=0.0)  # the sliding window's length

    cache_ttl_s: float = Field(300.0, gt=0.0)
    min_cacheable_tokens: int = Field(1024, ge=1)
    cache_lookback_blocks: int = Field(20, ge=1)  # block positions checked before each breakpoint

    compaction_min_trigger: int = Field(50_000, ge=1)  # a lower trigger value is a 400, as on the API
    compaction_default_trigger: int = Field(150_000, ge=1)

    record_requests: bool = False
    max_recorded: int = Field(1_000, ge=1)

    @classmethod
    def from_toml(cls, path: Path | str) -> EmulatorConfig:
        """Load from a TOML file whose top-level keys are this model's fields."""
        with open(path, "rb") as f:
            return cls.model_validate(tomllib.load(f))
