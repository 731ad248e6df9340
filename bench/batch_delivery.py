"""Batch delivery against live, through the real SDK against the emulator's Batches API: cost, tokens,
wall time, calls per batch, and how close a run with a deadline ended to it.

Two workloads, each run live and in ``delivery = "batch"`` (runner/models/batches.py), batch once with
the default 1-hour cache TTL (``[runner] batch_cache_ttl = "1h"``) and once with the 5-minute one:

- the cost table's long session: bench/cost.py's ``ours`` row (one survey job over eight standard-library
  packages, the offline policy as the model, ``context_token_limit=12500, compact_target_ratio=0.5``,
  summaries on the summary model), the same spec and limits;
- a 50-job nightly batch: 50 small surveys (each over three top-level standard-library modules, the
  same limits), all running at once; in batch delivery once without a deadline and once with a
  deadline at ``--deadline-fraction`` of the no-deadline run's wall (0.6 and 0.8), so that the last calls go
  live.

The emulator's turnaround is scaled down so a run takes minutes, not hours (see ``SCALED``): the real
API answers a batch in minutes to 24 h. The emulator's prompt cache runs on the same scaled clock
(``cache_ttl_s``: 5 real minutes are 1 scaled second, so the 2-5 s turnaround stands for 10-25 minutes
and the hour for 12 s): a 5-minute entry expires between two batch turns of a job, a 1-hour one does
not, and live calls come well within it. Wall numbers are for the scaled turnaround; token and cost
numbers depend on it only through which cache entries expire (the policy is deterministic; the
deadline runs' split between batch and live depends on the clock too).

Beside them, the delivery alone, like with like: live against batch with the 5-minute TTL (the same
requests) with the cache clock not scaled (the emulator's own 5 minutes: no entry expires within a
run), so the tokens are equal and the cost exactly the batch discount.

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
from typing import Any, Literal

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

from runner.billing import LONG_TTL_FACTOR  # noqa: E402
from runner.compaction.compactor import Compactor  # noqa: E402
from runner.compaction.summarizer import Summarizer  # noqa: E402
from runner.config import Limits  # noqa: E402
from runner.emulator.config import Batches, EmulatorConfig  # noqa: E402
from runner.emulator.server import EmulatorHandle, running_emulator  # noqa: E402
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
TOKEN_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_creation_1h_input_tokens",
    "cache_read_input_tokens",
)
# the scaled clock: (emulator turnaround min, max), then the batcher's window, first poll and longest poll
# (the defaults of [runner] are batch_window_s 2, batch_poll_s 1, batch_poll_max_s 60), the time kept for a
# call to go live before the deadline (batch_live_s, default 30: longer than the deadline runs' whole
# deadline at this scale, which would send every call live), and the emulator's
# cache TTL, 5 real minutes on this clock (the hour is billing.LONG_TTL_FACTOR = 12 times it)
SCALED = {
    "turnaround_s": 2.0,
    "turnaround_max_s": 5.0,
    "window_s": 0.5,
    "poll_s": 0.25,
    "poll_max_s": 1.0,
    "live_s": 0.5,
    "cache_ttl_s": 1.0,
}
SMOKE_SCALED = {
    "turnaround_s": 0.02,
    "turnaround_max_s": 0.04,
    "window_s": 0.01,
    "poll_s": 0.01,
    "poll_max_s": 0.02,
    "live_s": 0.01,
    "cache_ttl_s": 0.01,
}
UNSCALED_CACHE_TTL_S = 300.0  # the emulator's default: the real 5 minutes, longer than any run's turns
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
    cache_ttl: Literal["1h", "5m"] = "1h",
    cache_ttl_s: float,
    deadline: float | None = None,
) -> dict[str, Any]:
    """One run of ``specs`` (all at once), live or in batch delivery (its breakpoints' TTL
    ``cache_ttl``: ``[runner] batch_cache_ttl``), the emulator's 5-minute TTL ``cache_ttl_s``; what it
    cost, used and took."""
    emu.reconfigure(
        EmulatorConfig(
            context_window_tokens=5_000_000,
            cache_ttl_s=cache_ttl_s,
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
            live_s=clock["live_s"],
            deadline=deadline,
        )
        model = BatchModel(batcher, raw, cache_ttl=cache_ttl)
        summaries = BatchModel(batcher, raw, owns_live=False, cache_ttl=cache_ttl)
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
        "batch_cache_ttl": cache_ttl if batch else None,
        "emulator_cache_ttl_s": cache_ttl_s,
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
        f"{t.get('cache_creation_1h_input_tokens', 0):,} | "
        f"${r['cost_usd']:.4f} | ${r['cost_if_live_usd']:.4f} | {r['wall_s']:.1f} | {r['live_requests']:,} | "
        f"{r['batch_requests']:,} | {r['batches']['created']} | {per_batch} | {spread(r['turnarounds_s'])} | "
        f"{margin} |"
    )


HEADER = [
    "| run | jobs succeeded | turns | tokens in / out / cache write / cache read | of the writes, 1-hour | "
    "cost | same tokens priced live | wall s | live requests | batch requests | batches | requests per "
    "batch: mean (min, max) | turnaround s: mean (min, max) | ended before the deadline by |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
]
FIVE = ", 5-minute cache"  # a batch run with batch_cache_ttl = "5m"
UNSCALED = ", cache unscaled"  # a run with the emulator's cache TTL not scaled (UNSCALED_CACHE_TTL_S)
WORKLOADS = (("Long session", "long"), ("{jobs}-job batch", "nightly"))


def token_diff(a: dict[str, int], b: dict[str, int]) -> str:
    """``b``'s tokens against ``a``'s, the kinds that differ ("" when none does)."""
    return ", ".join(f"{k} {b.get(k, 0) - a.get(k, 0):+,}" for k in TOKEN_KEYS if b.get(k, 0) != a.get(k, 0))


def same_request_checks(data: dict[str, Any]) -> list[str]:
    """The delivery alone, like with like: live against batch with the 5-minute TTL (the same requests),
    the cache clock not scaled: tokens equal, batch cost half of live, reports equal."""
    out = []
    for title, w in WORKLOADS:
        live, batch = data["runs"][f"{w} live{UNSCALED}"], data["runs"][f"{w} batch{FIVE}{UNSCALED}"]
        diff = token_diff(live["tokens"], batch["tokens"])
        same_reports = live["report_sha256"] == batch["report_sha256"]
        ratio = batch["cost_usd"] / live["cost_usd"] if live["cost_usd"] else float("nan")
        out.append(
            f"{title.format(jobs=data['jobs'])}: tokens {'DIFFER (' + diff + ')' if diff else 'equal'}, "
            f"reports {'identical' if same_reports else 'DIFFER'}, batch cost / live cost = {ratio:.4f} "
            "(live against batch with the 5-minute cache: the same requests, the cache clock not scaled); "
            f"{batch['wall_s'] / live['wall_s']:.0f}x the live wall at the scaled turnaround."
        )
    return out


def saving_checks(data: dict[str, Any]) -> list[str]:
    """On the scaled cache clock: live keeps its cache (its tokens as unscaled), and what the 1-hour TTL
    saves against the 5-minute one (tokens written and read, dollars)."""
    out = []
    for title, w in WORKLOADS:
        name = title.format(jobs=data["jobs"])
        runs = data["runs"]
        live, one, five = runs[f"{w} live"], runs[f"{w} batch"], runs[f"{w} batch{FIVE}"]
        unscaled = runs.get(f"{w} live{UNSCALED}")
        if unscaled is not None:
            diff = token_diff(unscaled["tokens"], live["tokens"])
            out.append(
                f"{name}, live with the cache clock scaled: tokens "
                + (
                    f"DIFFER from those with it unscaled ({diff}): some of its calls came more than the "
                    "scaled 5 minutes apart, and its cache expired between them."
                    if diff
                    else "equal to those with it unscaled: its calls come within the scaled 5 minutes, "
                    "so it keeps its cache."
                )
            )
        t1, t5 = one["tokens"], five["tokens"]
        saved = five["cost_usd"] - one["cost_usd"]

        def moved(key: str, t1: dict[str, int] = t1, t5: dict[str, int] = t5) -> str:
            return f"{t5[key]:,} -> {t1[key]:,} ({t1[key] - t5[key]:+,})"

        same_reports = one["report_sha256"] == five["report_sha256"] == live["report_sha256"]
        out.append(
            f"{name}, the 1-hour cache against the 5-minute one (the cache clock scaled): cache writes "
            f"{moved('cache_creation_input_tokens')} tokens, cache reads {moved('cache_read_input_tokens')}, "
            f"uncached input {moved('input_tokens')}, output {moved('output_tokens')}; cost "
            f"${five['cost_usd']:.4f} -> ${one['cost_usd']:.4f}: ${saved:.4f} saved "
            f"({saved / five['cost_usd'] if five['cost_usd'] else 0.0:.0%}); batch cost / live cost "
            f"{one['cost_usd'] / live['cost_usd']:.4f} with the 1-hour cache, "
            f"{five['cost_usd'] / live['cost_usd']:.4f} with the 5-minute one; reports "
            f"{'identical in all three' if same_reports else 'DIFFER'}."
        )
    return out


def deadline_checks(data: dict[str, Any]) -> list[str]:
    out = []
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


def checks(data: dict[str, Any]) -> list[str]:
    """The comparisons a reader wants: like with like, tokens equal, batch cost half of live, reports
    equal; the 1-hour TTL's saving against the 5-minute one; the deadline runs."""
    return same_request_checks(data) + saving_checks(data) + deadline_checks(data)


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
    jobs = data["jobs"]
    names = {
        "long live": "long session, live",
        "long batch": "long session, batch (1-hour cache: the default)",
        f"long batch{FIVE}": "long session, batch, 5-minute cache",
        "nightly live": f"{jobs} jobs, live",
        "nightly batch": f"{jobs} jobs, batch (1-hour cache: the default)",
        f"nightly batch{FIVE}": f"{jobs} jobs, batch, 5-minute cache",
        **{
            deadline_key(f): f"{jobs} jobs, batch, deadline at {f:g} of its wall"
            for f in data["deadline_fractions"]
        },
        f"long live{UNSCALED}": "long session, live",
        f"long batch{FIVE}{UNSCALED}": "long session, batch, 5-minute cache",
        f"nightly live{UNSCALED}": f"{jobs} jobs, live",
        f"nightly batch{FIVE}{UNSCALED}": f"{jobs} jobs, batch, 5-minute cache",
    }
    scaled = [k for k in data["runs"] if not k.endswith(UNSCALED)]
    unscaled = [k for k in data["runs"] if k.endswith(UNSCALED)]
    hour = clock["cache_ttl_s"] * LONG_TTL_FACTOR
    out = [
        "## Batch delivery: half price overnight",
        "",
        f"The cost table's long session (bench/cost.py's `ours` row: one survey of "
        f"{', '.join(data['packages'])}, priced as {MODEL}, summaries as {SUMMARY_MODEL}) and a "
        f"{jobs}-job nightly batch ({jobs} surveys of {MODULES_PER_JOB} top-level "
        'standard-library modules each, the same limits, all at once), live and in `delivery = "batch"`, '
        "through the real SDK against the emulator's Batches API (the offline policy is the model; summaries "
        'go by batch too); batch once with the 1-hour cache TTL (`batch_cache_ttl = "1h"`, the default: '
        'a batch job\'s breakpoints carry `"ttl": "1h"`, its writes priced at 2x input) and once with the '
        '5-minute one (`"5m"`: writes at 1.25x, the same requests as live). Cost: the run\'s cost as the '
        'runner prices it (`prices.batch_discount` 0.5 on what a batch answered); "same tokens priced '
        'live": those tokens at the live price. The emulator adds no latency to a live call here, so a '
        "live wall is the machine's time alone. A job's calls follow each other, so the long session's "
        "batches hold one request each (its turns and summaries: one turnaround per call); the "
        f"{jobs} jobs share each batch.",
        "",
        f"**Clock scaled**: the emulator ends each batch a seeded uniform "
        f"{clock['turnaround_s']:g}-{clock['turnaround_max_s']:g} s after it was created (`[batches] "
        f"turnaround_s = {clock['turnaround_s']:g}, turnaround_max_s = {clock['turnaround_max_s']:g}`; the "
        "real API takes minutes to 24 h, usually within the hour), and the batcher sends a batch "
        f"{clock['window_s']:g} s after its first request and polls after {clock['poll_s']:g} s, doubling up "
        f"to {clock['poll_max_s']:g} s, and a call goes live when a batch would not end "
        f"{clock['live_s']:g} s before the deadline (`batch_window_s`, `batch_poll_s`, `batch_poll_max_s`, "
        "`batch_live_s`; defaults 2, 1, 60, 30). The emulator's prompt cache is on the same clock: 5 real "
        f"minutes are {clock['cache_ttl_s']:g} s (`cache_ttl_s = {clock['cache_ttl_s']:g}`), so a turnaround "
        "stands for "
        f"{clock['turnaround_s'] / clock['cache_ttl_s'] * 5:g}-"
        f"{clock['turnaround_max_s'] / clock['cache_ttl_s'] * 5:g} real minutes and the hour is "
        f"{hour:g} s: a 5-minute entry expires between two batch turns of a job, a 1-hour one lasts "
        "across them (unless a job's summary batch comes between its turns too), and live calls come well "
        "within 5 minutes. Wall numbers are for this scaled clock; tokens and costs depend on it only "
        "through which cache entries expire. One round each: the policy and the emulator decide every "
        "token, so a run has no spread of its own and a rerun is its check "
        f"({data.get('rerun', 'not compared with an earlier run')}; a deadline run's split between batch "
        "and live depends on the clock).",
        "",
        *HEADER,
    ]
    out += [row_line(names[k], data["runs"][k]) for k in scaled]
    out += ["", *[f"- {line}" for line in saving_checks(data) + deadline_checks(data)]]
    out += [
        "",
        "### The delivery alone: the same requests, the cache clock not scaled",
        "",
        "Live against batch with the 5-minute TTL (the same requests) and the emulator's cache TTL its own "
        f"5 minutes ({UNSCALED_CACHE_TTL_S:g} s: no entry expires within a run), the rest as above: "
        "what batch delivery changes besides the cache, like with like.",
        "",
        *HEADER,
    ]
    out += [row_line(names[k], data["runs"][k]) for k in unscaled]
    out += ["", *[f"- {line}" for line in same_request_checks(data)]]
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
    scaled_ttl = clock["cache_ttl_s"]
    with running_emulator(EmulatorConfig()) as emu:

        async def measured(key: str, specs: list[JobSpec], **how: Any) -> None:
            data["runs"][key] = await run(emu, run_dir(work), specs, clock=clock, **how)
            print(row_line(key, data["runs"][key]), flush=True)

        for w, specs in (("long", long_spec), ("nightly", nightly)):  # the cache on the scaled clock
            await measured(f"{w} live", specs, batch=False, cache_ttl_s=scaled_ttl)
            await measured(f"{w} batch", specs, batch=True, cache_ttl="1h", cache_ttl_s=scaled_ttl)
            await measured(f"{w} batch{FIVE}", specs, batch=True, cache_ttl="5m", cache_ttl_s=scaled_ttl)
        for fraction in deadline_fractions:
            deadline = time.time() + fraction * data["runs"]["nightly batch"]["wall_s"]
            await measured(
                deadline_key(fraction), nightly, batch=True, cache_ttl_s=scaled_ttl, deadline=deadline
            )
        for w, specs in (("long", long_spec), ("nightly", nightly)):  # the delivery alone, like with like
            await measured(f"{w} live{UNSCALED}", specs, batch=False, cache_ttl_s=UNSCALED_CACHE_TTL_S)
            await measured(
                f"{w} batch{FIVE}{UNSCALED}",
                specs,
                batch=True,
                cache_ttl="5m",
                cache_ttl_s=UNSCALED_CACHE_TTL_S,
            )
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
