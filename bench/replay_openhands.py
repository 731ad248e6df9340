"""OpenHands' condensers as ``runner replay`` contestants: the recorded histories, open loop, one rule.

Two rows, each an OpenHands SDK condenser run as its agent runs it, on the events of the recorded history:

- ``OpenHands LLMSummarizingCondenser``: ``LLMSummarizingCondenserSettings(max_tokens=window)
  .build_condenser(llm)``, the condenser the SDK's settings build, at its defaults (``max_size=240`` events,
  ``keep_first=2``, ``minimum_progress=0.1``) with its token trigger, ``max_tokens``, set to the window
  (unset, the settings give it the model's input limit). Past the trigger it forgets events from the head
  (after the first ``keep_first``) until the view is under half of ``max_tokens`` (``max_size // 2`` events
  when the event count fired), and puts its summary where they were.
- ``OpenHands observation masking``: the SDK ships no masking condenser (its condensers are
  ``NoOpCondenser``, ``LLMSummarizingCondenser`` and ``PipelineCondenser``); this is OpenHands' legacy (V0)
  ``ObservationMaskingCondenser`` as ``bench/peers_openhands.py`` ports it onto the SDK's ``CondenserBase``
  (:func:`peers_openhands.masking_condenser_class`), at V0's default ``attention_window=100`` events: each
  observation older than the newest 100 events becomes ``<MASKED>``. It has no window of its own.

How a contestant drives its condenser (as ``Agent.step`` with a ``ConversationState`` does):

- the history becomes OpenHands events, each recorded message once, with stable ids: a ``SystemPromptEvent``
  first (the recorded system prompt; the recorded agent's tools as ``ClientTool``s, the SDK's tools defined
  by a JSON schema), a user text a ``MessageEvent``, each ``tool_use`` an ``ActionEvent`` (the assistant's
  text its thought, on the first call of a message only, as the agent splits a reply; the call's input as
  an ``MCPToolAction``, the SDK's action that wraps raw JSON; one ``llm_response_id`` per message), each
  result an ``ObservationEvent`` (an ``MCPToolObservation`` of its text), an assistant text without a call
  a ``MessageEvent`` of the agent;
- before each call the condenser condenses the view of every event so far (``View.append_event``, the
  state's incremental view) with the agent's ``LLM`` for its token count; a ``Condensation`` is appended to
  the events and the view condensed again (the agent returns after a condensation and condenses again at
  its next step), until it returns a ``View``;
- that view's events are the request's messages in the Messages API's shape (the system prompt event is the
  request's system, which the engine sends): a summary (``CondensationSummaryEvent``) is user text, as the
  SDK sends it; adjacent messages of one role are merged;
- ``reactive`` (a request over the window, the API's "prompt is too long") does what the agent does on a
  context-window error: it appends a ``CondensationRequest`` when the condenser handles requests
  (``LLMSummarizingCondenser`` does: a hard condensation keeping about half the view) and condenses again;
  the masking port handles none, so it can do nothing.

The summarizer is every strategy's: the condenser's ``LLM`` (:func:`summary_llm_class`, a subclass of the
SDK's ``LLM`` whose ``generate``, the call the condenser makes, sends nothing) answers with a placeholder, and
the ``Condensation`` it returns gets, before it is appended, the runner's deterministic fallback summary
(``fallback_summary``) of the events it forgets, as Messages API messages, at 20% of the window (``window * 4
* 0.2`` characters), the share ours gets. An earlier summary among them is marked as one (``[Compacted]``,
as the runner marks its own) so the fallback carries its notes; the SDK would send the summarizer only each
event's ``str()``, cut at 500 characters (an action's thought without its arguments), which a deterministic
summary of the events themselves does not lose. Billed: the request the condenser built (its system prompt
and the forgotten events' strings) as input, ``runner.billing.input_tokens(None, messages, [])``, the summary
text as output.

The token count: the condenser counts the view's tokens with the agent's ``LLM`` (litellm's ``token_counter``
for ``anthropic/<MODEL>``, the tools' schemas as the SDK writes them included), which is not the replay's
count (4 characters of the request's JSON each); the engine judges the window by its own count, so a view
the condenser thinks fits may be refused, and ``reactive`` then asks for a condensation.

``targets()`` is empty (a masked result and a summary name nothing saved); ``cache_points()`` is ``()``
(the engine puts the breakpoint on the newest message, as the SDK's prompt caching marks the system prompt
and the newest message); ``tools`` is empty (the engine adds the recorded agent's).

    /work/peer-oh/bin/python bench/replay_openhands.py --smoke
    /work/peer-oh/bin/python bench/replay_openhands.py --windows 16000 32000 64000 --out rows.json

Needs Python >= 3.12 and ``openhands-sdk`` (a venv of its own, as for ``bench/peers_openhands.py``).
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # before litellm is imported: no network
os.environ.setdefault("OPENHANDS_SUPPRESS_BANNER", "1")
os.environ.setdefault("LOG_LEVEL", "WARNING")  # the SDK's logger: not its INFO line at every token count

sys.path.insert(0, str(Path(__file__).resolve().parent))
import replay_rows  # noqa: E402

from runner.billing import CHARS_PER_TOKEN, estimate, input_tokens  # noqa: E402
from runner.compaction.fallback import fallback_summary  # noqa: E402
from runner.messages import Message  # noqa: E402
from runner.pricing import Usage  # noqa: E402
from runner.protocol import COMPACTION_BLOCK_HEAD  # noqa: E402

SUMMARY_SHARE = 0.2  # of the window, in characters: the share ours gets
LOCAL_URL = "http://127.0.0.1:9"  # the discard port: no LLM here is called, and none could reach a server
MAX_ROUNDS = 20  # condensations in a row before a view (the agent condenses once a step)
PLACEHOLDER = "(replaced by the deterministic summary)"


def model_name(model: str) -> str:
    return f"anthropic/{model}"  # litellm's anthropic provider, as bench/peers_openhands.py names it


# --- the SDK's types ------------------------------------------------------------------------------------


@functools.cache
def summary_llm_class() -> type:
    """The SDK's ``LLM`` whose ``generate`` (the call ``LLMSummarizingCondenser`` makes) sends nothing: it
    keeps the request's messages and answers with a placeholder the contestant replaces."""
    from litellm import ModelResponse
    from openhands.sdk import LLM, TextContent
    from openhands.sdk import Message as OHMessage
    from openhands.sdk.llm import LLMResponse
    from pydantic import PrivateAttr

    class ReplaySummaryLLM(LLM):
        _requests: list[list[Any]] = PrivateAttr(default_factory=list)

        def take_request(self) -> list[Any] | None:
            """The messages of the oldest summary request not taken yet (None: there is none)."""
            return self._requests.pop(0) if self._requests else None

        def generate(self, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
            self._requests.append(list(messages))
            n = len(self._requests)
            return LLMResponse(
                message=OHMessage(role="assistant", content=[TextContent(text=PLACEHOLDER)]),
                metrics=self.metrics.get_snapshot(),
                raw_response=ModelResponse(id=f"replay-summary-{n}"),
            )

        async def agenerate(self, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
            return self.generate(messages, *args, **kwargs)

    return ReplaySummaryLLM


def agent_llm(model: str) -> Any:
    """The agent's ``LLM``, which the condenser counts tokens with (it is never called)."""
    from openhands.sdk import LLM

    return LLM(model=model_name(model), base_url=LOCAL_URL, api_key="replay", usage_id="agent")


def summarizing_condenser(window: int, model: str) -> Any:
    """``LLMSummarizingCondenserSettings`` at its defaults, ``max_tokens`` the window, built on a summary
    ``LLM`` (a copy of the agent's, as ``build_condenser`` makes it, with ``usage_id="condenser"``)."""
    from openhands.sdk.settings.model import LLMSummarizingCondenserSettings

    llm = summary_llm_class()(model=model_name(model), base_url=LOCAL_URL, api_key="replay", usage_id="agent")
    return LLMSummarizingCondenserSettings(max_tokens=window).build_condenser(llm)


def masking_condenser() -> Any:
    from peers_openhands import masking_condenser_class

    return masking_condenser_class()()


# --- the history as events, and a view as messages -----------------------------------------------------


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [str(b.get("text", "")) for b in content or () if isinstance(b, dict) and b.get("type") == "text"]


def system_event(system: str, tools: list[dict[str, Any]]) -> Any:
    from openhands.sdk import TextContent
    from openhands.sdk.event import SystemPromptEvent
    from openhands.sdk.tool import ClientTool, ClientToolSpec

    defined = [
        ClientTool.from_spec(
            ClientToolSpec(
                name=t["name"],
                description=t.get("description") or t["name"],
                parameters=t.get("input_schema") or {"type": "object"},
            )
        )
        for t in tools
    ]
    return SystemPromptEvent(id="replay-system", system_prompt=TextContent(text=system), tools=defined)


class EventBuilder:
    """Each recorded message as OpenHands events, once, with ids from its index (``m<index>.<k>``)."""

    def __init__(self) -> None:
        self.calls: dict[str, tuple[str, str]] = {}  # tool_use id -> (its ActionEvent's id, tool name)

    def events(self, index: int, message: Message) -> list[Any]:
        from openhands.sdk import Message as OHMessage
        from openhands.sdk import TextContent
        from openhands.sdk.event import ActionEvent, MessageEvent, ObservationEvent
        from openhands.sdk.llm import MessageToolCall
        from openhands.sdk.mcp import MCPToolAction, MCPToolObservation

        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
        rid = f"m{index}"
        out: list[Any] = []
        if message["role"] == "assistant":
            thought = [TextContent(text=b["text"]) for b in blocks if b["type"] == "text" and b["text"]]
            uses = [b for b in blocks if b["type"] == "tool_use"]
            if not uses:
                if thought:
                    out.append(
                        MessageEvent(
                            id=f"{rid}.0",
                            source="agent",
                            llm_message=OHMessage(role="assistant", content=thought),
                            llm_response_id=rid,
                        )
                    )
                return out
            for k, use in enumerate(uses):
                event = ActionEvent(
                    id=f"{rid}.{k}",
                    thought=thought if k == 0 else [],
                    action=MCPToolAction(data=dict(use["input"])),
                    tool_name=use["name"],
                    tool_call_id=use["id"],
                    tool_call=MessageToolCall(
                        id=use["id"],
                        name=use["name"],
                        arguments=json.dumps(use["input"], ensure_ascii=False),
                        origin="completion",
                    ),
                    llm_response_id=rid,
                )
                self.calls[use["id"]] = (event.id, use["name"])
                out.append(event)
            return out
        texts: list[str] = []
        for k, block in enumerate(blocks):
            if block["type"] == "tool_result":
                action_id, name = self.calls[block["tool_use_id"]]
                parts = [TextContent(text=t) for t in _texts(block.get("content"))] or [TextContent(text="")]
                out.append(
                    ObservationEvent(
                        id=f"{rid}.{k}",
                        tool_name=name,
                        tool_call_id=block["tool_use_id"],
                        action_id=action_id,
                        observation=MCPToolObservation(
                            content=parts, is_error=bool(block.get("is_error")), tool_name=name
                        ),
                    )
                )
            elif block["type"] == "text" and block["text"]:
                texts.append(block["text"])
        if texts:
            out.append(
                MessageEvent(
                    id=f"{rid}.t",
                    source="user",
                    llm_message=OHMessage(role="user", content=[TextContent(text=t) for t in texts]),
                )
            )
        return out


def event_blocks(event: Any, for_summary: bool = False) -> tuple[str, list[dict[str, Any]]] | None:
    """An event's role and its Messages API blocks (None: the system prompt, sent as the system)."""
    from openhands.sdk.event import (
        ActionEvent,
        CondensationSummaryEvent,
        MessageEvent,
        ObservationEvent,
        SystemPromptEvent,
    )

    if isinstance(event, SystemPromptEvent):
        return None
    if isinstance(event, MessageEvent):
        role = "user" if event.source == "user" else "assistant"
        texts = [c.text for c in event.llm_message.content if getattr(c, "text", "")]
        return role, [{"type": "text", "text": t} for t in texts]
    if isinstance(event, ActionEvent):
        out: list[dict[str, Any]] = [{"type": "text", "text": t.text} for t in event.thought if t.text]
        out.append(
            {
                "type": "tool_use",
                "id": event.tool_call_id,
                "name": event.tool_call.name,
                "input": json.loads(event.tool_call.arguments or "{}"),
            }
        )
        return "assistant", out
    if isinstance(event, ObservationEvent):
        texts = [getattr(c, "text", "") for c in event.observation.content]
        result: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": event.tool_call_id,
            "content": texts[0] if len(texts) == 1 else [{"type": "text", "text": t} for t in texts if t],
        }
        if event.observation.is_error:
            result["is_error"] = True
        return "user", [result]
    if isinstance(event, CondensationSummaryEvent):
        text = (COMPACTION_BLOCK_HEAD + event.summary) if for_summary else event.summary
        return "user", [{"type": "text", "text": text}]
    raise TypeError(f"no Messages API form for {type(event).__name__}")


def to_messages(events: list[Any], for_summary: bool = False) -> list[Message]:
    """``events`` as Messages API messages, adjacent messages of one role merged (tool results first in a
    user message, as the API wants them)."""
    out: list[Message] = []
    for event in events:
        converted = event_blocks(event, for_summary)
        if converted is None or not converted[1]:
            continue
        role, blocks = converted
        if out and out[-1]["role"] == role:
            out[-1]["content"] += blocks
        else:
            out.append({"role": role, "content": list(blocks)})
    for message in out:
        if message["role"] == "user":
            message["content"].sort(key=lambda b: b["type"] != "tool_result")  # stable
    return out


# --- the contestant ---------------------------------------------------------------------------------------


class OpenHandsContestant:
    """An OpenHands condenser, driven as its agent drives it (see the module docstring)."""

    def __init__(self, name: str, condenser: Any, llm: Any, summary_chars: int):
        from openhands.sdk.context.view import View

        self.name = name
        self.tools: list[dict[str, Any]] = []
        self.condenser = condenser
        self.llm = llm
        self.summary_chars = summary_chars
        self.log: list[Any] = []  # every event, condensations and requests included, as the state keeps them
        self.view = View()  # the state's incremental view of ``log``
        self.builder = EventBuilder()
        self.converted = 0  # history messages turned into events
        self.no_condensation = 0  # condensations the condenser could not make (it raised)
        self._usage = Usage()
        self._summaries = 0
        self._compactions: Counter[str] = Counter()
        self._condensations = 0
        self._requests = 0
        self._messages: dict[tuple[int, ...], tuple[list[Any], Message]] = {}
        self.last_ids: list[str] = []

    @property
    def summary_usage(self) -> Usage:
        return self._usage

    @property
    def summaries(self) -> int:
        return self._summaries

    @property
    def compactions(self) -> Counter[str]:
        return self._compactions

    def _append(self, event: Any) -> None:
        self.log.append(event)
        self.view.append_event(event)

    async def start(self, system: str, tools: list[dict[str, Any]]) -> None:
        self._append(system_event(system, tools))

    async def prepare(self, history: list[Message]) -> list[Message]:
        for index in range(self.converted, len(history)):
            for event in self.builder.events(index, history[index]):
                self._append(event)
        self.converted = len(history)
        return self._messages_of(self._condense())

    def cache_points(self) -> tuple[int, ...]:
        return ()

    async def record(self, usage: Usage) -> None:
        return None

    async def reactive(self) -> bool:
        from openhands.sdk.event import CondensationRequest

        if not self.condenser.handles_condensation_requests():
            return False
        before = self.last_ids
        self._requests += 1
        self._append(CondensationRequest(id=f"condensation-request-{self._requests}"))
        events = self._condense()
        return [e.id for e in events] != before

    def targets(self, view: list[Message]) -> dict[str, str]:
        return {}

    def _condense(self) -> list[Any]:
        """The agent's steps until the condenser gives a view, each ``Condensation`` added to the events."""
        from openhands.sdk.context.condenser import NoCondensationAvailableException
        from openhands.sdk.event import Condensation

        for _ in range(MAX_ROUNDS):
            reasons = getattr(self.condenser, "get_condensation_reasons", None)
            why = sorted(r.value for r in reasons(self.view, self.llm)) if reasons else []
            try:
                result = self.condenser.condense(self.view, agent_llm=self.llm)
            except NoCondensationAvailableException:
                self.no_condensation += 1
                events = list(self.view.events)
                break
            if isinstance(result, Condensation):
                self._append(self._summarized(result))
                self._compactions["+".join(why) or "condensation"] += 1
                continue
            events = list(result.events)
            break
        else:
            raise RuntimeError(f"{self.name}: {MAX_ROUNDS} condensations in a row and still no view")
        self.last_ids = [e.id for e in events]
        return events

    def _summarized(self, condensation: Any) -> Any:
        """``condensation`` with the deterministic summary of the events it forgets, its call billed."""
        llm = getattr(self.condenser, "llm", None)
        request = llm.take_request() if hasattr(llm, "take_request") else None
        self._condensations += 1
        stable = {"id": f"condensation-{self._condensations}"}  # its summary event: this id + "-summary"
        if condensation.summary is None or request is None:
            return condensation.model_copy(update=stable)
        forgotten = [e for e in self.view.events if e.id in condensation.forgotten_event_ids]
        text = fallback_summary(to_messages(forgotten, for_summary=True), self.summary_chars)
        sent = [
            {"role": m.role, "content": [{"type": "text", "text": t} for t in _oh_texts(m)]} for m in request
        ]
        self._usage.add(Usage(input_tokens=input_tokens(None, sent, []), output_tokens=estimate(text)))
        self._summaries += 1
        return condensation.model_copy(update={**stable, "summary": text})

    def _messages_of(self, events: list[Any]) -> list[Message]:
        """The view's messages; a run of events unchanged since the last view keeps its message object."""
        groups: list[list[Any]] = []
        role_of: list[str] = []
        for event in events:
            converted = event_blocks(event)
            if converted is None or not converted[1]:
                continue
            role = converted[0]
            if groups and role_of[-1] == role:
                groups[-1].append(event)
            else:
                groups.append([event])
                role_of.append(role)
        cache: dict[tuple[int, ...], tuple[list[Any], Message]] = {}
        out: list[Message] = []
        for group in groups:
            key = tuple(id(e) for e in group)
            hit = self._messages.get(key)
            if hit is None:
                hit = (group, to_messages(group)[0])
            cache[key] = hit
            out.append(hit[1])
        self._messages = cache  # the groups hold their events: an id is not reused while its key is kept
        return out


def _oh_texts(message: Any) -> list[str]:
    return [c.text for c in message.content if getattr(c, "text", None) is not None]


# --- the rows ---------------------------------------------------------------------------------------------


def summary_chars(window: int) -> int:
    return int(window * CHARS_PER_TOKEN * SUMMARY_SHARE)


def summarizing_factory(window: int) -> tuple[str, Callable[[Path], Any]]:
    from openhands.sdk.context.condenser import LLMSummarizingCondenser

    fields = LLMSummarizingCondenser.model_fields
    description = (
        f"OpenHands SDK LLMSummarizingCondenserSettings(max_tokens={window}).build_condenser(llm): "
        f"LLMSummarizingCondenser(max_tokens={window} (the window, counted by litellm for "
        f"{model_name(replay_rows.MODEL)}), max_size={fields['max_size'].default}, "
        f"keep_first={fields['keep_first'].default}, minimum_progress={fields['minimum_progress'].default}: "
        "its defaults); a request over the window gets a CondensationRequest; summaries: the runner's "
        f"deterministic fallback summary of the forgotten events at {summary_chars(window):,} characters "
        "(20% of the window), billed as the summary request the condenser built"
    )

    def make(job_dir: Path) -> Any:
        return OpenHandsContestant(
            "OpenHands LLMSummarizingCondenser",
            summarizing_condenser(window, replay_rows.MODEL),
            agent_llm(replay_rows.MODEL),
            summary_chars(window),
        )

    return description, make


def masking_factory(window: int) -> tuple[str, Callable[[Path], Any]]:
    from peers_openhands import ATTENTION_WINDOW, MASKED

    description = (
        f"OpenHands V0 ObservationMaskingCondenser(attention_window={ATTENTION_WINDOW} events, `{MASKED}`) "
        "ported onto the SDK's CondenserBase (bench/peers_openhands.py; the SDK ships no masking condenser); "
        "no window of its own, no summaries, nothing to do for a request over the window"
    )

    def make(job_dir: Path) -> Any:
        return OpenHandsContestant(
            "OpenHands observation masking",
            masking_condenser(),
            agent_llm(replay_rows.MODEL),
            summary_chars(window),
        )

    return description, make


CONTESTANTS = {
    "OpenHands LLMSummarizingCondenser": summarizing_factory,
    "OpenHands observation masking": masking_factory,
}


if __name__ == "__main__":
    replay_rows.main(CONTESTANTS)
