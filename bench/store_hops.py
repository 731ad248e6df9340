"""How a job store's file work gets off the event loop: ``aiofiles.os.wrap`` (``run_in_executor`` on
asyncio's default thread pool, what :mod:`runner.rundir.store` uses) against
``anyio.to_thread.run_sync`` with a ``CapacityLimiter`` per store, and against no hop at all
(``inline``: the write made on the event loop, as the store once did for a small one on a local disk).
Then the same question for the file tools: a small ``read`` and ``glob`` run by
:class:`runner.tools.file_calls.FileTool` on a worker thread (``thread``), against the inline path the
tools once had (``inline``: first on the loop within a 2 ms budget), when ``runner.tools.file_calls``
still has it (``INLINE_TOOLS``).

    python bench/store_hops.py              # 10,000 writes per contestant and scenario, 3 rounds
    python bench/store_hops.py --smoke      # 500 writes, 1 round: a few seconds

Each write is the store's own whole-file write, :func:`runner.rundir.store.write_atomic_sync` of a
~1 KB JSON document (temporary file, write, rename), or, in the ``flush`` scenarios, a turn's flush
(two JSONL lines appended, the ~1 KB metrics checkpoint swapped in: :func:`turn_flush`). Scenarios:

- ``one job``: one store, its writes awaited one after another (a job's turns);
- ``10 jobs``: ten stores at once, each awaiting its own writes one after another (a batch), the
  writes split evenly between them;
- ``hop only``: the same hops to a function that does nothing, so the hand-off itself is seen.

The contestants alternate within each round (so drift of the machine's load hits both), and the
tables give the median over the rounds of each one's wall time and CPU time (the process's, every
thread's: ``time.process_time``), in microseconds per write or call, each round's value after it.
Prints only; writes no result file (the numbers belong to the report that chose between them).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiofiles.os
import anyio
import anyio.to_thread

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import load_note, machine  # noqa: E402

from runner.rundir.store import _write_file, swap_in_sync, write_atomic_sync  # noqa: E402

Hop = Callable[..., Awaitable[Any]]
DOCUMENT = (
    json.dumps(
        {
            "job": "bench",
            "status": "running",
            "turns": 17,
            "usage": {"input_tokens": 123_456, "output_tokens": 7_890},
            "notes": ["x" * 60] * 12,
        },
        indent=2,
    )
    + "\n"
)


def nothing(_path: Path, _text: str) -> None:
    return None


LINE = (json.dumps({"role": "assistant", "content": [{"type": "text", "text": "y" * 400}]}) + "\n").encode()


def turn_flush(path: Path, text: str) -> None:
    """A turn's flush as :meth:`runner.rundir.store.JobStore.flush` writes it with no output to save:
    a line appended to the transcript and one to the events, then the metrics checkpoint swapped in."""
    for name in ("transcript.jsonl", "events.jsonl"):
        _write_file(path.with_name(name), LINE, os.O_APPEND)
    swap_in_sync(path, text)


def inline_hop(work: Callable[..., Any]) -> Callable[[], Hop]:
    """No hop: the work done on the event loop."""

    async def hop(*args: Any) -> Any:
        return work(*args)

    return lambda: hop


def aiofiles_hop(work: Callable[..., Any]) -> Callable[[], Hop]:
    """One hop factory per store: aiofiles' wrapper (every store shares asyncio's default executor)."""
    wrapped = aiofiles.os.wrap(work)
    return lambda: wrapped


def anyio_hop(work: Callable[..., Any], tokens: int) -> Callable[[], Hop]:
    """One hop factory per store: anyio's worker threads, each store with a limiter of its own."""

    def for_store() -> Hop:
        limiter = anyio.CapacityLimiter(tokens)

        async def hop(*args: Any) -> Any:
            return await anyio.to_thread.run_sync(functools.partial(work, *args), limiter=limiter)

        return hop

    return for_store


async def writes(hop: Hop, directory: Path, count: int) -> None:
    path = directory / "metrics.json"
    for _ in range(count):
        await hop(path, DOCUMENT)


async def timed(factory: Callable[[], Hop], root: Path, total: int, jobs: int) -> tuple[float, float]:
    """Wall and CPU seconds for ``total`` writes spread over ``jobs`` stores running at once."""
    directories = []
    for j in range(jobs):
        directories.append(root / f"job{j}")
        directories[-1].mkdir(parents=True, exist_ok=True)
    hops = [factory() for _ in range(jobs)]
    started, cpu = time.perf_counter(), time.process_time()
    async with anyio.create_task_group() as tg:
        for hop, directory in zip(hops, directories, strict=True):
            tg.start_soon(writes, hop, directory, total // jobs)
    return time.perf_counter() - started, time.process_time() - cpu


WHO = ("inline", "aiofiles", "anyio")


async def bench(
    total: int, rounds: int, tokens: int, root: Path
) -> dict[str, dict[str, list[tuple[float, float]]]]:
    scenarios: dict[str, tuple[Callable[..., Any], int]] = {
        "one job": (write_atomic_sync, 1),
        "10 jobs": (write_atomic_sync, 10),
        "flush, 1": (turn_flush, 1),
        "flush, 10": (turn_flush, 10),
        "hop only": (nothing, 1),
    }
    results: dict[str, dict[str, list[tuple[float, float]]]] = {
        name: {who: [] for who in WHO} for name in scenarios
    }
    for r in range(rounds):
        for name, (work, jobs) in scenarios.items():
            contestants = {
                "inline": inline_hop(work),
                "aiofiles": aiofiles_hop(work),
                "anyio": anyio_hop(work, tokens),
            }
            order = list(contestants) if r % 2 == 0 else list(reversed(contestants))
            for who in order:
                os.sync()
                wall, cpu = await timed(
                    contestants[who], root / f"r{r}-{name.replace(' ', '_')}-{who}", total, jobs
                )
                results[name][who].append((wall * 1e6 / total, cpu * 1e6 / total))
    return results


def file_workspace(root: Path) -> Path:
    """A small workspace: 40 Python files of about 1 KB in 4 directories."""
    ws = root / "ws"
    for i in range(40):
        d = ws / f"pkg{i % 4}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"mod{i:02d}.py").write_text(
            f'"""Module {i}."""\n\n' + f"def f{i}(x):\n    return x + {i}\n" * 30
        )
    return ws


async def file_calls(ws: Path, calls: int, jobs: int, inline: bool, root: Path) -> tuple[float, float, float]:
    """Wall and CPU seconds for ``calls`` small reads and globs (alternating) spread over ``jobs`` jobs
    at once, each job's calls one after another; and the median latency of one call, in seconds."""
    from runner.tools import file_calls as fc
    from runner.tools.shares import share_of

    kept = getattr(fc, "INLINE_TOOLS", None)
    if kept is not None and not inline:
        fc.INLINE_TOOLS = frozenset()
    latencies: list[float] = []

    async def job(j: int) -> None:
        share = share_of(root / f"job{j}")
        workspace = fc.Workspace(str(ws), lambda: share)
        tools = {name: fc.FileTool(name, workspace) for name in ("read", "glob")}
        for i in range(calls // jobs):
            name, args = (
                ("read", {"file_path": f"pkg{i % 4}/mod{i % 40:02d}.py"})
                if i % 2 == 0
                else ("glob", {"pattern": f"pkg{i % 4}/*.py"})
            )
            began = time.perf_counter()
            result = await tools[name].run(f"toolu_{j}_{i}", args)
            latencies.append(time.perf_counter() - began)
            assert not result.get("is_error"), result

    try:
        started, cpu = time.perf_counter(), time.process_time()
        async with anyio.create_task_group() as tg:
            for j in range(jobs):
                tg.start_soon(job, j)
        return time.perf_counter() - started, time.process_time() - cpu, statistics.median(latencies)
    finally:
        if kept is not None:
            fc.INLINE_TOOLS = kept


async def bench_files(calls: int, rounds: int, root: Path) -> dict[str, dict[str, list[tuple[float, ...]]]]:
    from runner.tools import file_calls as fc

    ws = file_workspace(root)
    who = ("inline", "thread") if hasattr(fc, "INLINE_TOOLS") else ("thread",)
    results: dict[str, dict[str, list[tuple[float, ...]]]] = {
        name: {w: [] for w in who} for name in ("one job", "10 jobs")
    }
    for r in range(rounds):
        for name, jobs in (("one job", 1), ("10 jobs", 10)):
            for w in who if r % 2 == 0 else tuple(reversed(who)):
                wall, cpu, latency = await file_calls(ws, calls, jobs, w == "inline", root)
                results[name][w].append((wall * 1e6 / calls, cpu * 1e6 / calls, latency * 1e6))
    return results


def cell(values: list[tuple[float, ...]], i: int) -> str:
    column = [v[i] for v in values]
    return f"{statistics.median(column):.1f} ({min(column):.1f}-{max(column):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=1, help="the limiter's tokens per store (anyio)")
    parser.add_argument("--smoke", action="store_true", help="500 writes, 1 round")
    args = parser.parse_args()
    total, rounds = (500, 1) if args.smoke else (args.writes, args.rounds)
    with tempfile.TemporaryDirectory(prefix="store-hops-") as tmp:
        results = anyio.run(bench, total, rounds, args.tokens, Path(tmp), backend="asyncio")
    with tempfile.TemporaryDirectory(prefix="store-hops-") as tmp:
        files = anyio.run(bench_files, total, rounds, Path(tmp), backend="asyncio")
    print(
        f"{total:,} writes (and file calls) per contestant and scenario, {rounds} round(s), median "
        f"(range) µs per write or call; anyio limiter: {args.tokens} token(s) per store"
    )
    print(f"{machine()}; {load_note()}")
    print(f"{'writes':<10} {'contestant':<10} {'wall µs':>22} {'CPU µs':>22}")
    for name, by in results.items():
        for who, values in by.items():
            print(f"{name:<10} {who:<10} {cell(values, 0):>22} {cell(values, 1):>22}")
    print(f"{'file calls':<10} {'contestant':<10} {'wall µs':>22} {'CPU µs':>22} {'latency µs':>22}")
    for name, by in files.items():
        for who, values in by.items():
            print(f"{name:<10} {who:<10} {cell(values, 0):>22} {cell(values, 1):>22} {cell(values, 2):>22}")


if __name__ == "__main__":
    main()
