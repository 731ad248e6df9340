"""What every replay contestant's script shares: the histories, the windows, one row per (contestant,
window), written as JSON for ``bench/replay.py`` to merge.

A row is ``{"contestant", "window", "description", "totals", "last_turns_cost_usd", "files"}``:
``totals`` as ``runner replay --json`` gives them (:func:`runner.replay.totals`), ``files`` each
file's report, ``last_turns_cost_usd`` the mean over the files of the cost per call at the last 10%
of their turns. Every row is priced the same way: the job's model ``MODEL``, summaries by the runner's
deterministic fallback summary billed at ``SUMMARY_MODEL``'s prices (:class:`DeterministicSummarizer`).

    python bench/replay_<peer>.py --windows 16000 32000 64000 --out rows.json [--smoke | --files FILE...]

A file that is not a history stops the script before any row: one line naming the file and the line,
exit 2 (:class:`runner.replay.HistoryError`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from runner.pricing import PriceTable
from runner.replay import Contestant, HistoryError, ReplayOptions, load_history, replay_files, totals

ROOT = Path(__file__).resolve().parent.parent
TRAJECTORIES = ROOT.parent / "shared" / "trajectories"
SMOKE_FILE = (
    ROOT
    / "tests"
    / "recorded"
    / "trajectories"
    / "swebv_minisweagent_gemini3pro_matplotlib_matplotlib_25775.jsonl"
)
WINDOWS = (16_000, 32_000, 64_000)
MODEL = "claude-sonnet-5-5"
SUMMARY_MODEL = "claude-haiku-5-5"

# a contestant's factory: (window tokens) -> (description, (scratch job dir) -> Contestant)
Factory = Callable[[int], tuple[str, Callable[[Path], Contestant]]]


def histories(smoke: bool, files: list[Path] | None = None) -> list[Path]:
    """The histories to replay: ``files`` when given, the smoke file, or every one of ``TRAJECTORIES``;
    each checked first (a file that is not a history: its error on stderr, exit 2)."""
    if files:
        chosen = list(files)
    elif smoke:
        chosen = [SMOKE_FILE]
    else:
        chosen = sorted(TRAJECTORIES.glob("*.jsonl"))
        if not chosen:
            raise SystemExit(f"no histories in {TRAJECTORIES}")
    for path in chosen:
        try:
            load_history(path)
        except HistoryError as e:
            print(f"error: {e}", file=sys.stderr)
            raise SystemExit(2) from None
    return chosen


def options(window: int) -> ReplayOptions:
    return ReplayOptions(model=MODEL, summary_model=SUMMARY_MODEL, prices=PriceTable(), context_tokens=window)


def row(name: str, window: int, factory: Factory, files: list[Path]) -> dict[str, Any]:
    description, make = factory(window)
    started = time.perf_counter()
    reports = anyio.run(lambda: replay_files(files, options(window), make))
    seconds = time.perf_counter() - started
    print(
        f"replay: {name} @ {window:,}: {totals(reports)['effective_cost_usd']:.4f} in {seconds:.1f} s",
        file=sys.stderr,
    )
    return {
        "contestant": name,
        "window": window,
        "description": description,
        "seconds": round(seconds, 2),
        "totals": totals(reports),
        "last_turns_cost_usd": sum(r.last_turns_cost for r in reports) / len(reports),
        "files": [r.to_json() for r in reports],
    }


def main(contestants: dict[str, Factory], argv: list[str] | None = None) -> None:
    """The command line of a contestants' script: every (contestant, window) row, as JSON."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--windows", type=int, nargs="+", default=list(WINDOWS))
    parser.add_argument("--only", action="append", help="a contestant's name (repeatable)")
    parser.add_argument("--smoke", action="store_true", help="one history")
    parser.add_argument("--files", type=Path, nargs="+", metavar="FILE", help="these histories instead")
    parser.add_argument("--out", type=Path, help="write the rows here (default: stdout)")
    args = parser.parse_args(argv)
    files = histories(args.smoke, args.files)
    names = args.only or list(contestants)
    unknown = [n for n in names if n not in contestants]
    if unknown:
        raise SystemExit(f"unknown contestants: {', '.join(unknown)} (known: {', '.join(contestants)})")
    rows = [row(name, window, contestants[name], files) for name in names for window in args.windows]
    text = json.dumps({"rows": rows}, indent=1)
    if args.out:
        args.out.write_text(text)
    else:
        print(text)
