"""The text protocol: every marker, placeholder and label the runner writes into a model's context,
and the parsers that recognize them.

Everything that writes or reads these texts (the compactor, the tools, the offline policy, the
emulator, the benchmarks) imports them from here, so a change of wording is one change.
"""

from __future__ import annotations

# -- The seed lessons' placeholders ---------------------------------------------------------------
# What the seed lessons' pipelines write in place of a tool result (bench/seeds_pipeline.py runs them
# as written). A reader of a conversation (the offline policy, as a real model would) must take each
# as "this result is gone from context", not as the tool's output.

SEED_PERSISTED_TAG = "<persisted-output>"  # all revisions: a large output moved to disk, with a preview
SEED_000_PLACEHOLDER_PREFIX = "[Earlier tool result saved at "  # 000 (Vietnamese): + path + "]"
SEED_001_MICRO_PLACEHOLDER = "[Earlier tool result compacted. Re-run if needed.]"  # 001 (English)
SEED_002_MICRO_PLACEHOLDER = "[Earlier tool result omitted for brevity]"  # 002 (Chinese)


def seed_000_placeholder(path: str) -> str:
    """Revision 000's placeholder for an old result saved at ``path``."""
    return f"{SEED_000_PLACEHOLDER_PREFIX}{path}]"


def is_seed_placeholder(content: str) -> bool:
    """Whether a tool result's text is one of the seed lessons' placeholders for a removed result
    (000's names where the result was saved; 001's and 002's name nothing: the tool must be re-run)."""
    return (content.startswith(SEED_000_PLACEHOLDER_PREFIX) and content.endswith("]")
            or content in (SEED_001_MICRO_PLACEHOLDER, SEED_002_MICRO_PLACEHOLDER))
