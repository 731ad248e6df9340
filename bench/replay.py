"""The replay table: every strategy, ours and the peers', on real recorded agent histories, judged by
one rule (``runner replay``: :mod:`runner.replay`).

The seven histories of ``shared/trajectories/`` (mini-swe-agent with Gemini 3 Pro on SWE-bench Verified)
go through each contestant open loop at 16k, 32k and 64k tokens: before every recorded assistant
message the contestant prepares the request, the request is priced as the API bills it (4 characters a
token, the runner's cache breakpoints, a 5-minute TTL that never expires between calls), then the
recorded message and results are appended whatever the view was. Every row has the same window, the
same job model (``claude-sonnet-5-5``) and the same summarizer: the runner's deterministic fallback
summary, billed as a call of ``claude-haiku-5-5`` (input: the summary request the strategy builds;
output: the summary).

Contestants (each at its defaults, at the window):
- ``ours``: the runner's default pipeline (``client``) with every limit at its default, the window as
  ``context_token_limit`` (and ``context_char_limit`` at 4 characters a token); ``mask`` and ``off``:
  the runner's other strategies, the same way;
- ``seed 000`` and ``seed 001``: the seeds' pipelines as written (``bench/seeds_pipeline.py``), their
  char limits set to the window (4 characters a token), summaries as above;
- inspect_ai's ``CompactionEdit``, ``CompactionTrim`` and ``CompactionSummary`` (``bench/replay_inspect.py``,
  run by ``RUNNER_PEER_PYTHON``), OpenHands' ``LLMSummarizingCondenser`` and observation masking
  (``bench/replay_openhands.py``, run by ``RUNNER_OPENHANDS_PYTHON``). A peer whose interpreter is not
  given keeps its saved rows.
- ``server``: the API's ``compact_20260112`` as the emulator serves it (:mod:`runner.emulator.compaction`:
  over the trigger, the server summarizes the whole request and answers from the summary and the last
  exchange; later requests are read from the compaction block on), with the runner's ``server`` strategy
  in front (an oversized new batch of results saved). Its trigger is at least 50,000 tokens, so it has a
  row at 64k only (trigger 50,000); the server's summary is the same deterministic one, billed as a
  summary call.
- ``clear``: the API's context editing ``clear_tool_uses_20250919`` as the emulator serves it (the same
  function, :mod:`runner.compaction.clearing`: over the trigger, every tool result but the newest 3 is
  replaced by a placeholder), with the runner's ``clear`` strategy in front; its trigger at 80% of the
  window (the API's default, 100,000 tokens, is over every window here), its other settings the API's.

    python bench/replay.py [--smoke | --files FILE...] [--only NAME ...] [--windows N ...] [--render]

``--files`` replays those histories instead (any history of the shared format), prints the table and
writes nothing, as ``--smoke`` does; a file that is not a history stops it before any row (its file
and line on stderr, exit 2).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, START_LOAD, load_note, measured_at, replace_section, write_result  # noqa: E402
from replay_rows import MODEL, SUMMARY_MODEL, WINDOWS, Factory, histories, row  # noqa: E402
from seeds_pipeline import Seed000, Seed001  # noqa: E402

from runner.billing import estimate, input_tokens  # noqa: E402
from runner.compaction.fallback import fallback_summary  # noqa: E402
from runner.config import Limits  # noqa: E402
from runner.emulator.compaction import SERVER_SUMMARY_CHARS, effective_view, summary_input  # noqa: E402
from runner.messages import Message  # noqa: E402
from runner.pricing import Usage  # noqa: E402
from runner.replay import Contestant, compactor_contestant, window_limits  # noqa: E402
from runner.replay.facts import result_texts, said_texts  # noqa: E402

HERE = Path(__file__).resolve().parent
SECTION = "replay"
OURS = "ours"
PEER_SCRIPTS = {"RUNNER_PEER_PYTHON": "replay_inspect.py", "RUNNER_OPENHANDS_PYTHON": "replay_openhands.py"}
RUNNER_ROWS = (OURS, "mask", "off", "server", "clear")  # the runner's own strategies; the rest: peers'
CLEAR_TRIGGER_SHARE = 0.8  # clear's trigger: this share of the window (the runner's compact_target_ratio)
SUMMARY_SHARE = 0.2  # a summary's share of the window, for every row (ours' summary_share default)
PATH = re.compile(r"[\w.-]+(?:/[\w.-]+)+")


def runner_factory(strategy: str) -> Factory:
    def factory(window: int) -> tuple[str, Any]:
        limits = window_limits(Limits(), window, strategy)
        what = (
            "the runner's default pipeline, every limit at its default"
            if strategy == "client"
            else (f"the runner's {strategy} strategy, every other limit at its default")
        )
        return what, lambda job_dir: compactor_contestant(
            strategy, limits, job_dir, summary_model=SUMMARY_MODEL
        )

    return factory


class SeedContestant:
    """A seed's pipeline as its lesson's loop runs it: ``messages = prepare(messages)`` before each call,
    the recorded messages appended to what it kept. Its pointers are the files it wrote (saved outputs,
    transcripts) named in the view."""

    def __init__(self, name: str, seed: Seed000 | Seed001, workdir: Path, summary_chars: int):
        self.name = name
        self.tools: list[dict[str, Any]] = []
        self.seed = seed
        self.workdir = workdir
        self.kept: list[Message] = []
        self.added = 0
        self.active = ""
        self.summary_usage = Usage()
        self.summaries = 0
        self.compactions: Counter[str] = Counter()
        self.summary_chars = summary_chars
        seed.summarize_history = self._summarize

    def _summarize(self, messages: list[Message]) -> str:
        text = fallback_summary(messages, self.summary_chars)
        self.summaries += 1
        self.compactions["summary"] += 1
        self.summary_usage.add(
            Usage(input_tokens=input_tokens(None, messages, []), output_tokens=estimate(text))
        )
        return text

    async def start(self, system: str, tools: list[dict[str, Any]]) -> None:
        pass

    async def prepare(self, history: list[Message]) -> list[Message]:
        if not self.active and history:
            self.active = "\n".join(said_texts(history[0]))
        self.kept += copy.deepcopy(history[self.added :])  # the seeds rewrite blocks in place
        self.added = len(history)
        self.kept = list(self.seed.prepare(self.kept, self.active))
        return self.kept

    def cache_points(self) -> tuple[int, ...]:
        return ()

    async def record(self, usage: Usage) -> None:
        pass

    async def reactive(self) -> bool:
        before = len(self.kept)
        if isinstance(self.seed, Seed000):
            self.kept = self.seed.reactive_compact(self.kept, self.active)
        else:
            self.kept = self.seed.reactive_compact(self.kept)
        return len(self.kept) < before

    def targets(self, view: list[Message]) -> dict[str, str]:
        found: dict[str, str] = {}
        for message in view:
            for text in said_texts(message) + result_texts(message):
                for rel in PATH.findall(text):
                    path = self.workdir / rel
                    if rel not in found and path.is_file():
                        found[rel] = path.read_text(encoding="utf-8", errors="replace")
        return found


def seed_factory(which: str) -> Factory:
    def factory(window: int) -> tuple[str, Any]:
        chars = window * 4
        summary = int(chars * SUMMARY_SHARE)

        def make(job_dir: Path) -> Contestant:
            job_dir.mkdir(parents=True, exist_ok=True)
            if which == "000":
                seed: Seed000 | Seed001 = Seed000(job_dir)
                seed.CONTEXT_CHAR_LIMIT = chars  # type: ignore[misc]
            else:
                seed = Seed001(job_dir, chars)
            return SeedContestant(f"seed {which}", seed, job_dir, summary)

        return f"the seed {which} pipeline as written, its char limit at the window", make

    return factory


SERVER_MIN_TRIGGER = 50_000  # the API's minimum for compact_20260112


class ServerContestant:
    """The runner's ``server`` strategy in front of the emulator's server-side compaction: the client
    keeps its window (the first user message and the reply that compacted, then what came after), the
    server reads it from the last compaction block on and compacts a request over its trigger."""

    def __init__(self, inner: Contestant, trigger: int):
        self.inner = inner
        self.name = "server"
        self.tools = inner.tools
        self.trigger = trigger
        self.summary_usage = Usage()
        self.summaries = 0
        self.compactions: Counter[str] = Counter()
        self.block: dict[str, Any] | None = None  # the newest compaction block
        self.since = 0  # the history's length when it was made
        self.overhead = 0
        self.system = ""
        self.tool_defs: list[dict[str, Any]] = []

    async def start(self, system: str, tools: list[dict[str, Any]]) -> None:
        self.system, self.tool_defs = system, tools
        await self.inner.start(system, tools)

    async def prepare(self, history: list[Message]) -> list[Message]:
        window = await self.inner.prepare(history)  # the runner's server strategy: results budgeted
        if self.block is not None:  # what the API reads: from the compaction block on
            window = effective_view([{"role": "assistant", "content": [self.block]}, *window[self.since :]])
        total = input_tokens(self.system, window, self.tool_defs)
        if total <= self.trigger:
            return window
        summary = fallback_summary(summary_input(window), SERVER_SUMMARY_CHARS)
        self.block = {"type": "compaction", "content": summary}
        self.since = len(history)
        self.summaries += 1
        self.compactions["server_compaction"] += 1
        self.summary_usage.add(Usage(input_tokens=total, output_tokens=estimate(summary)))
        return effective_view([{"role": "assistant", "content": [self.block]}, *window[-2:]])

    def cache_points(self) -> tuple[int, ...]:
        return ()

    async def record(self, usage: Usage) -> None:
        await self.inner.record(usage)

    async def reactive(self) -> bool:
        return False

    def targets(self, view: list[Message]) -> dict[str, str]:
        return self.inner.targets(view)


def server_factory(window: int) -> tuple[str, Any]:
    trigger = SERVER_MIN_TRIGGER
    limits = window_limits(Limits(server_trigger_tokens=trigger), window, "server")
    return (
        f"compact_20260112 at its minimum trigger ({trigger:,} tokens) as the emulator serves it, "
        "the runner's server strategy in front",
        lambda job_dir: ServerContestant(
            compactor_contestant("server", limits, job_dir, summary_model=SUMMARY_MODEL), trigger
        ),
    )


def clear_factory(window: int) -> tuple[str, Any]:
    trigger = int(window * CLEAR_TRIGGER_SHARE)
    limits = window_limits(Limits(clear_trigger_value=trigger), window, "clear")
    return (
        "clear_tool_uses_20250919 as the emulator serves it (runner.compaction.clearing), its trigger "
        f"at {CLEAR_TRIGGER_SHARE:.0%} of the window ({trigger:,} tokens), its other settings the API's "
        "defaults (keep 3 tool uses), the runner's clear strategy in front",
        lambda job_dir: compactor_contestant("clear", limits, job_dir, summary_model=SUMMARY_MODEL),
    )


CONTESTANTS: dict[str, Factory] = {
    OURS: runner_factory("client"),
    "mask": runner_factory("mask"),
    "off": runner_factory("off"),
    "seed 000": seed_factory("000"),
    "seed 001": seed_factory("001"),
    "server": server_factory,
    "clear": clear_factory,
}
# a contestant that cannot keep a request inside a window is not run there, saying why
NOT_AT: dict[str, tuple[Callable[[int], bool], str]] = {
    "server": (lambda window: window < SERVER_MIN_TRIGGER, "its trigger is at least 50,000 tokens"),
}


def peer_rows(
    windows: list[int], smoke: bool, files: list[Path] | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """The peers' rows, each script run by its own interpreter; the notes say which were skipped."""
    rows, notes = [], []
    for variable, script in PEER_SCRIPTS.items():
        python = os.environ.get(variable)
        if not python:
            notes.append(f"{script}: skipped, {variable} is not set (its saved rows are kept)")
            continue
        with tempfile.TemporaryDirectory() as scratch:
            out = Path(scratch) / "rows.json"
            command = [python, str(HERE / script), "--out", str(out), "--windows", *map(str, windows)]
            chosen = ["--files", *map(str, files)] if files else (["--smoke"] if smoke else [])
            done = subprocess.run([*command, *chosen], check=False)
            if done.returncode != 0 or not out.exists():
                notes.append(f"{script}: failed (exit {done.returncode}); its saved rows are kept")
                continue
            rows += json.loads(out.read_text())["rows"]
    return rows, notes


def share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def lost_share(row: dict[str, Any]) -> float:
    t = row["totals"]
    return t["lost"] / t["needed"] if t["needed"] else 0.0


def verdicts(rows: list[dict[str, Any]], window: int) -> list[str]:
    """The issue's three goals at one window, each met or missed by how much."""
    at = [r for r in rows if r["window"] == window]
    ours = next((r for r in at if r["contestant"] == OURS), None)
    if ours is None:
        return []
    cost, lost = ours["totals"]["effective_cost_usd"], lost_share(ours)
    out = []
    better = [
        r["contestant"]
        for r in at
        if r is not ours and r["totals"]["effective_cost_usd"] < cost and lost_share(r) < lost
    ]
    out.append(
        "no strategy has both a lower effective cost and a smaller lost share: "
        + ("met" if not better else f"**missed**: {', '.join(better)}")
    )
    out.append(
        f"ours loses at most 1% of needed facts: {'met' if lost <= 0.01 else '**missed**'} "
        f"({100 * lost:.2f}%)"
    )
    peers = [r for r in at if r["contestant"] not in RUNNER_ROWS and lost_share(r) <= lost]
    if peers:
        cheapest = min(peers, key=lambda r: r["totals"]["effective_cost_usd"])
        theirs = cheapest["totals"]["effective_cost_usd"]
        ratio = theirs / cost if cost else (1.0 if not theirs else float("inf"))  # both free: as cheap
        out.append(
            f"ours at least 1.5x cheaper (effective) than the cheapest peer losing no more "
            f"({cheapest['contestant']}, ${theirs:.2f}): "
            f"{'met' if ratio >= 1.5 else '**missed**'} ({ratio:.2f}x)"
        )
    else:
        out.append(
            "ours at least 1.5x cheaper than the cheapest peer losing no more: no peer loses as little"
        )
    others = [r for r in at if r["contestant"] not in RUNNER_ROWS]
    if others:
        cheapest = min(others, key=lambda r: r["totals"]["effective_cost_usd"])
        c = cheapest["totals"]["effective_cost_usd"]
        times = f"{cost / c:.2f}x" if c else "-"
        out.append(
            f"the cheapest peer at any loss: {cheapest['contestant']}, ${c:.2f} (ours costs {times} "
            f"that), losing {100 * lost_share(cheapest):.1f}% of the needed facts to ours' {100 * lost:.2f}%"
        )
    return out


def table(rows: list[dict[str, Any]], window: int) -> str:
    lines = [
        f"**{window:,} tokens**",
        "",
        "| contestant | tokens sent | cost | recalls | effective cost | in context | recoverable | lost "
        "| cost per call, last 10% of turns | over the window |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    at = sorted((r for r in rows if r["window"] == window), key=lambda r: r["totals"]["effective_cost_usd"])
    for r in at:
        t = r["totals"]
        name = f"**{r['contestant']}**" if r["contestant"] == OURS else r["contestant"]
        lines.append(
            f"| {name} | {t['tokens_sent'] / 1e6:.2f}M | ${t['cost_usd']:.2f} | {t['recalls']:,} "
            f"| ${t['effective_cost_usd']:.2f} | {share(t['in_context'], t['needed'])} "
            f"| {share(t['recoverable'], t['needed'])} | {share(t['lost'], t['needed'])} "
            f"| ${r['last_turns_cost_usd']:.4f} | {t['over_window']} |"
        )
    return "\n".join(lines)


def render(saved: dict[str, Any]) -> str:
    rows = saved["rows"]
    windows = sorted({r["window"] for r in rows})
    needed = next((r["totals"]["needed"] for r in rows), 0)
    turns = next((r["totals"]["turns"] for r in rows if r["contestant"] == OURS), 0)
    parts = [
        "## 0. Replay: every strategy on real recorded agent histories, by one rule",
        "",
        f"{len(saved['files'])} recorded histories ({', '.join(saved['files'])}), {turns:,} "
        f"turns, {needed:,} needed facts. One deterministic round (the replay has no randomness and no "
        "clock: a rerun gives the same numbers). Model "
        f"`{MODEL}`; summaries: the runner's deterministic fallback summary for every row, billed as "
        f"`{SUMMARY_MODEL}` calls. Tokens: 4 characters of JSON each; the prompt cache at the runner's "
        "breakpoints (peers and seeds: the system prompt and the newest message), a 5-minute TTL that never "
        "expires between calls. A needed fact not in context but held by a file a pointer in the request "
        "names is recoverable and paid as a recall (the file's tokens as input, plus 100 output tokens); "
        "effective "
        "cost = cost + recalls. Rows are sorted by effective cost.",
    ]
    for window in windows:
        parts += ["", table(rows, window), ""]
        parts += [f"- {line}" for line in verdicts(rows, window)]
    descriptions = {r["contestant"]: r["description"] for r in rows}
    parts += ["", "Contestants: " + "; ".join(f"{k}: {v}" for k, v in descriptions.items()) + "."]
    if saved.get("notes"):
        parts += ["", "Notes: " + "; ".join(saved["notes"]) + "."]
    return "\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="one history, nothing written")
    parser.add_argument(
        "--files", type=Path, nargs="+", metavar="FILE", help="these histories instead, nothing written"
    )
    parser.add_argument("--only", action="append", help="one of our contestants (repeatable); no peers")
    parser.add_argument("--windows", type=int, nargs="+", default=list(WINDOWS))
    parser.add_argument("--render", action="store_true", help="re-render the saved results only")
    args = parser.parse_args()
    saved_path = RESULTS / f"{SECTION}.json"
    if args.render:
        saved = json.loads(saved_path.read_text())
        measured_at(saved)
        replace_section(
            SECTION, render(saved), "python bench/replay.py", load=load_note(saved.get("load_1min"))
        )
        return
    files = histories(args.smoke, args.files)
    names = args.only or list(CONTESTANTS)
    unknown = [n for n in names if n not in CONTESTANTS]
    if unknown:
        parser.error(f"--only: unknown contestants {', '.join(unknown)} (known: {', '.join(CONTESTANTS)})")
    rows = [
        row(name, window, CONTESTANTS[name], files)
        for name in names
        for window in args.windows
        if not (name in NOT_AT and NOT_AT[name][0](window))
    ]
    notes: list[str] = [
        f"{name} has no row at {', '.join(f'{w:,}' for w in args.windows if skip(w))} tokens: {why}"
        for name, (skip, why) in NOT_AT.items()
        if name in names and any(skip(w) for w in args.windows)
    ]
    if not args.only:
        more, peer_notes = peer_rows(args.windows, args.smoke, args.files)
        rows += more
        notes += peer_notes
        if saved_path.exists() and not (args.smoke or args.files):  # a skipped peer keeps its saved rows
            have = {r["contestant"] for r in rows}
            rows += [r for r in json.loads(saved_path.read_text())["rows"] if r["contestant"] not in have]
    result = {"files": [p.name for p in files], "rows": rows, "notes": notes}
    print(render(result))
    if args.smoke or args.files:
        return
    if args.only and saved_path.exists():  # a partial run replaces its own rows (and notes) only
        saved = json.loads(saved_path.read_text())
        result["rows"] = [r for r in saved["rows"] if r["contestant"] not in names] + rows
        others = [n for n in saved.get("notes", []) if not any(n.startswith(f"{name} ") for name in names)]
        result["notes"] = others + notes
    write_result(SECTION, result)
    replace_section(SECTION, render(result), "python bench/replay.py", load=load_note(START_LOAD))


if __name__ == "__main__":
    main()
