"""The Compactor end to end: the real ``Compactor.prepare`` over a real ``CompactionState`` and ``JobStore``,
driven turn by turn the way ``runner/agent/session.py`` drives it.

- Property: for random histories (parallel tool calls, list-shaped results, text and tool_use mixed,
  ``is_error`` results, results of 0..300k chars, reactive compactions and ``compact`` calls in between),
  every request ``prepare`` returns is API-valid and holds the current user request exactly once.
- Property: every result whose content was replaced can be read back, byte for byte, from the path its
  placeholder names, and the ``recall`` tool finds it there.
- A real ``Session`` with a fake model: reactive compaction after "prompt is too long", the ``compact`` tool.
- The summarizer's circuit breaker, and its gate (concurrency and requests per window) under 20 sessions.
"""

from __future__ import annotations

import bisect
import copy
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from runner.agent.history import History
from runner.agent.runjob import Services
from runner.agent.session import Session
from runner.compaction.compactor import CompactionState, Compactor
from runner.compaction.stages import output_text
from runner.compaction.summarizer import Summarizer
from runner.config import Limits
from runner.jobs import JobSpec
from runner.messages import request_problems, tool_results, tool_uses
from runner.models.base import PromptTooLong, Reply, Request
from runner.offline.readback import recall_page, without_footer
from runner.pricing import Usage
from runner.protocol import PERSISTED_TAG, PLACEHOLDER_PREFIX, saved_path
from runner.rundir.docs import EVENTS, TRANSCRIPT
from runner.rundir.store import JobStore, read_jsonl
from runner.tools.toolset import Toolset

REQUEST = "Survey the package in the workspace and list every TODO (request id 5d0c-compactor)."


# --- random histories -----------------------------------------------------------------------------------

PATTERNS = [
    "abc def ",
    "line of log output 0123456789\n",
    'é ü 中文 🙂 "quoted" \\ back\tslash\n',
    "x",
    '{"json": [1, 2, 3]}\n',
    "CRLF line\r\n",
]
# tool output that looks like a compaction placeholder: a file the agent reads may well contain one
SPOOFS = [
    f"{PERSISTED_TAG}\nFull output saved to: tool-results/not-this-one.txt\nPreview:\n",
    f"{PERSISTED_TAG}\nFull output saved to: ../../../etc/passwd\n",
]


def make_text(pattern: str, n: int, spoof: int | None) -> str:
    text = (pattern * (n // len(pattern) + 1))[:n]
    return SPOOFS[spoof] + text if spoof is not None else text


@dataclass
class Call:
    name: str
    size: int
    pattern: str
    shape: str  # "str" | "list1" | "list2"
    is_error: bool
    spoof: int | None


@dataclass
class Turn:
    text: str | None
    calls: list[Call]
    tool_first: bool
    event: str  # "ok" | "reactive" | "compact_call"


sizes = st.one_of(
    st.integers(0, 200), st.integers(200, 5_000), st.integers(5_000, 40_000), st.integers(40_000, 300_000)
)
calls = st.builds(
    Call,
    name=st.sampled_from(["read", "grep", "bash", "glob"]),
    size=sizes,
    pattern=st.sampled_from(PATTERNS),
    shape=st.sampled_from(["str", "str", "list1", "list2"]),
    is_error=st.booleans(),
    spoof=st.one_of(st.none(), st.none(), st.none(), st.sampled_from([0, 1])),
)
turns = st.builds(
    Turn,
    text=st.one_of(st.none(), st.text(max_size=200), st.sampled_from([REQUEST[:20], "ok"])),
    calls=st.lists(calls, max_size=4),
    tool_first=st.booleans(),
    event=st.sampled_from(["ok"] * 8 + ["reactive", "compact_call"]),
)


@st.composite
def limit_sets(draw) -> Limits:
    head = draw(st.sampled_from([1, 2, 3]))
    target = draw(st.integers(head + 3, 12))
    trigger = draw(st.sampled_from([max(8, target + 1), max(12, target + 1), 20, 50]))
    large = draw(st.sampled_from([200, 5_000, 30_000]))
    return Limits(
        context_char_limit=draw(st.sampled_from([2_000, 10_000, 50_000])),
        snip_head=head,
        snip_target=target,
        snip_trigger=trigger,
        batch_char_limit=draw(st.sampled_from([1_000, 50_000, 200_000])),
        large_result_chars=large,
        preview_chars=draw(st.sampled_from([0, 100, 150])),
        keep_recent_results=draw(st.sampled_from([0, 1, 3])),
        fit_preview_chars=draw(st.sampled_from([0, 100, 1_000])),
        keep_recent_messages=draw(st.sampled_from([1, 2, 5])),
        context_token_limit=draw(st.sampled_from([None, None, 1_000, 5_000])),
    )


def result_content(call: Call) -> str | list:
    text = make_text(call.pattern, call.size, call.spoof)
    if call.shape == "list1":
        return [{"type": "text", "text": text}]
    if call.shape == "list2":
        half = len(text) // 2
        return [{"type": "text", "text": text[:half]}, {"type": "text", "text": text[half:]}]
    return text


def turn_messages(turn: Turn, first_id: int) -> tuple[dict, dict]:
    uses = [
        {
            "type": "tool_use",
            "id": f"toolu_{first_id + i:05d}",
            "name": c.name,
            "input": {"file_path": f"pkg/m{first_id + i}.py", "command": "pytest -q", "pattern": "TODO"},
        }
        for i, c in enumerate(turn.calls)
    ]
    text = [{"type": "text", "text": turn.text}] if turn.text else []
    content = (uses + text) if turn.tool_first else (text + uses)
    if not content:
        content = [{"type": "text", "text": "thinking..."}]
    if uses:
        answer = {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": u["id"],
                    "content": result_content(c),
                    **({"is_error": True} if c.is_error else {}),
                }
                for u, c in zip(uses, turn.calls, strict=True)
            ],
        }
    else:
        answer = {"role": "user", "content": "Your reply was cut off. Continue from where you stopped."}
    return {"role": "assistant", "content": content}, answer


def originals(store: JobStore) -> dict[str, object]:
    """Every tool result's content as it was added, from the transcript."""
    records, warnings = read_jsonl(store.dir / TRANSCRIPT)
    assert warnings == []
    return {
        block["tool_use_id"]: block.get("content") for message in records for block in tool_results(message)
    }


async def check_recoverable(store: JobStore, messages: list[dict], toolset: Toolset) -> int:
    """Every replaced result's placeholder names a file holding the original, and recall reads it."""
    original = originals(store)
    replaced = 0
    for message in messages:
        for block in tool_results(message):
            content = block.get("content")
            if content == original[block["tool_use_id"]]:
                continue  # untouched
            before = output_text(original[block["tool_use_id"]])
            assert isinstance(content, str) and before is not None
            path = saved_path(content)
            assert path is not None and (
                content.startswith(PERSISTED_TAG) or content.startswith(PLACEHOLDER_PREFIX)
            )
            target = store.resolve(path)
            assert target.read_bytes() == before.encode("utf-8"), f"{path} does not hold the original"
            pages, offset = [], 0
            while True:  # page by page, exactly: recall does no newline translation
                recalled = await toolset.run(
                    {
                        "type": "tool_use",
                        "id": "r",
                        "name": "recall",
                        "input": {"path": path, "offset": offset, "limit": 10**7},
                    }
                )
                assert not recalled.get("is_error"), recalled
                page, count, _, offset, total = recall_page(recalled["content"])
                pages.append(without_footer(recalled["content"]))
                if page == count:
                    break
            assert "".join(pages) == before and total == len(before)
            replaced += 1
    return replaced


def check_effective(state: CompactionState) -> None:
    """After ``prepare`` the window is within the limit, or holds only what no stage can shrink: every
    message the model had seen is summarized away, and every new result is persisted or tiny. (A
    compactor that does nothing fails this as soon as a history outgrows its limit.)"""
    if state.window.total <= state.char_limit():
        return
    entries = state.window.entries
    assert not any(e.seen for e in entries), "over the limit with seen messages left unsummarized"
    for entry in entries:
        for block in tool_results(entry.message):
            text = output_text(block.get("content"))
            assert text is None or saved_path(text) or len(text) <= state.limits.fit_preview_chars + 300, (
                f"over the limit with a {len(text)}-char new result left whole"
            )


async def simulate(root: Path, limits: Limits, script: list[Turn], check_files: bool) -> CompactionState:
    """Drive the Compactor like a session: prepare, (model call), record, add the reply and its results."""
    store = JobStore(root / "job")
    await store.open()
    state = CompactionState(limits=limits, active_request=REQUEST)
    history = History(store, state)
    compactor = Compactor(Summarizer(None, "none"))
    history.add({"role": "user", "content": REQUEST})
    workspace = root / "ws"
    workspace.mkdir()
    next_id = 1
    checked = 0
    async with Toolset(str(workspace), ("read",), store) as toolset:
        for turn in script:
            sent = await compactor.prepare(state, store)
            assert request_problems(sent, REQUEST) == []
            assert state.window.total == sum(e.chars for e in state.window.entries)
            check_effective(state)
            if check_files:
                checked += await check_recoverable(store, sent, toolset)
            if turn.event == "reactive":  # the API said "prompt is too long"
                await compactor.reactive(state, store)
                assert request_problems(state.window.messages, REQUEST) == []
                continue
            compactor.record(
                state, Reply([], "tool_use", Usage(input_tokens=max(1, state.window.total // 3))), store
            )
            reply, answer = turn_messages(turn, next_id)
            next_id += len(turn.calls)
            history.add(reply)
            history.add(answer)
            if turn.event == "compact_call" and turn.calls:  # one of the calls was `compact`
                await compactor.compact(state, store)
                assert request_problems(state.window.messages, REQUEST) == []
        sent = await compactor.prepare(state, store)
        assert request_problems(sent, REQUEST) == []
        check_effective(state)
        if check_files:
            checked += await check_recoverable(store, sent, toolset)
    state.checked_replaced = checked  # type: ignore[attr-defined]
    return state


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(limits=limit_sets(), script=st.lists(turns, min_size=1, max_size=40))
def test_every_prepared_request_is_api_valid_with_the_request_once(limits, script):
    with tempfile.TemporaryDirectory() as tmp:
        state = anyio.run(simulate, Path(tmp), limits, script, False)
    for stage in state.record.compactions:
        event(f"stage fired: {stage}")


def test_every_replaced_result_is_recoverable_byte_for_byte():
    checked: list[int] = []

    @settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(limits=limit_sets(), script=st.lists(turns, min_size=1, max_size=25))
    def every_example(limits, script):
        with tempfile.TemporaryDirectory() as tmp:
            state = anyio.run(simulate, Path(tmp), limits, script, True)
        checked.append(state.checked_replaced)
        event(f"results checked: {'some' if state.checked_replaced else 'none'}")

    every_example()
    # an example with nothing replaced checks nothing: the examples together must have checked some
    assert sum(checked) > 0, f"no replaced result was checked in {len(checked)} examples"


small_calls = st.builds(
    Call,
    name=st.sampled_from(["read", "grep"]),
    size=st.integers(0, 3_000),
    pattern=st.sampled_from(PATTERNS),
    shape=st.sampled_from(["str", "list1", "list2"]),
    is_error=st.booleans(),
    spoof=st.one_of(st.none(), st.just(0)),
)
small_turns = st.builds(
    Turn,
    text=st.one_of(st.none(), st.text(max_size=50)),
    calls=st.lists(small_calls, max_size=3),
    tool_first=st.booleans(),
    event=st.sampled_from(["ok"] * 20 + ["reactive", "compact_call"]),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(limits=limit_sets(), script=st.lists(small_turns, min_size=20, max_size=60))
def test_long_sessions_of_small_results_snip_and_stay_valid_and_recoverable(limits, script):
    """Long sessions where the message count, not the size, is what grows: snip's regime."""
    with tempfile.TemporaryDirectory() as tmp:
        state = anyio.run(simulate, Path(tmp), limits, script, True)
    for stage in state.record.compactions:
        event(f"stage fired: {stage}")


def test_a_result_that_looks_like_a_placeholder_is_still_saved_before_it_is_replaced():
    """A file the agent reads may itself start with ``<persisted-output>``; micro_compact must not
    take the path written inside it for the place the output was saved."""
    limits = Limits(context_char_limit=2_000, keep_recent_results=0)
    spoofed = Call("read", 5_000, "abc ", "str", False, 0)
    script = [
        Turn(None, [spoofed], False, "ok"),
        Turn("next", [Call("read", 10, "x", "str", False, None)], False, "ok"),
        Turn("done", [], False, "ok"),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        state = anyio.run(simulate, Path(tmp), limits, script, True)
        assert state.record.compactions["micro_compact"] >= 1


# --- a real Session with a fake model -------------------------------------------------------------------


class ScriptedModel:
    """Answers with the scripted replies in order; an exception in the script is raised instead."""

    name = "scripted"
    server_compaction = True

    def __init__(self, script: list[Reply | Exception]):
        self.script = list(script)
        self.requests: list[list[dict]] = []

    async def create(self, request: Request) -> Reply:
        self.requests.append(copy.deepcopy(request.messages))
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step

    async def aclose(self) -> None:
        return None


def too_long() -> PromptTooLong:
    return PromptTooLong("Error code: 400 - prompt is too long: 212345 tokens > 200000 maximum")


def tool_reply(*calls: tuple[str, str, dict], text: str = "Reading.") -> Reply:
    return Reply(
        [{"type": "text", "text": text}]
        + [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls],
        "tool_use",
        Usage(100, 20),
    )


def final_reply(text: str = "Done: 1 TODO in pkg/mod.py.") -> Reply:
    return Reply([{"type": "text", "text": text}], "end_turn", Usage(100, 20))


async def run_session(
    tmp: Path, model: ScriptedModel, summarizer: Summarizer | None = None, name: str = "job", **limits
) -> tuple[Session, object]:
    workspace = tmp / f"ws-{name}"
    (workspace / "pkg").mkdir(parents=True)
    (workspace / "pkg" / "mod.py").write_text("def f():\n    return 1  # TODO: more\n" * 50)
    spec = JobSpec(
        name=name,
        source=tmp / f"{name}.toml",
        prompt=REQUEST,
        workspace=workspace,
        model="claude-sonnet-4-5",
        system=None,
        tools=("read", "grep"),
        limits=Limits(**limits),
    )
    store = JobStore(tmp / "run" / name)
    await store.open()
    session = Session(
        spec,
        services=Services(
            model=model,
            compactor=Compactor(summarizer or Summarizer(None, "none")),
            summary_model="claude-haiku-4-5",
        ),
        store=store,
    )
    return session, await session.run()


def assert_valid_requests(model: ScriptedModel) -> None:
    for messages in model.requests:
        assert request_problems(messages, REQUEST) == []


@pytest.mark.anyio
async def test_reactive_compaction_then_the_retry_succeeds(tmp_path: Path):
    model = ScriptedModel(
        [tool_reply(("t1", "read", {"file_path": "pkg/mod.py"})), too_long(), final_reply()]
    )
    session, result = await run_session(tmp_path, model)
    assert result.status == "succeeded", result.error
    assert result.compactions == {"reactive_compact": 1}
    assert len(model.requests) == 3
    assert_valid_requests(model)
    retried = model.requests[2]
    assert retried[0]["content"].startswith("[Reactive compact]")
    assert (session.store.dir / "final.md").read_text() == "Done: 1 TODO in pkg/mod.py."
    metrics = json.loads((session.store.dir / "metrics.json").read_text())
    assert metrics["status"] == "succeeded" and metrics["compactions"] == {"reactive_compact": 1}


@pytest.mark.anyio
async def test_two_prompt_too_long_in_a_row_fail_the_job_not_the_caller(tmp_path: Path):
    failing = ScriptedModel([tool_reply(("t1", "read", {"file_path": "pkg/mod.py"})), too_long(), too_long()])
    healthy = ScriptedModel([tool_reply(("u1", "read", {"file_path": "pkg/mod.py"})), final_reply()])
    results = {}

    async def one(name: str, model: ScriptedModel) -> None:
        results[name] = await run_session(tmp_path, model, name=name)

    async with anyio.create_task_group() as tg:  # a batch: one job's failure does not touch the other
        tg.start_soon(one, "bad", failing)
        tg.start_soon(one, "good", healthy)
    session, result = results["bad"]
    assert result.status == "failed"
    assert "prompt is too long" in result.error
    assert result.compactions == {"reactive_compact": 1}, "one reactive compaction, then it gives up"
    assert len(failing.requests) == 3
    assert_valid_requests(failing)
    metrics = json.loads((session.store.dir / "metrics.json").read_text())
    assert metrics["status"] == "failed" and "prompt is too long" in metrics["error"]
    assert results["good"][1].status == "succeeded"


@pytest.mark.anyio
async def test_prompt_too_long_on_a_successful_retry_resets_the_count(tmp_path: Path):
    model = ScriptedModel(
        [
            tool_reply(("t1", "read", {"file_path": "pkg/mod.py"})),
            too_long(),
            tool_reply(("t2", "grep", {"pattern": "TODO"})),
            too_long(),
            final_reply(),
        ]
    )
    _, result = await run_session(tmp_path, model)
    assert result.status == "succeeded", result.error
    assert result.compactions == {"reactive_compact": 2}
    assert_valid_requests(model)


@pytest.mark.anyio
async def test_compact_tool_runs_after_the_whole_batch(tmp_path: Path):
    model = ScriptedModel(
        [
            tool_reply(
                ("t1", "read", {"file_path": "pkg/mod.py"}),
                ("t2", "compact", {}),
                ("t3", "grep", {"pattern": "TODO"}),
                text="Read, then compact.",
            ),
            final_reply(),
        ]
    )
    session, result = await run_session(tmp_path, model)
    assert result.status == "succeeded", result.error
    assert result.compactions == {"compact_tool": 1}
    assert_valid_requests(model)
    after = model.requests[1]
    assert after[0]["content"].startswith("[Compacted]")
    uses = [u["id"] for m in after for u in tool_uses(m)]
    answered = [r["tool_use_id"] for m in after for r in tool_results(m)]
    assert uses == answered == ["t1", "t2", "t3"], "every tool_use of the batch has its result"
    records, _ = read_jsonl(session.store.dir / TRANSCRIPT)
    assert [r["tool_use_id"] for m in records for r in tool_results(m)] == ["t1", "t2", "t3"]
    result_of = {r["tool_use_id"]: r for m in after for r in tool_results(m)}
    assert "TODO" in result_of["t1"]["content"] and not result_of["t1"].get("is_error")
    events, _ = read_jsonl(session.store.dir / EVENTS)
    assert [e["stage"] for e in events if e["stage"] != "model_call"] == ["compact_tool"]


# --- the summarizer: circuit breaker and gate -----------------------------------------------------------


class FailingModel:
    name = "failing"
    server_compaction = True

    def __init__(self, fail: int | None = None):
        self.calls = 0
        self.fail = fail  # fail the first `fail` calls, then answer; None: always fail

    async def create(self, request: Request) -> Reply:
        self.calls += 1
        if self.fail is None or self.calls <= self.fail:
            raise RuntimeError("529 overloaded")
        return Reply(
            [{"type": "text", "text": "Goal: survey. Next step: report."}], "end_turn", Usage(50, 10)
        )

    async def aclose(self) -> None:
        return None


async def compact_turns(tmp: Path, compactor: Compactor, n: int) -> tuple[History, list[str]]:
    store = JobStore(tmp / "job")
    await store.open()
    state = CompactionState(limits=Limits(), active_request=REQUEST)
    history = History(store, state)
    history.add({"role": "user", "content": REQUEST})
    summaries = []
    for i in range(n):
        state.window.mark_seen()
        history.add(tool_reply((f"c{i}", "read", {"file_path": f"f{i}.py"})).message())
        history.add(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"c{i}", "content": f"contents of f{i}.py"}
                ],
            }
        )
        await compactor.compact(state, store)
        summaries.append(state.window.messages[0]["content"])
        assert request_problems(state.window.messages, REQUEST) == []
    return history, summaries


@pytest.mark.anyio
async def test_circuit_breaker_stops_calling_a_failing_summarizer(tmp_path: Path):
    model = FailingModel()
    summarizer = Summarizer(model, "claude-haiku-4-5")
    history, summaries = await compact_turns(tmp_path, Compactor(summarizer), 7)
    state = history.state
    assert model.calls == 3 == state.limits.max_summary_failures
    assert summarizer.calls == 3
    assert state.record.compactions["compact_tool"] == 7, "every compaction still happened"
    assert all("Summary built without a model" in s for s in summaries)
    await history.writer.flush()  # what the session's next call (or the job's end) does
    failures = [e for e in read_jsonl(history.writer.dir / EVENTS)[0] if e["stage"] == "summary_failed"]
    assert [e["consecutive_failures"] for e in failures] == [1, 2, 3]


@pytest.mark.anyio
async def test_circuit_breaker_counts_consecutive_failures_only(tmp_path: Path):
    model = FailingModel(fail=2)  # two failures, then a working model
    history, summaries = await compact_turns(tmp_path, Compactor(Summarizer(model, "claude-haiku-4-5")), 5)
    state = history.state
    assert model.calls == 5
    assert ["Summary built without a model" in s for s in summaries] == [True, True, False, False, False]
    assert "Goal: survey." in summaries[-1] and state.summary_failures == 0


class SlowModel:
    """A summary model that takes a while, recording when each call starts and how many overlap."""

    name = "slow"
    server_compaction = True

    def __init__(self, delay: float):
        self.delay = delay
        self.starts: list[float] = []
        self.active = 0
        self.peak = 0

    async def create(self, request: Request) -> Reply:
        self.starts.append(anyio.current_time())
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            await anyio.sleep(self.delay)
        finally:
            self.active -= 1
        return Reply([{"type": "text", "text": "Goal: survey."}], "end_turn", Usage(50, 10))

    async def aclose(self) -> None:
        return None


def most_in_any_window(starts: list[float], window: float) -> int:
    """The most starts in any half-open window [t, t + window); every window starting at a start is
    checked, which covers every window (a window's count only changes at a start)."""
    starts = sorted(starts)
    return max((bisect.bisect_left(starts, t + window) - i for i, t in enumerate(starts)), default=0)


@pytest.mark.anyio
async def test_summary_gate_bounds_concurrency_and_rate_across_20_sessions(tmp_path: Path):
    max_concurrent, rate, window = 3, 6, 0.4
    model = SlowModel(delay=0.12)
    compactor = Compactor(
        Summarizer(
            model,
            "claude-haiku-4-5",
            max_concurrent=max_concurrent,
            requests_per_minute=rate,
            window_s=window,
        )
    )
    per_session = 2

    async def session(i: int) -> None:
        _, summaries = await compact_turns(tmp_path / f"s{i}", compactor, per_session)
        assert all("Goal: survey." in s for s in summaries), "every summary came from the model"

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(session, i)
    assert len(model.starts) == 20 * per_session
    assert model.peak <= max_concurrent
    assert model.peak == max_concurrent, "the test never reached the concurrency limit"
    # a start is recorded a few microseconds after the gate let it through; allow 1 ms for that
    assert most_in_any_window(model.starts, window - 0.001) <= rate
    assert most_in_any_window(model.starts, window * 1.5) > rate, "the test never pushed the rate limit"


def test_the_recorder_forgets_texts_that_left_the_window() -> None:
    """A long job's summaries and string messages are not all kept: only those still in view."""
    from runner.compaction.context import Recorder
    from runner.compaction.window import Entry

    recorder = Recorder()
    window: list[Entry] = []
    for turn in range(2_000):
        message = {"role": "user", "content": f"summary {turn}: " + "x" * 100}
        recorder.summary(message, f"summaries/{turn:04d}.md", "Compacted", where="transcript.jsonl")
        window = [Entry.of(message, None)]  # each summary replaces the one before
        refs = recorder.encode(window)
        assert refs[0]["m"]["summary"] == f"summaries/{turn:04d}.md"
    assert len(recorder._by_text) <= 4 * len(window) + 64 + 1


@pytest.mark.anyio
async def test_a_last_calls_prepare_summarizes_without_a_model(tmp_path: Path):
    """``prepare(model_summary=False)`` (a job's last call, with one call's time left) compacts a window
    over its limit with the fallback summary and asks the summary model nothing; ``prepare`` asks it."""

    async def over_the_limit(name: str) -> History:
        store = JobStore(tmp_path / name)
        await store.open()
        state = CompactionState(limits=Limits(context_char_limit=4_000), active_request=REQUEST)
        history = History(store, state)
        history.add({"role": "user", "content": REQUEST})
        for i in range(8):  # text alone: only a history compaction can bring it under the limit
            history.add({"role": "assistant", "content": f"step {i}: " + "x" * 1_000})
            history.add({"role": "user", "content": f"go on {i}"})
        history.state.window.mark_seen()
        return history

    model = FailingModel(fail=0)
    compactor = Compactor(Summarizer(model, "claude-haiku-4-5"))
    last = await over_the_limit("last")
    messages = await compactor.prepare(last.state, last.writer, model_summary=False)
    assert model.calls == 0
    assert "Summary built without a model" in messages[0]["content"]
    assert last.state.record.compactions["compact_history"] == 1
    assert sum(len(str(m["content"])) for m in messages) < 4_000
    usual = await over_the_limit("usual")
    messages = await compactor.prepare(usual.state, usual.writer)
    assert model.calls == 1 and "Goal: survey." in messages[0]["content"]
