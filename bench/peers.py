"""Peer rows of the cost table: inspect_ai's ``react()`` agent, as its authors ship it, on the same job.

The survey job of :mod:`cost` (same prompt, same system text, same workspace, same model name, priced by
``runner.pricing``) run by inspect_ai's ``react()`` agent through its own anthropic provider, pointed at an
in-process emulator (``ANTHROPIC_BASE_URL``, any key), once per compaction strategy inspect_ai ships:
``CompactionEdit``, ``CompactionSummary``, ``CompactionTrim``, ``CompactionNative`` and ``CompactionAuto``
(the emulator serves the server-side compaction ``compact_20260112`` they ask for), each with its defaults,
and once without compaction. "The model" is the emulator's deterministic offline policy.

What inspect_ai runs as shipped: ``react()`` with its default prompt (our system text as its
``instructions``), its ``submit()`` tool, ``attempts=1``, ``truncation="disabled"``, its default
``GenerateConfig`` (tool output cut at 16 KiB, its retries and timeouts, streaming) and each strategy's
defaults (threshold 0.9 of the context window inspect_ai knows for ``claude-sonnet-5-5``, 1,000,000 tokens:
900,000, which this job never reaches, so the ``@ 50k`` rows run each strategy again with ``threshold=50000``,
the ``server`` row's trigger). Changed, only to point it at the emulator: ``ANTHROPIC_BASE_URL`` and
``ANTHROPIC_API_KEY``; inspect_ai's own ``turn_limit`` of ``cost.MAX_TURNS`` model generations, so a run
that does not converge stops where the runner's rows stop (``max_turns``); and the two emulator gaps
below (``EMULATOR_GAP``, ``FIRST_MESSAGE_USER``).

The tools ``glob``, ``read`` and ``grep`` are inspect_ai tools with our definitions (name, description,
input schema) that call the runner's own :class:`runner.tools.toolset.Toolset`, so their outputs are ours,
byte for byte (an error result is raised as inspect_ai's ``ToolError``, which it sends as an error result).

The glue that stands in for what a model would understand (:class:`Teacher`), applied to what the policy
reads and never to what is billed (the emulator bills the request inspect_ai sent):

- inspect_ai's placeholder for a removed result, ``(Tool result removed)``, reads as the seed lessons'
  placeholder that names nothing (``protocol.SEED_001_MICRO_PLACEHOLDER``: the result is gone, re-run it);
- its summary message's head, ``[CONTEXT COMPACTION SUMMARY]``, reads as ours (``[Compacted]``);
- a request whose last user text is ``CompactionSummary``'s summary prompt is answered as the emulator
  answers our Summarizer: the deterministic fallback summary of the conversation it carries;
- the policy's final report, when the ``submit`` tool is offered, is a ``submit`` call with the report as
  its answer (a model told to call ``submit()`` does; inspect_ai otherwise urges it to continue, forever).

The emulator has no hook for that glue (its config holds data, not code), so :func:`taught_emulator`
replaces two of its module functions for the duration of a run (``replies.answer``, what the policy is
asked; ``app.build_message``, to split the billed usage into the job's and its summaries'). The smallest
runtime change that would make that a supported hook: an ``EmulatorState.view_hook`` (a callable from the
request body and the messages the API reads to the messages the policy reads, default identity) applied
in ``replies.answer`` before ``decide``, and the request's billed usages tagged in ``state.bill`` by kind.

    python bench/peers.py            # full size; writes bench/results/peers.json and BENCHMARKS.md
    python bench/peers.py --smoke    # one small package, writes nothing
    python bench/peers.py --only edit --only summary

Needs the ``bench`` extra (``pip install -e '.[bench]'``): inspect_ai is never imported by the runner or CI.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import load_note, repeat_note, replace_section, write_result  # noqa: E402
from cost import FULL_PACKAGES, MAX_TURNS, MODEL, SMOKE_PACKAGES, make_workspace  # noqa: E402

from runner.compaction.fallback import fallback_summary  # noqa: E402
from runner.emulator import app as emulator_app  # noqa: E402
from runner.emulator import replies  # noqa: E402
from runner.emulator.config import EmulatorConfig  # noqa: E402
from runner.emulator.server import EmulatorHandle, running_emulator  # noqa: E402
from runner.emulator.state import EmulatorState  # noqa: E402
from runner.messages import Message, blocks  # noqa: E402
from runner.models.memory_survey import report_rows  # noqa: E402
from runner.pricing import Usage, cost_usd  # noqa: E402
from runner.protocol import COMPACTED, SEED_001_MICRO_PLACEHOLDER  # noqa: E402
from runner.rundir.store import JobStore  # noqa: E402
from runner.tools.toolset import Toolset, file_tool_definitions  # noqa: E402

PROMPT = (
    "Survey this workspace: every file, lines per extension, largest files, TODO/FIXME lines, "
    "and for each file its top-level definitions and first docstring line."
)  # cost.py's job
SYSTEM = "You are a careful code surveyor."
TOOLS = ("glob", "read", "grep")
INSPECT_MODEL = f"anthropic/{MODEL}"
LOW_THRESHOLD = 50_000  # tokens: section 3's `server` row's trigger
# inspect_ai sends Sonnet 5.5 ``thinking: {"type": "adaptive", "block_binding": {...}}`` (beta
# thinking-binding-controls-2026-08-01), a field the emulator's schema does not have yet (400 "Extra inputs
# are not permitted"). Its documented override (``extra_body.thinking`` replaces the binding config) sends
# the same adaptive thinking without it; the policy writes no thinking blocks, so nothing else changes.
EMULATOR_GAP = {"thinking": {"type": "adaptive"}}
# inspect_ai counts tokens message by message for its compaction threshold, so a count_tokens request may
# start with an assistant message (it pads orphaned tool results with a made-up assistant turn first); the
# API counts those, the emulator refuses them with this problem (messages.check_conversation's); and after
# a native compaction inspect_ai sends the history from the assistant message holding the compaction block,
# as the API documents, which the emulator refuses the same way
FIRST_MESSAGE_USER = "messages.0: the first message must use the user role"
# inspect_ai's own texts, as its compaction writes them (model/_compaction/edit.py and summary.py)
INSPECT_REMOVED = "(Tool result removed)"
INSPECT_SUMMARY_HEAD = "[CONTEXT COMPACTION SUMMARY]"


def strategies() -> dict[str, tuple[Callable[[], Any] | None, str]]:
    """Each row: how to build inspect_ai's strategy (None: no compaction), and what it is."""
    from inspect_ai.model import (
        CompactionAuto,
        CompactionEdit,
        CompactionNative,
        CompactionSummary,
        CompactionTrim,
    )

    return {
        "none": (None, "react() without compaction"),
        "edit": (CompactionEdit, "CompactionEdit(): threshold 0.9, keep_tool_uses=3, keep_tool_inputs=True"),
        "summary": (
            CompactionSummary,
            "CompactionSummary(): threshold 0.9, summaries by the job's model, its default prompt",
        ),
        "trim": (CompactionTrim, "CompactionTrim(): threshold 0.9, preserve=0.8"),
        "native": (
            CompactionNative,
            "CompactionNative(): threshold 0.9, the API's compact_20260112 "
            "(trigger 50,000, pause_after_compaction)",
        ),
        "auto": (CompactionAuto, "CompactionAuto(): native first, summary if native fails"),
        # the defaults never compact this job (0.9 of the 1,000,000 tokens inspect_ai knows for the model):
        # the same strategies at the `server` row's trigger, 50,000 tokens, the one setting changed
        **{
            f"{name} @ 50k": (
                functools.partial(make, threshold=LOW_THRESHOLD),
                f"{make.__name__}(threshold=50000)",
            )
            for name, make in (
                ("edit", CompactionEdit),
                ("summary", CompactionSummary),
                ("trim", CompactionTrim),
                ("native", CompactionNative),
                ("auto", CompactionAuto),
            )
        },
    }


# --- the glue a model would not need: inspect_ai's texts, as the policy understands them ---------------


def summary_prompt_head() -> str:
    from inspect_ai.model import CompactionSummary

    return CompactionSummary.DEFAULT_SUMMARY_PROMPT.strip().split("\n", 1)[0]


def _texts(message: Message) -> list[str]:
    return [str(b.get("text", "")) for b in blocks(message) if b.get("type") == "text"]


def is_summary_request(view: list[Message], head: str) -> bool:
    last = view[-1] if view else None
    return bool(last and last.get("role") == "user" and any(head in t for t in _texts(last)))


def _taught_block(block: dict[str, Any]) -> dict[str, Any]:
    if block.get("type") == "tool_result":
        content = block.get("content")
        if content == INSPECT_REMOVED or (
            isinstance(content, list)
            and len(content) == 1
            and isinstance(content[0], dict)
            and content[0].get("text") == INSPECT_REMOVED
        ):
            return {**block, "content": SEED_001_MICRO_PLACEHOLDER}
    if block.get("type") == "text" and str(block.get("text", "")).startswith(INSPECT_SUMMARY_HEAD):
        return {**block, "text": f"[{COMPACTED}]" + block["text"][len(INSPECT_SUMMARY_HEAD) :]}
    return block


def taught(view: list[Message]) -> list[Message]:
    """``view`` with inspect_ai's placeholder and summary head in the policy's words."""
    out = []
    for message in view:
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        out.append(
            {**message, "content": [_taught_block(b) if isinstance(b, dict) else b for b in content or []]}
        )
    return out


def submit_call(view: list[Message], report: str) -> dict[str, Any]:
    seed = json.dumps([len(view), report[:200]]).encode()
    return {
        "type": "tool_use",
        "id": "toolu_off_" + hashlib.sha256(seed).hexdigest()[:20],
        "name": "submit",
        "input": {"answer": report},
    }


@dataclass
class Ledger:
    """What one run asked and was billed, as the emulator saw it."""

    job: Usage = field(default_factory=Usage)
    summaries: Usage = field(default_factory=Usage)
    turns: int = 0  # answered requests that were not summary requests
    summary_requests: int = 0
    server_compactions: int = 0
    reads: list[str] = field(default_factory=list)  # every read call's file_path, in order
    report: str = ""


class Teacher:
    """The emulator's answer and billing, with inspect_ai's texts taught to the policy (see the module)."""

    def __init__(self, answer: Callable[..., Any], build_message: Callable[..., Any]):
        self.answer_inner = answer
        self.build_inner = build_message
        self.head = summary_prompt_head()
        self.ledger = Ledger()

    def answer(self, state: EmulatorState, body: dict[str, Any], view: list[Message]) -> tuple[Any, str]:
        view = taught(view)
        if is_summary_request(view, self.head):
            state.summary_requests += 1
            last = {
                **view[-1],
                "content": [b for b in blocks(view[-1]) if self.head not in str(b.get("text", ""))],
            }
            budget = max(2_000, int(body.get("max_tokens", 0)) * 4 - 4_000)  # as the emulator sizes ours
            conversation = [*view[:-1], last] if blocks(last) else view[:-1]
            return [{"type": "text", "text": fallback_summary(conversation, budget)}], "end_turn"
        content, stop_reason = self.answer_inner(state, body, view)
        names = {t.get("name") for t in body.get("tools") or []}
        if stop_reason == "end_turn" and "submit" in names:
            report = "\n".join(b["text"] for b in content if b.get("type") == "text")
            content, stop_reason = [submit_call(view, report)], "tool_use"
        for b in content:
            if b.get("type") == "tool_use" and b.get("name") == "read":
                self.ledger.reads.append(str((b.get("input") or {}).get("file_path")))
            if b.get("type") == "tool_use" and b.get("name") == "submit":
                self.ledger.report = str(b["input"]["answer"])
        return content, stop_reason

    def build_message(
        self, state: EmulatorState, body: dict[str, Any], view: list[Message], total: int
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        summary = is_summary_request(taught(view), self.head)
        message, billed = self.build_inner(state, body, view, total)
        for usage in billed:
            kept = {
                k: int(usage.get(k) or 0)
                for k in (
                    "input_tokens",
                    "output_tokens",
                    "cache_creation_input_tokens",
                    "cache_read_input_tokens",
                )
            }
            (self.ledger.summaries if summary else self.ledger.job).add(Usage(**kept))
            self.ledger.server_compactions += usage.get("type") == "compaction"
        self.ledger.summary_requests += summary
        self.ledger.turns += not summary
        return message, billed


@contextlib.contextmanager
def taught_emulator(config: EmulatorConfig) -> Iterator[tuple[EmulatorHandle, Teacher]]:
    """An in-process emulator whose policy reads inspect_ai's texts as a model would (see the module)."""
    teacher = Teacher(replies.answer, emulator_app.build_message)
    validate = emulator_app.validate

    def count_tokens_as_the_api(body: Any, *, betas: Any, count_tokens: bool, min_trigger: int) -> list[str]:
        problems = validate(body, betas=betas, count_tokens=count_tokens, min_trigger=min_trigger)
        messages = body.get("messages") if isinstance(body, dict) else None
        first = (
            messages[0] if isinstance(messages, list) and messages and isinstance(messages[0], dict) else {}
        )
        compacted = any(isinstance(b, dict) and b.get("type") == "compaction" for b in blocks(first))
        return [p for p in problems if not ((count_tokens or compacted) and p == FIRST_MESSAGE_USER)]

    replies.answer = teacher.answer  # type: ignore[assignment]
    emulator_app.build_message = teacher.build_message  # type: ignore[assignment]
    emulator_app.validate = count_tokens_as_the_api  # type: ignore[assignment]
    try:
        with running_emulator(config) as emulator:
            yield emulator, teacher
    finally:
        replies.answer = teacher.answer_inner
        emulator_app.build_message = teacher.build_inner
        emulator_app.validate = validate


# --- the tools: ours, as inspect_ai tools ----------------------------------------------------------------


def inspect_tools(toolset: Toolset) -> list[Any]:
    """``glob``, ``read`` and ``grep`` with our definitions, run by ``toolset`` (the runner's own tools)."""
    from inspect_ai.tool import ToolDef, ToolError, ToolParam, ToolParams

    definitions = file_tool_definitions()
    counter = iter(range(1, 10**9))

    async def call(name: str, args: dict[str, Any]) -> str:
        args = {k: v for k, v in args.items() if v is not None}
        result = await toolset.run({"id": f"bench_{next(counter)}", "name": name, "input": args})
        content = result.get("content")
        text = content if isinstance(content, str) else json.dumps(content)
        if result.get("is_error"):
            raise ToolError(text)
        return text

    async def glob(pattern: str, path: str | None = None) -> str:
        return await call("glob", {"pattern": pattern, "path": path})

    async def read(
        file_path: str, view_range: list[int] | None = None, byte_range: list[int] | None = None
    ) -> str:
        return await call(
            "read", {"file_path": file_path, "view_range": view_range, "byte_range": byte_range}
        )

    async def grep(pattern: str, path: str | None = None) -> str:
        return await call("grep", {"pattern": pattern, "path": path})

    out = []
    for name, fn in (("glob", glob), ("read", read), ("grep", grep)):
        schema = definitions[name]["input_schema"]
        # inspect_ai's schema has no ``title`` and wants a description for every input: a title stands in
        properties = {
            k: ToolParam(**{"description": v.get("title", k), **{f: x for f, x in v.items() if f != "title"}})
            for k, v in schema["properties"].items()
        }
        params = ToolParams(properties=properties, required=list(schema.get("required", [])))
        out.append(
            ToolDef(fn, name=name, description=definitions[name]["description"], parameters=params).as_tool()
        )
    return out


# --- one row ----------------------------------------------------------------------------------------------


def ground_truth(workspace: Path) -> dict[str, tuple[int, int]]:
    """Each file's (lines, chars) as the read tool returns it whole: what a correct report row says."""
    out = {}
    for p in workspace.rglob("*"):
        if p.is_file():
            text = p.read_bytes().decode("utf-8", errors="replace")
            out[str(p.relative_to(workspace))] = (
                text.count("\n") + (1 if text and not text.endswith("\n") else 0),
                len(text),
            )
    return out


EVERY_FILE_ROW = re.compile(r"^\| (.+?) \| (\d+) \| [^|]* \| .* \|$", re.M)


def survey_rows(report: str, job_dir: Path) -> dict[str, int | None]:
    """Each file the report names, with its line count: the memory survey's report as ``report_rows``
    reads it (lines and chars), else the plain survey's (``policy.report``: its "Every file" table,
    path and lines; chars only for its largest files, so they are not checked)."""
    rows = report_rows(report, job_dir)
    if rows:
        return {path: (row[2] if row[1] == "text" else None) for path, row in rows.items()}
    table = report.split("## Every file", 1)[1] if "## Every file" in report else ""
    return {path: int(lines) for path, lines in EVERY_FILE_ROW.findall(table) if path != "file"}


def correct_rows(rows: dict[str, int | None], truth: dict[str, tuple[int, int]]) -> int:
    """Rows whose line count is the file's."""
    return sum(1 for path, lines in rows.items() if path in truth and lines == truth[path][0])


async def run_row(
    name: str, make: Callable[[], Any] | None, workspace: Path, out: Path, teacher: Teacher
) -> dict[str, Any]:
    """One ``inspect eval`` of one sample (``react()`` needs a sample to run in), its log in ``out``."""
    from inspect_ai import Task, eval_async
    from inspect_ai.agent import AgentPrompt, react
    from inspect_ai.dataset import Sample

    teacher.ledger = Ledger()
    store = JobStore(out / f"inspect-{name}")
    await store.open()
    toolset = Toolset(str(workspace), TOOLS, store)
    agent = react(
        prompt=AgentPrompt(instructions=SYSTEM),
        tools=inspect_tools(toolset),
        compaction=make() if make else None,
    )
    task = Task(dataset=[Sample(input=PROMPT)], solver=agent, turn_limit=MAX_TURNS)
    started = time.perf_counter()
    error = None
    logs = await eval_async(
        task,
        model=INSPECT_MODEL,
        log_dir=str(out / f"inspect-{name}" / "logs"),
        fail_on_error=False,
        model_args={"extra_body": EMULATOR_GAP},
    )
    sample = logs[0].samples[0] if logs and logs[0].samples else None
    if logs and logs[0].status != "success" or sample is None or sample.error is not None:
        status = "failed"
        error = str(
            (sample.error.message[-1500:] if sample is not None and sample.error else None)
            or (logs[0].error.message if logs and logs[0].error else logs[0].status if logs else "no log")
        )[-500:]
    elif sample.limit is not None:
        status = "max_turns"
    else:
        status = "succeeded" if teacher.ledger.report else "no_report"
    wall = time.perf_counter() - started
    ledger = teacher.ledger
    truth = ground_truth(workspace)
    rows = survey_rows(ledger.report, store.dir) if status == "succeeded" else {}
    job, summ = ledger.job, ledger.summaries
    return {
        "strategy": f"inspect_ai {name}",
        "status": status,
        "error": error,
        "turns": ledger.turns,
        "input_tokens": job.input_tokens,
        "output_tokens": job.output_tokens,
        "cache_creation_input_tokens": job.cache_creation_input_tokens,
        "cache_read_input_tokens": job.cache_read_input_tokens,
        "summary_model": MODEL,
        "summary_requests": ledger.summary_requests,
        "server_compactions": ledger.server_compactions,
        "summarizer_tokens": summ.input_tokens
        + summ.output_tokens
        + summ.cache_creation_input_tokens
        + summ.cache_read_input_tokens,
        "cost_usd": round(cost_usd(MODEL, job) + cost_usd(MODEL, summ), 4),
        "rereads": len(ledger.reads) - len(set(ledger.reads)),
        "files_in_report": len(rows),
        "files_correct": correct_rows(rows, truth),
        "files_in_workspace": len(truth),
        "wall_s": round(wall, 1),
    }


async def run_all(packages: tuple[str, ...], names: list[str]) -> list[dict[str, Any]]:
    known = strategies()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workspace = make_workspace(Path(tmp), packages)
        with taught_emulator(EmulatorConfig(context_window_tokens=5_000_000)) as (emulator, teacher):
            os.environ["ANTHROPIC_BASE_URL"] = emulator.base_url
            os.environ["ANTHROPIC_API_KEY"] = "bench-key"
            os.environ.setdefault("INSPECT_DISPLAY", "none")  # no live display: a benchmark prints its rows
            for name in names:
                emulator.reset()
                row = await run_row(name, known[name][0], workspace, Path(tmp) / "runs", teacher)
                rows.append(row)
                print(
                    f"  {row['strategy']}: {row['status']}, {row['turns']} turns, ${row['cost_usd']}, "
                    f"{row['files_in_report']}/{row['files_in_workspace']} files "
                    f"({row['files_correct']} correct), {row['rereads']} re-reads, {row['wall_s']} s"
                    + (f", {row['error']}" if row["error"] else ""),
                    flush=True,
                )
    return rows


def table(rows: list[dict[str, Any]], ours: dict[str, Any] | None) -> str:
    lines = [
        "| strategy | status | turns | input | output | cache write | cache read | summaries | cost $ "
        "| vs ours | files in report (correct) | re-reads |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        done = r["status"] == "succeeded"
        ratio = f"{r['cost_usd'] / ours['cost_usd']:.2f}x" if ours and ours.get("cost_usd") and done else "-"
        status = (
            "succeeded"
            if done
            else (
                f"**did not finish** ({r['status']}: stopped at {r['turns']} turns)"
                if r["status"] == "max_turns"
                else f"**{r['status']}**"
            )
        )
        lines.append(
            f"| {r['strategy']} | {status} | {r['turns']} | {r['input_tokens']:,} | {r['output_tokens']:,} "
            f"| {r['cache_creation_input_tokens']:,} | {r['cache_read_input_tokens']:,} "
            f"| {r['summarizer_tokens']:,} | {r['cost_usd']:.4f} | {ratio} "
            f"| {r['files_in_report']} ({r['files_correct']}) / {r['files_in_workspace']} | {r['rereads']} |"
        )
    return "\n".join(lines)


def ours_row() -> dict[str, Any] | None:
    """The cost table's ``ours`` row, from its last full run (bench/results/cost.json)."""
    path = Path(__file__).resolve().parent / "results" / "cost.json"
    if not path.exists():
        return None
    return next((r for r in json.loads(path.read_text())["rows"] if r["strategy"] == "ours"), None)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--only", action="append", choices=sorted(strategies()))
    args = parser.parse_args()
    packages = SMOKE_PACKAGES if args.smoke else FULL_PACKAGES
    names = args.only or list(strategies())
    print(load_note(), flush=True)
    rows = anyio.run(run_all, packages, names)
    ours = ours_row()
    print(table(rows, ours))
    if args.smoke or args.only:
        return
    import inspect_ai

    known = strategies()
    rerun = repeat_note(
        "peers", rows, decided_by="the policy, the emulator and inspect_ai's loop"
    )  # before this run's results replace the last
    print(rerun)
    write_result(
        "peers",
        {
            "packages": packages,
            "model": MODEL,
            "peer": f"inspect_ai {inspect_ai.__version__}",
            "max_turns": MAX_TURNS,
            "rows": rows,
        },
    )
    replace_section(
        "peers",
        (
            "## 3b. Peers on the same long session\n\n"
            f"inspect_ai {inspect_ai.__version__}'s `react()` agent on the cost table's survey job "
            f"({', '.join(packages)}), "
            f"through its own anthropic provider to the same emulator and policy, priced as {MODEL} (its "
            "summaries "
            "too: `CompactionSummary` summarizes with the job's model). Its defaults are kept: the default "
            "prompt "
            "(our system text as `instructions`), the `submit()` tool, `attempts=1`, tool output cut at 16 "
            "KiB, "
            "streaming, each strategy's own defaults (threshold 0.9 of the 1,000,000-token window inspect_ai "
            "knows "
            "for this model: 900,000 tokens, never reached here; the `@ 50k` rows set `threshold=50000`, the "
            "`server` row's trigger, and nothing else). Changed only to point it at the emulator: "
            "`ANTHROPIC_BASE_URL`, `ANTHROPIC_API_KEY`, inspect_ai's own `turn_limit` of "
            f"{MAX_TURNS} model generations (where section 3's rows stop), and two emulator gaps worked "
            "around in `bench/peers.py`: Sonnet 5.5's "
            "`thinking.block_binding` (sent as plain adaptive thinking through inspect_ai's model arg "
            "`extra_body`) and a request that starts with an assistant message (count_tokens of one message, "
            "or the "
            "history from a compaction block, both accepted, as the API does). Tools: ours (`glob`, `read`, "
            "`grep`: our definitions, the runner's Toolset runs "
            "them). The policy reads inspect_ai's placeholder `(Tool result removed)` as a removed result, "
            "its "
            "summary head as a summary, its summary prompt as a summary request, and calls `submit` with its "
            "report (glue in `bench/peers.py`; the billed request is the one inspect_ai sent). The policy is "
            "offered no `memory` tool here, so it takes its plain survey (notes in its replies); the "
            "runner's rows "
            "in section 3 offer `memory` (every runner job has it) and take the memory survey. Files in "
            "report "
            "(correct): rows the report names (rows whose lines and chars match the file) / files. "
            "Server-side "
            "compaction tokens are in the job's columns, as section 3's `server` row counts them. "
            f"`vs ours`: against section 3's `ours` row (${ours['cost_usd'] if ours else '?'}).\n\n"
            "Strategies: "
            + "; ".join(f"`inspect_ai {n}` = {known[n][1]}" for n in names)
            + ".\n\n"
            + table(rows, ours)
            + "\n\n"
            + rerun
        ),
        "python bench/peers.py",
    )


if __name__ == "__main__":
    main()
