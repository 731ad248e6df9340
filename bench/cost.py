"""Benchmark 3: what one long session costs under each compaction strategy.

One long survey job (the offline policy, served by the emulator over real HTTP to the real SDK)
over a workspace made of several standard-library packages, run once per strategy, side by side:

- ``none``: no compaction at all (the emulator's window is raised so it can finish);
- ``seed 000``: revision 000 of the seed lesson (the Vietnamese lesson with code, "Context Compact")
  as written: its own thresholds (50,000 chars), no ``cache_control`` anywhere, summaries by the
  job's model; ``seed 000 + our caching`` is the same pipeline with our request's cache breakpoints
  (last tool, system prompt, newest message), the ablation that shows what caching alone buys;
- ``seed 001 @ 50k`` and ``seed 001 @ 200k``: revision 001 (the English README, "s08: Context
  Compact") as written, THRESHOLD 50,000 and 200,000 chars, no ``cache_control``, summaries by the
  job's model;
- ``ours``: the client pipeline (snip hysteresis 50 -> 30), token-aware (12,500 tokens), cache-aware
  (a breakpoint after the newest message compaction will not rewrite; micro_compact and
  fit_tool_results go down to half the limit), summaries by the summary model;
- ``server``: the API's server-side compaction (``compact_20260112``);
- ``mask``: observation masking only: every tool result older than the newest three is replaced by
  a placeholder, nothing else.

The seed pipelines are ``bench/seeds_pipeline.py`` (each function as its lesson writes it), driven
from the runner's own ``Session`` by :class:`SeedStrategy`, the way each lesson's agent loop calls
them: the pipeline before every model call, ``compact_history`` after a tool batch that called
``compact``, ``reactive_compact`` on "prompt is too long". Two things sit between a seed and the API,
both here: the request carries ``merge_adjacent(history)``, because both seeds put their snip marker
(a user message) right after a user message, and the API combines consecutive same-role turns
(the emulator, stricter, rejects them); and a summary is our Summarizer's request to the job's model
(the emulator answers it with the deterministic summary), since the lessons do not give their prompt.

Reports billed tokens (input, output, cache writes, cache reads), summary tokens, cost in USD,
turns, completeness (files in the report / files in the workspace) and re-reads (a file read again
after its content was compacted away: information the strategy lost). A strategy that has not
finished after ``MAX_TURNS`` turns is stopped and reported as not finishing.

    python bench/cost.py            # full size; writes bench/results/cost.json and BENCHMARKS.md
    python bench/cost.py --smoke    # one small package, a few seconds, writes nothing
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import re
import shutil
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import load_note, replace_section, write_result  # noqa: E402
from seeds_pipeline import Seed000, Seed001, Summarize  # noqa: E402

from runner.agent.session import Session  # noqa: E402
from runner.compaction.compactor import CompactionState, Compactor  # noqa: E402
from runner.compaction.summarizer import Summarizer  # noqa: E402
from runner.config import Limits  # noqa: E402
from runner.emulator.config import EmulatorConfig  # noqa: E402
from runner.emulator.server import running_emulator  # noqa: E402
from runner.jobs import JobSpec  # noqa: E402
from runner.messages import Message, merge_adjacent  # noqa: E402
from runner.models.anthropic import AnthropicModel  # noqa: E402
from runner.models.base import Reply, Request  # noqa: E402
from runner.models.memory_survey import report_rows  # noqa: E402
from runner.models.policy import reread_count  # noqa: E402
from runner.pricing import cost_usd  # noqa: E402
from runner.rundir.store import JobStore, read_jsonl  # noqa: E402

MODEL = "claude-sonnet-5-5"
SUMMARY_MODEL = "claude-haiku-5-5"
FULL_PACKAGES = ("asyncio", "email", "importlib", "json", "http", "concurrent", "logging", "unittest")
SMOKE_PACKAGES = ("json",)
MAX_TURNS = 600  # about four times what a strategy that finishes needs here


@dataclasses.dataclass(frozen=True)
class Strategy:
    """One row: per-job limits, and for a seed row, the pipeline that replaces our Compactor."""

    limits: dict[str, Any]
    summary_model: str = SUMMARY_MODEL
    seed: Callable[[Path, Summarize], Seed000 | Seed001] | None = None
    cache: bool = True  # False: no cache_control in any request, as the seeds write them
    text: str = ""


SEED_LIMITS = {"cache_aware": False}  # our breakpoint after the settled prefix needs our window
STRATEGIES: dict[str, Strategy] = {
    "none": Strategy({"compaction": "off"}, text="compaction off"),
    "seed 000": Strategy(
        SEED_LIMITS,
        MODEL,
        lambda d, s: Seed000(d, s),
        cache=False,
        text="revision 000 as written: 50,000 chars, no cache_control, summaries on the job's model",
    ),
    "seed 000 + our caching": Strategy(
        SEED_LIMITS,
        MODEL,
        lambda d, s: Seed000(d, s),
        cache=True,
        text="revision 000 as written, with our request's cache breakpoints (last "
        "tool, system prompt, newest message)",
    ),
    "seed 001 @ 50k": Strategy(
        SEED_LIMITS,
        MODEL,
        lambda d, s: Seed001(d, 50_000, s),
        cache=False,
        text="revision 001 as written, THRESHOLD 50,000 chars, no cache_control, summaries "
        "on the job's model",
    ),
    "seed 001 @ 200k": Strategy(
        SEED_LIMITS,
        MODEL,
        lambda d, s: Seed001(d, 200_000, s),
        cache=False,
        text="revision 001 as written, THRESHOLD 200,000 chars, no cache_control, summaries "
        "on the job's model",
    ),
    # token-aware (12,500 tokens: the seeds' 50,000 chars), cache-aware (a breakpoint after the newest
    # settled message; compacting deeper, to half the limit, so the cache is rewritten half as often)
    "ours": Strategy(
        {"context_token_limit": 12_500, "compact_target_ratio": 0.5},
        text="context_token_limit=12500, compact_target_ratio=0.5, summaries on the summary model",
    ),
    "server": Strategy(
        {"compaction": "server", "server_trigger_tokens": 50_000},
        text="compaction=server, server_trigger_tokens=50000",
    ),
    "mask": Strategy({"compaction": "mask"}, text="compaction=mask"),
}
ANCHORS = ("server", "mask", "seed 000", "seed 001 @ 50k", "seed 001 @ 200k")  # what ours must beat 2x


class NoCacheModel:
    """A model whose requests carry no ``cache_control`` at all (the seeds send none)."""

    def __init__(self, inner: AnthropicModel):
        self.inner = inner
        self.name = inner.name
        self.server_compaction = inner.server_compaction

    async def create(self, request: Request) -> Reply:
        return await self.inner.create(dataclasses.replace(request, cache=False))

    async def aclose(self) -> None:
        await self.inner.aclose()


class SeedStrategy:
    """Runs a seed pipeline in place of our Compactor, called where the seed's agent loop calls it.

    The seed keeps its own message list: each call takes the messages the session added since the
    last one (a copy: the seeds rewrite blocks in place), runs the seed's function on the whole list in
    a worker thread (its summaries call back into the event loop for the model), and leaves the
    session's window empty again. Guarantees: the seed's functions run unchanged and in the lesson's
    order; the request is the seed's list with same-role neighbours merged."""

    def __init__(self, make: Callable[[Path, Summarize], Seed000 | Seed001], summarizer: Summarizer):
        self.make = make
        self.summarizer = summarizer
        self.seed: Seed000 | Seed001 | None = None
        self.history: list[Message] = []

    def _take(self, state: CompactionState) -> Seed000 | Seed001:
        if self.seed is None:
            self.seed = self.make(
                state.store.dir, lambda messages: anyio.from_thread.run(self._summarize, state, messages)
            )
        self.history += [copy.deepcopy(e.message) for e in state.window.entries]
        state.window.replace([])
        return self.seed

    async def _summarize(self, state: CompactionState, messages: list[Message]) -> str:
        summary = await self.summarizer.summarize(messages, state.active_request)
        state.record.summarizer_usage.add(summary.usage)
        state.record.count("summary")
        return summary.text

    async def prepare(self, state: CompactionState) -> list[Message]:
        seed = self._take(state)
        self.history = await anyio.to_thread.run_sync(seed.prepare, self.history, state.active_request)
        return merge_adjacent(self.history)

    async def compact(self, state: CompactionState) -> None:
        seed = self._take(state)
        if isinstance(seed, Seed000):
            self.history = await anyio.to_thread.run_sync(
                seed.compact_history, self.history, state.active_request
            )
        else:
            self.history = await anyio.to_thread.run_sync(seed.compact_history, self.history)

    async def reactive(self, state: CompactionState) -> bool:
        seed = self._take(state)
        if isinstance(seed, Seed000):
            self.history = await anyio.to_thread.run_sync(
                seed.reactive_compact, self.history, state.active_request
            )
        else:
            self.history = await anyio.to_thread.run_sync(seed.reactive_compact, self.history)
        return True

    async def record(self, state: CompactionState, reply: Reply) -> None:
        """After a call, as the Compactor does: the token estimate calibrated, what was sent seen."""
        if reply.compacted:  # pragma: no cover - client only
            raise RuntimeError("a seed pipeline never asks for server-side compaction")
        if reply.usage.context_tokens:
            state.calibrate(reply.usage.context_tokens, state.window.total + state.overhead_chars)
        state.window.mark_seen()

    def stuck(self, state: CompactionState) -> str | None:
        return None  # the seeds have no thrash detection: a seed row ends on its own limits


def make_workspace(root: Path, packages: tuple[str, ...]) -> Path:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    workspace = root / "workspace"
    for package in packages:
        shutil.copytree(
            stdlib / package,
            workspace / package,
            ignore=shutil.ignore_patterns("__pycache__", "test", "tests"),
        )
    return workspace


async def run_strategy(
    name: str, strategy: Strategy, workspace: Path, out: Path, base_url: str
) -> dict[str, Any]:
    limits = Limits(**{"max_turns": MAX_TURNS, "timeout_s": 3_600, **strategy.limits})
    spec = JobSpec(
        name=f"survey-{re.sub(r'[^a-z0-9]+', '-', name)}",
        source=Path("bench/cost.py"),
        prompt=(
            "Survey this workspace: every file, lines per extension, largest files, TODO/FIXME lines, "
            "and for each file its top-level definitions and first docstring line."
        ),
        workspace=workspace,
        model=MODEL,
        system="You are a careful code surveyor.",
        tools=("read", "glob", "grep"),
        limits=limits,
    )
    http = AnthropicModel(base_url=base_url, api_key="bench-key", max_retries=2)
    model: Any = http if strategy.cache else NoCacheModel(http)
    summarizer = Summarizer(http, strategy.summary_model, requests_per_minute=10_000)
    compactor: Any = SeedStrategy(strategy.seed, summarizer) if strategy.seed else Compactor(summarizer)
    store = JobStore(out / spec.name)
    await store.open()
    started = time.perf_counter()
    result = await Session(
        spec, model=model, compactor=compactor, store=store, summary_model=strategy.summary_model
    ).run()
    wall = time.perf_counter() - started
    await http.aclose()
    transcript, _ = read_jsonl(store.dir / "transcript.jsonl")
    final = (store.dir / "final.md").read_text() if (store.dir / "final.md").exists() else ""
    usage, summ = result.usage, result.summarizer_usage
    return {
        "strategy": name,
        "status": result.status,
        "error": result.error,
        "turns": result.turns,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
        "cache_read_input_tokens": usage.cache_read_input_tokens,
        "summary_model": strategy.summary_model,
        "summarizer_tokens": summ.input_tokens
        + summ.output_tokens
        + summ.cache_creation_input_tokens
        + summ.cache_read_input_tokens,
        "cost_usd": round(cost_usd(MODEL, usage) + cost_usd(strategy.summary_model, summ), 4),
        "rereads": reread_count(transcript),
        "compactions": result.compactions,
        "files_in_report": len(report_rows(final, store.dir)) if result.status == "succeeded" else 0,
        "files_in_workspace": sum(1 for p in workspace.rglob("*") if p.is_file()),
        "wall_s": round(wall, 1),
    }


async def run_all(packages: tuple[str, ...], strategies: list[str]) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workspace = make_workspace(Path(tmp), packages)
        config = EmulatorConfig(context_window_tokens=5_000_000)
        with running_emulator(config) as emulator:
            for name in strategies:
                emulator.reset()
                row = await run_strategy(
                    name, STRATEGIES[name], workspace, Path(tmp) / "runs", emulator.base_url
                )
                rows.append(row)
                print(
                    f"  {name}: {row['status']}, {row['turns']} turns, ${row['cost_usd']}, "
                    f"{row['files_in_report']}/{row['files_in_workspace']} files, {row['rereads']} re-reads, "
                    f"{row['wall_s']} s",
                    flush=True,
                )
    return rows


def finished(row: dict[str, Any]) -> bool:
    return row["status"] == "succeeded"


def table(rows: list[dict[str, Any]]) -> str:
    ours = next((r for r in rows if r["strategy"] == "ours"), None)
    lines = [
        "| strategy | status | turns | input | output | cache write | cache read | summaries | cost $ "
        "| vs ours | files in report | re-reads |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        ratio = (
            f"{r['cost_usd'] / ours['cost_usd']:.2f}x" if ours and ours["cost_usd"] and finished(r) else "-"
        )  # a run stopped early cost what it cost up to then: no ratio
        status = (
            r["status"]
            if finished(r)
            else (
                f"**did not finish** ({r['status']}: stopped at {r['turns']} turns)"
                if r["status"] == "max_turns"
                else f"**{r['status']}**"
            )
        )
        lines.append(
            f"| {r['strategy']} | {status} | {r['turns']} | {r['input_tokens']:,} | "
            f"{r['output_tokens']:,} | {r['cache_creation_input_tokens']:,} | "
            f"{r['cache_read_input_tokens']:,} | {r['summarizer_tokens']:,} | {r['cost_usd']:.4f} | "
            f"{ratio} | {r['files_in_report']} / {r['files_in_workspace']} | {r['rereads']} |"
        )
    return "\n".join(lines)


def strategies_text(names: list[str]) -> str:
    return "Strategies: " + "; ".join(f"`{name}` = {STRATEGIES[name].text}" for name in names) + "."


def findings(rows: list[dict[str, Any]]) -> str:
    """The targets, checked against the table (computed, never typed in)."""
    by = {r["strategy"]: r for r in rows}
    ours = by["ours"]

    def mark(ok: bool) -> str:
        return "met" if ok else "MISSED"

    parts = []
    for name in ("none", *ANCHORS):
        r = by.get(name)
        if r is None:
            continue
        if not finished(r):
            parts.append(
                f"`{name}` did not finish (excluded from the cost target; it stopped at {r['turns']} "
                f"turns with {r['files_in_report']} of {r['files_in_workspace']} files reported)"
            )
            continue
        ratio = r["cost_usd"] / ours["cost_usd"]
        parts.append(
            f"{ratio:.2f}x cheaper than `{name}` ({mark(ratio >= 2)}"
            + ("" if ratio >= 2 else f", short by {2 - ratio:.2f}x")
            + ")"
        )
    complete = ours["files_in_report"] == ours["files_in_workspace"] and finished(ours)
    fewest = min(r["rereads"] for r in rows if finished(r))
    ablation = by.get("seed 000 + our caching"), by.get("seed 000")
    extra = ""
    if ablation[0] and ablation[1]:
        same = ablation[0]["turns"] == ablation[1]["turns"]
        change = 1 - ablation[0]["cost_usd"] / ablation[1]["cost_usd"]
        extra = (
            f" Caching alone takes revision 000 from ${ablation[1]['cost_usd']:.2f} to "
            f"${ablation[0]['cost_usd']:.2f} ({abs(change):.0%} {'less' if change >= 0 else 'more'}"
            + (f", over the same {ablation[0]['turns']} turns" if same else "")
            + ")"
            + ("" if finished(ablation[0]) else ", and does not make it finish")
            + "."
        )
    return (
        "Targets: ours >= 2x cheaper than no compaction and than every anchor strategy that completes, with "
        "a "
        "complete report and no more re-reads. Measured: ours is " + "; ".join(parts) + ". "
        f"Report: {ours['files_in_report']} of {ours['files_in_workspace']} files ({mark(complete)}). "
        f"Re-reads: ours {ours['rereads']}, fewest of any strategy that finished {fewest} "
        f"({mark(ours['rereads'] <= fewest)})." + extra
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--only", action="append", choices=sorted(STRATEGIES))
    args = parser.parse_args()
    packages = SMOKE_PACKAGES if args.smoke else FULL_PACKAGES
    strategies = args.only or list(STRATEGIES)
    print(load_note(), flush=True)
    rows = anyio.run(run_all, packages, strategies)
    print(table(rows))
    if not args.smoke and not args.only:
        print(findings(rows))
        write_result(
            "cost",
            {
                "packages": packages,
                "model": MODEL,
                "summary_model": SUMMARY_MODEL,
                "max_turns": MAX_TURNS,
                "rows": rows,
            },
        )
        replace_section(
            "cost",
            (
                "## 3. Cost of a long session\n\n"
                f"One survey job over {', '.join(packages)} (copied from the standard library), the offline "
                "policy "
                f"served by the emulator to the real SDK; the job priced as {MODEL}, summaries as the row's "
                "summary "
                "model; cache writes 1.25x input, cache reads 0.1x. A strategy still running after "
                f"{MAX_TURNS} turns "
                "is stopped and reported as not finishing. Files in report: files in the final report / "
                "files in the "
                "workspace. Re-reads: files read again because their content was compacted away. The seed "
                "rows run "
                "`bench/seeds_pipeline.py` (each lesson's functions as written) from the runner's session; "
                "the "
                "offline policy takes each revision's placeholder as a removed result, as a model would.\n\n"
                + strategies_text(strategies)
                + "\n\n"
                + table(rows)
                + "\n\n"
                + findings(rows)
            ),
            "python bench/cost.py",
        )


if __name__ == "__main__":
    main()
