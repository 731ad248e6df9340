"""Prices in USD per million tokens, and the cost of a usage record.

Cache writes cost 1.25x the input price and cache reads 0.1x, unless a price says otherwise.
``config.toml`` can add or override prices (``[prices."claude-sonnet-5-5"] input = 3.0 ...``); a key
matches a model by exact name first, then as the longest part of its name (``sonnet`` matches every
Sonnet). A model that matches nothing is priced as the most expensive family, never as free.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .models.base import Usage

CACHE_WRITE = 1.25
CACHE_READ = 0.10


@dataclass(frozen=True)
class Rates:
    input: float
    output: float
    cache_write: float
    cache_read: float

    @classmethod
    def of(cls, input: float, output: float, cache_write: float | None = None,
           cache_read: float | None = None) -> Rates:
        return cls(input, output, input * CACHE_WRITE if cache_write is None else cache_write,
                   input * CACHE_READ if cache_read is None else cache_read)


DEFAULT_PRICES: dict[str, Rates] = {
    "opus": Rates.of(15.0, 75.0),
    "sonnet": Rates.of(3.0, 15.0),
    "haiku": Rates.of(1.0, 5.0),
}
FALLBACK = "opus"


class PriceTable:
    def __init__(self, overrides: Mapping[str, Any] | None = None):
        self.prices = dict(DEFAULT_PRICES)
        for key, price in (overrides or {}).items():
            data = price if isinstance(price, Mapping) else price.model_dump()
            self.prices[key] = Rates.of(**data)

    def rates(self, model: str) -> Rates:
        if model in self.prices:
            return self.prices[model]
        matches = [key for key in self.prices if key.lower() in model.lower()]
        return self.prices[max(matches, key=len)] if matches else self.prices[FALLBACK]

    def cost(self, model: str, usage: Usage) -> float:
        r = self.rates(model)
        return (usage.input_tokens * r.input + usage.cache_creation_input_tokens * r.cache_write
                + usage.cache_read_input_tokens * r.cache_read + usage.output_tokens * r.output) / 1_000_000


DEFAULT_TABLE = PriceTable()


def cost_usd(model: str, usage: Usage, table: PriceTable | None = None) -> float:
    return (table or DEFAULT_TABLE).cost(model, usage)
