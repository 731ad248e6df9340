"""The floor under benchmark 1: the SDK alone, with none of the runner's work.

N sessions of up to K calls each through the runner's own model client (the SDK's ``AsyncAnthropic``
on its aiohttp transport, one shard per 25 sessions, as ``runner run`` makes it), against the same emulator,
offering the same tool definitions as a survey job. A tool call is answered with a fixed line instead of being
run, and a final answer with "Go on.", so every session makes K calls: no tools, no files, no
compaction, no display. What this process spends, from its start
(imports included) to its end, is what the SDK costs before the runner does anything.

    python bench/sdk_floor.py --base-url URL --sessions N --calls K --workspace DIR

Prints one JSON line: calls made, wall seconds after the imports, and the seconds the imports took.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

STARTED = time.perf_counter()

from runner.jobs import DEFAULT_TOOLS  # noqa: E402
from runner.models.anthropic import AnthropicModel  # noqa: E402
from runner.models.base import Request  # noqa: E402
from runner.rundir.store import JobStore  # noqa: E402
from runner.tools.toolset import Toolset  # noqa: E402

IMPORTED = time.perf_counter()
MODEL = "claude-sonnet-4-5"


async def session(model: AnthropicModel, tools: list[dict], prompt: str, calls: int) -> int:
    messages: list[dict] = [{"role": "user", "content": prompt}]
    for _ in range(calls):
        reply = await model.create(Request(model=MODEL, max_tokens=4096, messages=messages, tools=tools))
        uses = [b for b in reply.content if b.get("type") == "tool_use"]
        answers = [
            {
                "type": "tool_result",
                "tool_use_id": u["id"],
                "content": "(not run: the SDK floor runs no tools)",
            }
            for u in uses
        ] or [{"type": "text", "text": "Go on."}]  # K calls, whatever the model answers
        messages = [
            *messages,
            {"role": "assistant", "content": reply.content},
            {"role": "user", "content": answers},
        ]
    return calls


async def main(base_url: str, sessions: int, calls: int, workspace: str) -> dict:
    tools = Toolset(workspace, DEFAULT_TOOLS, JobStore(Path(workspace))).definitions()
    model = AnthropicModel(
        api_key="bench-key", base_url=base_url, shards=-(-sessions // 25)
    )  # as runner run does
    try:
        made = await asyncio.gather(
            *(session(model, tools, f"Survey this workspace ({i}).", calls) for i in range(sessions))
        )
    finally:
        await model.aclose()
    return {
        "model_calls": sum(made),
        "wall_after_imports_s": round(time.perf_counter() - IMPORTED, 3),
        "imports_s": round(IMPORTED - STARTED, 3),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--sessions", type=int, required=True)
    parser.add_argument("--calls", type=int, required=True)
    parser.add_argument("--workspace", required=True)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.base_url, args.sessions, args.calls, args.workspace))))
