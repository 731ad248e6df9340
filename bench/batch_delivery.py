"""Batch delivery against live, through the real SDK against the emulator's Batches API: cost, tokens,
wall time, calls per batch, and how close a run with a deadline ended to it.

Two workloads, each run live and in ``delivery = "batch"`` (runner/models/batches.py):

- the cost table's long session: bench/cost.py's ``ours`` row (one survey job over eight standard-library
  packages, the offline policy as the model, ``context_token_limit=12500, compact_target_ratio=0.5``,
  summaries on the summary model), the same spec and limits;
- a 50-job nightly batch: 50 small surveys (each over three top-level standard-library modules, the
  same limits), all running at once; in batch delivery once without a deadline and once with a
  deadline at ``--deadline-fraction`` of the no-deadline run's wall (0.6 and 0.8), so that the last calls go
  live.

The emulator's turnaround is scaled down so a run takes minutes, not hours (see ``SCALED``): the real
API answers a batch in minutes to 24 h. Wall numbers are for the scaled turnaround; cost and token
numbers do not depend on it (the policy is deterministic; the deadline run's split between batch and
live does depend on the clock).

    python bench/batch_delivery.py [--deadline-fraction 0.6 --deadline-fraction 0.8] [--render]
    python bench/batch_delivery.py --smoke     # one small package and 5 jobs, seconds, writes nothing
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import shutil
import statistics
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import common  # noqa: E402
from common import RESULTS, load_note, replace_section, write_result  # noqa: E402
from cost import (  # noqa: E402
    FULL_PACKAGES,
    MAX_TURNS,
    MODEL,
    SMOKE_PACKAGES,
    STRATEGIES,
    SUMMARY_MODEL,
    make_workspace,  # noqa: E402
)

from runner.compaction.compactor import Compactor  # noqa: E402
from runner.compaction.summarizer import Summarizer  # noqa: E402
from runner.config import Limits  # noqa: E402
from runner.emulator import EmulatorConfig, running_emulator  # noqa: E402
from runner.emulator.config import Batches  # noqa: E402
from runner.emulator.server import EmulatorHandle  # noqa: E402
from runner.execution.scheduler import Batch, run_batch  # noqa: E402
from runner.jobs import JobSpec  # noqa: E402
from runner.models.anthropic import AnthropicModel  # noqa: E402
from runner.models.base import Model  # noqa: E402
from runner.models.batches import Batcher, BatchModel  # noqa: E402
from runner.pricing import PriceTable  # noqa: E402

COMMAND = "python bench/batch_delivery.py"
JOBS, SMOKE_JOBS = 50, 5
DEADLINE_FRACTIONS = (0.6, 0.8)
MODULES_PER_JOB = 3
TOKEN_KEYS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
# the scaled clock: (emulator turnaround min, max), then the batcher's window, first poll and longest poll
# (the defaults of [runner] are batch_window_s 2, batch_poll_s 1, batch_poll_max_s 60)
SCALED = {"turnaround_s": 2.0, "turnaround_max_s": 5.0, "window_s": 0.5, "poll_s": 0.25, "poll_max_s": 1.0}
SMOKE_SCALED = {
    "turnaround_s": 0.1,
    "turnaround_max_s": 0.2,
    "window_s": 0.05,
    "poll_s": 0.05,
    "poll_max_s": 0.1,
}
PROMPT = (
    "Survey this workspace: every file, lines per extension, largest files, TODO/FIXME lines, "
    "and for each file its top-level definitions and first docstring line."
)  # bench/cost.py's


def spec(name: str, workspace: Path) -> JobSpec:
    """bench/cost.py's ``ours`` job: its prompt, system prompt, tools and limits."""
    limits = Limits(**{"max_turns": MAX_TURNS, "timeout_s": 3_600, **STRATEGIES["ours"].limits})
    return JobSpec(
        name=name,
        source=Path("bench/batch_delivery.py"),
        prompt=PROMPT,
        workspace=workspace,
        model=MODEL,
        system="You are a careful code surveyor.",
        tools=("read", "glob", "grep"),
        limits=limits,
    )


def small_workspaces(root: Path, jobs: int) -> list[Path]:
    """``jobs`` workspaces of ``MODULES_PER_JOB`` top-level standard-library modules each (in name order)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    modules = sorted(p for p in stdlib.glob("*.py") if not p.name.startswith("_"))[: jobs * MODULES_PER_JOB]
    if len(modules) < jobs * MODULES_PER_JOB:
        raise SystemExit(f"{stdlib} has {len(modules)} top-level modules, {jobs * MODULES_PER_JOB} needed")
    spaces = []
    for i in range(jobs):
        space = root / f"ws{i:02d}"
        space.mkdir(parents=True)
        for module in modules[i * MODULES_PER_JOB : (i + 1) * MODULES_PER_JOB]:
            (space / module.name).write_bytes(module.read_bytes())
        spaces.append(space)
    return spaces


async def run(
    emu: EmulatorHandle,
    run_dir: Path,
    specs: list[JobSpec],
    *,
    batch: bool,
    clock: dict[str, float],
    deadline: float | None = None,
) -> dict[str, Any]:
    """One run of ``specs`` (all at once), live or in batch delivery; what it cost, used and took."""
    emu.reconfigure(
        EmulatorConfig(
            context_window_tokens=5_000_000,
            batches=Batches(turnaround_s=clock["turnaround_s"], turnaround_max_s=clock["turnaround_max_s"]),
        )
    )
    raw = AnthropicModel(base_url=emu.base_url, api_key="bench-key", max_retries=4)
    model: Model = raw
    summaries: Model = raw
    if batch:
        batcher = Batcher(
            raw,
            window_s=clock["window_s"],
            poll_s=clock["poll_s"],
            poll_max_s=clock["poll_max_s"],
            deadline=deadline,
        )
        model = BatchModel(batcher, raw)
        summaries = BatchModel(batcher, raw, part="batch_summarizer_usage", owns_live=False)
    job_batch = Batch(
        run_dir=run_dir,
        specs=specs,
        model=model,
        compactor=Compactor(Summarizer(summaries, SUMMARY_MODEL, requests_per_minute=10_000)),
        summary_model=SUMMARY_MODEL,
        concurrency=len(specs),
        handle_signals=False,
    )
    started, started_at = time.monotonic(), time.time()
    try:
        result = await run_batch(job_batch)
    finally:
        await model.aclose()
    ended_at = time.time()
    wall = time.monotonic() - started
    stats = emu.stats()
    batches = list(emu.state.batches.values())
    records = result.results.values()
    prices = PriceTable()
    totals = json.loads((run_dir / "run.json").read_text())["totals"]
    row: dict[str, Any] = {
        "delivery": "batch" if batch else "live",
        "jobs": len(specs),
        "succeeded": sum(r.status == "succeeded" for r in records),
        "turns": sum(r.turns for r in records),
        "wall_s": round(wall, 1),
        "cost_usd": round(totals["cost_usd"], 6),
        # the same tokens priced live: what the run would have cost without the batch discount
        "cost_if_live_usd": round(
            sum(
                prices.cost(MODEL, r.usage) + prices.cost(SUMMARY_MODEL, r.summarizer_usage) for r in records
            ),
            6,
        ),
        "tokens": {k: sum(r.usage_total(k) for r in records) for k in TOKEN_KEYS},
        "live_requests": stats["requests"],
        "summary_requests": stats["summary_requests"],
        "batch_requests": stats["batch_requests"],
        "batch_calls": sum(r.batch_calls for r in records),
        "batches": stats["batches"],
        "batch_outcomes": stats["batch_outcomes"],
        "requests_per_batch": [len(b.requests) for b in batches],
        "turnarounds_s": [
            round((b.ended_at - b.created_at).total_seconds(), 2) for b in batches if b.ended_at
        ],
        "report_sha256": {r.job: report_digest(run_dir / r.job) for r in records},
    }
    if deadline is not None:
        last_batch_end = max((b.ended_at.timestamp() for b in batches if b.ended_at), default=started_at)
        row.update(
            deadline_s=round(deadline - started_at, 1),
            margin_s=round(deadline - ended_at, 1),
            last_batch_margin_s=round(deadline - last_batch_end, 1),
        )
    return row


def report_digest(job_dir: Path) -> str:
    """The final report's sha256 (empty when there is none): two runs' reports compared, not stored."""
    report = job_dir / "final.md"
    return hashlib.sha256(report.read_bytes()).hexdigest() if report.exists() else ""


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.mean(values):.1f} (min {min(values):g}, max {max(values):g})"


def row_line(name: str, r: dict[str, Any]) -> str:
    t = r["tokens"]
    per_batch = spread(r["requests_per_batch"])
    margin = (
        f"{r['margin_s']:+.1f} s (deadline {r['deadline_s']:g} s after the start; last batch ended "
        f"{r['last_batch_margin_s']:+.1f} s before it)"
        if "margin_s" in r
        else "-"
    )
    return (
        f"| {name} | {r['succeeded']}/{r['jobs']} | {r['turns']:,} | {t['input_tokens']:,} / "
        f"{t['output_tokens']:,} / {t['cache_creation_input_tokens']:,} / {t['cache_read_input_tokens']:,} | "
        f"${r['cost_usd']:.4f} | ${r['cost_if_live_usd']:.4f} | {r['wall_s']:.1f} | {r['live_requests']:,} | "
        f"{r['batch_requests']:,} | {r['batches']['created']} | {per_batch} | {spread(r['turnarounds_s'])} | "
        f"{margin} |"
    )


HEADER = [
    "| run | jobs succeeded | turns | tokens in / out / cache write / cache read | cost | same tokens "
    "priced live | wall s | live requests | batch requests | batches | requests per batch: mean (min, "
    "max) | turnaround s: mean (min, max) | ended before the deadline by |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
]


def checks(data: dict[str, Any]) -> list[str]:
    """The comparisons a reader wants: tokens equal, batch cost half of live, reports equal."""
    out = []
    for title, live_key, batch_key in (
        ("Long session", "long live", "long batch"),
        (f"{data['jobs']}-job batch", "nightly live", "nightly batch"),
    ):
        live, batch = data["runs"][live_key], data["runs"][batch_key]
        same_tokens = live["tokens"] == batch["tokens"]
        same_reports = live["report_sha256"] == batch["report_sha256"]
        ratio = batch["cost_usd"] / live["cost_usd"] if live["cost_usd"] else float("nan")
        diff = (
            ""
            if same_tokens
            else " ("
            + ", ".join(
                f"{k} {batch['tokens'][k] - live['tokens'][k]:+,}"
                for k in TOKEN_KEYS
                if batch["tokens"][k] != live["tokens"][k]
            )
            + ")"
        )
        out.append(
            f"{title}: tokens {'equal' if same_tokens else 'DIFFER' + diff}, reports "
            f"{'identical' if same_reports else 'DIFFER'}, batch cost / live cost = {ratio:.4f}; "
            f"{batch['wall_s'] / live['wall_s']:.0f}x the live wall at the scaled turnaround."
        )
    for fraction in data["deadline_fractions"]:
        d = data["runs"][deadline_key(fraction)]
        saved = 1 - d["cost_usd"] / d["cost_if_live_usd"] if d["cost_if_live_usd"] else 0.0
        out.append(
            f"{data['jobs']}-job batch with a deadline {d['deadline_s']:g} s after the start ({fraction:g} "
            "of the "
            f"no-deadline batch run's wall): {d['succeeded']}/{d['jobs']} succeeded, {d['batch_calls']:,} "
            f"calls answered by batches and {d['live_requests']:,} live requests, "
            f"{d['batches']['canceled']} batch(es) cancelled at the deadline; the last batch ended "
            f"{d['last_batch_margin_s']:.1f} s before the deadline and the run {abs(d['margin_s']):.1f} s "
            f"{'before' if d['margin_s'] >= 0 else 'AFTER'} it, paying {saved:.0%} less than the same "
            "tokens live."
        )
        if d["margin_s"] < 0:
            out.append(
                f"What bounds it: the batcher sends a call live once the window and the expected turnaround "
                f"(the last batch's) would pass the deadline, so its batches end before it (here "
                f"{d['last_batch_margin_s']:.1f} s before); it does not count the turns a job has left "
                f"at the live speed: the jobs' last turns ({d['live_requests']:,} calls went live) ended the "
                f"run {d['last_batch_margin_s'] - d['margin_s']:.1f} s after its last batch, "
                f"{-d['margin_s']:.1f} s late."
            )
    return out


def rerun_note(data: dict[str, Any]) -> str:
    """This run's tokens and costs against the previous saved run's, for every run without a deadline
    (read before this run's results replace it)."""
    try:
        old = json.loads((RESULTS / "batch_delivery.json").read_text())
    except (OSError, ValueError):
        return "no earlier saved run to compare with"
    keys = ("turns", "tokens", "cost_usd", "cost_if_live_usd", "succeeded")
    names = [k for k in data["runs"] if "deadline" not in k and k in old.get("runs", {})]
    differ = [k for k in names if any(data["runs"][k].get(f) != old["runs"][k].get(f) for f in keys)]
    when = f"{old.get('date')}, code at {old.get('commit', 'not recorded')}"
    if not differ:
        return f"against the previous saved run ({when}): the same tokens and costs in all {len(names)}"
    return f"against the previous saved run ({when}): {', '.join(differ)} differ, of {len(names)}"


def render(data: dict[str, Any]) -> str:
    clock = data["clock"]
    names = {
        "long live": "long session, live",
        "long batch": "long session, batch",
        "nightly live": "50 jobs, live",
        "nightly batch": "50 jobs, batch",
        **{
            deadline_key(f): f"50 jobs, batch, deadline at {f:g} of its wall"
            for f in data["deadline_fractions"]
        },
    }
    out = [
        "## Batch delivery: half price overnight",
        "",
        f"The cost table's long session (bench/cost.py's `ours` row: one survey of "
        f"{', '.join(data['packages'])}, priced as {MODEL}, summaries as {SUMMARY_MODEL}) and a "
        f"{data['jobs']}-job nightly batch ({data['jobs']} surveys of {MODULES_PER_JOB} top-level "
        'standard-library modules each, the same limits, all at once), live and in `delivery = "batch"`, '
        "through the real SDK against the emulator's Batches API (the offline policy is the model; summaries "
        "go by batch too). Cost: the run's cost as the runner prices it (`prices.batch_discount` 0.5 on what "
        "a batch answered; cache writes at the 5-minute rate in both: the requests carry `cache_control` "
        "with "
        'no `ttl`); "same tokens priced live": those tokens at the live price. The emulator adds no latency '
        "to a live call here, so a live wall is the machine's time alone. A job's calls follow each other, "
        "so "
        "the long session's batches hold one request each (its turns and summaries: one turnaround per "
        "call); "
        "the 50 jobs share each batch.",
        "",
        f"**Turnaround scaled**: the emulator ends each batch a seeded uniform "
        f"{clock['turnaround_s']:g}-{clock['turnaround_max_s']:g} s after it was created (`[batches] "
        f"turnaround_s = {clock['turnaround_s']:g}, turnaround_max_s = {clock['turnaround_max_s']:g}`; the "
        "real API takes minutes to 24 h, usually within the hour), and the batcher sends a batch "
        f"{clock['window_s']:g} s after its first request and polls after {clock['poll_s']:g} s, doubling up "
        f"to {clock['poll_max_s']:g} s (`batch_window_s`, `batch_poll_s`, `batch_poll_max_s`; defaults 2, 1, "
        "60). Wall numbers are for this scaled clock; cost and token numbers do not depend on it. One round "
        "each: the policy and the emulator decide every token, so a run has no spread of its own and a "
        f"rerun is its check ({data.get('rerun', 'not compared with an earlier run')}; a deadline run's "
        "split between batch and live depends on the clock).",
        "",
        *HEADER,
    ]
    out += [row_line(names[k], r) for k, r in data["runs"].items()]
    out += ["", *[f"- {line}" for line in checks(data)]]
    return "\n".join(out)


def run_dir(work: Path) -> Path:
    """A fresh run directory ``<a new temporary directory>/runs``, its path as long as every other's and
    as bench/cost.py's (the job's persisted results name it: a longer path would be more tokens); the
    temporary directory is linked from ``work`` so that it goes with it."""
    fresh = Path(tempfile.mkdtemp())
    (work / "runs").mkdir(exist_ok=True)
    (work / "runs" / fresh.name).symlink_to(fresh)
    return fresh / "runs"


def deadline_key(fraction: float) -> str:
    return f"nightly batch, deadline {fraction:g}"


async def measure(work: Path, *, smoke: bool, deadline_fractions: list[float]) -> dict[str, Any]:
    packages = SMOKE_PACKAGES if smoke else FULL_PACKAGES
    jobs = SMOKE_JOBS if smoke else JOBS
    clock = SMOKE_SCALED if smoke else SCALED
    long_spec = [spec("survey-ours", make_workspace(work, packages))]  # bench/cost.py's name
    nightly = [spec(f"night-{i:02d}", ws) for i, ws in enumerate(small_workspaces(work / "small", jobs))]
    data: dict[str, Any] = {
        "packages": list(packages),
        "jobs": jobs,
        "clock": clock,
        "deadline_fractions": deadline_fractions,
        "runs": {},
    }
    with running_emulator(EmulatorConfig()) as emu:
        for key, specs, batch in (
            ("long live", long_spec, False),
            ("long batch", long_spec, True),
            ("nightly live", nightly, False),
            ("nightly batch", nightly, True),
        ):
            data["runs"][key] = await run(emu, run_dir(work), specs, batch=batch, clock=clock)
            print(row_line(key, data["runs"][key]), flush=True)
        for fraction in deadline_fractions:
            deadline = time.time() + fraction * data["runs"]["nightly batch"]["wall_s"]
            key = deadline_key(fraction)
            data["runs"][key] = await run(
                emu, run_dir(work), nightly, batch=True, clock=clock, deadline=deadline
            )
            print(row_line(key, data["runs"][key]), flush=True)
    return data


def command_of(fractions: list[float]) -> str:
    return COMMAND + "".join(f" --deadline-fraction {f:g}" for f in fractions)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="small and fast; writes nothing")
    parser.add_argument(
        "--deadline-fraction",
        type=float,
        action="append",
        help="a deadline run's deadline as a fraction of the no-deadline batch run's wall "
        f"(repeatable; default {' and '.join(map(str, DEADLINE_FRACTIONS))})",
    )
    parser.add_argument(
        "--render", action="store_true", help="rewrite the section from bench/results/batch_delivery.json"
    )
    args = parser.parse_args()
    fractions = args.deadline_fraction or list(DEADLINE_FRACTIONS)[: 1 if args.smoke else None]
    if args.render:
        data = json.loads((RESULTS / "batch_delivery.json").read_text())
        common.measured_at(data)  # the load and code of those runs, not of now
        replace_section("batch_delivery", render(data), command_of(data["deadline_fractions"]))
        return
    print(load_note(), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            data = asyncio.run(measure(Path(tmp), smoke=args.smoke, deadline_fractions=fractions))
        finally:
            for link in (Path(tmp) / "runs").glob("*"):
                shutil.rmtree(link.resolve(), ignore_errors=True)
    print("\n".join(checks(data)))
    if not args.smoke:
        data["rerun"] = rerun_note(data)
        print(data["rerun"])
        write_result("batch_delivery", data)
        replace_section("batch_delivery", render(data), command_of(fractions))


if __name__ == "__main__":
    main()
