"""``clear``: the API's context editing. Each request carries the ``clear_tool_uses_20250919`` edit
built from the job's ``clear_*`` limits (in the SDK's own parameter type); over its trigger the API
replaces the oldest tool results with a placeholder before the model reads the request, and reports
what it cleared (``context_management.applied_edits``). The runner keeps the whole history, as the API
expects, and persists an oversized new batch of results, which the API would otherwise send whole. On
a backend without server-side context management the job runs ``client`` instead."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import Stages, Strategy

if TYPE_CHECKING:  # the SDK's parameter types only type the edit: a job's modules load without the SDK
    from anthropic.types.beta import (
        BetaClearToolUses20250919EditParam,
        BetaInputTokensTriggerParam,
        BetaToolUsesTriggerParam,
    )


class ClearStrategy(Strategy):
    name = "clear"
    server_side = True
    fallback = "client"

    def edit(self) -> BetaClearToolUses20250919EditParam:
        limits = self.limits
        trigger: BetaInputTokensTriggerParam | BetaToolUsesTriggerParam = (
            {"type": "tool_uses", "value": limits.clear_trigger_value}
            if limits.clear_trigger == "tool_uses"
            else {"type": "input_tokens", "value": limits.clear_trigger_value}
        )
        edit: BetaClearToolUses20250919EditParam = {
            "type": "clear_tool_uses_20250919",
            "trigger": trigger,
            "keep": {"type": "tool_uses", "value": limits.clear_keep_tool_uses},
        }
        if limits.clear_at_least_tokens:
            edit["clear_at_least"] = {"type": "input_tokens", "value": limits.clear_at_least_tokens}
        if limits.clear_exclude_tools:
            edit["exclude_tools"] = list(limits.clear_exclude_tools)
        if limits.clear_tool_inputs:
            inputs = limits.clear_tool_inputs
            edit["clear_tool_inputs"] = inputs if isinstance(inputs, bool) else list(inputs)
        return edit

    def context_management(self) -> dict[str, Any]:
        return {"edits": [self.edit()]}

    async def prepare(self, stages: Stages) -> None:
        self.budget_results(stages)
