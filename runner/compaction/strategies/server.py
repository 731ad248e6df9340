"""``server``: the API compacts. Each request carries the ``compact_20260112`` edit (trigger in input
tokens, optional ``instructions``); the reply's ``compaction`` block replaces the history server-side.
The runner still persists an oversized new batch of results, which the API would otherwise send whole.
On a backend without server-side compaction (a model whose ``server_compaction`` is False) the job
runs ``client`` instead."""

from __future__ import annotations

from typing import Any

from .base import Stages, Strategy


class ServerStrategy(Strategy):
    name = "server"
    server_side = True
    fallback = "client"

    def context_management(self) -> dict[str, Any]:
        edit: dict[str, Any] = {
            "type": "compact_20260112",
            "trigger": {"type": "input_tokens", "value": self.limits.server_trigger_tokens},
        }
        if self.limits.server_instructions:
            edit["instructions"] = self.limits.server_instructions
        return {"edits": [edit]}

    async def prepare(self, stages: Stages) -> None:
        self.budget_results(stages)
