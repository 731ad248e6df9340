"""The README's table of ``config.toml`` keys, made from the settings models (``python -m
runner.config_table`` prints it; ``--write README.md`` puts it between the file's markers).

Guarantees:
- Every field of ``[runner]``, ``[summarizer]`` and ``[limits]`` has one row, in the models' order:
  its key, its default as the model holds it, and its meaning (the field's docstring). ``[prices]`` has
  its two rows (a model's prices, ``batch_discount``), their defaults from :mod:`runner.pricing`.
- :func:`with_table` changes nothing of a text outside its markers.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .config import Limits, RunnerSection, SummarizerSection
from .pricing import BATCH_DISCOUNT, BATCH_DISCOUNT_KEY, DEFAULT_PRICES

BEGIN = "<!-- config table: made by `python -m runner.config_table --write README.md` -->"
END = "<!-- end of config table -->"
SECTIONS: tuple[tuple[str, type[BaseModel]], ...] = (
    ("runner", RunnerSection),
    ("summarizer", SummarizerSection),
    ("limits", Limits),
)


def shown_default(value: Any) -> str:
    """A default as the table shows it: ``none``, ``true``/``false``, a whole number without its
    ``.0``, a name in backticks."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int | float):
        return str(value)
    return f"`{value}`"


def _row(key: str, default: str, meaning: str) -> str:
    return f"| `{key}` | {default} | {' '.join(meaning.split())} |"


def _prices_rows() -> list[str]:
    families = ", ".join(f"{name} {r.input:g}/{r.output:g}" for name, r in DEFAULT_PRICES.items())
    return [
        _row(
            'prices."<model or family>"',
            families,
            "USD per million tokens: `input`, `output`, optional `cache_write` (default 1.25x input), "
            "`cache_read` (0.1x); a key matches a model by its exact name, else as the longest part of it",
        ),
        _row(
            f"prices.{BATCH_DISCOUNT_KEY}",
            shown_default(BATCH_DISCOUNT),
            'the share of its price a call a Message Batch answered costs (`delivery = "batch"`)',
        ),
    ]


def config_table() -> str:
    """The table, as markdown lines (no markers)."""
    lines = ["| section.key | default | meaning |", "|---|---|---|"]
    for section, model in SECTIONS:
        for name, info in model.model_fields.items():
            if info.description is None:
                raise ValueError(f"{model.__name__}.{name}: no docstring to show as its meaning")
            lines.append(_row(f"{section}.{name}", shown_default(info.default), info.description))
        if section == "summarizer":
            lines += _prices_rows()
    return "\n".join(lines) + "\n"


def with_table(text: str) -> str:
    """``text`` with the table between its markers made anew (ValueError: the markers are missing)."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"no {BEGIN!r} ... {END!r} in the text")
    return text[: start + len(BEGIN)] + "\n" + config_table() + text[end:]


def main(argv: list[str]) -> int:
    if argv[:1] == ["--write"] and len(argv) == 2:
        path = Path(argv[1])
        path.write_text(with_table(path.read_text(encoding="utf-8")), encoding="utf-8")
        return 0
    if argv:
        print("usage: python -m runner.config_table [--write README.md]", file=sys.stderr)
        return 2
    print(config_table(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
