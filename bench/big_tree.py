"""The big-tree survey: the offline model over this venv's site-packages (every file, ``__pycache__``
included), in the default 50,000-char window and in a 400,000-char one, side by side.

For each window: files in the tree and files the report names correctly (against ``os.walk``),
turns, compactions by stage, identical repeated calls, history compactions and how close they
came, cost (estimated from characters: the offline model counts about 4 characters a token, priced
as the job's model), the same requests' cost with prompt caching (each request as the anthropic
backend would post it, its ``cache_control`` breakpoints included, accounted by the emulator's
:class:`PromptCache`, which follows the API's rules), and wall time. Each run is repeated
``--repeat`` times (the policy is deterministic: only the wall varies); the wall is the median with
its range.

    python bench/big_tree.py [--repeat 3] [--tree DIR] [--render]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import common  # noqa: E402
from common import RESULTS, replace_section, todo_cell, todo_counts, write_result  # noqa: E402
from conftest import calls_and_gaps, expected_row, regular_files, survey_rows, todo_lines  # noqa: E402

from runner.agent.runjob import Services
from runner.agent.session import Session  # noqa: E402
from runner.billing import PromptCache  # noqa: E402
from runner.compaction.compactor import Compactor  # noqa: E402
from runner.compaction.summarizer import Summarizer  # noqa: E402
from runner.config import Limits  # noqa: E402
from runner.emulator.config import EmulatorConfig  # noqa: E402
from runner.jobs import JobSpec  # noqa: E402
from runner.models.anthropic import request_params  # noqa: E402
from runner.models.base import Reply, Request  # noqa: E402
from runner.offline.model import OfflineModel  # noqa: E402
from runner.pricing import Usage, cost_usd  # noqa: E402
from runner.rundir.store import JobStore  # noqa: E402

WINDOWS = {"default (50,000 chars)": 50_000, "400,000 chars": 400_000}
COMMAND = "python bench/big_tree.py"


class CachePriced:
    """The offline model, and beside it what each request would bill with prompt caching: the body the
    anthropic backend posts for it (its breakpoints), accounted by the emulator's prompt cache."""

    def __init__(self, inner: OfflineModel):
        self.inner = inner
        self.name = inner.name
        self.server_compaction = inner.server_compaction
        self.cache = PromptCache()
        self.config = EmulatorConfig()
        self.usage = Usage()

    async def create(self, request: Request) -> Reply:
        reply = await self.inner.create(request)
        body, _ = request_params(request)
        total = reply.usage.input_tokens
        read, written, _ = self.cache.account(
            request.model, body.get("system"), body.get("tools") or [], body["messages"], total, self.config
        )
        self.usage.add(
            Usage(
                input_tokens=total - read - written,
                output_tokens=reply.usage.output_tokens,
                cache_creation_input_tokens=written,
                cache_read_input_tokens=read,
            )
        )
        return reply

    async def aclose(self) -> None:
        await self.inner.aclose()


async def survey(root: Path, out: Path, limits: dict) -> tuple[Any, str, Usage]:
    """The offline model's survey of ``root``: the job's result, its final.md, the cached usage."""
    spec = JobSpec(
        name="survey",
        source=Path("survey.toml"),
        prompt="Survey this package.",
        workspace=root,
        model="m",
        system=None,
        tools=("read", "glob", "grep"),
        limits=Limits(**limits),
    )
    store = JobStore(out)
    await store.open()
    model = CachePriced(OfflineModel())
    result = await Session(
        spec,
        services=Services(model=model, compactor=Compactor(Summarizer(None, "none")), summary_model="none"),
        store=store,
    ).run()
    final = out / "final.md"
    return result, final.read_text() if final.exists() else "", model.usage


def run_one(tree: Path, truth: dict[str, bytes], window: int, work: Path) -> dict:
    job = work / f"job-{window}"
    shutil.rmtree(job, ignore_errors=True)
    started = time.monotonic()
    result, report, cached = asyncio.run(
        survey(tree, job, {"context_char_limit": window, "max_turns": 20_000})
    )
    wall = time.monotonic() - started
    rows = survey_rows(report, job)
    right = sum(
        1
        for p, data in truth.items()
        if p in rows and ("binary" if rows[p][1] == "image" else rows[p][1], rows[p][2]) == expected_row(data)
    )
    calls, repeated, gaps = calls_and_gaps(job)
    return {
        "status": str(result.status),
        "turns": result.turns,
        "files": len(truth),
        "right": right,
        **todo_counts(report, todo_lines(truth)),
        "compactions": dict(result.compactions),
        "calls": calls,
        "repeated": repeated,
        "closest": min(gaps, default=0),
        "within_2": sum(g < 3 for g in gaps),
        "cost_usd": result.cost_usd,
        "cached_usage": cached.to_json(),
        "cached_cost_usd": cost_usd("m", cached),
        "wall_s": wall,
    }


def cached_cell(run: dict) -> str:
    usage = run.get("cached_usage")
    if not usage:
        return "-"
    return (
        f"${run['cached_cost_usd']:,.2f} ({usage['cache_creation_input_tokens']:,} / "
        f"{usage['cache_read_input_tokens']:,})"
    )


def same_calls(data: dict) -> str:
    """Whether every run of each window made the same calls, turns and tokens, as checked, not assumed."""
    keys = ("calls", "turns", "cost_usd", "cached_cost_usd", "cached_usage", "right")
    differ = [
        name
        for name, runs in data["windows"].items()
        if len({repr([r.get(k) for k in keys]) for r in runs}) > 1
    ]
    return (
        "checked, the same calls, turns and cost in each" if not differ else f"NOT so for {', '.join(differ)}"
    )


def render(data: dict) -> str:
    out = [
        "The offline model surveys this venv's site-packages as it is (`__pycache__`, shared objects, "
        "files over 256 KiB) with the memory tool; the report's facts are checked against `os.walk` "
        "(every regular file named with its line count, or as binary with its size). Cost is estimated "
        "(about 4 characters a token, priced as opus: $15 in / $75 out per million tokens, no prompt "
        "caching, which the offline model does not report); a real model's bill would differ, and so "
        "would the ratio between the windows (the next column shows how caching changes it). With caching: "
        "the same requests as the anthropic backend posts "
        "them (its `cache_control` breakpoints), accounted by the emulator's prompt cache (the API's "
        "rules: writes 1.25x input, reads 0.1x, a prefix of at least 1,024 tokens, about 20 blocks looked "
        "back from a breakpoint).",
        "",
        "| window | files | named right | TODO lines reported | status | turns "
        "| history / snip / micro / fit / budget compactions "
        "| calls | repeated | history compactions < 3 turns apart (closest) | cost (est.) | with caching "
        "(written / read tokens) | wall s |",
        "|---|---:|---:|---:|---|---:|---|---:|---:|---|---:|---|---:|",
    ]
    for name, runs in data["windows"].items():
        r = runs[0]
        c = r["compactions"]
        walls = [x["wall_s"] for x in runs]
        wall = (
            f"{statistics.median(walls):.1f} ({min(walls):.1f}-{max(walls):.1f})"
            if len(walls) > 1
            else f"{walls[0]:.1f}"
        )
        out.append(
            f"| {name} | {r['files']:,} | {r['right']:,} | {todo_cell(r)} | {r['status']} | {r['turns']:,} | "
            f"{c.get('compact_history', 0)} / {c.get('snip', 0)} / {c.get('micro_compact', 0)} / "
            f"{c.get('fit_tool_results', 0)} / {c.get('tool_result_budget', 0)} | {r['calls']:,} | "
            f"{r['repeated']} | {r['within_2']} ({r['closest'] or '-'}) | ${r['cost_usd']:,.2f} | "
            f"{cached_cell(r)} | {wall} |"
        )
    out += [
        "",
        f"Every run of one window made the same calls: {same_calls(data)} (the policy is deterministic); "
        "wall times are "
        f"the median and range of {data['repeat']} runs on a shared machine.",
        "",
        "The small window is the cheaper one: each turn carries at most 50,000 characters, against up "
        "to 400,000 (turns: "
        + ", ".join(f"{name} {runs[0]['turns']:,}" for name, runs in data["windows"].items())
        + "; the survey reads a few files a turn in both).",
    ]
    close = sum(runs[0]["within_2"] for runs in data["windows"].values())
    out.append(
        f"History compactions less than 3 turns apart: {close} (target 0: "
        f"{'met' if not close else 'MISSED'})."
    )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per window (default 3)")
    parser.add_argument(
        "--tree", type=Path, help="the tree to survey (default: a copy of this venv's site-packages)"
    )
    parser.add_argument(
        "--render", action="store_true", help="rewrite the section from bench/results/big_tree.json"
    )
    args = parser.parse_args()
    if args.render:
        data = json.loads((RESULTS / "big_tree.json").read_text())
        common.measured_at(data)  # the date, load and code of those runs, not of now
        replace_section("big-tree", render(data), f"{COMMAND} --repeat {data['repeat']}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tree = args.tree or work / "site-packages"
        if args.tree is None:
            shutil.copytree(sysconfig.get_paths()["purelib"], tree, symlinks=True)
        truth = regular_files(tree)
        data: dict = {"repeat": args.repeat, "windows": {}}
        for _ in range(args.repeat):  # rounds: each window once per round
            for name, window in WINDOWS.items():
                run = run_one(tree, truth, window, work)
                data["windows"].setdefault(name, []).append(run)
                print(name, json.dumps(run), flush=True)
    write_result("big_tree", data)
    replace_section("big-tree", render(data), f"{COMMAND} --repeat {args.repeat}")


if __name__ == "__main__":
    main()
