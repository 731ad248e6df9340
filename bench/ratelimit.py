"""Benchmark 2: summaries from 50 sessions through one gate of R requests per window.

Every session asks for summaries as fast as it can through the shared :class:`Summarizer`, so the
gate is saturated from start to end. Reports the most starts seen in any sliding window (must never
exceed R) and the utilisation of the gate while saturated (starts / what R per window allows).

    python bench/ratelimit.py            # full size, writes bench/results/ratelimit.json
    python bench/ratelimit.py --smoke    # a second or two, writes nothing
"""

from __future__ import annotations

import argparse
import bisect
import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import replace_section, write_result  # noqa: E402

from runner.compaction.summarizer import Summarizer  # noqa: E402
from runner.models.base import Reply, Request  # noqa: E402
from runner.pricing import Usage  # noqa: E402


class InstantModel:
    """A summary model that answers at once, recording when each call started."""

    name = "instant"
    server_compaction = False

    def __init__(self) -> None:
        self.starts: list[float] = []

    async def create(self, request: Request) -> Reply:
        self.starts.append(anyio.current_time())
        await anyio.sleep(0.001)
        return Reply([{"type": "text", "text": "summary"}], "end_turn", Usage(10, 2))

    async def aclose(self) -> None:
        return None


def max_in_window(starts: list[float], window: float) -> int:
    """The most starts in any half-open window [t, t + window)."""
    starts = sorted(starts)
    return max((bisect.bisect_left(starts, t + window) - i for i, t in enumerate(starts)), default=0)


async def measure(sessions: int, per_session: int, rate: int, window: float) -> dict[str, float]:
    model = InstantModel()
    summarizer = Summarizer(
        model, "instant", max_concurrent=sessions, requests_per_minute=rate, window_s=window
    )
    history = [{"role": "user", "content": "x"}]

    async def session() -> None:
        for _ in range(per_session):
            await summarizer.summarize(history, "task")

    async with anyio.create_task_group() as tg:
        for _ in range(sessions):
            tg.start_soon(session)
    starts = sorted(model.starts)
    span = starts[-1] - starts[0]
    allowed = rate * (
        span / window + 1
    )  # what the gate may start from the first start to one window after the last
    return {
        "sessions": sessions,
        "requests": len(starts),
        "rate_per_window": rate,
        "window_s": window,
        "max_in_any_window": max_in_window(starts, window),
        "span_s": round(span, 3),
        "utilisation": round(len(starts) / allowed, 4),
    }


def spread(values: list[float]) -> str:
    """The median of the rounds and, in brackets, their range."""
    values = sorted(values)
    return f"{values[len(values) // 2]:.1%} ({values[0]:.1%}-{values[-1]:.1%})"


def verdict(by_row: list[tuple[dict, ...]]) -> str:
    """Both targets judged over every run of every row."""
    over = sum(r["max_in_any_window"] > r["rate_per_window"] for runs in by_row for r in runs)
    lowest = min(r["utilisation"] for runs in by_row for r in runs)
    return (
        f"No window over R: {'met' if over == 0 else f'MISSED in {over} runs'}; utilisation >= 95%: "
        f"{'met' if lowest >= 0.95 else 'MISSED'} (the lowest of any run {lowest:.1%})."
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each row (every row once a round)")
    args = parser.parse_args()
    sizes = (
        [(10, 2, 5, 0.2)] if args.smoke else [(50, 6, r, w) for r, w in ((20, 1.0), (60, 2.0), (100, 1.0))]
    )
    rounds = [[anyio.run(measure, *size) for size in sizes] for _ in range(1 if args.smoke else args.rounds)]
    print(f"{'R':>5} {'window':>7} {'requests':>9} {'max in window':>14} {'utilisation':>12}")
    for r in (run for one in rounds for run in one):
        print(
            f"{r['rate_per_window']:>5} {r['window_s']:>6}s {r['requests']:>9} {r['max_in_any_window']:>14} "
            f"{r['utilisation']:>11.1%}"
        )
        assert r["max_in_any_window"] <= r["rate_per_window"], "the gate let too many through"
    if not args.smoke:
        by_row = list(zip(*rounds, strict=True))  # each row's runs, one a round
        write_result("ratelimit", {"rounds": len(rounds), "runs": [list(runs) for runs in by_row]})
        rows = [
            "| R per window | window | sessions | requests a round | most in any window (over the rounds) | "
            "utilisation while saturated |",
            "|---:|---:|---:|---:|---:|---:|",
        ]
        rows += [
            f"| {runs[0]['rate_per_window']} | {runs[0]['window_s']} s | {runs[0]['sessions']} | "
            f"{runs[0]['requests']} | {max(r['max_in_any_window'] for r in runs)} | "
            f"{spread([r['utilisation'] for r in runs])} |"
            for runs in by_row
        ]
        replace_section(
            "ratelimit",
            "## 2. Rate limit: summaries from 50 sessions through one gate\n\n"
            "Every session asks for summaries as fast as it can through one shared gate (a model that "
            f"answers "
            f"in 1 ms), so the gate is saturated from start to end. {len(rounds)} rounds (every row once a "
            "round): most in any window is the most over all the rounds; utilisation is the median with, in "
            "brackets, the range.\n\n"
            "Target: no window over R; utilisation >= 95% of R while saturated.\n\n"
            + "\n".join(rows)
            + "\n\n"
            + verdict(by_row),
            "python bench/ratelimit.py",
        )


if __name__ == "__main__":
    main()
