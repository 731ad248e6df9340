"""Issue 40, part 1: one reply's work is bounded and runs off the event loop, whatever the reply holds.

A hostile model (scripted: a tiny in-test model for the loop's own measurements, the emulator's
``script`` behind a real ``python -m runner run`` subprocess for SIGTERM) sends one reply of 4,000
``memory create`` calls, or of 1,000 ``read`` calls with distinct ``view_range``s of a 20 MB file. The
bounds are the issue's: the event loop never stalls for 1 s (a concurrent task ticking every 50 ms
records its longest gap), SIGTERM is acted on within 2 s; and a reply of more calls than
``max_tool_calls_per_reply`` gets an error result for each call past it, every ``tool_use`` answered.
CI runs these as root (asserted when ``CI`` is set), as the runner often runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import runner_env

from runner.agent.runjob import Services
from runner.agent.session import Session
from runner.compaction.compactor import Compactor
from runner.compaction.summarizer import Summarizer
from runner.config import ConfigError, Limits, load_settings
from runner.emulator.config import EmulatorConfig, ScriptedReply
from runner.emulator.server import running_emulator
from runner.jobs import JobSpec
from runner.messages import request_problems
from runner.models.base import Reply, Request
from runner.pricing import Usage
from runner.rundir.store import JobStore, read_jsonl
from runner.tools.file_calls import file_tool_definitions
from runner.tools.toolset import Toolset

MEMORY_CALLS = 4_000
READ_CALLS = 1_000
BIG_LINES = 200_000  # of 100 bytes: a 20 MB file
TICK_S = 0.05


def test_ci_runs_these_attacks_as_root() -> None:
    if os.environ.get("CI"):
        assert os.geteuid() == 0, "the reply-bounds attacks must run as root in CI"


def memory_creates(n: int) -> list[dict[str, Any]]:
    return [
        {
            "type": "tool_use",
            "id": f"toolu_m{i}",
            "name": "memory",
            "input": {"command": "create", "path": f"/memories/n{i}.md", "file_text": f"note {i}\n"},
        }
        for i in range(n)
    ]


def big_file(ws: Path) -> Path:
    ws.mkdir(exist_ok=True)
    path = ws / "big.txt"
    path.write_bytes((b"x" * 99 + b"\n") * BIG_LINES)
    return path


def distinct_reads(path: Path, n: int) -> list[dict[str, Any]]:
    """``n`` reads of ``path``, each of three lines, spread over the whole file, the deepest first (the
    calls a cap lets run are the dearest)."""
    step = BIG_LINES // n
    return [
        {
            "type": "tool_use",
            "id": f"toolu_r{i}",
            "name": "read",
            "input": {"file_path": str(path), "view_range": [first, first + 2]},
        }
        for i in range(n)
        for first in [BIG_LINES - (i + 1) * step + 1]
    ]


class ScriptedModel:
    """The ``Model`` protocol, answering with ``replies`` (each a list of content blocks) in turn,
    then a last text reply."""

    name = "scripted"
    server_compaction = False

    def __init__(self, replies: list[list[dict[str, Any]]]):
        self.replies = list(replies)
        self.requests: list[Request] = []

    async def create(self, request: Request) -> Reply:
        self.requests.append(request)
        usage = Usage(input_tokens=100, output_tokens=100)
        if self.replies:
            return Reply(content=self.replies.pop(0), stop_reason="tool_use", usage=usage)
        return Reply(content=[{"type": "text", "text": "Done."}], stop_reason="end_turn", usage=usage)

    async def aclose(self) -> None:
        pass


async def loop_gap_while(work: Callable[[], Any]) -> tuple[Any, float]:
    """``await work()`` beside a task ticking every 50 ms: its result and the longest the ticker waited
    past its 50 ms (the event loop's longest stall)."""
    gap = 0.0
    done = anyio.Event()

    async def tick() -> None:
        nonlocal gap
        last = time.monotonic()
        while not done.is_set():
            await anyio.sleep(TICK_S)
            now = time.monotonic()
            gap = max(gap, now - last - TICK_S)
            last = now

    result: Any = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(tick)
        await anyio.sleep(2 * TICK_S)  # the ticker is running before the work starts
        try:
            result = await work()
        finally:
            done.set()
    return result, gap


async def session_of(tmp_path: Path, ws: Path, reply: list[dict[str, Any]], **limits: Any) -> Session:
    ws.mkdir(exist_ok=True)
    spec = JobSpec(
        name="hostile",
        source=Path("hostile.toml"),
        prompt="Work.",
        workspace=ws,
        model="claude-sonnet-5-5",
        system=None,
        tools=("read", "glob"),
        limits=Limits(max_retries=0, max_turns=5, **limits),
    )
    store = JobStore(tmp_path / "job")
    await store.open()
    file_tool_definitions()  # built once a process: not the reply's work
    return Session(
        spec,
        services=Services(
            model=ScriptedModel([reply]), compactor=Compactor(Summarizer(None, "m")), summary_model="m"
        ),
        store=store,
    )


def answers(tmp_path: Path) -> list[dict[str, Any]]:
    """The tool results of the job's first tool batch, from its transcript."""
    transcript, _ = read_jsonl(tmp_path / "job" / "transcript.jsonl")
    batch = next(
        m for m in transcript if m["role"] == "user" and isinstance(m["content"], list) and m["content"]
    )
    return [b for b in batch["content"] if b.get("type") == "tool_result"]


# -- the event loop, in process ---------------------------------------------------------------------


@pytest.mark.anyio
async def test_4000_memory_creates_in_one_reply_never_stall_the_loop(tmp_path: Path) -> None:
    reply = memory_creates(MEMORY_CALLS)
    session = await session_of(
        tmp_path, tmp_path / "ws", reply, max_tool_calls_per_reply=MEMORY_CALLS, max_memory_entries=5_000
    )
    record, gap = await loop_gap_while(session.run)
    assert record.status == "succeeded", record
    results = answers(tmp_path)
    assert [r["tool_use_id"] for r in results] == [c["id"] for c in reply]
    assert not [r for r in results if r.get("is_error")][:3]  # every create really ran
    assert len(os.listdir(tmp_path / "job" / "memories")) == MEMORY_CALLS
    print(f"longest loop gap: {gap:.3f} s")
    assert gap < 1.0, f"the event loop stalled {gap:.2f} s"


@pytest.mark.anyio
async def test_the_memory_folder_has_an_entry_cap_and_keeps_its_byte_cap(tmp_path: Path) -> None:
    from runner.tools.memory import MemoryTool
    from runner.tools.memory_files import MAX_TOTAL_BYTES

    tool = MemoryTool(str(tmp_path), max_entries=5)

    async def run(**args: Any) -> dict[str, Any]:
        return await tool.run("toolu_1", dict(args))

    made = [await run(command="create", path=f"/memories/d/n{i}.md", file_text="x") for i in range(6)]
    assert [bool(r.get("is_error")) for r in made] == [False] * 4 + [True] * 2  # d/ and four files
    assert "6 entries" in made[4]["content"] and "max_memory_entries" in made[4]["content"]
    assert not (await run(command="create", path="/memories/d/n0.md", file_text="rewritten")).get("is_error")
    moved = await run(command="rename", old_path="/memories/d/n0.md", new_path="/memories/e/n0.md")
    assert moved["is_error"] and "max_memory_entries" in moved["content"]  # e/ would be the sixth
    assert not (await run(command="delete", path="/memories/d/n1.md")).get("is_error")
    assert not (await run(command="rename", old_path="/memories/d/n0.md", new_path="/memories/e/n0.md")).get(
        "is_error"
    )
    # the running count is what a walk of the folder finds
    on_disk = sorted(tmp_path.joinpath("memories").rglob("*"))
    assert tool._tally is not None and tool._tally.entries == len(on_disk) == 5
    assert tool._tally.bytes == sum(p.lstat().st_size for p in on_disk)
    (tmp_path / "big").mkdir()
    big = MemoryTool(str(tmp_path / "big"))
    blob = "y" * (200 * 1024)
    made = [
        await big.run(f"toolu_{i}", {"command": "create", "path": f"/memories/b{i}", "file_text": blob})
        for i in range(25)
    ]
    assert sum(not r.get("is_error") for r in made) == MAX_TOTAL_BYTES // len(blob)
    assert "over its" in made[-1]["content"]


@pytest.mark.anyio
async def test_1000_reads_of_a_20_mb_file_in_one_reply_answered_past_the_cap(tmp_path: Path) -> None:
    """At the default cap: its first calls run, every other one is answered "not run", the loop free."""
    path = big_file(tmp_path / "ws")
    reply = distinct_reads(path, READ_CALLS)
    session = await session_of(tmp_path, tmp_path / "ws", reply)
    record, gap = await loop_gap_while(session.run)
    cap = Limits().max_tool_calls_per_reply
    results = answers(tmp_path)
    assert record.status == "succeeded", record
    assert [r["tool_use_id"] for r in results] == [c["id"] for c in reply]
    assert not [r for r in results[:cap] if r.get("is_error")][:3]
    assert results[cap + 5]["content"].startswith(
        f"not run: this reply made {READ_CALLS:,} tool calls, over max_tool_calls_per_reply = {cap}"
    )
    assert all(r.get("is_error") and "not run" in r["content"] for r in results[cap:])
    print(f"longest loop gap: {gap:.3f} s")
    assert gap < 1.0, f"the event loop stalled {gap:.2f} s"


@pytest.mark.slow  # 1,000 reads of 10 MB on average: about 10 s of work
@pytest.mark.anyio
async def test_1000_reads_of_a_20_mb_file_that_all_run_never_stall_the_loop(tmp_path: Path) -> None:
    """The cap raised past the reply: every read runs (none abandoned for want of a thread), the
    loop stays free."""
    path = big_file(tmp_path / "ws")
    reply = distinct_reads(path, READ_CALLS)
    session = await session_of(tmp_path, tmp_path / "ws", reply, max_tool_calls_per_reply=READ_CALLS)
    record, gap = await loop_gap_while(session.run)
    assert record.status == "succeeded", record
    results = answers(tmp_path)
    assert [r["tool_use_id"] for r in results] == [c["id"] for c in reply]
    assert not [r for r in results if r.get("is_error")][:3]  # none abandoned
    assert all(r["content"] == "\n".join(["x" * 99] * 3) for r in results), results[0]
    print(f"longest loop gap: {gap:.3f} s")
    assert gap < 1.0, f"the event loop stalled {gap:.2f} s"


# -- the cap ----------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_calls_past_the_cap_get_error_results_and_the_history_stays_valid(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.py").write_text("x = 1\n")
    store = JobStore(tmp_path / "job")
    await store.open()
    calls = [
        {
            "type": "tool_use",
            "id": f"toolu_{i}",
            "name": "read",
            "input": {"file_path": "a.py", "view_range": [1, i + 1]},
        }
        for i in range(7)
    ]
    async with Toolset(
        str(tmp_path / "ws"), ("read",), store, limits=Limits(max_tool_calls_per_reply=3)
    ) as tools:
        results = await tools.run_batch(calls)
        # a capped call's id is used: the model cannot send it again as a new call
        again = await tools.run_batch([{**calls[5], "id": "toolu_5"}], turn=1)
    assert [r["tool_use_id"] for r in results] == [c["id"] for c in calls]
    assert [bool(r.get("is_error")) for r in results] == [False] * 3 + [True] * 4
    assert results[3]["content"] == (
        "not run: this reply made 7 tool calls, over max_tool_calls_per_reply = 3; only its first 3 "
        "were taken. Make at most 3 calls in one reply, and send this one again in a later reply if it "
        "is still needed"
    )
    assert again[0]["is_error"] and "already used" in again[0]["content"]
    history = [
        {"role": "user", "content": "Work."},
        {"role": "assistant", "content": calls},
        {"role": "user", "content": results},
    ]
    assert request_problems(history) == []


def test_the_caps_are_limits_validated_like_their_neighbours(tmp_path: Path) -> None:
    assert Limits().max_tool_calls_per_reply == 64 and Limits().max_memory_entries == 1_000
    for field in ("max_tool_calls_per_reply", "max_memory_entries"):
        for bad in (0, -1, True, "many", 10**9):
            with pytest.raises(ValueError):
                Limits(**{field: bad})
    (tmp_path / "config.toml").write_text("[limits]\nmax_tool_calls_per_reply = 0\n")
    with pytest.raises(ConfigError, match="max_tool_calls_per_reply"):
        load_settings(tmp_path / "config.toml")


# -- SIGTERM, a real runner -------------------------------------------------------------------------


INTERRUPTED = "interrupted: running jobs were cancelled"  # the runner's last line, its files written


def _sigterm_during(
    tmp_path: Path, reply: list[dict[str, Any]], limits: str, running: Callable[[int], bool]
) -> tuple[subprocess.Popen, str, float, float]:
    """``runner run`` on one job whose model's first reply is ``reply`` (through the emulator); once
    ``running(pid)`` says the reply's calls are under way, SIGTERM. Returns the ended process, its
    stderr, how long after the signal the runner said it was interrupted (every job cancelled, its
    files and the run's written) and how long after it the process was gone."""
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "j.toml").write_text(
        f'workspace = "{tmp_path / "ws"}"\nprompt = "Work."\ntools = ["read", "glob"]\n'
        f"[limits]\ntimeout_s = 600\nmax_output_tokens = 128000\n{limits}"
    )
    (tmp_path / "config.toml").write_text('[runner]\nbackend = "anthropic"\n')
    script = [ScriptedReply(content=reply, stop_reason="tool_use")]
    with running_emulator(EmulatorConfig(script=script)) as emu:
        proc = subprocess.Popen(
            [sys.executable, "-m", "runner", "run", "jobs"],
            cwd=tmp_path,
            env=runner_env(ANTHROPIC_BASE_URL=emu.base_url, ANTHROPIC_API_KEY="emulator"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        lines: list[tuple[float, str]] = []  # stderr, each line with when it came

        def drain(stream: Any, into: list[tuple[float, str]] | None) -> None:
            for line in stream:
                if into is not None:
                    into.append((time.monotonic(), line))

        readers = [
            threading.Thread(target=drain, args=(proc.stderr, lines), daemon=True),
            threading.Thread(target=drain, args=(proc.stdout, None), daemon=True),
        ]
        for reader in readers:
            reader.start()
        try:
            deadline = time.monotonic() + 120
            while not running(proc.pid):
                assert proc.poll() is None, "".join(line for _, line in lines)
                assert time.monotonic() < deadline, "the reply's calls never started"
                time.sleep(0.01)
            proc.send_signal(signal.SIGTERM)
            sent = time.monotonic()
            proc.wait(timeout=60)
            exited = time.monotonic() - sent
            for reader in readers:
                reader.join(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
    err = "".join(line for _, line in lines)
    acted = next((at - sent for at, line in lines if line.startswith(INTERRUPTED)), float("inf"))
    return proc, err, acted, exited


def _ended_cancelled(tmp_path: Path, proc: subprocess.Popen, err: str, acted: float, exited: float) -> Path:
    print(f"SIGTERM acted on in {acted:.2f} s, the process gone in {exited:.2f} s")
    assert proc.returncode == 130, err[-3000:]
    assert acted < 2, f"the runner took {acted:.1f} s to act on SIGTERM"  # the bound
    # then the interpreter's own exit (its collection of the heap: ~0.5 s quiet, more on a loaded host)
    assert exited < 10, f"the runner's process took {exited:.1f} s to end"
    [run_dir] = [p for p in (tmp_path / "runs").iterdir() if not p.is_symlink()]
    assert json.loads((run_dir / "j" / "metrics.json").read_text())["status"] == "cancelled"
    assert (run_dir / "j" / "final.md").read_text().strip()
    return run_dir / "j"


def test_sigterm_is_acted_on_within_2_s_during_4000_memory_creates(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    found: list[Path] = []

    def creating(_pid: int) -> bool:  # the reply's creates are under way
        if not found:
            found.extend((tmp_path / "runs").glob("*/j/memories"))
        return bool(found) and len(os.listdir(found[0])) >= 20

    proc, err, acted, exited = _sigterm_during(
        tmp_path,
        memory_creates(MEMORY_CALLS),
        f"max_tool_calls_per_reply = {MEMORY_CALLS}\nmax_memory_entries = 5000\n",
        creating,
    )
    job = _ended_cancelled(tmp_path, proc, err, acted, exited)
    assert len(os.listdir(job / "memories")) < MEMORY_CALLS  # stopped part-way through the reply


def test_sigterm_is_acted_on_within_2_s_during_1000_reads_of_a_20_mb_file(tmp_path: Path) -> None:
    path = big_file(tmp_path / "ws")

    def reading(pid: int) -> bool:  # a read of the big file is open in the runner
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            return False
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                    return True
            except OSError:
                continue
        return False

    proc, err, acted, exited = _sigterm_during(
        tmp_path, distinct_reads(path, READ_CALLS), f"max_tool_calls_per_reply = {READ_CALLS}\n", reading
    )
    _ended_cancelled(tmp_path, proc, err, acted, exited)


# -- the read's scan, in C ----------------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [1, 3, 7, 1 << 20])
def test_a_view_range_is_the_same_lines_whatever_the_chunks(
    monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """The range reader skips and takes runs of lines by C-level counts; what it returns is still
    exactly the lines asked for, however the file's chunks cut them (empty lines, CRs, no last newline)."""
    import io

    from runner.tools import file_tools

    monkeypatch.setattr(file_tools, "_CHUNK", chunk)
    for data in (b"a\nbb\n\n\nccc\r\nd", b"\n" * 50, b"x\n" * 30 + b"tail", b"one line, no newline"):
        rows = data.split(b"\n")
        count = len(rows) - (1 if data.endswith(b"\n") else 0)  # the file's lines
        for start, end in ((1, 1), (1, -1), (2, 4), (3, 3), (5, 40), (max(1, count - 1), -1)):
            if start > count:
                continue
            want = b"\n".join(rows[start - 1 : end if end > 0 else len(rows)]).decode()
            got = file_tools._range(
                io.BytesIO(data),
                "f",
                start,
                end=end,
                limit=10_000,
                stop_at=time.monotonic() + 60,
                size=len(data),
            )
            assert got == want, (data, start, end)
        lines, page_end, first_line = file_tools.first_page(io.BytesIO(data), time.monotonic() + 60)
        assert lines == data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
        assert first_line == (data.find(b"\n") + 1 or len(data)) and page_end >= 1
