"""A small scripted model for the tests of the runner's guarantees, which must hold with any model.

:class:`ScriptedModel` is a ``Model`` (``runner/models/base.py``) that plays a list of turns, each one
or more tool calls given by name and input, then a final text. It keeps no position of its own: the
turn it plays is read from the request alone (one more than the newest of its own tool_use ids the
request carries, :data:`ID_PATTERN`), so a resumed job, a retried call or the same request sent by
another process is answered alike, and a job killed and resumed gets the replies an uninterrupted one
gets. A request without tools to call (``tool_choice`` ``none``: the runner's last call) or past the
last turn gets the final text. Its usage is counted from the request as ``runner/billing.py`` counts
(4 characters of JSON a token).

Ways to drive it:

- in this process: pass it as a job's or a batch's model;
- the CLI with ``backend = "offline"``, where the runner builds its model at its one seam for it
  (``runner.execution.backend.stand_in``): in this process with :func:`play_instead_of_the_stand_in`,
  or as a real process (killed or not) with :func:`scripted_runner`, ``python tests/scripted.py
  SCRIPT ARGS``, which is ``python -m runner ARGS`` with the model read from SCRIPT (its
  :meth:`ScriptedModel.save`); the summarizer is then the runner's own fallback, without a model;
- the CLI on the anthropic backend (the real SDK over HTTP): :func:`scripted_api` serves it from the
  emulator (a thread of this process) and gives the environment that points the runner at it; the
  emulator bills each reply from the request (without a prompt cache unless asked) and answers the
  runner's summary requests itself. (A process that imports the SDK starts ~1.5 s slower.)
"""

from __future__ import annotations

import json
import re
import runpy
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from runner.billing import estimate, input_tokens
from runner.messages import text_of, tool_results, tool_uses
from runner.models.base import Reply, Request
from runner.pricing import Usage
from runner.protocol import subagent_result

if TYPE_CHECKING:  # the emulator imports the SDK: a process that runs the runner offline does without
    import pytest

    from runner.emulator.server import EmulatorHandle

Call = tuple[str, dict[str, Any]]  # a tool's name and its input
Turn = Call | Sequence[Call] | Exception  # one call, several in one reply, or a call that fails
Final = str | Callable[[Request], str]

ID_PATTERN = re.compile(r"toolu_sc(\d{4})_\d+")
NO_CACHE = 10**9  # the emulator's min_cacheable_tokens: no prefix is ever cached


def call_id(turn: int, k: int) -> str:
    return f"toolu_sc{turn:04d}_{k}"


def turn_of(request: Request) -> int:
    """The turn a request asks for: one past the newest turn whose call it carries (0: none)."""
    seen = [int(n) for n in ID_PATTERN.findall(json.dumps(request.messages))]
    return max(seen) + 1 if seen else 0


class ScriptedModel:
    """Plays ``turns`` (each a ``(name, input)`` call, a list of them, or an exception the call raises),
    then ``final`` (a text, or a function of the request that gets it). Each reply with calls opens
    with a text: ``Turn N.`` and ``notes`` characters of notes (as a model that thinks aloud: history
    only a summary takes out). A request whose first message is the prompt of one of ``subagents``
    (a ``task`` call's), as a string or a text block, or a summary quoting it as the current request,
    is answered by that one's model. Every request it answered is in ``requests``
    (a subagent's in its model's too). ``delay``: seconds each call takes (a model's latency)."""

    name = "scripted"
    server_compaction = False

    def __init__(
        self,
        turns: Sequence[Turn],
        final: Final = "Done.",
        *,
        notes: int = 0,
        subagents: dict[str, ScriptedModel] | None = None,
        delay: float = 0.0,
    ):
        self.turns: list[list[Call] | Exception] = [
            turn if isinstance(turn, Exception) else [turn] if isinstance(turn, tuple) else list(turn)
            for turn in turns
        ]
        self.final = final
        self.notes = notes
        self.subagents = dict(subagents or {})
        self.delay = delay
        self.requests: list[Request] = []

    def script(self) -> dict[str, Any]:
        if callable(self.final) or any(isinstance(t, Exception) for t in self.turns):
            raise TypeError("a saved script's turns are calls and its final text a string")
        subagents = {prompt: model.script() for prompt, model in self.subagents.items()}
        return {
            "turns": self.turns,
            "final": self.final,
            "notes": self.notes,
            "subagents": subagents,
            "delay": self.delay,
        }

    def save(self, path: Path) -> Path:
        """The script as JSON (for :func:`scripted_runner`); the final texts must be strings."""
        path.write_text(json.dumps(self.script()))
        return path

    @classmethod
    def from_script(cls, data: dict[str, Any]) -> ScriptedModel:
        subagents = {prompt: cls.from_script(s) for prompt, s in data.get("subagents", {}).items()}
        turns = [[tuple(c) for c in t] for t in data["turns"]]
        return cls(
            turns, data["final"], notes=data["notes"], subagents=subagents, delay=data.get("delay", 0.0)
        )

    @classmethod
    def load(cls, path: Path | str) -> ScriptedModel:
        return cls.from_script(json.loads(Path(path).read_text()))

    def text(self, turn: int) -> str:
        filler = "".join(f" note {turn}.{i}: checked." for i in range(self.notes // 18 + 1))
        return f"Turn {turn + 1}." + filler[: self.notes]

    def reply_to(self, request: Request) -> tuple[list[dict[str, Any]], str]:
        turn = turn_of(request)
        if (request.tool_choice or {}).get("type") == "none" or turn >= len(self.turns):
            text = self.final(request) if callable(self.final) else self.final
            return [{"type": "text", "text": text}], "end_turn"
        step = self.turns[turn]
        if isinstance(step, Exception):
            raise step
        calls = [
            {"type": "tool_use", "id": call_id(turn, k), "name": name, "input": args}
            for k, (name, args) in enumerate(step)
        ]
        return [{"type": "text", "text": self.text(turn)}, *calls], "tool_use"

    async def create(self, request: Request) -> Reply:
        self.requests.append(request)
        if self.delay:
            await anyio.sleep(self.delay)
        first = text_of(request.messages[0]) if request.messages else ""
        for prompt, model in self.subagents.items():  # as sent (a string or a text block), or summarized
            if first == prompt or f"Current user request:\n{prompt}\n" in first:
                return await model.create(request)
        content, stop_reason = self.reply_to(request)
        usage = Usage(
            input_tokens=input_tokens(request.system, request.messages, request.tools),
            output_tokens=estimate(content),
        )
        return Reply(content=content, stop_reason=stop_reason, usage=usage)

    async def aclose(self) -> None:
        return None


def reads(paths: Sequence[str], per_turn: int = 1) -> list[Turn]:
    """Turns reading ``paths`` in order, ``per_turn`` files a turn."""
    return [
        [("read", {"file_path": p}) for p in paths[i : i + per_turn]] for i in range(0, len(paths), per_turn)
    ]


def answered_reads(request: Request) -> list[str]:
    """The paths of the reads whose results ``request`` carries without an error, in order."""
    answered = {b["tool_use_id"] for m in request.messages for b in tool_results(m) if not b.get("is_error")}
    return [
        u["input"]["file_path"]
        for m in request.messages
        for u in tool_uses(m)
        if u["name"] == "read" and u["id"] in answered
    ]


def subagent_results(request: Request) -> list[tuple[str, str, str, bool]]:
    """The subagents' results ``request`` carries, each as :func:`runner.protocol.subagent_result` reads
    its head (directory, status, report, cut), in order."""
    heads = (subagent_result(str(r["content"])) for m in request.messages for r in tool_results(m))
    return [h for h in heads if h]


def files_under(root: Path, suffix: str = ".py") -> list[str]:
    """The files of a workspace with ``suffix``, relative and sorted (a script's reads)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob(f"*{suffix}") if p.is_file())


def play_instead_of_the_stand_in(monkeypatch: pytest.MonkeyPatch, model: ScriptedModel) -> None:
    """The CLI run in this process with ``backend = "offline"`` plays ``model`` (for this test)."""
    from runner.execution import backend

    monkeypatch.setattr(backend, "stand_in", lambda **_: model)


def scripted_runner(script: Path, *args: str) -> list[str]:
    """The argv of a real runner process with ``args`` whose offline backend plays the model saved in
    ``script`` (:meth:`ScriptedModel.save`)."""
    return [sys.executable, str(Path(__file__).resolve()), str(script), *args]


def main() -> None:
    """``python scripted.py SCRIPT ARGS``: ``python -m runner ARGS``, its offline model SCRIPT's."""
    from runner.execution import backend

    model = ScriptedModel.load(sys.argv.pop(1))
    backend.stand_in = lambda **_: model  # type: ignore[assignment]
    sys.argv[0] = "runner"
    runpy.run_module("runner", run_name="__main__", alter_sys=True)


@dataclass
class ScriptedApi:
    """The emulator serving a scripted model: ``env`` points the runner's anthropic backend at it."""

    emulator: EmulatorHandle
    env: dict[str, str]


CONFIG_TOML = '[runner]\nbackend = "anthropic"\n'  # a config.toml for a run on the scripted API


def answer_with(emulator: EmulatorHandle, model: ScriptedModel) -> ScriptedModel:
    """The running ``emulator`` answers with ``model`` wherever its default replier (the stand-in)
    would: a request its ``script`` and its summaries leave. Returns ``model`` (its ``requests`` are
    what the emulator asked it). ``reconfigure`` and ``reset`` keep it."""
    emulator.state.replies = lambda _batch_size: model
    return model


@contextmanager
def scripted_api(model: ScriptedModel, **config: Any) -> Iterator[ScriptedApi]:
    """The emulator (``EmulatorConfig(**config)``, without a prompt cache unless ``min_cacheable_tokens``
    is given) answering with ``model``, for the duration of the ``with`` block."""
    from runner.emulator.config import EmulatorConfig
    from runner.emulator.server import running_emulator

    with running_emulator(EmulatorConfig(**{"min_cacheable_tokens": NO_CACHE, **config})) as emu:
        answer_with(emu, model)
        yield ScriptedApi(emu, {"ANTHROPIC_BASE_URL": emu.base_url, "ANTHROPIC_API_KEY": "emulator"})


if __name__ == "__main__":
    main()
