"""The floors under benchmark 1: the same sessions with none of the runner's work, by three clients.

N sessions of up to K calls each against the same emulator, offering the same tool definitions as a survey
job, made by one of:

- ``sdk``: the runner's own model client (the SDK's ``AsyncAnthropic`` on its transport, one shard per 25
  sessions, as ``runner run`` makes it). A tool call is answered with a fixed line instead of being run,
  and a final answer with "Go on.", so every session makes K calls: no tools, no files, no compaction, no
  display. What this process spends is what the SDK costs before the runner does anything.
- ``raw``: a bare ``aiohttp`` client posting the same bodies (``request_params``, serialized as the runner
  does) with the same headers, answered the same way: no retries, no timeouts, no checks. What an HTTP
  client costs at all on this machine.
- ``inspect``: inspect_ai (a peer, if installed: ``pip install -e '.[bench]'``) running the N sessions as
  N samples of one ``eval``, each its ``use_tools`` + ``generate()`` loop (the loop ends when the model
  answers without a tool call) with the tools ``glob``, ``read`` and ``grep`` run by the runner's own
  :class:`Toolset` (bench/peers.py's glue), ``max_connections`` and ``max_samples`` = N, its log written
  as it ships. Pointed at the emulator by ``ANTHROPIC_BASE_URL`` only; its calls a session are what its
  loop makes.

    python bench/sdk_floor.py --client sdk --base-url URL --sessions N --calls K --workspace DIR

Prints one JSON line: calls made, wall seconds after the imports, and the seconds the imports took.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

STARTED = time.perf_counter()

from runner.jobs import DEFAULT_TOOLS  # noqa: E402
from runner.models.base import Request  # noqa: E402
from runner.rundir.store import JobStore  # noqa: E402
from runner.tools.toolset import Toolset  # noqa: E402

MODEL = "claude-sonnet-4-5"
CLIENTS = ("sdk", "raw", "inspect")
SHARD_SESSIONS = 25  # sessions per client shard, as runner run makes them


def answers_to(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The user turn after a reply: a fixed line per tool call, or "Go on." (K calls, whatever it says)."""
    uses = [b for b in content if b.get("type") == "tool_use"]
    return [
        {"type": "tool_result", "tool_use_id": u["id"], "content": "(not run: the floor runs no tools)"}
        for u in uses
    ] or [{"type": "text", "text": "Go on."}]


async def sdk_sessions(base_url: str, sessions: int, calls: int, tools: list[dict[str, Any]]) -> int:
    from runner.models.anthropic import AnthropicModel

    model = AnthropicModel(api_key="bench-key", base_url=base_url, shards=-(-sessions // SHARD_SESSIONS))

    async def session(prompt: str) -> int:
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        for _ in range(calls):
            reply = await model.create(Request(model=MODEL, max_tokens=4096, messages=messages, tools=tools))
            messages = [
                *messages,
                {"role": "assistant", "content": reply.content},
                {"role": "user", "content": answers_to(reply.content)},
            ]
        return calls

    try:
        made = await asyncio.gather(*(session(f"Survey this workspace ({i}).") for i in range(sessions)))
    finally:
        await model.aclose()
    return sum(made)


async def raw_sessions(base_url: str, sessions: int, calls: int, tools: list[dict[str, Any]]) -> int:
    import aiohttp

    from runner.models.anthropic import request_params

    headers = {
        "x-api-key": "bench-key",
        "anthropic-version": "2023-06-01",
        "content-type": "application/json",
    }
    url = f"{base_url}/v1/messages"

    async def session(http: aiohttp.ClientSession, prompt: str) -> int:
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        for _ in range(calls):
            body, betas = request_params(
                Request(model=MODEL, max_tokens=4096, messages=messages, tools=tools)
            )
            async with http.post(  # the beta endpoint and header when a tool needs one, as AnthropicModel
                f"{url}?beta=true" if betas else url,
                data=json.dumps(body, separators=(",", ":")).encode(),
                headers={"anthropic-beta": ",".join(betas)} if betas else None,
            ) as response:
                response.raise_for_status()
                reply = await response.json()
            messages = [
                *messages,
                {"role": "assistant", "content": reply["content"]},
                {"role": "user", "content": answers_to(reply["content"])},
            ]
        return calls

    async with aiohttp.ClientSession(
        headers=headers, connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=600)
    ) as http:
        made = await asyncio.gather(
            *(session(http, f"Survey this workspace ({i}).") for i in range(sessions))
        )
    return sum(made)


async def inspect_sessions(sessions: int, workspace: str, out: Path) -> int:
    """inspect_ai's own loop over ``sessions`` samples; the calls it made (counted by the caller, at the
    emulator: returned here as -1)."""
    import os

    from inspect_ai import Task, eval_async
    from inspect_ai.dataset import Sample
    from inspect_ai.solver import generate, use_tools

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from peers import inspect_tools

    os.environ.setdefault("INSPECT_DISPLAY", "none")
    store = JobStore(out / "inspect-tools")
    await store.open()
    toolset = Toolset(workspace, ("glob", "read", "grep"), store)
    task = Task(
        dataset=[Sample(input=f"Survey this workspace ({i}).") for i in range(sessions)],
        solver=[use_tools(inspect_tools(toolset)), generate()],
    )
    logs = await eval_async(
        task,
        model=f"anthropic/{MODEL}",
        log_dir=str(out / "logs"),
        max_connections=sessions,
        max_samples=sessions,
        fail_on_error=False,
    )
    log = logs[0]
    failed = [s for s in (log.samples or []) if s.error is not None]
    if log.status != "success" or failed:
        why = failed[0].error.message if failed and failed[0].error else str(log.error or log.status)
        raise SystemExit(f"inspect_ai: {log.status}, {len(failed)} samples failed: {why[-1500:]}")
    return -1


async def main(client: str, base_url: str, sessions: int, calls: int, workspace: str) -> dict[str, Any]:
    tools = Toolset(workspace, DEFAULT_TOOLS, JobStore(Path(workspace))).definitions()
    if client == "sdk":
        made = await sdk_sessions(base_url, sessions, calls, tools)
    elif client == "raw":
        made = await raw_sessions(base_url, sessions, calls, tools)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            made = await inspect_sessions(sessions, workspace, Path(tmp))
    return {
        "model_calls": made,
        "wall_after_imports_s": round(time.perf_counter() - IMPORTED, 3),
        "imports_s": round(IMPORTED - STARTED, 3),
    }


IMPORTED = time.perf_counter()

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--client", choices=CLIENTS, default="sdk")
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--sessions", type=int, required=True)
    parser.add_argument("--calls", type=int, required=True)
    parser.add_argument("--workspace", required=True)
    args = parser.parse_args()
    print(
        json.dumps(asyncio.run(main(args.client, args.base_url, args.sessions, args.calls, args.workspace)))
    )
