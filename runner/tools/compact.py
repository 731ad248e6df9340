"""The ``compact`` tool: the model asks for its history to be compacted. The call only takes note;
the session compacts once the whole tool batch has run (every ``tool_use`` answered first)."""

from __future__ import annotations

from typing import Any

COMPACT_TOOL: dict[str, Any] = {
    "name": "compact",
    "description": (
        "Summarize the earlier conversation to free context space. Use it after finishing a phase of "
        "work, when the next phase only needs a summary. It takes effect after this turn's other tool "
        "calls have run."
    ),
    "input_schema": {"type": "object", "properties": {}},
}


class Compact:
    """The ``compact`` tool of one job: ``requested`` until the session has compacted."""

    name = "compact"
    definition = COMPACT_TOOL

    def __init__(self) -> None:
        self.requested = False

    async def run(self, tool_use_id: str, args: dict[str, Any]) -> dict[str, Any]:
        self.requested = True
        return {
            "type": "tool_result",
            "tool_use_id": tool_use_id,
            "content": "Compaction requested; it runs after this tool batch.",
        }
