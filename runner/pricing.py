"""Billed tokens (:class:`Usage`, the one usage type), prices in USD per million tokens, and the cost
of a usage record.

Cache writes cost 1.25x the input price (2x for a write with the 1-hour TTL,
``cache_control: {"type": "ephemeral", "ttl": "1h"}``) and cache reads 0.1x, unless a price says
otherwise. ``Usage.cache_creation_1h_input_tokens`` is the part of ``cache_creation_input_tokens``
written with the 1-hour TTL (the API's ``usage.cache_creation.ephemeral_1h_input_tokens``).
``config.toml`` can add or override prices (``[prices."claude-sonnet-5-5"] input = 3.0 ...``); a key
matches a model by exact name first, then as the longest part of its name (``sonnet`` matches every
Sonnet). A model that matches nothing is priced as the most expensive family, never as free.
``[prices] batch_discount = 0.5`` (the default): the share of its price a call answered by a Message
Batch costs (:meth:`PriceTable.cost_with_batch`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

CACHE_1H_KEY = "cache_creation_1h_input_tokens"  # the 1-hour TTL's part of cache_creation_input_tokens
USAGE_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    CACHE_1H_KEY,
)


def api_count(usage: Mapping[str, Any], key: str) -> Any:
    """Count ``key`` of an API usage object as sent (:data:`CACHE_1H_KEY` is nested there, in
    ``cache_creation.ephemeral_1h_input_tokens``); None when it is absent."""
    if key != CACHE_1H_KEY:
        return usage.get(key)
    nested = usage.get("cache_creation")
    return nested.get("ephemeral_1h_input_tokens") if isinstance(nested, Mapping) else None


class Usage(BaseModel):
    """Billed tokens of one call or of a whole job; ``context_tokens`` is what the model saw as input.
    Strict on types (a count is an int); the same model in a reply, a job's record and its documents."""

    model_config = ConfigDict(extra="allow", strict=True)

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_1h_input_tokens: int = 0  # of cache_creation_input_tokens: written with the 1-hour TTL

    def __init__(
        self,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cache_creation_input_tokens: int = 0,
        *,
        cache_read_input_tokens: int = 0,
        cache_creation_1h_input_tokens: int = 0,
        **extra: Any,
    ) -> None:
        super().__init__(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cache_creation_input_tokens=cache_creation_input_tokens,
            cache_read_input_tokens=cache_read_input_tokens,
            cache_creation_1h_input_tokens=cache_creation_1h_input_tokens,
            **extra,
        )

    @property
    def context_tokens(self) -> int:
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    def add(self, other: Usage) -> None:
        for name in USAGE_KEYS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @model_serializer(mode="wrap")
    def _written(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """As dumped: the 1-hour part of the cache writes only when there is one (so a document
        written before it existed reads and writes back the same)."""
        data: dict[str, Any] = handler(self)
        if not self.cache_creation_1h_input_tokens:
            data.pop(CACHE_1H_KEY, None)
        return data

    def to_json(self) -> dict[str, int]:
        return {
            name: getattr(self, name)
            for name in USAGE_KEYS
            if name != CACHE_1H_KEY or self.cache_creation_1h_input_tokens
        }


def sum_usage(records: Iterable[Any]) -> Usage:
    """The usage of several jobs' records together (their own calls', summaries' and subagents')."""
    parts = [part for r in records for part in (r.usage, r.summarizer_usage, r.subagent_usage)]
    return Usage(**{key: sum(getattr(part, key) for part in parts) for key in USAGE_KEYS})


CACHE_WRITE = 1.25
CACHE_WRITE_1H = 2.0
CACHE_READ = 0.10


@dataclass(frozen=True)
class Rates:
    input: float
    output: float
    cache_write: float
    cache_read: float
    cache_write_1h: float

    @classmethod
    def of(
        cls,
        input: float,
        output: float,
        cache_write: float | None = None,
        *,
        cache_read: float | None = None,
        cache_write_1h: float | None = None,
    ) -> Rates:
        return cls(
            input,
            output,
            input * CACHE_WRITE if cache_write is None else cache_write,
            input * CACHE_READ if cache_read is None else cache_read,
            input * CACHE_WRITE_1H if cache_write_1h is None else cache_write_1h,
        )


DEFAULT_PRICES: dict[str, Rates] = {
    "opus": Rates.of(15.0, 75.0),
    "sonnet": Rates.of(3.0, 15.0),
    "haiku": Rates.of(1.0, 5.0),
}
FALLBACK = "opus"
BATCH_DISCOUNT = 0.5  # a Message Batch bills every token at half the price
BATCH_DISCOUNT_KEY = "batch_discount"  # [prices] batch_discount = 0.5: a number, not a model's prices


class PriceOverrides(Protocol):
    """``[prices]`` as the config holds it: a mapping, or anything with its ``items()``."""

    def items(self) -> Iterable[tuple[str, Any]]: ...


class PriceTable:
    def __init__(self, overrides: PriceOverrides | None = None):
        self.prices = dict(DEFAULT_PRICES)
        self._keys: dict[str, str | None] = {}  # a model name not in prices -> the key that matched it
        self.batch_discount = BATCH_DISCOUNT
        for key, price in (overrides or {}).items():
            if key == BATCH_DISCOUNT_KEY:
                self.batch_discount = float(price)
                continue
            data = price if isinstance(price, Mapping) else price.model_dump()
            self.prices[key] = Rates.of(**data)

    def key_for(self, model: str) -> str | None:
        """The price table's key that prices ``model``, or None when none matches (then FALLBACK's)."""
        if model in self.prices:
            return model
        if model not in self._keys:  # every call's cost asks: the match is made once per model
            matches = [key for key in self.prices if key.lower() in model.lower()]
            self._keys[model] = max(matches, key=len) if matches else None
        return self._keys[model]

    def rates(self, model: str) -> Rates:
        return self.prices[self.key_for(model) or FALLBACK]

    def unpriced(self, model: str) -> str | None:
        """A line saying that ``model`` has no price and which one is assumed, or None when it has one."""
        if self.key_for(model) is not None:
            return None
        r = self.prices[FALLBACK]
        return (
            f"model {model!r} has no price in the price table; it is priced as {FALLBACK} "
            f"(${r.input:g} in / ${r.output:g} out per million tokens), so costs and max_cost_usd may be "
            f'off; set [prices."{model}"] input = ..., output = ... in config.toml'
        )

    def cost(self, model: str, usage: Usage) -> float:
        r = self.rates(model)
        long = min(usage.cache_creation_1h_input_tokens, usage.cache_creation_input_tokens)
        return (
            usage.input_tokens * r.input
            + (usage.cache_creation_input_tokens - long) * r.cache_write
            + long * r.cache_write_1h
            + usage.cache_read_input_tokens * r.cache_read
            + usage.output_tokens * r.output
        ) / 1_000_000

    def cost_with_batch(self, model: str, usage: Usage, batch: Usage) -> float:
        """The cost of ``usage`` of which ``batch`` (each count at most ``usage``'s) was billed by a
        Message Batch, at ``batch_discount`` of its price."""
        full = self.cost(model, usage)
        if not any(getattr(batch, k) for k in USAGE_KEYS):
            return full
        part = Usage(**{k: min(getattr(batch, k), getattr(usage, k)) for k in USAGE_KEYS})
        return full - (1 - self.batch_discount) * self.cost(model, part)


DEFAULT_TABLE = PriceTable()


def cost_usd(model: str, usage: Usage, table: PriceTable | None = None) -> float:
    return (table or DEFAULT_TABLE).cost(model, usage)
