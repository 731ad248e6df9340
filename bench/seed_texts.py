"""The texts the seed lessons' pipelines (:mod:`seeds_pipeline`) write into a conversation, as each lesson
spells them: used by the benchmarks alone.

The seeds' texts the runner itself reads stay in ``runner/protocol.py`` and are imported from there: the
offline policy takes a seed's placeholder (``SEED_000_PLACEHOLDER_PREFIX``, ``SEED_001_MICRO_PLACEHOLDER``,
``SEED_002_MICRO_PLACEHOLDER``) for a removed result, and a seed's persisted output and summary, which
start as ours do (``PERSISTED_TAG``, ``[Compacted]``, ``[Reactive compact]``), for what they are.
"""

from __future__ import annotations

from runner.offline.readback import SEED_000_PLACEHOLDER_PREFIX, SEED_001_MICRO_PLACEHOLDER
from runner.protocol import COMPACTED, PERSISTED_END, PERSISTED_TAG, PREVIEW, REACTIVE_COMPACT, SAVED_AT

__all__ = [
    "COMPACTED",
    "REACTIVE_COMPACT",
    "SAVED_AT",
    "SEED_001_MICRO_PLACEHOLDER",
    "seed_000_archived",
    "seed_000_placeholder",
    "seed_000_summary",
    "seed_001_snipped",
    "seed_001_summary",
    "seed_persisted",
    "seed_persisted_path",
]


def seed_persisted(saved: str, preview: str) -> str:
    """A large output moved to disk (000, and 002's ``persist_large_output`` that 001 calls)."""
    return f"{PERSISTED_TAG}\n{SAVED_AT}{saved}\n{PREVIEW}{preview}\n{PERSISTED_END}"


def seed_persisted_path(content: str) -> str | None:
    """Where a :func:`seed_persisted` text says its output is (000's ``persisted_output_path``)."""
    if not content.startswith(PERSISTED_TAG):
        return None
    for line in content.splitlines():
        if line.startswith(SAVED_AT):
            return line[len(SAVED_AT) :].strip()
    return None


def seed_000_placeholder(path: str) -> str:
    """Revision 000's placeholder for an old result saved at ``path``."""
    return f"{SEED_000_PLACEHOLDER_PREFIX}{path}]"


def seed_000_archived(count: int, transcript: str) -> str:
    """Revision 000's snip marker: ``count`` messages saved in the ``transcript`` file."""
    return f"[{count} messages archived at {transcript}]"


def seed_001_snipped(count: int) -> str:
    """Revision 001's snip placeholder (nothing saved)."""
    return f"[snipped {count} messages from conversation middle]"


def seed_000_summary(label: str, active_request: str, summary: str, transcript: str) -> str:
    """Revision 000's summary message text (``label``: ``COMPACTED`` or ``REACTIVE_COMPACT``)."""
    return (
        f"[{label}]\n\nCurrent user request:\n{active_request}\n\n"
        f"Conversation summary:\n{summary}\n\nFull transcript: {transcript}"
    )


def seed_001_summary(label: str, summary: str) -> str:
    """Revision 001's summary message text."""
    return f"[{label}]\n\n{summary}"
