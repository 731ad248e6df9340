"""One big survey with and without subagents, through the real SDK against the emulator with 2 s of
latency a call: wall time, cost, files reported right, repeated calls.

The tree is eight packages of this venv's site-packages (about 800 files: big enough to split, small
enough that the run without subagents, one call at a time, ends in minutes at 2 s a call). With the
``task`` tool the offline policy measures the tree and cuts it into parts of about the same size,
run four at once (``max_subagents``); without it, the same policy surveys the tree alone. Both runs
use the same model, window, prices, call limit (5 in flight) and summary gate.

    python bench/subagents.py [--repeat 1] [--latency 2.0] [--site-packages] [--render]

``--site-packages`` surveys a copy of the venv's whole site-packages (the big-tree table's tree)
instead; each tree's results are kept in ``bench/results/subagents.json`` and rendered together.
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from common import RESULTS, START_LOAD, replace_section, todo_cell, todo_counts, write_result  # noqa: E402
from conftest import calls_and_gaps, expected_row, regular_files, survey_rows, todo_lines  # noqa: E402

from runner.compaction.compactor import Compactor  # noqa: E402
from runner.compaction.summarizer import Summarizer  # noqa: E402
from runner.config import Limits  # noqa: E402
from runner.emulator.config import EmulatorConfig, Latency  # noqa: E402
from runner.emulator.server import running_emulator  # noqa: E402
from runner.execution.scheduler import Batch, run_batch  # noqa: E402
from runner.jobs import JobSpec  # noqa: E402
from runner.models.adaptive import AdaptiveLimit, AdaptiveModel  # noqa: E402
from runner.models.anthropic import AnthropicModel  # noqa: E402

PACKAGES = ("setuptools", "pydantic", "hypothesis", "rich", "_pytest", "filelock", "markdown_it", "aiohttp")
MODEL, SUMMARY_MODEL = "claude-sonnet-5-5", "claude-haiku-5-5"
COMMAND = "python bench/subagents.py"
EIGHT = "Eight packages"
SITE = "The whole site-packages"
CALLS_IN_FLIGHT = 5


def make_tree(root: Path) -> Path:
    site = Path(sysconfig.get_paths()["purelib"])
    for name in PACKAGES:
        shutil.copytree(site / name, root / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    return root


async def survey(tree: Path, out: Path, tools: tuple[str, ...], latency: float) -> dict:
    spec = JobSpec(
        name="survey",
        source=Path("bench/subagents.py"),
        prompt="Survey this workspace.",
        workspace=tree,
        model=MODEL,
        system=None,
        tools=tools,
        limits=Limits(max_turns=5_000, timeout_s=6 * 3600, max_subagents=4, max_retries=4),
    )
    with running_emulator(EmulatorConfig(latency=Latency(seconds=latency))) as emu:
        raw = AnthropicModel(base_url=emu.base_url, api_key="bench-key", max_retries=4)
        summarizer = Summarizer(raw, SUMMARY_MODEL, requests_per_minute=10_000)
        batch = Batch(
            run_dir=out,
            specs=[spec],
            model=AdaptiveModel(raw, AdaptiveLimit(maximum=CALLS_IN_FLIGHT)),
            compactor=Compactor(summarizer),
            summary_model=SUMMARY_MODEL,
            concurrency=CALLS_IN_FLIGHT,
            handle_signals=False,
        )
        started = time.monotonic()
        try:
            result = await run_batch(batch)
        finally:
            await raw.aclose()
        wall = time.monotonic() - started
        stats = emu.state.snapshot()
    record = result.results["survey"]
    job = out / "survey"
    truth = regular_files(tree)
    report = (job / "final.md").read_text() if (job / "final.md").exists() else ""
    rows = survey_rows(report, job) if record.status == "succeeded" else {}
    right = sum(
        1
        for p, data in truth.items()
        if p in rows and ("binary" if rows[p][1] == "image" else rows[p][1], rows[p][2]) == expected_row(data)
    )
    children = sum(float(r.get("cost_usd") or 0) for r in record.subagents)
    calls = repeated = 0
    for d in [job, *sorted((job / "agents").glob("*"))]:
        c, r, _ = calls_and_gaps(d)
        calls, repeated = calls + c, repeated + r
    return {
        "status": str(record.status),
        "files": len(truth),
        "right": right,
        "wall_s": round(wall, 1),
        "cost_usd": round(record.cost_usd, 4),
        "turns": record.turns,
        "subagents": len(record.subagents),
        "subagent_turns": sum(r["turns"] for r in record.subagents),
        "calls": calls,
        "repeated": repeated,
        "requests": stats["requests"],
        "peak_concurrent": stats["peak_concurrent"],
        "input_tokens": record.usage_total("input_tokens"),
        "subagent_walls": [round(float(r.get("wall_s") or 0), 1) for r in record.subagents],
        "parent_cost_usd": round(record.cost_usd - children, 4),
        **todo_counts(report, todo_lines(truth)),
        "output_tokens": record.usage_total("output_tokens"),
    }


def trees_of(data: dict) -> dict:
    """The results by tree (a file written before trees were named holds the eight packages' only)."""
    if "trees" in data:
        return data["trees"]
    return {EIGHT: {k: data.get(k) for k in ("repeat", "latency", "files", "runs", "load_1min")}}


EACH = "each tree's load at its start below"


def render(data: dict) -> str:
    out = [
        "## Subagents",
        "",
        "One survey with and without subagents, through the real SDK against the emulator with a fixed "
        "latency a call (summaries too), at most 5 calls in flight; the offline policy is the model, "
        "the report is checked against `os.walk`. Cost as priced for sonnet (the emulator's token "
        "counts, prompt caching included). With the `task` tool the parent measures the tree (the "
        "`parent turns`), cuts it into parts of about the same size (a directory, several small "
        "ones, a big one's subdirectories and its own files: one part a lane for a small tree, up to "
        "two a lane for a big one, one per 1,000 entries) and runs them 4 at once, largest first.",
    ]
    for label, tree in trees_of(data).items():
        out += ["", *render_tree(label, tree)]
    return "\n".join(out)


def render_tree(label: str, tree: dict) -> list[str]:
    command = f"; command: `{tree['command']}`" if tree.get("command") else ""
    out = [
        f"### {label}: {tree['files']:,} files, {tree['latency']:g} s a call, "
        f"{tree['repeat']} round{'s' if tree['repeat'] > 1 else ''}, 1-minute load average at its start "
        f"{tree.get('load_1min') or 0:.2f}{command}",
        "",
        "| run | status | files named right | TODO lines reported | wall s | cost | parent turns | "
        "subagents (their turns) | tool calls | repeated | requests | peak in flight |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, runs in tree["runs"].items():
        r = runs[0]
        walls = [x["wall_s"] for x in runs]
        wall = (
            f"{statistics.median(walls):.0f} ({min(walls):.0f}-{max(walls):.0f})"
            if len(walls) > 1
            else f"{walls[0]:.0f}"
        )
        out.append(
            f"| {name} | {r['status']} | {r['right']:,} of {r['files']:,} | {todo_cell(r)} | {wall} | "
            f"${r['cost_usd']:.2f} | "
            f"{r['turns']} | {r['subagents']} ({r['subagent_turns']:,}) | {r['calls']:,} | {r['repeated']} | "
            f"{r['requests']:,} | {r['peak_concurrent']} |"
        )
    alone, split = tree["runs"]["alone"], tree["runs"]["4 subagents at once"]
    speeds = [a["wall_s"] / s["wall_s"] for a, s in zip(alone, split, strict=False)]
    speed = statistics.median(speeds)
    spread = f" (range {min(speeds):.2f}-{max(speeds):.2f})" if len(speeds) > 1 else ""
    cost = split[0]["cost_usd"] / alone[0]["cost_usd"]
    out += [
        "",
        f"Subagents: {speed:.2f}x less wall time{spread} (target 3x: {'met' if speed >= 3 else 'MISSED'}) "
        f"at {cost:.2f}x the cost (target at most 1x: {'met' if cost <= 1 else 'MISSED'}).",
    ]
    walls = split[0].get("subagent_walls")
    if walls:
        packed = sum(walls) / 4
        out += [
            "",
            f"What bounds it: the subagents' own wall times add up to {sum(walls):.0f} s; packed perfectly "
            f"on 4 lanes that is {packed:.0f} s, the longest took {max(walls):.0f} s, and the parent's "
            f"{split[0]['turns']} turns (measuring, handing out, assembling) come before and after "
            f"({split[0]['wall_s'] - max(packed, max(walls)):.0f} s beyond the subagents' share). The "
            f"subagents made {split[0]['subagent_turns']:,} turns against the lone survey's "
            f"{alone[0]['turns']:,}: each part starts, searches and reports on its own.",
        ]
    lone, parts = alone[0], split[0]
    if "todo_truth" in lone and (lone["todo_cut"] or parts["todo_cut"]):
        out += [
            "",
            f"TODO lines: the lone survey reports {lone['todo_reported']:,} of {lone['todo_truth']:,}"
            + (
                " (its one search of the tree was cut at the grep tool's output limit; its report says so)"
                if lone["todo_cut"]
                else ""
            )
            + f", the subagents {parts['todo_reported']:,}"
            + (
                " (a search was cut)"
                if parts["todo_cut"]
                else " (each part searches only its own, none was cut)"
            )
            + ": the runs' costs are not for the same work.",
        ]
    parent = split[0].get("parent_cost_usd")
    if parent is not None:
        extra = split[0]["cost_usd"] - alone[0]["cost_usd"]
        out += [
            "",
            f"Where the cost goes: the parent (measuring, handing out, assembling) ${parent:.2f}, the "
            f"subagents ${split[0]['cost_usd'] - parent:.2f}; against the lone survey's "
            f"${alone[0]['cost_usd']:.2f} that is {'$' if extra >= 0 else '-$'}{abs(extra):.2f}.",
        ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs of each (default 1)")
    parser.add_argument("--latency", type=float, default=2.0, help="seconds per call (default 2)")
    parser.add_argument(
        "--site-packages",
        action="store_true",
        help="survey a copy of this venv's whole site-packages (the big-tree table's) instead of 8 packages",
    )
    parser.add_argument(
        "--render", action="store_true", help="rewrite the section from bench/results/subagents.json"
    )
    args = parser.parse_args()
    stored = RESULTS / "subagents.json"
    previous = trees_of(json.loads(stored.read_text())) if stored.exists() else {}
    if args.render:
        replace_section("subagents", render({"trees": previous}), f"{COMMAND} (each tree's below)", load=EACH)
        return
    label = SITE if args.site_packages else EIGHT
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.site_packages:
            tree = work / "site-packages"
            shutil.copytree(sysconfig.get_paths()["purelib"], tree, symlinks=True)
        else:
            tree = make_tree(work / "tree")
        result: dict = {
            "repeat": args.repeat,
            "latency": args.latency,
            "files": len(regular_files(tree)),
            "runs": {},
            "load_1min": START_LOAD,
            "command": " ".join(["python bench/subagents.py", *sys.argv[1:]]),
        }
        for k in range(args.repeat):
            for name, tools in (
                ("4 subagents at once", ("read", "glob", "grep", "task")),
                ("alone", ("read", "glob", "grep")),
            ):
                run = asyncio.run(survey(tree, work / f"run-{k}-{len(tools)}", tools, args.latency))
                result["runs"].setdefault(name, []).append(run)
                print(label, name, json.dumps(run), flush=True)
    previous = trees_of(json.loads(stored.read_text())) if stored.exists() else {}  # as it is now
    trees = {**previous, label: result}
    write_result("subagents", {"trees": trees})
    replace_section("subagents", render({"trees": trees}), f"{COMMAND} (each tree's below)", load=EACH)


if __name__ == "__main__":
    main()
