"""The emulator's settings: one pydantic model, loadable from TOML, mutable while it runs.

Guarantees:
- Unknown keys, out-of-range values and values of the wrong type are rejected (``extra="forbid"``,
  field bounds, ``strict=True``: ``rpm = "50"`` or ``seed = true`` is an error, not a number), also
  on assignment at run time (``validate_assignment=True``), so a typo never silently disables a fault.
- :meth:`EmulatorConfig.from_toml` raises :class:`runner.config.ConfigError` whose lines read like
  the runner's own: the file, the key and what was expected, one problem a line.
- A scripted ``text`` or ``tool_use`` block with a key its type does not have (``inputs`` for ``input``)
  is an error naming the reply, the block and the key when the script is loaded; the values are not
  checked (a hostile script may send any).
- The running app reads its config on every request: tests may change faults, limits or the script
  between calls (``handle.config.faults.overloaded.schedule = [5]``).
- ``faults.stream_error`` fires only on a streamed request (``stream: true``); on another request
  it is no fault (the request is answered). Every other fault happens before a stream starts, as an
  HTTP status (or a dropped connection), streamed or not.
- Request numbers in fault ``schedule`` lists are 1-based and count every authenticated
  ``POST /v1/messages`` (retries included), in arrival order; in ``batches.errored`` and
  ``batches.expired`` they count the requests of every batch created, in creation order, and in
  ``batches.canceling`` and ``batches.hostile.on`` the batches created.
- ``batches.hostile`` (:class:`BatchHostile`) plays a hostile batches API; its ``url`` is required by
  ``foreign_results_url`` and refused with any other kind, when the config is loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..config import ConfigError, describe_errors, read_toml
from ..pricing import USAGE_KEYS
from .schema import Shape, TextBlock, ToolUseBlock

# the blocks a script writes by hand: a misspelled key in one (``inputs`` for ``input``) is named when the
# script is loaded, not served and refused by the emulator's own validation on the next request
_SCRIPTED_BLOCKS: dict[str, type[Shape]] = {"text": TextBlock, "tool_use": ToolUseBlock}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, strict=True)


class Fault(_Strict):
    """Fires on request number ``n`` when ``n`` is in ``schedule``, or with probability ``rate``
    (decided by a random generator seeded with ``(seed, fault kind, n)``: reproducible)."""

    rate: float = Field(default=0.0, ge=0.0, le=1.0)
    schedule: list[int] = Field(default_factory=list)


class Latency(_Strict):
    """Added before every messages request: ``seconds`` plus a seeded uniform jitter in [0, jitter_s)."""

    seconds: float = Field(default=0.0, ge=0.0)
    jitter_s: float = Field(default=0.0, ge=0.0)


class Faults(_Strict):
    """At most one fault per request, checked in this order."""

    rate_limit: Fault = Field(default_factory=Fault)  # 429 rate_limit_error, retry-after = retry_after_s
    overloaded: Fault = Field(default_factory=Fault)  # 529 overloaded_error
    server_error: Fault = Field(default_factory=Fault)  # 500 api_error
    drop: Fault = Field(default_factory=Fault)  # headers and part of the body, then the connection closes
    slow: Fault = Field(default_factory=Fault)  # the answer comes after slow_s seconds
    # a streamed request only: 200, the stream starts, then an ``error`` event (stream_error_type) cuts it
    stream_error: Fault = Field(default_factory=Fault)


MIB = 1 << 20


class BatchHostile(_Strict):
    """What a hostile Message Batches API does to the batches ``on`` picks (by batch number; every
    batch unless set), see :mod:`.batches`:

    - ``padded_results``: the results file starts with ``bytes`` bytes of well-formed result lines under
      other custom_ids (``padding-<n>``, each about ``line_bytes``), made as they are sent;
    - ``drip_results``: the results file is sent one byte every ``interval_s`` seconds;
    - ``foreign_results_url``: the batch's ``results_url`` is on ``url`` (another host or port);
    - ``escaped_id``: the batch's id carries terminal escapes (an OSC window title, clear-screen).
    """

    kind: Literal["padded_results", "drip_results", "foreign_results_url", "escaped_id"]
    on: Fault = Field(default_factory=lambda: Fault(rate=1.0))
    bytes: int = Field(default=400 * MIB, ge=1)
    line_bytes: int = Field(default=64 * 1024, ge=64, le=64 * MIB)
    interval_s: float = Field(default=1.0, gt=0.0)
    url: str | None = Field(default=None, pattern=r"^https?://[^/?#\s]+/?$")  # scheme://host[:port]

    @model_validator(mode="after")
    def _url(self) -> BatchHostile:
        if (self.kind == "foreign_results_url") != (self.url is not None):
            raise ValueError(
                "url (scheme://host:port) is needed by kind foreign_results_url, and by no other kind"
            )
        return self


class Batches(_Strict):
    """The Message Batches API (see :mod:`.batches`): how long a batch takes, and its faults by rate."""

    turnaround_s: float = Field(default=1.0, ge=0.0, le=86_400.0)  # a batch ends this long after creation
    # ... or, when set, at a seeded uniform time between turnaround_s and turnaround_max_s
    turnaround_max_s: float | None = Field(default=None, ge=0.0, le=86_400.0)
    cancel_s: float = Field(default=0.1, ge=0.0)  # canceling lasts this long (never past the turnaround)
    max_requests: int = Field(default=100_000, ge=1)
    max_request_bytes: int = Field(default=256_000_000, ge=1)  # larger create bodies get 413
    errored: Fault = Field(default_factory=Fault)  # a request's result is an error of errored_type
    expired: Fault = Field(default_factory=Fault)  # a request's result is expired
    canceling: Fault = Field(default_factory=Fault)  # a batch cancels itself part-way: the rest canceled
    errored_type: Literal["overloaded_error", "api_error"] = "overloaded_error"
    hostile: BatchHostile | None = None  # a hostile server's batches (see BatchHostile)

    @model_validator(mode="after")
    def _bounds(self) -> Batches:
        if self.turnaround_max_s is not None and self.turnaround_max_s < self.turnaround_s:
            raise ValueError(
                f"turnaround_max_s ({self.turnaround_max_s:g}) is less than turnaround_s "
                f"({self.turnaround_s:g})"
            )
        return self


class Hostile(_Strict):
    """A reply no honest server sends, served in place of a scripted reply (see :mod:`.faults`):

    - ``gzip_bomb``: 200, ``content-encoding: gzip``, a message whose text decodes to ``bytes`` bytes
      (compressed about 1000:1 as it is sent, so 4 GiB decoded is ~4 MB on the wire);
    - ``huge_text``: 200, a message whose one text block is ``bytes`` bytes, sent uncompressed;
    - ``drip``: 200, a valid message body sent one byte every ``interval_s`` seconds;
    - ``error_body``: 200 with the API's error body ``{"type": "error", ...}`` instead of a message.
    """

    kind: Literal["gzip_bomb", "huge_text", "drip", "error_body"]
    bytes: int = Field(default=4 * 1024**3, ge=1)
    interval_s: float = Field(default=1.0, gt=0.0)


class ScriptedReply(_Strict):
    """One canned reply; a string ``content`` becomes one text block. ``stop_reason`` is sent as given
    (any string: an unknown one plays a hostile server); ``usage`` replaces fields of the reply's usage
    as sent (any JSON value: ``{"input_tokens": -1e9}``), not as the emulator bills it; ``hostile``
    serves that reply instead (the content is then unused)."""

    content: list[dict[str, Any]] = Field(default_factory=list)
    stop_reason: str = "end_turn"
    usage: dict[str, Any] | None = None
    hostile: Hostile | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return [{"type": "text", "text": value}] if isinstance(value, str) else value

    @model_validator(mode="before")
    @classmethod
    def _block_keys(cls, value: Any) -> Any:
        content = value.get("content") if isinstance(value, dict) else None
        for i, block in enumerate(content if isinstance(content, list) else []):
            model = _SCRIPTED_BLOCKS.get(str(block.get("type"))) if isinstance(block, dict) else None
            unknown = sorted(set(block) - set(model.model_fields)) if model else []
            if model and unknown:
                keys = sorted(model.model_fields, key=lambda k: (not model.model_fields[k].is_required(), k))
                raise ValueError(
                    f"content.{i}.{unknown[0]}: unknown key in a {block['type']} block "
                    f"(expected {', '.join(keys)})"
                )
        return value

    @field_validator("usage")
    @classmethod
    def _usage_keys(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        unknown = sorted(set(value or {}) - {*USAGE_KEYS, "iterations"})
        if unknown:
            raise ValueError(
                f"unknown usage field(s) {', '.join(unknown)}; expected some of "
                f"{', '.join([*USAGE_KEYS, 'iterations'])}"
            )
        return value


class EmulatorConfig(_Strict):
    """Everything the emulator does; the defaults behave like a healthy API with no limits."""

    api_key: str | None = None  # None: any non-empty x-api-key is accepted
    context_window_tokens: int = Field(default=200_000, ge=1)
    max_request_bytes: int = Field(default=32_000_000, ge=1)  # larger bodies get 413 request_too_large
    batch_size: int = Field(default=4, ge=1)  # the policy's parallel reads per turn
    script: list[ScriptedReply] = Field(default_factory=list)  # served in order, then the policy answers
    enforce_max_tokens: bool = False  # cut replies longer than max_tokens (stop_reason "max_tokens")

    seed: int = 0
    latency: Latency = Field(default_factory=Latency)
    faults: Faults = Field(default_factory=Faults)
    slow_s: float = Field(default=30.0, ge=0.0)
    retry_after_s: float = Field(default=1.0, gt=0.0)  # for injected 429s
    retry_after_ms: bool = False  # also send ``retry-after-ms`` (exact; the SDK prefers it)
    stream_error_type: Literal["overloaded_error", "api_error"] = "overloaded_error"  # of faults.stream_error
    stream_chunk_chars: int = Field(default=64, ge=1)  # the longest text or partial_json piece of one delta

    rpm: int | None = Field(default=None, ge=1)  # enforced requests per window
    input_tokens_per_minute: int | None = Field(default=None, ge=1)  # enforced input tokens per window
    window_s: float = Field(default=60.0, gt=0.0)  # the sliding window's length

    cache_ttl_s: float = Field(default=300.0, gt=0.0)
    min_cacheable_tokens: int = Field(default=1024, ge=1)
    cache_lookback_blocks: int = Field(default=20, ge=1)  # block positions checked before each breakpoint

    compaction_min_trigger: int = Field(default=50_000, ge=1)  # a lower trigger value is a 400, as on the API
    compaction_default_trigger: int = Field(default=150_000, ge=1)

    batches: Batches = Field(default_factory=Batches)

    record_requests: bool = False  # batch requests too, as their params, when a batch is created
    max_recorded: int = Field(default=1_000, ge=1)

    @classmethod
    def from_toml(cls, path: Path | str) -> EmulatorConfig:
        """Load from a TOML file whose top-level keys are this model's fields."""
        path = Path(path)
        if path.is_dir():
            raise ConfigError([f"{path}: config file is a directory, expected a TOML file"])
        if not path.exists():
            raise ConfigError([f"{path}: config file not found"])
        if not path.is_file():
            raise ConfigError([f"{path}: not a regular file, expected a TOML file"])
        try:
            return cls.model_validate(read_toml(path))
        except ValidationError as e:
            raise ConfigError(describe_errors(str(path), e)) from None
