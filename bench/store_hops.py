"""How a job store's file work gets off the event loop: ``aiofiles.os.wrap`` (``run_in_executor`` on
asyncio's default thread pool, what :mod:`runner.rundir.store` uses) against
``anyio.to_thread.run_sync`` with a ``CapacityLimiter`` per store.

    python bench/store_hops.py              # 10,000 writes per contestant and scenario, 3 rounds
    python bench/store_hops.py --smoke      # 500 writes, 1 round: a few seconds

Each write is the store's own whole-file write, :func:`runner.rundir.store.write_atomic_sync` of a
~1 KB JSON document (a metrics checkpoint: temporary file, write, rename). Scenarios:

- ``one job``: one store, its writes awaited one after another (a job's turns);
- ``10 jobs``: ten stores at once, each awaiting its own writes one after another (a batch), the
  writes split evenly between them;
- ``hop only``: the same hops to a function that does nothing, so the hand-off itself is seen.

The contestants alternate within each round (so drift of the machine's load hits both), and the
table gives the median over the rounds of each one's wall time, in microseconds per write. Prints
only; writes no result file (the numbers belong to the report that chose between the two).
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

from runner.rundir.store import write_atomic_sync  # noqa: E402

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


async def timed(factory: Callable[[], Hop], root: Path, total: int, jobs: int) -> float:
    """Seconds for ``total`` writes spread over ``jobs`` stores running at once."""
    directories = []
    for j in range(jobs):
        directories.append(root / f"job{j}")
        directories[-1].mkdir(parents=True, exist_ok=True)
    hops = [factory() for _ in range(jobs)]
    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for hop, directory in zip(hops, directories, strict=True):
            tg.start_soon(writes, hop, directory, total // jobs)
    return time.perf_counter() - started


async def bench(total: int, rounds: int, tokens: int, root: Path) -> dict[str, dict[str, list[float]]]:
    scenarios: dict[str, tuple[Callable[..., Any], int]] = {
        "one job": (write_atomic_sync, 1),
        "10 jobs": (write_atomic_sync, 10),
        "hop only": (nothing, 1),
    }
    results: dict[str, dict[str, list[float]]] = {name: {"aiofiles": [], "anyio": []} for name in scenarios}
    for r in range(rounds):
        for name, (work, jobs) in scenarios.items():
            contestants = {"aiofiles": aiofiles_hop(work), "anyio": anyio_hop(work, tokens)}
            order = list(contestants) if r % 2 == 0 else list(reversed(contestants))
            for who in order:
                os.sync()
                seconds = await timed(
                    contestants[who], root / f"r{r}-{name.replace(' ', '_')}-{who}", total, jobs
                )
                results[name][who].append(seconds * 1e6 / total)
    return results


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
    print(
        f"{total:,} writes per contestant and scenario, {rounds} round(s), median µs per write; "
        f"anyio limiter: {args.tokens} token(s) per store"
    )
    print(f"{machine()}; {load_note()}")
    print(
        f"{'scenario':<10} {'aiofiles':>10} {'anyio':>10} {'anyio/aiofiles':>15}   rounds (aiofiles | anyio)"
    )
    for name, by in results.items():
        a, b = statistics.median(by["aiofiles"]), statistics.median(by["anyio"])
        spread = (
            " ".join(f"{x:.1f}" for x in by["aiofiles"]) + " | " + " ".join(f"{x:.1f}" for x in by["anyio"])
        )
        print(f"{name:<10} {a:>10.1f} {b:>10.1f} {b / a:>15.2f}   {spread}")


if __name__ == "__main__":
    main()
