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
that does not converge stops where the runner's rows stop (``max_turns``); and the emulator gap below
(``FIRST_MESSAGE_USER``). Its requests are sent as inspect_ai makes them (Sonnet 5.5's
``thinking.block_binding`` with its beta header included: the emulator takes every field the SDK's beta
types take).

The tools ``glob``, ``read`` and ``grep`` are inspect_ai tools with our definitions (name, description,
input schema) that call the runner's own :class:`runner.tools.toolset.Toolset`, so their outputs are ours,
byte for byte (an error result is raised as inspect_ai's ``ToolError``, which it sends as an error result).

The glue that stands in for what a model would understand (:class:`Teacher`), applied to what the policy
reads and never to what is billed (the emulator bills the request inspect_ai sent):

- inspect_ai's placeholder for a removed result, ``(Tool result removed)``, reads as the seed lessons'
  placeholder that names nothing (``readback.SEED_001_MICRO_PLACEHOLDER``: the result is gone, re-run it);
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
from common import load_note, replace_section, write_result  # noqa: E402
from cost import (  # noqa: E402
    FULL_PACKAGES,
    MAX_TURNS,
    MODEL,
    PROMPT,
    SMOKE_PACKAGES,
    STRATEGIES,
    SYSTEM,
    WIDE_WINDOW,
    WIDE_WINDOW_TOKENS,
    WINDOW,
    WINDOW_TOKENS,
    correct_rows,
    definition,
    files_cell,
    ground_truth,
    make_workspace,
    ours_for,
    ratio_cell,
    rerun_note,
    status_cell,
    survey_rows,
)
from cost import run_all as run_ours  # noqa: E402

from runner.compaction.fallback import fallback_summary  # noqa: E402
from runner.emulator import app as emulator_app  # noqa: E402
from runner.emulator import replies  # noqa: E402
from runner.emulator.config import EmulatorConfig  # noqa: E402
from runner.emulator.server import EmulatorHandle, running_emulator  # noqa: E402
from runner.emulator.state import EmulatorState  # noqa: E402
from runner.messages import Message, blocks  # noqa: E402
from runner.offline.memory_survey import REQUEST_START, SUMMARY_START  # noqa: E402
from runner.offline.readback import SEED_001_MICRO_PLACEHOLDER  # noqa: E402
from runner.pricing import Usage, cost_usd  # noqa: E402
from runner.protocol import COMPACTED  # noqa: E402
from runner.rundir.store import JobStore  # noqa: E402
from runner.tools.file_calls import file_tool_definitions  # noqa: E402
from runner.tools.toolset import Toolset  # noqa: E402

TOOLS = ("glob", "read", "grep")
INSPECT_MODEL = f"anthropic/{MODEL}"
# ours beside the peers, at each window (bench/cost.py's rows, run in this process on the same workspace)
OURS = {WINDOW: "ours", WIDE_WINDOW: "ours @ 50k tokens"}
# inspect_ai counts tokens message by message for its compaction threshold, so a count_tokens request may
# start with an assistant message (it pads orphaned tool results with a made-up assistant turn first); the
# API counts those, the emulator refuses them with this problem (messages.check_conversation's). (After a
# native compaction inspect_ai sends the history from the assistant message holding the compaction block,
# as the API documents: the emulator takes that itself, see runner.emulator.validation.)
FIRST_MESSAGE_USER = "messages.0: the first message must use the user role"
# inspect_ai's own texts, as its compaction writes them (model/_compaction/edit.py and summary.py)
INSPECT_REMOVED = "(Tool result removed)"
INSPECT_SUMMARY_HEAD = "[CONTEXT COMPACTION SUMMARY]"


@dataclass(frozen=True)
class Row:
    """One inspect_ai row: how to build its strategy (None: no compaction), what it is, its window."""

    make: Callable[[], Any] | None
    text: str
    window: str


def strategies() -> dict[str, Row]:
    """Each row, at the cost table's window (12,500 tokens as ``threshold``) and at the server's (50,000):
    inspect_ai's defaults (threshold 0.9 of the 1,000,000 tokens it knows for the model: 900,000) never
    compact this job, so each strategy is given the table's window as its ``threshold`` and nothing else.
    ``CompactionNative`` asks the API's compaction, whose trigger is at least 50,000 tokens: it runs at
    50,000 only (``CompactionAuto`` starts with it, and falls back to a summary when it does not trigger)."""
    from inspect_ai.model import (
        CompactionAuto,
        CompactionEdit,
        CompactionNative,
        CompactionSummary,
        CompactionTrim,
    )

    rows = {"none": Row(None, "react() without compaction", "")}
    for label, window, tokens, makers in (
        ("12.5k", WINDOW, WINDOW_TOKENS, (CompactionEdit, CompactionSummary, CompactionTrim, CompactionAuto)),
        (
            "50k",
            WIDE_WINDOW,
            WIDE_WINDOW_TOKENS,
            (CompactionEdit, CompactionSummary, CompactionTrim, CompactionNative, CompactionAuto),
        ),
    ):
        for make in makers:
            name = make.__name__.removeprefix("Compaction").lower()
            rows[f"{name} @ {label} tokens"] = Row(
                functools.partial(make, threshold=tokens),
                f"{make.__name__}(threshold={tokens}), its other defaults" + STRATEGY_DEFAULTS[name],
                window,
            )
    return rows


# what each strategy's other defaults are (inspect_ai 0.3.285's signatures)
STRATEGY_DEFAULTS = {
    "edit": " (keep_tool_uses=3, keep_tool_inputs=True, memory=True)",
    "summary": " (summaries by the job's model, its default prompt, memory=True)",
    "trim": " (preserve=0.8, memory=True)",
    "native": " (the API's compact_20260112: trigger 50,000, pause_after_compaction)",
    "auto": " (native first, a summary when native does not compact; memory warnings on)",
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
    text = str(block.get("text", "")) if block.get("type") == "text" else ""
    if text.startswith(INSPECT_SUMMARY_HEAD):
        return {**block, "text": f"[{COMPACTED}]" + text[len(INSPECT_SUMMARY_HEAD) :]}
    if f"\n{INSPECT_SUMMARY_HEAD}" in text:
        # inspect_ai's anthropic provider joins consecutive user messages into one text: the request, then
        # the summary message that follows it; read as our summary message (protocol.summary_text's shape:
        # the label, the current request, the summary)
        request, _, summary = text.partition(f"\n{INSPECT_SUMMARY_HEAD}")
        return {
            **block,
            "text": f"[{COMPACTED}]\n\n{REQUEST_START}\n{request}\n\n{SUMMARY_START}\n{summary.lstrip()}",
        }
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
    largest: int = 0  # the most input tokens (plain, cache write and read) one of the job's requests carried


class Teacher:
    """The emulator's answer and billing, with inspect_ai's texts taught to the policy (see the module)."""

    def __init__(self, answer: Callable[..., Any], build_message: Callable[..., Any]):
        self.answer_inner = answer
        self.build_inner = build_message
        self.head = summary_prompt_head()
        self.ledger = Ledger()

    async def answer(
        self, state: EmulatorState, body: dict[str, Any], view: list[Message]
    ) -> tuple[Any, str]:
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
        content, stop_reason = await self.answer_inner(state, body, view)
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

    async def build_message(
        self,
        state: EmulatorState,
        body: dict[str, Any],
        view: list[Message],
        total: int,
        *,
        applied: list[dict[str, Any]] | None = None,
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        summary = is_summary_request(taught(view), self.head)
        message, billed = await self.build_inner(state, body, view, total, applied=applied)
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
            if not summary:
                sent = (
                    kept["input_tokens"]
                    + kept["cache_creation_input_tokens"]
                    + kept["cache_read_input_tokens"]
                )
                self.ledger.largest = max(self.ledger.largest, sent)
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
        return [p for p in problems if not (count_tokens and p == FIRST_MESSAGE_USER)]

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


def memory_files(sample: Any) -> dict[str, str]:
    """The files inspect_ai's ``memory()`` tool held at the sample's end (its store, in the log), by path."""
    files: dict[str, str] = {}
    for key, value in (sample.store or {}).items():
        if key.startswith("MemoryStore") and key.endswith(":files") and isinstance(value, dict):
            files.update({str(k): str(v) for k, v in value.items()})
    return files


def keep_memory(files: dict[str, str], job_dir: Path) -> None:
    """Write inspect_ai's memory files under ``job_dir/memories`` (``/memories/x`` as ``memories/x``), where a
    report that points at its facts files is read from (``report_rows``)."""
    for path, text in files.items():
        rel = Path(path.lstrip("/"))
        if rel.parts and rel.parts[0] == "memories" and ".." not in rel.parts:
            (job_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            (job_dir / rel).write_text(text)


async def run_row(name: str, row: Row, workspace: Path, out: Path, teacher: Teacher) -> dict[str, Any]:
    """One ``inspect eval`` of one sample (``react()`` needs a sample to run in), its log in ``out``."""
    from inspect_ai import Task, eval_async
    from inspect_ai.agent import AgentPrompt, react
    from inspect_ai.dataset import Sample
    from inspect_ai.tool import memory

    teacher.ledger = Ledger()
    job = re.sub(r"[^a-z0-9]+", "-", name)
    store = JobStore(out / f"inspect-{job}")
    await store.open()
    toolset = Toolset(str(workspace), TOOLS, store)
    agent = react(
        prompt=AgentPrompt(instructions=SYSTEM),
        tools=[*inspect_tools(toolset), memory()],
        compaction=row.make() if row.make else None,
    )
    task = Task(dataset=[Sample(input=PROMPT)], solver=agent, turn_limit=MAX_TURNS)
    started = time.perf_counter()
    error = None
    logs = await eval_async(
        task,
        model=INSPECT_MODEL,
        log_dir=str(out / f"inspect-{job}" / "logs"),
        fail_on_error=False,
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
    if sample is not None:
        keep_memory(memory_files(sample), store.dir)
    truth = ground_truth(workspace)
    rows = survey_rows(ledger.report, store.dir) if status == "succeeded" else {}
    used, summ = ledger.job, ledger.summaries
    return {
        "strategy": f"inspect_ai {name}",
        "definition": definition(row.text, row.window, "memory", MODEL),
        "window": row.window,
        "survey": "memory",
        "status": status,
        "error": error,
        "turns": ledger.turns,
        "input_tokens": used.input_tokens,
        "output_tokens": used.output_tokens,
        "cache_creation_input_tokens": used.cache_creation_input_tokens,
        "cache_read_input_tokens": used.cache_read_input_tokens,
        "summary_model": MODEL,
        "summary_requests": ledger.summary_requests,
        "server_compactions": ledger.server_compactions,
        "largest_request_tokens": ledger.largest,
        "summarizer_tokens": summ.input_tokens
        + summ.output_tokens
        + summ.cache_creation_input_tokens
        + summ.cache_read_input_tokens,
        "cost_usd": round(cost_usd(MODEL, used) + cost_usd(MODEL, summ), 4),
        "rereads": len(ledger.reads) - len(set(ledger.reads)),
        "files_in_report": len(rows),
        "files_correct": correct_rows(rows, truth),
        "files_in_workspace": len(truth),
        "wall_s": round(wall, 1),
    }


def print_row(row: dict[str, Any]) -> None:
    print(
        f"  {row['strategy']}: {row['status']}, {row['turns']} turns, ${row['cost_usd']}, "
        f"{files_cell(row)} files (correct in brackets), {row['rereads']} re-reads, {row['wall_s']} s"
        + (f", {row['error']}" if row.get("error") else ""),
        flush=True,
    )


def in_order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows by window (none first, then each window: ours, then the peer's rows), as run otherwise."""
    windows = ["", WINDOW, WIDE_WINDOW]

    def key(r: dict[str, Any]) -> tuple[int, int]:
        w = r.get("window", "")
        return (
            windows.index(w) if w in windows else len(windows),
            0 if r["strategy"].startswith("ours") else 1,
        )

    return sorted(rows, key=key)


async def run_all(packages: tuple[str, ...], names: list[str]) -> list[dict[str, Any]]:
    """Ours at each window the named rows run at (bench/cost.py's rows, its own emulator), then each
    inspect_ai row."""
    known = strategies()
    windows = {known[n].window for n in names} - {""}
    rows = await run_ours(packages, [OURS[w] for w in (WINDOW, WIDE_WINDOW) if w in windows])
    with tempfile.TemporaryDirectory() as tmp:
        workspace = make_workspace(Path(tmp), packages)
        with taught_emulator(EmulatorConfig(context_window_tokens=5_000_000)) as (emulator, teacher):
            os.environ["ANTHROPIC_BASE_URL"] = emulator.base_url
            os.environ["ANTHROPIC_API_KEY"] = "bench-key"
            os.environ.setdefault("INSPECT_DISPLAY", "none")  # no live display: a benchmark prints its rows
            for name in names:
                emulator.reset()
                row = await run_row(name, known[name], workspace, Path(tmp) / "runs", teacher)
                rows.append(row)
                print_row(row)
    return in_order(rows)


def table(rows: list[dict[str, Any]], window_column: bool = True) -> str:
    """The rows, each against ours at its window on its survey (``cost.ours_for``)."""
    head = "| strategy | " + ("window | " if window_column else "")
    lines = [
        head + "status | turns | input | output | cache write | cache read | summaries | cost $ "
        "| vs ours | files in report (correct) | re-reads |",
        "|---|"
        + ("---|" if window_column else "")
        + "---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        window = f" {r.get('window') or 'none'} |" if window_column else ""
        lines.append(
            f"| {r['strategy']} |{window} {status_cell(r)} | {r['turns']} | {r['input_tokens']:,} "
            f"| {r['output_tokens']:,} | {r['cache_creation_input_tokens']:,} "
            f"| {r['cache_read_input_tokens']:,} | {r['summarizer_tokens']:,} | {r['cost_usd']:.4f} "
            f"| {ratio_cell(r, ours_for(r, rows))} | {files_cell(r)} | {r['rereads']} |"
        )
    return "\n".join(lines)


INSPECT_TOOL_OUTPUT = 16 * 1024  # inspect_ai's default GenerateConfig.max_tool_output, in bytes

# what this table depends on, in one sentence
DEPENDS_PEER = (
    "What this table depends on: the offline stand-in's choices, not a model's: it reads as many files a "
    "turn as the runner's pipeline lets through (which cuts a new result beyond the window to a preview and "
    "its size, where inspect_ai keeps it whole up to its 16 KiB cut), it takes inspect_ai's 16 KiB cut of a "
    "read for the whole file, and it keeps its progress in a note in its replies and never views its memory "
    "to resume, so a strategy that drops its replies starts the survey again."
)


def same_as_saved(rows: list[dict[str, Any]], name: str = "cost") -> str:
    """Whether the ours rows run here are section 3's saved rows of the same name and definition."""
    import common

    try:
        saved = {r["strategy"]: r for r in json.loads((common.RESULTS / f"{name}.json").read_text())["rows"]}
    except (OSError, ValueError, KeyError):
        return "section 3 has no saved rows to compare with"
    out = []
    for r in rows:
        was = saved.get(r["strategy"])
        if not r["strategy"].startswith("ours") or was is None or was.get("definition") != r["definition"]:
            continue
        changed = [f for f in common.TOKEN_FIELDS if was.get(f) != r.get(f)]
        out.append(f"`{r['strategy']}` " + (f"differs in {', '.join(changed)}" if changed else "the same"))
    return "against section 3's saved rows: " + ("; ".join(out) if out else "none of the same definition")


def section(packages: tuple[str, ...], names: list[str], rows: list[dict[str, Any]], version: str) -> str:
    known = strategies()
    by = {r["strategy"]: r for r in rows}
    none = by.get("inspect_ai none")
    files = files_over_limit(packages)
    largest = f"{none['largest_request_tokens']:,}" if none else "?"
    ours_names = [r["strategy"] for r in rows if r["strategy"].startswith("ours")]
    return (
        "## 3b. Peers on the same long session\n\n"
        f"inspect_ai {version}'s `react()` agent on the cost table's survey job ({', '.join(packages)}), "
        f"through its own anthropic provider to the same emulator and policy, priced as {MODEL}, its "
        "summaries too (`CompactionSummary` summarizes with the job's model, as every row of section 3 "
        "does). The survey is section 3's: `react()` is offered inspect_ai's own `memory()` tool "
        "(`inspect_ai.tool.memory`, sent as the API's `memory_20250818` tool, as the runner sends its own) "
        "beside ours (`glob`, `read`, "
        "`grep`: our definitions, the runner's Toolset runs them), so the policy takes its memory survey, as "
        "it does in every row of section 3; ours runs beside it in this run (bench/cost.py's "
        + ", ".join(f"`{n}`" for n in ours_names)
        + f"; {same_as_saved(rows)}). Window: every strategy is given section 3's window, "
        f"`threshold={WINDOW_TOKENS}` tokens, and again the server's, `threshold={WIDE_WINDOW_TOKENS}` "
        "(the smallest trigger of the API's compaction, which `CompactionNative` asks for, so it runs at "
        f"{WIDE_WINDOW} only; `CompactionAuto` starts with it and falls back to a summary); inspect_ai's own "
        "default, 0.9 of the 1,000,000-token window it knows for this model (900,000 tokens), is more than "
        f"any request here (`inspect_ai none`'s largest: {largest} tokens), so at its defaults no strategy "
        "compacts this job and every row would be `none`'s. Its other defaults are kept: the default prompt "
        "(our system text as `instructions`), the `submit()` tool, `attempts=1`, tool output cut at 16 KiB, "
        "streaming, each strategy's other settings, its memory warning before a compaction (a user text the "
        "policy takes no step for: it writes every fact to memory as it learns it). Changed only to point "
        "it at the emulator: `ANTHROPIC_BASE_URL`, `ANTHROPIC_API_KEY`, inspect_ai's own `turn_limit` of "
        f"{MAX_TURNS} model generations (where section 3's rows stop), and one emulator gap worked around "
        "in `bench/peers.py`: a count_tokens request of one message that starts with an assistant message "
        "(accepted, as the API does; the history from a compaction block the emulator takes itself); its "
        "requests are otherwise sent as inspect_ai makes them (Sonnet 5.5's "
        "`thinking.block_binding` included). The policy reads inspect_ai's placeholder "
        "`(Tool result removed)` as a removed result, its "
        "summary message as a summary (also where its anthropic provider joins it to the request before it "
        "into one user text, as it always does after a summary), its summary prompt as a summary request, "
        "and calls `submit` with its report (glue in `bench/peers.py`; the billed request is the one "
        "inspect_ai sent). inspect_ai cuts every tool output at 16 KiB, and the policy takes a cut read for "
        f"the whole file: the {files} files over 16 KiB can be right in no inspect_ai row. Files in report "
        "(correct) as in section 3: files the report names (of them, files whose every fact, lines, size and "
        "top-level definitions, is the file's) / files. Server-side compaction tokens are in the job's "
        "columns, as section 3's `server` row counts them. `vs ours`: the row's cost over ours' at the same "
        "window, in this table. "
        + DEPENDS_PEER
        + "\n\nStrategies: "
        + "; ".join(
            [f"`{n}` = {STRATEGIES[n].text}" for n in ours_names]
            + [f"`inspect_ai {n}` = {known[n].text}" for n in names]
        )
        + ".\n\n"
        + table(rows)
    )


def files_over_limit(packages: tuple[str, ...]) -> int:
    """The workspace's files larger than inspect_ai's tool output limit."""
    with tempfile.TemporaryDirectory() as tmp:
        truth = ground_truth(make_workspace(Path(tmp), packages))
    return sum(1 for t in truth.values() if t["bytes"] > INSPECT_TOOL_OUTPUT)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--only", action="append", choices=sorted(strategies()))
    args = parser.parse_args()
    packages = SMOKE_PACKAGES if args.smoke else FULL_PACKAGES
    names = args.only or list(strategies())
    print(load_note(), flush=True)
    rows = anyio.run(run_all, packages, names)
    print(table(rows))
    if args.smoke or args.only:
        return
    import inspect_ai

    rerun = rerun_note(  # before this run's results replace the last; `none` ran the plain survey before
        "peers",
        rows,
        redefined=("inspect_ai none",),
        decided_by="the policy, the emulator and inspect_ai's loop",
    )
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
        section(packages, names, rows, inspect_ai.__version__) + "\n\n" + rerun,
        "python bench/peers.py",
    )


if __name__ == "__main__":
    main()
