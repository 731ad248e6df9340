"""Prices per million tokens, and the cost of a usage record.

Cache writes cost 1.25x the input price, cache reads 0.1x. A model not in the table is priced as
the most expensive family it could belong to (matched by its family name), never as free.
"""

from __future__ import annotations

from .models.base import Usage

# family: (input, output) USD per million tokens
PRICES: dict[str, tuple[float, float]] = {
    "opus": (15.0, 75.0),
    "sonnet": (3.0, 15.0),
    "haiku": (1.0, 5.0),
}
DEFAULT_FAMILY = "opus"
CACHE_WRITE = 1.25
CACHE_READ = 0.10


def price(model: str) -> tuple[float, float]:
    for family, prices in PRICES.items():
        if family in model.lower():
            return prices
    return PRICES[DEFAULT_FAMILY]


def cost_usd(model: str, usage: Usage) -> float:
    input_price, output_price = price(model)
    total = (usage.input_tokens * input_price
             + usage.cache_creation_input_tokens * input_price * CACHE_WRITE
             + usage.cache_read_input_tokens * input_price * CACHE_READ
             + usage.output_tokens * output_price)
    return total / 1_000_000
