"""The embedded offline model: the deterministic survey policy behind the :class:`Model` interface.

Its usage is an estimate (about four characters per token), marked ``estimated`` so reports say so.
``serving``, it answers for the emulator instead, which bills each reply itself.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path

from ..billing import CHARS_PER_TOKEN
from ..config import Settings
from ..jobs import JobSpec
from ..models.base import Reply, Request
from ..pricing import Usage
from .policy import decide, partial_report

__all__ = ["CHARS_PER_TOKEN", "OfflineModel", "estimate_tokens", "request_chars", "what_it_will_not_do"]

ACTING_TOOLS = ("bash", "write", "edit")


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def request_chars(request: Request) -> int:
    return len(json.dumps([request.system, request.messages, request.tools], ensure_ascii=False))


class OfflineModel:
    """Answers from :func:`runner.offline.policy.decide`; never calls a network."""

    name = "offline"
    server_compaction = False

    def __init__(self, batch_size: int = 4, *, serving: bool = False):
        self.batch_size = batch_size
        self.serving = serving  # behind the emulator: any tool set, the report not cut, no usage

    async def create(self, request: Request) -> Reply:
        tool_names = {str(t.get("name")) for t in request.tools}
        if self.serving:
            return self._served(request, tool_names)
        if not {"glob", "read"} <= tool_names:
            raise RuntimeError(
                "the offline model surveys a workspace with glob, read and grep, and this job does "
                f"not offer them (tools: {', '.join(sorted(tool_names))}); run it with an API key"
            )
        if (request.tool_choice or {}).get("type") == "none":  # the last call: a report from what it has
            report = partial_report(request.messages)
            room = request.max_tokens * CHARS_PER_TOKEN  # like the API, it stops at max_tokens
            stop_reason = "max_tokens" if len(report) > room else "end_turn"
            content = [{"type": "text", "text": report[:room]}]
        else:
            content, stop_reason = decide(request.messages, tool_names, self.batch_size)
        usage = Usage(
            input_tokens=math.ceil(request_chars(request) / CHARS_PER_TOKEN),
            output_tokens=estimate_tokens(json.dumps(content, ensure_ascii=False)),
        )
        return Reply(content=content, stop_reason=stop_reason, usage=usage, estimated=True)

    def _served(self, request: Request, tool_names: set[str]) -> Reply:
        if (request.tool_choice or {}).get("type") == "none":
            return Reply(
                content=[{"type": "text", "text": partial_report(request.messages)}], stop_reason="end_turn"
            )
        content, stop_reason = decide(request.messages, tool_names, self.batch_size)
        return Reply(content=content, stop_reason=stop_reason)

    async def aclose(self) -> None:
        return None


def what_it_will_not_do(
    settings: Settings, specs: Sequence[JobSpec], *, shown: Callable[[Path], str] = str
) -> list[str]:
    """What the stand-in will not do for ``specs`` (those it will run), a warning a line: delivery = batch
    has no effect, and a job that lists a tool that acts will not have its prompt carried out. ``shown``:
    a task file's path as the operator reads it."""
    warnings = []
    if settings.runner.delivery == "batch" or any(spec.limits.delivery == "batch" for spec in specs):
        warnings.append(
            "delivery = batch has no effect on the offline model (it answers every call at once); "
            "it applies with backend = anthropic"
        )
    for spec in specs:
        if acting := [t for t in spec.tools if t in ACTING_TOOLS]:
            warnings.append(
                f"job {spec.name} ({shown(spec.source)}): the offline model only surveys the "
                "workspace (read, glob, grep) and writes a report; it will not do what the prompt asks "
                f"with {', '.join(acting)}; set ANTHROPIC_API_KEY to run it with a model"
            )
    return warnings
