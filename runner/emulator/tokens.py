"""Token counts as the emulator bills them: ceil(characters of the JSON text / 4), as
:mod:`runner.billing` counts, so the runner's estimates and the emulator's usage agree."""

from __future__ import annotations

from ..billing import CHARS_PER_TOKEN, estimate, input_tokens

__all__ = ["CHARS_PER_TOKEN", "estimate", "input_tokens", "over_the_window"]


def over_the_window(total: int, window: int) -> str | None:
    """The API's 400 message for a prompt of ``total`` tokens over a context window of ``window``, or None."""
    return f"prompt is too long: {total} tokens > {window} maximum" if total > window else None
