"""Replay rows of inspect_ai's own compaction strategies: ``CompactionEdit``, ``CompactionTrim`` and
``CompactionSummary`` (inspect_ai 0.3.285), called as inspect's ``react()`` agent calls them, on the
recorded histories of ``runner replay``.

Each contestant keeps the history as inspect ChatMessages (each recorded message converted once, with
stable ids, so inspect's bookkeeping by id holds across turns), and before each call does what
``react()`` does: ``compact_input(messages)`` on the handler ``compaction(strategy, prefix, tools, model)``
returns the input to send and maybe a supplemental message (a summary), which is appended to the kept
history; after the call ``record_output(input, output)`` calibrates inspect's token baseline with the
tokens the call was billed (``output.usage.input_tokens`` = the request's whole context, as the engine
priced it). A request over the window is answered as ``react()``'s overflow recovery answers a
``model_length`` error: ``compact_input(messages, force=True)``.

What inspect sees:

- the messages: the system prompt as a ``ChatMessageSystem`` and the first user message (marked
  ``source="input"``, as a sample's input is) form the prefix, as ``react()`` derives it (``system +
  input``); a user message's tool results become ``ChatMessageTool``s (``is_error`` as a
  ``ToolCallError``), its text a ``ChatMessageUser``; an assistant message is a ``ChatMessageAssistant``
  with its text and its ``ToolCall``s. Back to the Messages API: system messages dropped (the engine sends
  the recorded system prompt), tool messages become ``tool_result`` blocks, adjacent messages of one role
  merged (results before text), empty text blocks left out;
- the tools: the recorded agent's (the engine's definitions), as ``ToolInfo``;
- the model: ``runner-replay/window-<N>``, an offline ``ModelAPI`` registered with ``@modelapi``: its
  context window is the replay's window (``set_model_info``), its token count the runner's
  (:func:`runner.billing.estimate` of the messages in the Messages API's shape: 4 characters of JSON a
  token), and its ``generate()`` (only ``CompactionSummary`` calls it) answers with the runner's
  deterministic fallback summary of the request inspect built, in 20% of the window (as ours gets),
  billed as the summary call: the request's tokens in (:func:`runner.billing.input_tokens`, inspect's
  summary prompt included), the summary's tokens out. The fallback summary reads a summary of its own
  (``runner.protocol.is_summary``) but not inspect's ``[CONTEXT COMPACTION SUMMARY]`` message, so a
  second summary carries nothing of the first (a model would).

The strategies at inspect's defaults, the threshold written out: ``threshold=int(0.9 * window)``, what
the default ``0.9`` resolves to with the model reporting the window as its context.

A compaction inspect cannot bring under its threshold raises ``RuntimeError("Compaction insufficient")``
(live, the sample fails there: ``react()`` does not catch it). Here the open loop goes on: the call
sends what the strategy makes of the input (one ``strategy.compact()`` pass on the same messages; for
``CompactionEdit``, the only one that raised here, where inspect's own passes end: a second pass changes
nothing), over the threshold, perhaps over the window; inspect's own
state stays as inspect left it; the event is counted as ``<strategy> insufficient`` and the first turn
it happens at is printed. Compactions are counted by inspect's own ``CompactionEvent``s
(``<strategy>`` at the threshold, ``<strategy> forced`` for the overflow recovery). Pointers: none
(inspect's placeholders, e.g. ``(Tool result removed)``, name nothing to recover), so ``targets()`` is
empty; cache breakpoints: the engine's default (the newest message).

    /work/peer-inspect/bin/python bench/replay_inspect.py --windows 16000 32000 64000 --out rows.json
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import replay_rows  # noqa: E402
from inspect_ai.event import CompactionEvent  # noqa: E402
from inspect_ai.log import transcript  # noqa: E402
from inspect_ai.model import (  # noqa: E402
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
    CompactionEdit,
    CompactionStrategy,
    CompactionSummary,
    CompactionTrim,
    ContentText,
    GenerateConfig,
    ModelAPI,
    ModelInfo,
    ModelOutput,
    ModelUsage,
    compaction,
    get_model,
    modelapi,
    set_model_info,
)
from inspect_ai.tool import ToolCall, ToolCallError, ToolChoice, ToolInfo, ToolParams  # noqa: E402

from runner.billing import estimate, input_tokens  # noqa: E402
from runner.compaction.fallback import fallback_summary  # noqa: E402
from runner.messages import Message  # noqa: E402
from runner.pricing import Usage  # noqa: E402

PROVIDER = "runner-replay"
THRESHOLD_SHARE = 0.9  # inspect's default threshold: 0.9 of the model's context window
SUMMARY_SHARE = 0.2  # the summary's budget: 20% of the window, as the runner's own strategies get
CHARS_PER_TOKEN = 4


# -- Messages API <-> inspect ChatMessages ------------------------------------------------------------


def _text_blocks(content: Any) -> list[dict[str, Any]]:
    """Non-empty text blocks of an inspect message's content (a string or a list of contents)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    out = []
    for part in content:
        if isinstance(part, ContentText):
            if part.text:
                out.append({"type": "text", "text": part.text})
        else:  # the histories hold text only; anything else is named, never sent empty
            out.append({"type": "text", "text": f"[{part.type}]"})
    return out


def _result_content(content: Any) -> Any:
    return content if isinstance(content, str) else _text_blocks(content)


def to_inspect(message: Message, index: int, calls: dict[str, str]) -> list[ChatMessage]:
    """One recorded message as inspect messages, ids ``m<index>.<k>``; ``calls``: tool name by call id
    (updated from an assistant message)."""
    content = message["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if message["role"] == "assistant":
        texts = [ContentText(text=b["text"]) for b in blocks if b["type"] == "text"]
        tool_calls = [
            ToolCall(id=b["id"], function=b["name"], arguments=dict(b.get("input") or {}))
            for b in blocks
            if b["type"] == "tool_use"
        ]
        calls.update({tc.id: tc.function for tc in tool_calls})
        return [
            ChatMessageAssistant(
                id=f"m{index}.0", content=texts if texts else "", tool_calls=tool_calls or None
            )
        ]
    out: list[ChatMessage] = []
    texts = []
    for block in blocks:
        if block["type"] == "tool_result":
            inner = block.get("content")
            text = (
                inner
                if isinstance(inner, str)
                else [
                    ContentText(text=str(b.get("text", ""))) for b in inner or [] if b.get("type") == "text"
                ]
            )
            flat = text if isinstance(text, str) else "\n".join(t.text for t in text)
            out.append(
                ChatMessageTool(
                    id=f"m{index}.{len(out)}",
                    content=text,
                    tool_call_id=block["tool_use_id"],
                    function=calls.get(block["tool_use_id"]),
                    error=ToolCallError("unknown", flat) if block.get("is_error") else None,
                )
            )
        elif block["type"] == "text":
            texts.append(ContentText(text=block["text"]))
    if texts:
        out.append(
            ChatMessageUser(
                id=f"m{index}.{len(out)}",
                content=texts[0].text if len(texts) == 1 else texts,
                source="input" if index == 0 else None,
            )
        )
    return out


class ToApi:
    """inspect messages back to Messages-API dicts, the same dict for the same message (by id) so a
    view keeps most of its objects from turn to turn."""

    def __init__(self) -> None:
        self._one: dict[str, tuple[ChatMessage, tuple[str, list[dict[str, Any]]]]] = {}
        self._merged: dict[tuple[int, ...], tuple[tuple[ChatMessage, ...], Message]] = {}

    def blocks(self, message: ChatMessage) -> tuple[str, list[dict[str, Any]]]:
        """(role, blocks) of one message; role ``system`` for a system message."""
        cached = self._one.get(message.id or "")
        if cached is not None and cached[0] is message:
            return cached[1]
        if isinstance(message, ChatMessageTool):
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": _result_content(message.content),
            }
            if message.error is not None:
                block["is_error"] = True
            out = ("user", [block])
        elif isinstance(message, ChatMessageAssistant):
            uses = [
                {"type": "tool_use", "id": tc.id, "name": tc.function, "input": tc.arguments}
                for tc in message.tool_calls or []
            ]
            out = ("assistant", _text_blocks(message.content) + uses)
        else:
            out = (message.role, _text_blocks(message.content))
        if message.id:
            self._one[message.id] = (message, out)
        return out

    def view(self, messages: list[ChatMessage]) -> list[Message]:
        """The Messages-API view of an inspect input: system messages dropped, messages without
        blocks dropped, adjacent messages of one role merged (a user message's tool results first)."""
        runs: list[tuple[str, list[tuple[ChatMessage, list[dict[str, Any]]]]]] = []
        for message in messages:
            role, blocks = self.blocks(message)
            if role == "system" or not blocks:
                continue
            if runs and runs[-1][0] == role:
                runs[-1][1].append((message, blocks))
            else:
                runs.append((role, [(message, blocks)]))
        view: list[Message] = []
        for role, parts in runs:
            objects = tuple(m for m, _ in parts)
            key = tuple(id(m) for m in objects)
            cached = self._merged.get(key)
            if cached is not None and all(a is b for a, b in zip(cached[0], objects, strict=True)):
                view.append(cached[1])
                continue
            content = [b for _, bs in parts for b in bs]
            if role == "user":
                content = [b for b in content if b["type"] == "tool_result"] + [
                    b for b in content if b["type"] != "tool_result"
                ]
            merged: Message = {"role": role, "content": content}
            self._merged[key] = (objects, merged)  # the objects kept alive: an id is never reused
            view.append(merged)
        return view

    def counted(self, messages: list[ChatMessage]) -> list[dict[str, Any]]:
        """Each message as one Messages-API dict (system ones too), for counting its tokens."""
        out = []
        for message in messages:
            role, blocks = self.blocks(message)
            out.append({"role": role, "content": blocks})
        return out


# -- the offline model -------------------------------------------------------------------------------


class ReplayModelAPI(ModelAPI):
    """No network: tokens counted as the runner counts them, the summary the runner's fallback summary.
    ``owner`` (a model arg): the contestant billed for each summary call."""

    def __init__(
        self,
        model_name: str,
        base_url: str | None = None,
        api_key: str | None = None,
        config: GenerateConfig | None = None,
        owner: InspectContestant | None = None,
        **model_args: Any,
    ) -> None:
        super().__init__(
            model_name=model_name, base_url=base_url, api_key=api_key, config=config or GenerateConfig()
        )
        self.owner = owner
        self.convert = ToApi()

    async def count_tokens(self, input: str | list[ChatMessage], config: GenerateConfig | None = None) -> int:
        if isinstance(input, str):
            return estimate(input)
        return estimate(self.convert.counted(input))

    async def generate(
        self,
        input: list[ChatMessage],
        tools: list[ToolInfo],
        tool_choice: ToolChoice,
        config: GenerateConfig,
    ) -> ModelOutput:
        assert self.owner is not None, "the replay model answers summary calls of one contestant"
        return self.owner.summarize(input)


@modelapi(name=PROVIDER)
def replay_provider() -> type[ModelAPI]:
    return ReplayModelAPI


def model_name(window: int) -> str:
    return f"{PROVIDER}/window-{window}"


# -- the contestant ----------------------------------------------------------------------------------


class InspectContestant:
    """One of inspect's compaction strategies behind the :class:`runner.replay.Contestant` verbs."""

    def __init__(self, name: str, strategy: CompactionStrategy, window: int):
        self.name = name
        self.tools: list[dict[str, Any]] = []
        self.strategy = strategy
        self.window = window
        self.summary_usage = Usage()
        self.summaries = 0
        self.compactions: Counter[str] = Counter()
        self.budget_chars = int(window * CHARS_PER_TOKEN * SUMMARY_SHARE)
        set_model_info(model_name(window), ModelInfo(context_length=window))
        self.model = get_model(model_name(window), memoize=False, owner=self)
        self.convert = ToApi()
        self.messages: list[ChatMessage] = []  # the kept history, as inspect's agent keeps it
        self.added = 0  # recorded messages converted so far
        self.calls: dict[str, str] = {}
        self.handler: Any = None
        self.input: list[ChatMessage] = []  # the last input sent
        self.compacted: list[ChatMessage] = []  # the last input compact_input returned
        self.sent_upto = 0  # messages of self.messages inspect has taken in
        self._events = 0  # the transcript's events seen
        self.turns = 0  # calls recorded
        self.system: list[ChatMessage] = []
        self.first: list[ChatMessage] = []  # the first recorded message, converted
        self.first_insufficient: int | None = None

    async def start(self, system: str, tools: list[dict[str, Any]]) -> None:
        self.system = [ChatMessageSystem(id="system", content=system)] if system else []
        self.tool_infos = [
            ToolInfo(
                name=t["name"],
                description=t.get("description") or t["name"],
                parameters=ToolParams.model_validate(t.get("input_schema") or {"type": "object"}),
            )
            for t in tools
        ]
        self.messages = list(self.system)
        self._events = len(transcript().events)  # the task's transcript: earlier files' events are in it

    def _take(self, history: list[Message]) -> None:
        """The recorded messages not converted yet, converted and kept; the handler made on the first."""
        for index in range(self.added, len(history)):
            converted = to_inspect(history[index], index, self.calls)
            if index == 0:
                self.first = converted
            self.messages += converted
        self.added = len(history)
        if self.handler is None:  # the prefix as react() derives it: system messages + the sample's input
            prefix = self.system + self.first
            self.handler = compaction(self.strategy, prefix=prefix, tools=self.tool_infos, model=self.model)

    async def _compact(self, force: bool) -> bool:
        """``compact_input`` on the kept history; False when inspect could not compact enough."""
        try:
            self.input, extra = await self.handler.compact_input(self.messages, force=force)
        except RuntimeError as e:
            if "Compaction insufficient" not in str(e):
                raise
            self._count_events()
            self.compactions[f"{type(self.strategy).__name__} insufficient"] += 1
            if self.first_insufficient is None:
                self.first_insufficient = self.turns + 1
                print(
                    f"replay: {self.name} @ {self.window:,}: compaction insufficient first at turn "
                    f"{self.first_insufficient} (live, inspect raises there: {str(e)[:120]})",
                    file=sys.stderr,
                )
            # what the strategy made of the input, over its threshold all the same (inspect's own state
            # is left as inspect left it: the same input, those messages still to take in)
            target = self.compacted + self.messages[self.sent_upto :]
            self.input, extra = await self.strategy.compact(self.model, target, self.tool_infos)
            if extra is not None:
                self.messages.append(extra)
            return False
        self.compacted = self.input
        if extra is not None:
            self.messages.append(extra)
        self.sent_upto = len(self.messages)
        self._count_events()
        return True

    def _count_events(self) -> None:
        events = transcript().events
        for event in events[self._events :]:
            if isinstance(event, CompactionEvent):
                strategy = str((event.metadata or {}).get("strategy", type(self.strategy).__name__))
                forced = (event.metadata or {}).get("trigger") == "forced"
                self.compactions[strategy + (" forced" if forced else "")] += 1
        self._events = len(events)

    async def prepare(self, history: list[Message]) -> list[Message]:
        self._take(history)
        await self._compact(force=False)
        return self.convert.view(self.input)

    def cache_points(self) -> tuple[int, ...]:
        return ()

    async def record(self, usage: Usage) -> None:
        self.turns += 1
        output = ModelOutput.from_content(model=self.model.name, content="")
        output.usage = ModelUsage(
            input_tokens=usage.context_tokens,
            output_tokens=usage.output_tokens,
            total_tokens=usage.context_tokens + usage.output_tokens,
        )
        await self.handler.record_output(self.input, output)

    async def reactive(self) -> bool:
        before = self.convert.view(self.input)
        await self._compact(force=True)
        return self.convert.view(self.input) != before

    def targets(self, view: list[Message]) -> dict[str, str]:
        return {}

    def summarize(self, request: list[ChatMessage]) -> ModelOutput:
        """The summary call inspect built: the fallback summary of its messages, billed."""
        system = "\n".join(str(m.text) for m in request if isinstance(m, ChatMessageSystem)) or None
        messages = self.convert.view(request)
        text = fallback_summary(messages, self.budget_chars)
        usage = Usage(input_tokens=input_tokens(system, messages, []), output_tokens=estimate(text))
        self.summary_usage.add(usage)
        self.summaries += 1
        output = ModelOutput.from_content(model=self.model.name, content=text, stop_reason="stop")
        output.usage = ModelUsage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            total_tokens=usage.input_tokens + usage.output_tokens,
        )
        return output


# -- the rows ----------------------------------------------------------------------------------------

STRATEGIES: dict[str, tuple[type[CompactionStrategy], str]] = {
    "inspect_ai CompactionEdit": (
        CompactionEdit,
        "tool results older than the newest 3 replaced by '(Tool result removed)' (keep_tool_uses=3, "
        "tool inputs kept)",
    ),
    "inspect_ai CompactionTrim": (
        CompactionTrim,
        "the oldest 20% of the conversation after the prefix dropped (preserve=0.8), orphaned calls and "
        "results removed",
    ),
    "inspect_ai CompactionSummary": (
        CompactionSummary,
        "the conversation since the last summary replaced by a summary (inspect's default prompt; the "
        "summary the runner's deterministic fallback summary in 20% of the window, billed at the summary "
        "model's prices)",
    ),
}


def factory(name: str) -> replay_rows.Factory:
    cls, what = STRATEGIES[name]

    def make_row(window: int) -> tuple[str, Any]:
        threshold = int(THRESHOLD_SHARE * window)
        description = (
            f"inspect_ai {cls.__name__}(threshold={threshold}) (inspect's default 0.9 of a {window:,}-token "
            f"context window; every other parameter at its default): {what}; driven as react() drives it "
            "(prefix = system + first user message, compact_input before each call, record_output with the "
            "billed context tokens, force=True on a request over the window)"
        )

        def make(job_dir: Path) -> InspectContestant:
            return InspectContestant(name, cls(threshold=threshold), window)

        return description, make

    return make_row


if __name__ == "__main__":
    replay_rows.main({name: factory(name) for name in STRATEGIES})
