"""Peer rows of the cost table: OpenHands' SDK agent, as its authors ship it, on the same job.

The survey job of :mod:`cost` (same prompt, same system text, same workspace, same model name, priced by
``runner.pricing``) run by the OpenHands SDK's ``Agent`` in a ``LocalConversation`` (no Docker, no agent
server: the SDK runs the agent loop and the tools in this process), its model calls made by litellm's
anthropic provider to an in-process emulator (the ``LLM``'s ``base_url``, any key); "the model" is the
emulator's deterministic offline policy, as in :mod:`peers`. One run per condenser:

- ``none``: ``Agent(llm, tools)`` as the SDK builds it (``condenser=None``, the ``Agent`` default);
- ``default``: ``default_condenser(llm)``, the SDK's "standard summarizing condenser used by the default agent
  and sub-agents": ``LLMSummarizingCondenser(max_size=80, keep_first=4)``, summaries by the job's model
  (a copy of the agent's ``LLM`` with ``usage_id="condenser"``, as the SDK makes it);
- ``settings``: ``LLMSummarizingCondenserSettings().build_condenser(llm)``, the condenser the SDK's settings
  model builds when nothing is set (``enabled=True``, ``max_size=240``, ``keep_first=2``, ``max_tokens`` the
  model's input limit as litellm knows it);
- ``masking``: observation masking. The SDK ships no masking condenser (its condensers are
  ``NoOpCondenser``, ``LLMSummarizingCondenser`` and ``PipelineCondenser``); OpenHands' own
  ``ObservationMaskingCondenser`` is in its legacy (V0) agent (``openhands.memory.condenser``, config default
  ``attention_window=100``): every observation older than the newest ``attention_window`` events becomes
  ``<MASKED>``. :func:`masking_condenser_class` ports it onto the SDK's ``CondenserBase`` with the same window
  and placeholder; the one difference is that the SDK pairs each tool call with its observation, so the masked
  observation keeps its tool call id (V0 replaced the observation with a user message).

What the SDK runs as shipped: its system prompt (our system text as the ``AgentContext``'s
``system_message_suffix``), its default tools ``finish`` and ``think`` beside ours, its tool schemas (it adds
a ``summary`` field to each), its ``LLM`` defaults (prompt caching on: ``cache_control`` on the system prompt
and the newest message; ``reasoning_effort="high"``, sent as ``output_config.effort``; no streaming;
``max_tokens`` as it sets it; 5 retries), stuck detection on. Changed, only to point it at
the emulator: the ``LLM``'s ``model`` (``anthropic/<MODEL>``: litellm's anthropic provider), ``base_url`` and
``api_key``; ``max_iteration_per_run`` (default 500) set to ``cost.MAX_TURNS`` so a run that does not converge
stops where the cost table's do; ``LITELLM_LOCAL_MODEL_COST_MAP=True`` (litellm's price map from its package,
not the network), ``OPENHANDS_SUPPRESS_BANNER=1`` and no console visualizer (display only). Telemetry: the
SDK's tracing (Laminar/OpenTelemetry) starts only when ``LMNR_PROJECT_API_KEY`` or an ``OTEL_*`` endpoint is
set; none is.

The tools ``glob``, ``read`` and ``grep`` are SDK tools (``ToolDefinition`` with an ``Action`` whose fields
are our inputs: names, types and which are required) that call the runner's own
:class:`runner.tools.toolset.Toolset`, so their outputs are ours, byte for byte (an error result is an
``Observation`` with ``is_error``, which the SDK sends under its error header).

The glue that stands in for what a model would understand (:class:`OpenHandsTeacher`), applied to what the
policy reads and never to what is billed (the emulator bills the request the SDK sent):

- the masking placeholder ``<MASKED>`` reads as the seed lessons' placeholder that names nothing
  (``readback.SEED_001_MICRO_PLACEHOLDER``: the result is gone, re-run it);
- a summary the condenser put in the history (a user message holding only the summary's text: the SDK gives it
  no head) reads as ours (``[Compacted]`` before it);
- a request whose system text is ``LLMSummarizingCondenser``'s summary prompt is answered as the emulator
  answers our Summarizer, with the deterministic fallback summary of what that request carries: the SDK sends
  each forgotten event as its ``str()``, cut at 500 characters (an action's thought but not its arguments, an
  observation's first 500 characters), so the summary is built from those texts alone (a note line the cut
  left unfinished keeps its complete items, up to its last ``; `` or ``, ``, as a reader of a list cut short
  would);
- the policy's final report, when the ``finish`` tool is offered, is a ``finish`` call with the report as its
  message (the tool's description: use it when the task is done; a plain text reply would also end the run).

The hooks are :mod:`peers`' (it replaces ``replies.answer`` and ``app.build_message`` for the run; see its
module docstring for the runtime hook that would replace that).

    python bench/peers_openhands.py          # full size; writes its result file and BENCHMARKS.md
    python bench/peers_openhands.py --smoke  # one small package, writes nothing
    python bench/peers_openhands.py --only masking

Needs Python >= 3.12 and ``openhands-sdk`` (the ``bench`` extra, in a venv of its own): the runner and CI
never import it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # before litellm is imported: no network
os.environ.setdefault("OPENHANDS_SUPPRESS_BANNER", "1")

import anyio  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import load_note, replace_section, write_result  # noqa: E402
from cost import (  # noqa: E402
    FULL_PACKAGES,
    MAX_TURNS,
    MODEL,
    OURS_PLAIN,
    PROMPT,
    SMOKE_PACKAGES,
    SYSTEM,
    WINDOW,
    correct_rows,
    definition,
    ground_truth,
    make_workspace,
    rerun_note,
    survey_rows,
)
from cost import run_all as run_ours  # noqa: E402
from peers import TOOLS, Ledger, print_row, table  # noqa: E402

from runner.compaction.fallback import fallback_summary  # noqa: E402
from runner.emulator import app as emulator_app  # noqa: E402
from runner.emulator import replies  # noqa: E402
from runner.emulator.config import EmulatorConfig  # noqa: E402
from runner.emulator.server import EmulatorHandle, running_emulator  # noqa: E402
from runner.emulator.state import EmulatorState  # noqa: E402
from runner.messages import Message, blocks  # noqa: E402
from runner.offline.readback import SEED_001_MICRO_PLACEHOLDER  # noqa: E402
from runner.pricing import Usage, cost_usd  # noqa: E402
from runner.protocol import COMPACTED  # noqa: E402
from runner.rundir.store import JobStore  # noqa: E402
from runner.tools.file_calls import file_tool_definitions  # noqa: E402
from runner.tools.toolset import Toolset  # noqa: E402

OPENHANDS_MODEL = f"anthropic/{MODEL}"  # litellm's anthropic provider
MASKED = "<MASKED>"  # V0 ObservationMaskingCondenser's placeholder
ATTENTION_WINDOW = 100  # V0 ObservationMaskingCondenserConfig's default
PREVIEW = 500  # openhands.sdk.event.base.N_CHAR_PREVIEW: how much of an event its str() keeps
EVENT = re.compile(r"<EVENT>\n(.*?)\n</EVENT>", re.S)


# --- the condensers -------------------------------------------------------------------------------------


@functools.cache
def masking_condenser_class() -> type:
    """V0's ``ObservationMaskingCondenser`` on the SDK's ``CondenserBase`` (see the module docstring)."""
    from openhands.sdk import TextContent
    from openhands.sdk.context.condenser import CondenserBase
    from openhands.sdk.context.view import View
    from openhands.sdk.event import ObservationEvent

    class ObservationMaskingCondenser(CondenserBase):
        """Masks the values of observations outside of a recent attention window."""

        attention_window: int = ATTENTION_WINDOW

        def condense(self, view: Any, agent_llm: Any = None) -> Any:
            events = list(view.events)
            cut = len(events) - self.attention_window
            out = []
            for i, event in enumerate(events):
                if isinstance(event, ObservationEvent) and i < cut:
                    masked = event.observation.model_copy(
                        update={"content": [TextContent(text=MASKED)], "is_error": False}
                    )
                    event = event.model_copy(update={"observation": masked})
                out.append(event)
            return View(events=out)

    return ObservationMaskingCondenser


def condensers(max_tokens: int = 0) -> dict[str, tuple[Callable[[Any], Any] | None, str, str]]:
    """Each row: how to build the condenser from the agent's ``LLM`` (None: no condenser), what it is, and
    its window. Each summarizing condenser is given the table's window as its ``max_tokens`` (``max_tokens``:
    the table's 50,000 characters in the SDK's own token count, :func:`window_tokens`), its event limits
    kept: as shipped, they count events (80, 240) and tokens only up to the model's input limit (1,000,000),
    which no request here reaches. Masking has no window (it masks by event count)."""
    from openhands.sdk.context.condenser import default_condenser
    from openhands.sdk.settings.model import LLMSummarizingCondenserSettings

    def default(llm: Any) -> Any:
        made = default_condenser(llm.model_copy(update={"usage_id": "condenser"}))
        return made.model_copy(update={"max_tokens": max_tokens})

    return {
        "none": (None, "Agent() as the SDK builds it: condenser=None", ""),
        "default @ 12.5k tokens": (
            default,
            "default_condenser(llm) (LLMSummarizingCondenser(max_size=80, keep_first=4), summaries by the "
            f"job's model) with max_tokens={max_tokens}, the table's window as the SDK counts tokens",
            WINDOW,
        ),
        "settings @ 12.5k tokens": (
            lambda llm: LLMSummarizingCondenserSettings(max_tokens=max_tokens).build_condenser(llm),
            f"LLMSummarizingCondenserSettings(max_tokens={max_tokens}).build_condenser(llm): what the SDK's "
            "settings build (LLMSummarizingCondenser(max_size=240, keep_first=2)) with the table's window as "
            "the SDK counts tokens",
            WINDOW,
        ),
        "masking": (
            lambda llm: masking_condenser_class()(),
            f"V0's ObservationMaskingCondenser(attention_window={ATTENTION_WINDOW}), `{MASKED}`, "
            "ported onto the SDK's CondenserBase (no window: it masks by event count)",
            "",
        ),
    }


def window_tokens(workspace: Path, chars: int = 50_000) -> tuple[int, float]:
    """The table's window (``chars`` characters) in the SDK's token count (litellm's tokenizer for the model,
    as the condenser counts), measured on this workspace's text; and the characters a token it found."""
    from openhands.sdk import LLM, Message, TextContent

    llm = LLM(model=OPENHANDS_MODEL, base_url="http://127.0.0.1:9", api_key="bench-key", usage_id="count")
    text = "".join(p.read_text(errors="replace") for p in sorted(workspace.rglob("*")) if p.is_file())
    tokens = llm.get_token_count([Message(role="user", content=[TextContent(text=text)])])
    per_token = len(text) / max(1, tokens)
    return int(chars / per_token), per_token


# --- the glue a model would not need: the SDK's texts, as the policy understands them -------------------


@functools.cache
def summary_system_prompt() -> str:
    """``LLMSummarizingCondenser``'s system prompt, as it renders it."""
    from openhands.sdk.context.condenser import llm_summarizing_condenser as module
    from openhands.sdk.context.prompts import render_template

    return render_template(os.path.join(os.path.dirname(module.__file__), "prompts"), "summarizing_system.j2")


def _system_text(body: dict[str, Any]) -> str:
    system = body.get("system")
    if isinstance(system, str):
        return system
    return "".join(str(b.get("text", "")) for b in system or [] if isinstance(b, dict))


def is_summary_request(body: dict[str, Any]) -> bool:
    return _system_text(body).strip() == summary_system_prompt().strip()


def _whole_lines(text: str) -> str:
    """``text`` as a reader trusts it when ``str(event)`` cut it (its preview ends in ``...``): the line the
    cut ran through keeps its complete items (up to its last ``; `` or ``, ``), or goes when it has none."""
    if len(text) < PREVIEW or not text.endswith("..."):
        return text
    head, _, last = text[:-3].rpartition("\n")
    cut = max(last.rfind("; "), last.rfind(", "))
    kept = last[:cut] if cut > 0 else ""
    return "\n".join(x for x in (head, kept) if x)


def summarized_events(view: list[Message], summaries: set[str]) -> list[Message]:
    """The conversation a summary request carries, as messages: each ``<EVENT>`` the SDK sent, by its kind.

    An action's thought is an assistant text, a message event is a message of its role, an earlier summary is
    a summary (``[Compacted]``); observations carry no call arguments, so nothing is built from them."""
    text = "\n".join(str(b.get("text", "")) for m in view for b in blocks(m) if b.get("type") == "text")
    out: list[Message] = []
    for event in EVENT.findall(text):
        head, _, rest = event.partition("\n")
        kind = head.split(" ", 1)[0]
        if kind == "ActionEvent":
            match = re.search(r"^  Thought: (.*?)\n  Action: ", rest, re.S | re.M)
            thought = _whole_lines(match.group(1)) if match else ""
            if thought.strip():
                out.append({"role": "assistant", "content": [{"type": "text", "text": thought}]})
            continue
        match = re.match(r"  (user|assistant): (.*)", rest, re.S)
        if kind not in ("MessageEvent", "CondensationSummaryEvent") or not match:
            continue
        role, said = match.group(1), _whole_lines(match.group(2))
        if kind == "CondensationSummaryEvent" or any(
            s.startswith(said.removesuffix("...")) for s in summaries
        ):
            said = f"[{COMPACTED}]\n{said}"
            role = "user"
        out.append({"role": role, "content": [{"type": "text", "text": said}]})
    return out


def _taught_block(block: dict[str, Any], summaries: set[str]) -> dict[str, Any]:
    if block.get("type") == "tool_result":
        content = block.get("content")
        texts = (
            [str(c.get("text", "")) for c in content if isinstance(c, dict)]
            if isinstance(content, list)
            else [str(content)]
        )
        if "".join(texts) == MASKED:
            return {**block, "content": SEED_001_MICRO_PLACEHOLDER}
    if block.get("type") == "text" and block.get("text") in summaries:
        return {**block, "text": f"[{COMPACTED}]\n" + block["text"]}
    return block


def taught(view: list[Message], summaries: set[str]) -> list[Message]:
    """``view`` with the SDK's placeholder and summaries in the policy's words."""
    out = []
    for message in view:
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        out.append(
            {
                **message,
                "content": [_taught_block(b, summaries) if isinstance(b, dict) else b for b in content or []],
            }
        )
    return out


def finish_call(view: list[Message], report: str) -> dict[str, Any]:
    import hashlib
    import json

    seed = json.dumps([len(view), report[:200]]).encode()
    return {
        "type": "tool_use",
        "id": "toolu_off_" + hashlib.sha256(seed).hexdigest()[:20],
        "name": "finish",
        "input": {"message": report},
    }


class OpenHandsTeacher:
    """The emulator's answer and billing, with the SDK's texts taught to the policy (see the module)."""

    def __init__(self, answer: Callable[..., Any], build_message: Callable[..., Any]):
        self.answer_inner = answer
        self.build_inner = build_message
        self.ledger = Ledger()
        self.summaries: set[str] = set()  # every summary this teacher wrote, as the SDK puts it back
        self.most_removed = 0  # the most masked results one request carried

    async def answer(
        self, state: EmulatorState, body: dict[str, Any], view: list[Message]
    ) -> tuple[Any, str]:
        if is_summary_request(body):
            state.summary_requests += 1
            budget = max(2_000, int(body.get("max_tokens", 0)) * 4 - 4_000)  # as the emulator sizes ours
            summary = fallback_summary(summarized_events(view, self.summaries), budget)
            self.summaries.add(summary)
            return [{"type": "text", "text": summary}], "end_turn"
        view = taught(view, self.summaries)
        removed = sum(1 for m in view for b in blocks(m) if b.get("content") == SEED_001_MICRO_PLACEHOLDER)
        self.most_removed = max(self.most_removed, removed)
        content, stop_reason = await self.answer_inner(state, body, view)
        names = {t.get("name") for t in body.get("tools") or []}
        if stop_reason == "end_turn" and "finish" in names:
            report = "\n".join(b["text"] for b in content if b.get("type") == "text")
            content, stop_reason = [finish_call(view, report)], "tool_use"
        for b in content:
            if b.get("type") == "tool_use" and b.get("name") == "read":
                self.ledger.reads.append(str((b.get("input") or {}).get("file_path")))
            if b.get("type") == "tool_use" and b.get("name") == "finish":
                self.ledger.report = str(b["input"]["message"])
        if stop_reason == "end_turn":
            self.ledger.report = "\n".join(b["text"] for b in content if b.get("type") == "text")
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
        summary = is_summary_request(body)
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
        self.ledger.summary_requests += summary
        self.ledger.turns += not summary
        return message, billed


@contextlib.contextmanager
def taught_emulator(config: EmulatorConfig) -> Iterator[tuple[EmulatorHandle, OpenHandsTeacher]]:
    """An in-process emulator whose policy reads the SDK's texts as a model would (see the module)."""
    teacher = OpenHandsTeacher(replies.answer, emulator_app.build_message)
    replies.answer = teacher.answer  # type: ignore[assignment]
    emulator_app.build_message = teacher.build_message  # type: ignore[assignment]
    try:
        with running_emulator(config) as emulator:
            yield emulator, teacher
    finally:
        replies.answer = teacher.answer_inner
        emulator_app.build_message = teacher.build_inner


# --- the tools: ours, as SDK tools -----------------------------------------------------------------------


class ToolBridge:
    """Runs a tool call on the event loop that owns ``toolset`` (the SDK calls tools from its own threads)."""

    def __init__(self, toolset: Toolset, loop: asyncio.AbstractEventLoop):
        self.toolset, self.loop = toolset, loop
        self.counter = iter(range(1, 10**9))

    def run(self, name: str, args: dict[str, Any]) -> tuple[str, bool]:
        import json

        call = {"id": f"bench_{next(self.counter)}", "name": name, "input": args}
        result = asyncio.run_coroutine_threadsafe(self.toolset.run(call), self.loop).result()
        content = result.get("content")
        return (content if isinstance(content, str) else json.dumps(content)), bool(result.get("is_error"))


@functools.cache
def tool_classes() -> dict[str, type]:
    """``glob``, ``read`` and ``grep`` as SDK tool classes with our inputs (descriptions: our titles)."""
    from openhands.sdk.tool import Action, Observation, ToolAnnotations, ToolDefinition, ToolExecutor
    from pydantic import Field, create_model

    definitions = file_tool_definitions()

    class FileToolObservation(Observation):
        """Our tool's result text."""

    class BridgeExecutor(ToolExecutor):
        def __init__(self, name: str, bridge: ToolBridge):
            self.name, self.bridge = name, bridge

        def __call__(self, action: Any, conversation: Any = None) -> Any:
            fields = definitions[self.name]["input_schema"]["properties"]
            args = {k: getattr(action, k) for k in fields if getattr(action, k, None) is not None}
            text, failed = self.bridge.run(self.name, args)
            return FileToolObservation.from_text(text=text, is_error=failed)

    def action_type(name: str) -> type:
        schema = definitions[name]["input_schema"]
        required = set(schema.get("required", []))
        fields: dict[str, Any] = {}
        for key, spec in schema["properties"].items():
            types = {spec.get("type"), *(t.get("type") for t in spec.get("anyOf", []))}
            kind: Any = str if "string" in types else list[int]
            description = spec.get("description") or spec.get("title", key)
            if key in required:
                fields[key] = (kind, Field(description=description))
            else:
                fields[key] = (kind | None, Field(default=None, description=description))
        return create_model(f"{name.capitalize()}Action", __base__=Action, **fields)

    def tool_class(name: str) -> type:
        act = action_type(name)

        def create(cls: Any, conv_state: Any = None, *, bridge: ToolBridge | None = None, **_: Any) -> Any:
            return [
                cls(
                    description=definitions[name]["description"],
                    action_type=act,
                    observation_type=FileToolObservation,
                    executor=BridgeExecutor(name, bridge) if bridge else None,
                    annotations=ToolAnnotations(title=name, readOnlyHint=True, destructiveHint=False),
                )
            ]

        return type(
            f"{name.capitalize()}Tool",
            (ToolDefinition[act, FileToolObservation],),  # type: ignore[valid-type]
            {"name": name, "create": classmethod(create), "__module__": __name__},
        )

    return {name: tool_class(name) for name in TOOLS}


def register_tools(bridge: ToolBridge) -> list[Any]:
    """Register our three tools (bound to ``bridge``) with the SDK; the agent's tool specs."""
    from openhands.sdk import Tool
    from openhands.sdk.tool import register_tool

    for name, cls in tool_classes().items():
        register_tool(name, cls.create(bridge=bridge)[0])
    return [Tool(name=name) for name in TOOLS]


# --- one row ----------------------------------------------------------------------------------------------


def run_conversation(
    make: Callable[[Any], Any] | None, workspace: Path, base_url: str, specs: list[Any]
) -> tuple[str, str | None]:
    """One conversation to its end, in this (worker) thread; its final status and error."""
    from openhands.sdk import LLM, Agent, AgentContext, Conversation
    from openhands.sdk.event.conversation_error import ConversationErrorEvent

    llm = LLM(model=OPENHANDS_MODEL, base_url=base_url, api_key="bench-key", usage_id="agent")
    agent = Agent(
        llm=llm,
        tools=specs,
        agent_context=AgentContext(system_message_suffix=SYSTEM),
        condenser=make(llm) if make else None,
    )
    conversation = Conversation(
        agent=agent,
        workspace=str(workspace),
        max_iteration_per_run=MAX_TURNS,
        visualizer=None,
    )
    try:
        conversation.send_message(PROMPT)
        conversation.run()
    except Exception as e:  # a run that raised is a failed row, with why
        return "failed", f"{type(e).__name__}: {e}"[-500:]
    finally:
        status = str(conversation.state.execution_status.value)
        errors = [e for e in conversation.state.events if isinstance(e, ConversationErrorEvent)]
        conversation.close()
    error = f"{errors[-1].code}: {errors[-1].detail}"[-500:] if errors else None
    return status, error


async def run_row(
    name: str,
    row: tuple[Callable[[Any], Any] | None, str, str],
    workspace: Path,
    out: Path,
    teacher: OpenHandsTeacher,
    url: str,
) -> dict[str, Any]:
    teacher.ledger = Ledger()
    teacher.summaries = set()
    teacher.most_removed = 0
    make, text, window = row
    store = JobStore(out / f"openhands-{re.sub(r'[^a-z0-9]+', '-', name)}")
    await store.open()
    toolset = Toolset(str(workspace), TOOLS, store)
    specs = register_tools(ToolBridge(toolset, asyncio.get_running_loop()))
    started = time.perf_counter()
    sdk_status, error = await anyio.to_thread.run_sync(run_conversation, make, workspace, url, specs)
    wall = time.perf_counter() - started
    ledger = teacher.ledger
    if sdk_status == "finished" and ledger.report:
        status = "succeeded"
    elif error and "MaxIterationsReached" in error:
        status = "max_turns"
    elif sdk_status == "finished":
        status = "no_report"
    else:
        status = "failed" if sdk_status in ("error", "failed") else sdk_status
    truth = ground_truth(workspace)
    rows = survey_rows(ledger.report, store.dir) if status == "succeeded" else {}
    job, summ = ledger.job, ledger.summaries
    return {
        "strategy": f"openhands {name}",
        "definition": definition(text, window, "plain", MODEL),
        "window": window,
        "survey": "plain",
        "status": status,
        "error": error,
        "turns": ledger.turns,
        "input_tokens": job.input_tokens,
        "output_tokens": job.output_tokens,
        "cache_creation_input_tokens": job.cache_creation_input_tokens,
        "cache_read_input_tokens": job.cache_read_input_tokens,
        "summary_model": MODEL,
        "summary_requests": ledger.summary_requests,
        "most_masked_results": teacher.most_removed,
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
    """Ours on the plain survey (bench/cost.py's session, its own emulator, the memory tool left out: the
    SDK has none to offer), then each condenser, the summarizing ones at the table's window."""
    rows = await run_ours(packages, list(OURS_PLAIN), OURS_PLAIN)
    with tempfile.TemporaryDirectory() as tmp:
        workspace = make_workspace(Path(tmp), packages)
        max_tokens, per_token = window_tokens(workspace)
        known = condensers(max_tokens)
        with taught_emulator(EmulatorConfig(context_window_tokens=5_000_000)) as (emulator, teacher):
            for name in names:
                emulator.reset()
                row = await run_row(
                    name, known[name], workspace, Path(tmp) / "runs", teacher, emulator.base_url
                )
                row["emulator_outcomes"] = emulator.stats()["outcomes"]  # a refused request shows here
                row["window_sdk_tokens"], row["chars_per_sdk_token"] = max_tokens, round(per_token, 2)
                rows.append(row)
                print_row(row)
                print(
                    f"    {row['summary_requests']} summaries, {row['most_masked_results']} masked at most",
                    flush=True,
                )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--only", action="append", choices=sorted(condensers()))
    args = parser.parse_args()
    packages = SMOKE_PACKAGES if args.smoke else FULL_PACKAGES
    names = args.only or list(condensers())
    print(load_note(), flush=True)
    rows = anyio.run(run_all, packages, names)
    print(table(rows, window_column=False))
    if args.smoke or args.only:
        return
    from importlib.metadata import version

    peer = f"openhands-sdk {version('openhands-sdk')}"
    rerun = rerun_note(
        "peers_openhands", rows, decided_by="the policy, the emulator and the SDK's loop"
    )  # before this run's results replace the last
    print(rerun)
    write_result(
        "peers_openhands",
        {
            "packages": packages,
            "model": MODEL,
            "peer": peer,
            "litellm": version("litellm"),
            "max_turns": MAX_TURNS,
            "rows": rows,
        },
    )
    replace_section(
        "peers-openhands",
        section(packages, names, rows, peer) + "\n\n" + rerun,
        "python bench/peers_openhands.py",
    )


def why(rows: list[dict[str, Any]]) -> str:
    """What the rows show, in words, with their numbers."""
    by = {r["strategy"].removeprefix("openhands "): r for r in rows}
    out = []
    for name, first, events in (("default @ 12.5k tokens", 4, 80), ("settings @ 12.5k tokens", 2, 240)):
        r = by.get(name)
        if r is None:
            continue
        out.append(
            f"`{name}` ({r['status']}, {r['summary_requests']} summaries, {r['rereads']} re-reads) condenses "
            f"when the history passes {r['window_sdk_tokens']:,} tokens (or {events} events), keeping the "
            "first "
            f"{first} events and half the window's newest; its summary is built from the events' "
            "500-character previews, which cut the policy's notes (one line per directory, growing as its "
            "files "
            "are read), so the policy re-reads what a summary lost."
        )
    if "masking" in by:
        r = by["masking"]
        out.append(
            f"`masking` ({r['status']}, up to {r['most_masked_results']} results masked in one request, "
            f"{r['rereads']} re-reads) keeps every reply's notes and masks only results; each step masks a "
            "result inside the cached prefix, so the rest of the prompt is written to the cache again "
            f"({r['cache_creation_input_tokens']:,} tokens of cache writes)."
        )
    return "\n\n" + " ".join(out) if out else ""


# what this table depends on, in one sentence
DEPENDS_OPENHANDS = (
    "What this table depends on: the offline stand-in's choices, not a model's: offered no memory tool, it "
    "keeps every fact in note lines in its replies (so what a condenser keeps of its replies decides what it "
    "must read again), its notes are cut by the SDK's 500-character event previews where a model's own "
    "summary would say more, and it reads as many files a turn as the runner's pipeline lets through."
)


def section(packages: tuple[str, ...], names: list[str], rows: list[dict[str, Any]], peer: str) -> str:
    refused = sum(n for r in rows for k, n in r.get("emulator_outcomes", {}).items() if k != "ok")
    peers = [r for r in rows if r["strategy"].startswith("openhands ")]
    max_tokens = next((r["window_sdk_tokens"] for r in peers), 0)
    per_token = next((r["chars_per_sdk_token"] for r in peers), 0)
    known = condensers(max_tokens)
    ours = [r["strategy"] for r in rows if r["strategy"].startswith("ours")]
    total = rows[0]["files_in_workspace"] if rows else 0
    return (
        "## 3c. OpenHands on the same long session\n\n"
        f"{peer}'s `Agent` (a `LocalConversation` in this process: no Docker, no agent server) on the "
        f"cost table's survey job ({', '.join(packages)}, copied from this interpreter's standard library, "
        f"Python {sys.version_info.major}.{sys.version_info.minor}: {total} files, not section 3's copy), "
        "through litellm's anthropic provider to the same emulator and policy, priced as "
        f"{MODEL} (its summaries too: its condensers summarize with the job's model, as every row of section "
        "3 does). Memory: the SDK ships no memory tool (its tools are `finish`, `think` and those a caller "
        "registers), so the policy, offered none, takes its plain survey (its facts in note lines in its "
        "replies), and ours runs beside it in this run on that same survey: "
        + ", ".join(f"`{n}`" for n in ours)
        + " (bench/cost.py's session with every limit at its default, the `memory` tool left out of every "
        "request; section 3's rows are on the memory survey and are not compared here). Window: ours runs at "
        f"its default 50,000 characters ({WINDOW} as the emulator counts them); each summarizing condenser "
        "is "
        f"given the same as its `max_tokens`, {max_tokens:,} tokens as the SDK counts them (litellm's "
        f"tokenizer, {per_token} characters a token on this workspace's files), its event limits kept (as "
        "shipped they count events, 80 and 240, and tokens only up to the model's 1,000,000, which no "
        "request "
        "here reaches); `masking` has no window (it masks by event count), nor has `none`. Its other "
        "defaults "
        "are kept: its system prompt (our system text as `AgentContext.system_message_suffix`), its `finish` "
        "and `think` tools beside ours, the `summary` field it adds to every tool's input, prompt caching "
        '(`cache_control` on the system prompt and the newest message), `reasoning_effort="high"` (sent as '
        "`output_config.effort`), no streaming, its retries, its stuck detection, tool output as the tool "
        "returns it (the SDK cuts none). Changed only to point it at the emulator: the `LLM`'s model "
        f"(`{OPENHANDS_MODEL}`), `base_url` and `api_key`, `max_iteration_per_run` {MAX_TURNS} (its default "
        "500) as the cost table stops a run, litellm's local price map, and no console visualizer (display "
        "only); its tracing stays off (it starts only when a Laminar key or an OpenTelemetry endpoint is "
        f"set). Requests the emulator refused: {refused}. Tools: ours (`glob`, `read`, `grep`: our inputs as "
        "SDK `Action`s, the runner's Toolset runs them). The SDK ships no observation-masking condenser: the "
        "`masking` row is its legacy (V0) agent's `ObservationMaskingCondenser` (config default "
        f"`attention_window={ATTENTION_WINDOW}` events, `{MASKED}`) ported onto the SDK's `CondenserBase` in "
        "`bench/peers_openhands.py` (a masked observation keeps its tool call id, which the SDK's history "
        "needs). The policy reads `<MASKED>` as a removed result, a summary the condenser put back as a "
        "summary, the summarizer's prompt as a summary request, answered with the deterministic summary of "
        "what that request carries: the SDK sends each forgotten event as its `str()`, cut at 500 characters "
        "(an action's thought without its arguments, an observation's first 500 characters, an earlier "
        "summary's first 500), so a summary keeps only the notes in the first 500 characters of each reply; "
        "and it calls `finish` with its report (glue in `bench/peers_openhands.py`; the billed request is "
        "the "
        "one the SDK sent). Files in report (correct): files the report names (of them, files whose every "
        "fact the plain survey's report gives, lines and top-level definitions, is the file's, computed from "
        "the files themselves) / files. `vs ours`: the row's cost over `"
        + (ours[0] if ours else "ours")
        + "`'s. "
        + DEPENDS_OPENHANDS
        + "\n\nRows: "
        + "; ".join(
            [f"`{n}` = {OURS_PLAIN[n].text}" for n in ours]
            + [f"`openhands {n}` = {known[n][1]}" for n in names]
        )
        + ".\n\n"
        + table(rows, window_column=False)
        + why(rows)
    )


if __name__ == "__main__":
    main()
