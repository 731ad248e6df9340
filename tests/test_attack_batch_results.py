"""Issue 40, part 2: a Message Batch's results file is the server's, and trusted no more than a reply.
Everything goes through the real SDK over real HTTP to the emulator (``batches.hostile``) on loopback.

Covers: 400 MiB of results under other custom_ids leaving a real ``runner run --delivery batch`` well
under 300 MiB of peak RSS (over the byte cap: the call goes live; under a cap large enough to read it
all: dropped line by line, the batch's own result used); padding under the cap dropped and counted; a
results file dripping a byte at a time ended at its deadline (``request_timeout_s``) or before the
run's deadline, the call going live in time; a ``results_url`` on another host or port refused before
any request (a second server there receives nothing); the guard following no redirect to another origin and
bounding every streamed body; a batch id full of terminal escapes never reaching stderr raw.

What the emulator answers, by batch or live, is a scripted model's reply (``tests/scripted.py``), so
the checks hold with any model: one call's is :data:`HELLO_TEXT`; a ``runner run``'s job reads the
workspace's three modules one a turn, then writes :data:`REPORT`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx2
import pytest
from conftest import runner_env
from scripted import ScriptedModel, reads

from runner.emulator.config import Batches, BatchHostile, EmulatorConfig, Fault
from runner.emulator.server import running_emulator
from runner.models.anthropic import AnthropicModel
from runner.models.base import Request
from runner.models.batches import Batcher, BatchModel, result_lines
from runner.models.guard import ForeignOrigin, Guard, ReplyTooLarge, download, guarded_client

pytestmark = pytest.mark.anyio
MIB = 1 << 20
KEY = "sk-test-the-key-0123456789"
ESC = "\x1b"
HELLO_TEXT = "Hello."
MODULES = [f"m{i}.py" for i in range(3)]
REPORT = "# Report\n\nThree modules, each one function ten times."
TURNS = len(MODULES) + 1  # the job's calls: a read a turn, then the report


@pytest.fixture(scope="module")
def emu():
    with running_emulator(EmulatorConfig()) as handle:
        yield handle


@pytest.fixture(autouse=True)
def scripted(request) -> ScriptedModel | None:
    """For a test that uses the emulator: the model it answers ``HELLO`` with (by batch or live)."""
    if "emu" not in request.fixturenames:
        return None
    return _play(request.getfixturevalue("emu"), ScriptedModel([], final=HELLO_TEXT))


def _play(emu, model: ScriptedModel) -> ScriptedModel:
    emu.state.replies = lambda _batch_size: model
    return model


def _hello(reply) -> bool:
    """The reply is the script's (whether the batch or the live call gave it)."""
    return reply.content == [{"type": "text", "text": HELLO_TEXT}] and reply.stop_reason == "end_turn"


def _check_job(root: Path) -> None:
    """The job ran its whole script and its report is the script's."""
    [job] = [p for p in (root / "runs").glob("*/survey") if not p.parent.is_symlink()]
    metrics = json.loads((job / "metrics.json").read_text())
    assert metrics["status"] == "succeeded" and metrics["turns"] == TURNS, metrics
    assert (job / "final.md").read_text().strip() == REPORT


def _hostile(emu, **hostile) -> None:
    emu.reconfigure(EmulatorConfig(batches=Batches(turnaround_s=0.05, hostile=BatchHostile(**hostile))))


def _model(emu, *, timeout: float = 10.0, max_reply_bytes: int = MIB, deadline: float | None = None):
    raw = AnthropicModel(
        base_url=emu.base_url, api_key=KEY, max_retries=0, timeout=timeout, max_reply_bytes=max_reply_bytes
    )
    batcher = Batcher(raw, window_s=0.01, poll_s=0.02, poll_max_s=0.1, deadline=deadline, live_s=1.0)
    return BatchModel(batcher, raw), batcher


HELLO = Request(
    model="claude-sonnet-5-5", messages=[{"role": "user", "content": "hi"}], tools=[], max_tokens=100
)


def _problems(journal: Path) -> list[str]:
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    return [line["results_problem"] for line in lines if "results_problem" in line]


# --- a second server: the "foreign" host, a redirector, bodies of any size or pace --------------------


Route = tuple[int, dict[str, str], bytes]  # status, headers, body


class Recorder:
    """A tiny HTTP server on ``host`` recording every request it receives (method, path, headers)."""

    def __init__(self, host: str = "127.0.0.1", routes: dict[str, Route] | None = None):
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.routes = routes or {}
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
                recorder.requests.append(("GET", self.path, {k.lower(): v for k, v in self.headers.items()}))
                status, headers, body = recorder.routes.get(self.path, (200, {}, b"{}"))
                self.send_response(status)
                for name, value in {"content-length": str(len(body)), **headers}.items():
                    self.send_header(name, value)
                self.end_headers()
                try:
                    if self.path == "/drip":
                        for i in range(len(body)):
                            self.wfile.write(body[i : i + 1])
                            self.wfile.flush()
                            time.sleep(0.3)
                    else:
                        self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # the client stopped reading: its right
                    pass

            do_POST = do_GET  # noqa: N815

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://{host}:{self.server.server_address[1]}"

    def __enter__(self) -> Recorder:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _other_loopback_host() -> str:
    """127.0.0.2 where it can be bound (Linux: all of 127/8 is the loopback), else 127.0.0.1."""
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.2", 0))
        return "127.0.0.2"
    except OSError:
        return "127.0.0.1"


# --- the results file, line by line -----------------------------------------------------------------


async def test_result_lines_skip_a_line_over_the_limit_as_it_streams_never_holding_it():
    async def pieces(*parts: bytes):
        for part in parts:
            yield part

    got = [
        line
        async for line in result_lines(
            pieces(b'{"a":1}\n{"b"', b":2}\n\n" + b"x" * 50, b"y" * 50 + b"\n", b'{"c":3}'), max_line=20
        )
    ]
    assert got == [b'{"a":1}', b'{"b":2}', None, b'{"c":3}']
    assert [line async for line in result_lines(pieces(b"z" * 30), max_line=20)] == [None]


# --- padding under other custom_ids -----------------------------------------------------------------


async def test_padding_under_other_custom_ids_is_dropped_and_counted_and_the_batch_answers(emu, scripted):
    _hostile(emu, kind="padded_results", bytes=MIB, line_bytes=16 * 1024)
    model, batcher = _model(emu, max_reply_bytes=4 * MIB)
    try:
        reply = await model.create(HELLO)
    finally:
        await model.aclose()
    assert reply.batch is not None and reply.batch.startswith("msgbatch_emu_") and _hello(reply)
    assert len(scripted.requests) == 1
    assert batcher.foreign_results == 64 and batcher.failed_downloads == 0  # 1 MiB of 16 KiB lines
    assert emu.stats()["requests"] == 0  # nothing went live
    assert "64 foreign result lines dropped" in (batcher.status_line() or "")


async def test_padding_over_the_byte_cap_stops_the_download_and_the_call_goes_live(emu, tmp_path, scripted):
    _hostile(emu, kind="padded_results", bytes=64 * MIB)
    model, batcher = _model(emu, max_reply_bytes=MIB)  # one request: a cap of about 1 MiB
    batcher.open_journal(tmp_path / "batches.jsonl")
    started = time.monotonic()
    try:
        reply = await model.create(HELLO)
    finally:
        await model.aclose()
    assert reply.batch is None and _hello(reply)
    assert len(scripted.requests) == 2  # asked once for the batch, once for the live call
    stats = emu.stats()
    assert stats["batches"]["created"] == 1 and stats["requests"] == 1  # the call went live
    assert batcher.failed_downloads == 1 and time.monotonic() - started < 10
    [problem] = _problems(tmp_path / "batches.jsonl")
    assert "ReplyTooLarge" in problem and "1,064,960 bytes" in problem, problem


# --- a results file dripping ------------------------------------------------------------------------


async def test_a_dripping_results_file_ends_at_request_timeout_s_and_the_call_goes_live(emu, scripted):
    _hostile(emu, kind="drip_results", interval_s=0.5)
    model, batcher = _model(emu, timeout=2.0)
    started = time.monotonic()
    try:
        reply = await model.create(HELLO)
    finally:
        await model.aclose()
    took = time.monotonic() - started
    assert reply.batch is None and emu.stats()["requests"] == 1 and _hello(reply)
    assert len(scripted.requests) == 2  # asked once for the batch, once for the live call
    assert batcher.failed_downloads == 1
    assert 2.0 < took < 6.0, took  # request_timeout_s + 0.1 s for its one request, then the live call


async def test_the_runs_deadline_cancels_a_download_and_the_call_goes_live(emu, scripted):
    _hostile(emu, kind="drip_results", interval_s=0.5)
    deadline = time.time() + 2.0
    model, batcher = _model(emu, timeout=60.0, deadline=deadline)
    try:
        reply = await model.create(HELLO)
    finally:
        await model.aclose()
    assert reply.batch is None and emu.stats()["requests"] == 1 and _hello(reply)
    assert len(scripted.requests) == 2  # asked once for the batch, once for the live call
    assert batcher.failed_downloads == 1  # the download ended live_s / 2 before the deadline
    assert time.time() < deadline  # the live call answered in the time it left


# --- a results_url elsewhere --------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["another host", "another port"])
async def test_a_results_url_on_another_origin_is_refused_before_any_request(emu, tmp_path, where, scripted):
    host = _other_loopback_host() if where == "another host" else "127.0.0.1"
    with Recorder(host) as foreign:
        _hostile(emu, kind="foreign_results_url", url=foreign.url)
        model, batcher = _model(emu)
        batcher.open_journal(tmp_path / "batches.jsonl")
        try:
            reply = await model.create(HELLO)
        finally:
            await model.aclose()
        assert foreign.requests == []  # not one request, so never the key
    assert reply.batch is None and emu.stats()["requests"] == 1 and _hello(reply)  # the call went live
    assert len(scripted.requests) == 2  # asked once for the batch, once for the live call
    [problem] = _problems(tmp_path / "batches.jsonl")
    assert "not on the base URL's origin" in problem and foreign.url in problem, problem


async def test_the_guard_follows_a_redirect_only_within_its_origin():
    with Recorder() as foreign:
        routes = {
            "/away": (302, {"location": f"{foreign.url}/stolen"}, b""),
            "/here": (302, {"location": "/ok"}, b""),
            "/ok": (200, {}, b"fine"),
        }
        with Recorder(routes=routes) as server:
            client = guarded_client(Guard(deadline_s=5.0))
            try:
                with pytest.raises(ForeignOrigin, match="redirected it to another origin"):
                    await client.get(f"{server.url}/away", headers={"x-api-key": KEY})
                ok = await client.get(f"{server.url}/here", headers={"x-api-key": KEY})
            finally:
                await client.aclose()
        assert foreign.requests == []
    assert ok.status_code == 200 and ok.content == b"fine"
    assert [path for _, path, _ in server.requests] == ["/away", "/here", "/ok"]


async def test_the_guard_bounds_every_streamed_body_unless_a_download_widens_it():
    routes = {"/big": (200, {}, b"a" * (3 * MIB)), "/drip": (200, {}, b"x" * 100)}
    with Recorder(routes=routes) as server:
        client = guarded_client(Guard(deadline_s=1.0, max_reply_bytes=MIB))
        try:
            async with client.stream("GET", f"{server.url}/big") as response:
                with pytest.raises(ReplyTooLarge):
                    await response.aread()
            started = time.monotonic()
            async with client.stream("GET", f"{server.url}/drip") as response:
                with pytest.raises(httpx2.ReadTimeout):
                    await response.aread()
            assert time.monotonic() - started < 3.0
            with download(4 * MIB, 10.0):
                async with client.stream("GET", f"{server.url}/big") as response:
                    assert len(await response.aread()) == 3 * MIB
        finally:
            await client.aclose()


# --- real runs: the escapes, the memory ----------------------------------------------------------------


def _project(tmp_path: Path, config: str) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(3):
        (ws / f"m{i}.py").write_text(f'"""Module {i}."""\n' + "def f():\n    return 1\n" * 10)
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "survey.toml").write_text(f'workspace = "{ws}"\nprompt = "Survey this workspace."\n')
    (tmp_path / "config.toml").write_text(
        '[runner]\nbackend = "anthropic"\nbatch_window_s = 0.1\nbatch_poll_s = 0.05\nbatch_poll_max_s = 0.2\n'
        + config
    )
    return tmp_path


@contextmanager
def _files(tmp_path: Path) -> Iterator[tuple[object, object]]:
    with open(tmp_path / "stdout", "w+b") as out, open(tmp_path / "stderr", "w+b") as err:
        yield out, err


def _run_measured(root: Path, emu) -> tuple[int, str, int]:
    """``runner run jobs --delivery batch`` as a real process: its exit code, its stderr and its peak RSS
    in bytes (the larger of ``VmHWM`` sampled from /proc while it runs and ``wait4``'s ``ru_maxrss``:
    the process alone, not the test's)."""
    env = runner_env(ANTHROPIC_BASE_URL=emu.base_url, ANTHROPIC_API_KEY=KEY, COLUMNS="250")
    with _files(root) as (out, err):
        proc = subprocess.Popen(
            [sys.executable, "-m", "runner", "run", "jobs", "--delivery", "batch"],
            cwd=root,
            env=env,
            stdout=out,
            stderr=err,
        )
        peak_kib, status = 0, None
        started = time.monotonic()
        while status is None:
            try:
                with open(f"/proc/{proc.pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            peak_kib = max(peak_kib, int(line.split()[1]))
            except OSError:  # not Linux, or just ended
                pass
            pid, code, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                status = os.waitstatus_to_exitcode(code)
                peak_kib = max(peak_kib, usage.ru_maxrss)
                proc.returncode = status
            elif time.monotonic() - started > 120:
                proc.kill()
                raise AssertionError("the run did not end in 120 s")
            else:
                time.sleep(0.02)
        err.seek(0)
        return status, err.read().decode("utf-8", "replace"), peak_kib * 1024


def test_a_batch_id_full_of_escapes_never_reaches_stderr_raw(emu, tmp_path, scripted):
    _hostile(emu, kind="escaped_id")
    model = _play(emu, ScriptedModel(reads(MODULES), final=REPORT))
    root = _project(tmp_path, "")
    code, stderr, _ = _run_measured(root, emu)
    assert code == 0, stderr
    _check_job(root)
    assert len(model.requests) == emu.stats()["batch_requests"] == TURNS
    assert ESC not in stderr and "\x07" not in stderr
    assert "msgbatch_emu_\\x1b]0;batch owned\\x07\\x1b[2J" in stderr  # shown, as text
    assert emu.stats()["batch_requests"] > 0 and emu.stats()["requests"] == 0


@pytest.mark.parametrize(
    ("max_reply_bytes", "read_whole"),
    [(MIB, False), (512 * MIB, True)],
    ids=["over the cap: live", "under the cap: dropped as it streams"],
)
def test_400_mib_of_padded_results_leave_the_runner_under_300_mib(emu, tmp_path, max_reply_bytes, read_whole):
    _hostile(emu, kind="padded_results", bytes=400 * MIB, on=Fault(schedule=[1]))
    model = _play(emu, ScriptedModel(reads(MODULES), final=REPORT))
    root = _project(tmp_path, f"max_reply_bytes = {max_reply_bytes}\nrequest_timeout_s = 60\n")
    code, stderr, peak = _run_measured(root, emu)
    assert code == 0, stderr
    _check_job(root)
    assert peak < 300 * MIB, f"peak RSS {peak / MIB:.0f} MiB"
    stats = emu.stats()
    # the padded first one, then one a turn for the job's later calls, each call batched once
    assert stats["batches"]["created"] == stats["batch_requests"] == TURNS
    if read_whole:  # all 6400 lines of padding read and dropped; the batch's own line used
        assert "6400 foreign result lines dropped" in stderr and stats["requests"] == 0, stderr
        assert len(model.requests) == TURNS
    else:  # the cap (about 1 MiB for its one request) stopped it: that call went live
        assert "1 results unread (calls live)" in stderr and stats["requests"] == 1, stderr
        assert len(model.requests) == TURNS + 1  # the first call asked again, live
