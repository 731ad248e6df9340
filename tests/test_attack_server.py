"""Issue 24: a hostile server (or a hostile model scripted through the emulator) cannot make the runner
trust a number it sends. Everything goes through the real SDK over real HTTP to the emulator.

Covers: negative and enormous usage refused and never in a budget (a real ``runner run`` with the
run's ``max_cost_usd``); a gzip bomb and a 100 MB reply refused with the runner's peak memory under
1 GiB (a real ``runner run`` subprocess, its peak RSS measured); a server dripping a byte a second
fails the attempt at ``request_timeout_s``; ``retry-after: 100000`` capped; a 200 with an error body
retried then failed, never ``succeeded``; an unknown ``stop_reason`` failed; a tool input over 1 MiB
answered with an error result, not run; the disk quota ending a job ``disk_quota`` with its final
documents written; a reply nested too deeply to parse failing its job, never the batch (a raw server of
the test's own: the emulator cannot serialize one).

What is not a hostile scripted reply is a scripted model's (``tests/scripted.py``), so the checks hold
with any model: it reads the workspace's four modules one a turn, then writes :data:`REPORT`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx2
import pytest
from conftest import runner_env
from scripted import ScriptedModel, reads

from runner.compaction.compactor import Compactor
from runner.compaction.summarizer import Summarizer
from runner.config import ConfigError, Limits
from runner.emulator.config import EmulatorConfig, Fault, Faults
from runner.emulator.server import running_emulator
from runner.execution.scheduler import Batch, run_batch
from runner.jobs import JobSpec
from runner.models.anthropic import AnthropicModel, ReplyTimedOut
from runner.models.base import InvalidReply, Request, usage_from_api
from runner.models.guard import NotAMessage, capped_retry_headers
from runner.rundir.store import read_jsonl

GIB = 1 << 30
MODULES = [f"m{i}.py" for i in range(4)]
REPORT = "# Report\n\nFour modules of thirty functions each."


def _play(emu, model: ScriptedModel) -> ScriptedModel:
    """The emulator answers what its script does not with ``model``."""
    emu.state.replies = lambda _batch_size: model
    return model


def _survey() -> ScriptedModel:
    return ScriptedModel(reads(MODULES), final=REPORT)


@pytest.fixture(scope="module")
def emu():
    with running_emulator(EmulatorConfig()) as handle:
        yield handle


@pytest.fixture
def fresh(emu):
    """The emulator afresh; what no script answers is a scripted model's final text, never the stand-in's."""
    emu.reconfigure()
    _play(emu, ScriptedModel([], final="Done."))
    return emu


def _request(**kw) -> Request:
    return Request(
        model="claude-sonnet-5-5",
        messages=[{"role": "user", "content": "hi"}],
        tools=[],
        max_tokens=100,
        **kw,
    )


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    for i in range(4):
        (ws / f"m{i}.py").write_text(
            f'"""Module {i}."""\n' + "".join(f"def f{j}():\n    return {j}\n" for j in range(30))
        )
    return ws


def _spec(name: str, ws: Path, **limits) -> JobSpec:
    return JobSpec(
        name=name,
        source=Path(f"{name}.toml"),
        prompt=f"Survey this workspace ({name}).",
        workspace=ws,
        model="claude-sonnet-5-5",
        system=None,
        tools=("read", "glob", "grep"),
        limits=Limits(**{"max_retries": 0, "timeout_s": 60, **limits}),
    )


async def _run(emu, specs: list[JobSpec], run_dir: Path, max_retries: int = 0):
    raw = AnthropicModel(base_url=emu.base_url, api_key="k", max_retries=max_retries, timeout=20)
    summarizer = Summarizer(raw, "claude-haiku-5-5", requests_per_minute=10_000)
    batch = Batch(
        run_dir=run_dir,
        specs=specs,
        model=raw,
        compactor=Compactor(summarizer),
        summary_model="claude-haiku-5-5",
        concurrency=len(specs),
        handle_signals=False,
    )
    try:
        return await run_batch(batch)
    finally:
        await raw.aclose()


def _run_cli(
    tmp_path: Path, emu, jobs: dict[str, str], config: str
) -> tuple[subprocess.CompletedProcess[str], int, Path]:
    """``runner run`` as a real process on the anthropic backend; its result, its peak RSS in bytes (from
    a small parent that waits for it alone, so RUSAGE_CHILDREN is the runner's) and its run directory."""
    (tmp_path / "jobs").mkdir()
    ws = _workspace(tmp_path)
    for name, extra in jobs.items():
        (tmp_path / "jobs" / f"{name}.toml").write_text(
            f'workspace = "{ws}"\nprompt = "Survey ({name})."\n{extra}'
        )
    (tmp_path / "config.toml").write_text(f'[runner]\nbackend = "anthropic"\n{config}')
    wrapper = (
        "import resource, subprocess, sys\n"
        "code = subprocess.call([sys.executable, '-m', 'runner', 'run', 'jobs', '--output-dir', 'runs'])\n"
        "print('PEAK_RSS_KB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", wrapper],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=runner_env(ANTHROPIC_BASE_URL=emu.base_url, ANTHROPIC_API_KEY="emulator", COLUMNS="250"),
    )
    peak = next(
        int(line.split()[1]) * 1024 for line in done.stderr.splitlines() if line.startswith("PEAK_RSS_KB")
    )
    [run_dir] = [p for p in (tmp_path / "runs").iterdir() if not p.is_symlink()]
    return done, peak, run_dir


def _metrics(run_dir: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in run_dir.glob("*/metrics.json")}


# --- usage -------------------------------------------------------------------------------------


def test_usage_counts_must_be_non_negative_integers_below_the_bound():
    assert usage_from_api({"input_tokens": 5, "output_tokens": None}).input_tokens == 5
    for bad, field in [
        ({"input_tokens": -1}, "usage.input_tokens = -1"),
        ({"output_tokens": -1e9}, "usage.output_tokens = -1000000000.0"),
        ({"cache_read_input_tokens": 10**8}, "usage.cache_read_input_tokens = 100000000"),
        ({"cache_creation_input_tokens": "12"}, "usage.cache_creation_input_tokens = '12'"),
        ({"input_tokens": True}, "usage.input_tokens = True"),
        ({"input_tokens": 1.5}, "usage.input_tokens = 1.5"),
        (
            {"iterations": [{"input_tokens": 3}, {"output_tokens": -7}]},
            "usage.iterations[1].output_tokens = -7",
        ),
        ({"iterations": [{"input_tokens": 6 * 10**7}, {"input_tokens": 6 * 10**7}]}, "total input_tokens"),
        ({"iterations": "x"}, "usage.iterations = 'x'"),
    ]:
        with pytest.raises(InvalidReply, match=re.escape(field)):
            usage_from_api(bad)


def test_hostile_usage_fails_its_call_and_never_reaches_a_budget(tmp_path: Path, fresh) -> None:
    model = _play(fresh, _survey())
    fresh.set_script(
        [
            {"content": "a", "usage": {"input_tokens": -1e9}},
            {"content": "b", "usage": {"output_tokens": 10**12}},
        ]
    )
    done, _, run_dir = _run_cli(
        tmp_path,
        fresh,
        {"neg": "", "huge": "", "sibling": ""},
        "concurrency = 3\nmax_cost_usd = 0.05\n[limits]\nmax_retries = 0\n",
    )
    assert "Traceback" not in done.stderr, done.stderr
    metrics = _metrics(run_dir)
    failed = {n: m for n, m in metrics.items() if m["status"] == "failed"}
    errors = sorted(m["error"] for m in failed.values())
    assert len(failed) == 2, metrics
    assert "InvalidReply: usage.input_tokens = -1000000000.0" in " ".join(errors), errors
    assert "InvalidReply: usage.output_tokens = 1000000000000" in " ".join(errors), errors
    assert all(m["cost_usd"] == 0 and m["usage"]["input_tokens"] >= 0 for m in failed.values())
    [(name, sibling)] = [(n, m) for n, m in metrics.items() if m["status"] != "failed"]
    # the sibling ran its whole script (within the budget): only the two hostile replies were refused
    assert sibling["status"] == "succeeded" and sibling["turns"] == len(MODULES) + 1, sibling
    assert 0 < sibling["cost_usd"] <= 0.05
    assert len(model.requests) == len(MODULES) + 1
    assert (run_dir / name / "final.md").read_text().strip() == REPORT
    run = json.loads((run_dir / "run.json").read_text())
    assert 0 <= run["totals"]["cost_usd"] <= 0.05 * 1.5
    assert all(run["totals"][k] >= 0 for k in ("input_tokens", "output_tokens"))


# --- size --------------------------------------------------------------------------------------


def test_a_gzip_bomb_and_a_100_mb_reply_are_refused_within_a_bounded_memory(tmp_path: Path, fresh) -> None:
    fresh.set_script(
        [
            {"hostile": {"kind": "gzip_bomb", "bytes": 4 * GIB}},
            {"hostile": {"kind": "huge_text", "bytes": 100_000_000}},
        ]
    )
    done, peak, run_dir = _run_cli(
        tmp_path, fresh, {"bomb": "", "big": ""}, "concurrency = 2\n[limits]\nmax_retries = 2\n"
    )
    assert "Traceback" not in done.stderr, done.stderr
    metrics = _metrics(run_dir)
    assert [m["status"] for m in metrics.values()] == ["failed", "failed"], metrics
    for m in metrics.values():
        assert "ReplyTooLarge: the reply's body is over max_reply_bytes = 33,554,432 bytes" in m["error"], m[
            "error"
        ]
        assert m["requests"] == 1  # refused at once: not retried
    assert any("content-encoding gzip" in m["error"] for m in metrics.values())
    for name in metrics:
        assert (run_dir / name / "final.md").read_text().startswith("> **Partial report**")
        assert sum(p.stat().st_size for p in (run_dir / name).rglob("*") if p.is_file()) < 1_000_000
    print(f"peak RSS of runner run against a 4 GiB gzip bomb and a 100 MB reply: {peak / 2**20:.0f} MiB")
    assert peak < GIB, peak


@pytest.mark.anyio
async def test_a_tool_input_over_1_mib_is_answered_with_an_error_and_not_run(tmp_path: Path, fresh) -> None:
    fresh.set_script(
        [
            {
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_big",
                        "name": "read",
                        "input": {"path": "m0.py", "pad": "x" * (1 << 20)},
                    },
                    {"type": "tool_use", "id": "toolu_ok", "name": "glob", "input": {"pattern": "*.py"}},
                ],
                "stop_reason": "tool_use",
            },
            {"content": "done"},
        ]
    )
    out = await _run(fresh, [_spec("tool", _workspace(tmp_path))], tmp_path / "run")
    assert out.results["tool"].status == "succeeded", out.results["tool"].error
    messages, _ = read_jsonl(tmp_path / "run" / "tool" / "transcript.jsonl")
    [call] = [
        b for m in messages if m["role"] == "assistant" for b in m["content"] if b.get("id") == "toolu_big"
    ]
    assert call["input"] == {}
    results = {
        b["tool_use_id"]: b
        for m in messages
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    }
    assert results["toolu_big"]["is_error"] and "over the limit of 1,048,576 bytes" in str(
        results["toolu_big"]["content"]
    )
    assert not results["toolu_ok"].get("is_error") and "m0.py" in str(results["toolu_ok"]["content"])


@pytest.mark.anyio
async def test_a_reply_of_thousands_of_tool_calls_fails_its_call_and_is_never_stored(
    tmp_path: Path, fresh
) -> None:
    """12,000 tool calls in one reply (the audit's 250,000 took 1.2 GB and a 91 MB transcript): more
    blocks than a reply may hold; the call fails naming the count, nothing of it is kept or billed."""
    calls = [
        {"type": "tool_use", "id": f"toolu_{i:x}", "name": "glob", "input": {"pattern": "*"}}
        for i in range(12_000)
    ]
    fresh.set_script([{"content": calls, "stop_reason": "tool_use"}, {"content": "done"}])
    out = await _run(fresh, [_spec("many", _workspace(tmp_path))], tmp_path / "run")
    result = out.results["many"]
    assert result.status == "failed" and "12,000 blocks, over the 11,024 a reply may hold" in result.error
    assert result.turns == 0 and result.cost_usd == 0
    transcript = tmp_path / "run" / "many" / "transcript.jsonl"
    assert transcript.stat().st_size < 10_000 and "toolu_" not in transcript.read_text()


# --- time --------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_dripping_reply_fails_the_attempt_at_the_deadline(fresh) -> None:
    fresh.set_script([{"hostile": {"kind": "drip", "interval_s": 1.0}}])
    model = AnthropicModel(base_url=fresh.base_url, api_key="k", max_retries=0, timeout=2.0)
    started = time.monotonic()
    try:
        with pytest.raises(ReplyTimedOut, match=r"no whole reply within request_timeout_s = 2 s"):
            await model.create(_request())
    finally:
        await model.aclose()
    elapsed = time.monotonic() - started
    assert 1.5 < elapsed < 6.0, elapsed  # at the deadline, far before the drip's ~250 s


def test_retry_after_is_capped_in_every_form():
    headers = httpx2.Headers({"retry-after": "100000", "retry-after-ms": "100000000"})
    capped_retry_headers(headers, 60)
    assert headers["retry-after"] == "60" and headers["retry-after-ms"] == "60000"
    future = httpx2.Headers({"retry-after": "Wed, 21 Oct 2099 07:28:00 GMT"})
    capped_retry_headers(future, 5)
    assert future["retry-after"] == "5"
    small = httpx2.Headers({"retry-after": "2", "retry-after-ms": "1500"})
    capped_retry_headers(small, 60)
    assert small["retry-after"] == "2" and small["retry-after-ms"] == "1500"


@pytest.mark.anyio
async def test_a_429_asking_for_100000_s_waits_only_max_retry_after_s(fresh) -> None:
    fresh.reconfigure(
        EmulatorConfig(
            faults=Faults(rate_limit=Fault(schedule=[1])), retry_after_s=100000.0, retry_after_ms=True
        )
    )
    scripted = _play(fresh, ScriptedModel([], final="Hello."))
    model = AnthropicModel(base_url=fresh.base_url, api_key="k", max_retries=1, max_retry_after_s=1.0)
    started = time.monotonic()
    try:
        with anyio.fail_after(60):  # honoured as given, it would wait 27 hours
            reply = await model.create(_request())
    finally:
        await model.aclose()
    assert reply.stop_reason == "end_turn" and fresh.stats()["outcomes"] == {"429": 1, "ok": 1}
    assert reply.content == [{"type": "text", "text": "Hello."}] and len(scripted.requests) == 1
    assert time.monotonic() - started < 30


# --- shape -------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_200_with_an_error_body_is_retried_then_fails(fresh) -> None:
    fresh.set_script([{"hostile": {"kind": "error_body"}}] * 3)
    model = AnthropicModel(base_url=fresh.base_url, api_key="k", max_retries=2)
    try:
        with pytest.raises(NotAMessage, match='not a message.*"type":"error"'):
            await model.create(_request())
    finally:
        await model.aclose()
    assert fresh.stats()["outcomes"]["hostile"] == 3  # the first attempt and two retries


@pytest.mark.anyio
async def test_a_job_never_succeeds_on_an_error_body_or_an_unknown_stop_reason(tmp_path: Path, fresh) -> None:
    ws = _workspace(tmp_path)
    fresh.set_script([{"hostile": {"kind": "error_body"}}] * 2)
    out = await _run(fresh, [_spec("errbody", ws, max_retries=1)], tmp_path / "a", max_retries=1)
    result = out.results["errbody"]
    assert result.status == "failed" and "NotAMessage" in (result.error or ""), result.error
    assert result.requests == 2 and result.retries == 1
    fresh.set_script(
        [
            {
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "glob", "input": {"pattern": "*"}}],
                "stop_reason": "banana",
            }
        ]
    )
    out = await _run(fresh, [_spec("stop", ws)], tmp_path / "b")
    result = out.results["stop"]
    assert result.status == "failed" and "InvalidReply: stop_reason = 'banana'" in (result.error or ""), (
        result.error
    )
    assert result.turns == 0 and result.cost_usd == 0
    final = (tmp_path / "b" / "stop" / "final.md").read_text()
    assert final.startswith("> **Partial report** (status `failed`") and "banana" in final


# --- disk --------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_disk_quota_ends_the_job_with_its_final_documents(tmp_path: Path, fresh) -> None:
    model = _play(fresh, _survey())
    out = await _run(fresh, [_spec("quota", _workspace(tmp_path), max_job_bytes=4_000)], tmp_path / "run")
    result = out.results["quota"]
    assert result.status == "disk_quota", (result.status, result.error)
    assert "over its disk quota max_job_bytes = 4,000" in (result.error or "")
    job = tmp_path / "run" / "quota"
    final = (job / "final.md").read_text()
    assert final.startswith("> **Partial report** (status `disk_quota`: the job's files would take")
    metrics = json.loads((job / "metrics.json").read_text())
    assert metrics["status"] == "disk_quota" and "max_job_bytes" in metrics["error"]
    written = sum(p.stat().st_size for p in job.rglob("*") if p.is_file())
    assert written - len(final.encode()) - (job / "metrics.json").stat().st_size <= 4_000
    # the quota stopped the script part way (no call was made after it: the report was built without
    # the model), and the report holds the reads of the turns the job had
    assert 0 < result.turns == len(model.requests) < len(MODULES)
    assert "### Files read\n" + "".join(f"- {p}\n" for p in MODULES[: result.turns]) + "#" in final


@pytest.mark.anyio
async def test_a_long_answer_past_the_quota_is_not_a_success_and_its_report_is_cut(
    tmp_path: Path, fresh
) -> None:
    fresh.set_script([{"content": "x" * 3_000_000}])  # under max_reply_bytes, over the job's quota
    out = await _run(fresh, [_spec("long", _workspace(tmp_path), max_job_bytes=100_000)], tmp_path / "run")
    result = out.results["long"]
    assert result.status == "disk_quota" and "max_job_bytes = 100,000" in (result.error or ""), result.error
    job = tmp_path / "run" / "long"
    final = (job / "final.md").read_text()
    assert final.startswith("> **Partial report** (status `disk_quota`") and "[cut: " in final
    assert (job / "final.md").stat().st_size <= 100_000 + 256 * 1024
    assert json.loads((job / "metrics.json").read_text())["status"] == "disk_quota"


def test_the_hostile_keys_of_the_emulator_config_are_checked(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text(
        '[[script]]\nusage = { input_tokens = -1e9 }\n[[script]]\nstop_reason = "banana"\n'
        '[[script]]\nhostile = { kind = "drip", interval_s = 0.5 }\n'
    )
    config = EmulatorConfig.from_toml(good)
    assert config.script[0].usage == {"input_tokens": -1e9} and config.script[2].hostile.kind == "drip"
    for text, expected in [
        ('[[script]]\nhostile = { kind = "bomb" }\n', "script.0.hostile.kind"),
        ('[[script]]\nhostile = { kind = "drip", interval_s = "1" }\n', "script.0.hostile.interval_s"),
        ('[[script]]\nhostile = { kind = "gzip_bomb", size = 5 }\n', "script.0.hostile.size: unknown key"),
        ("[[script]]\nusage = { input_token = 5 }\n", "unknown usage field(s) input_token"),
    ]:
        bad = tmp_path / "bad.toml"
        bad.write_text(text)
        with pytest.raises(ConfigError, match=re.escape(expected)):
            EmulatorConfig.from_toml(bad)


# --- a reply nested too deeply ----------------------------------------------------------------------


class _RawServer:
    """A Messages API server of our own over real HTTP: the bodies given, in order, then end_turn text."""

    def __init__(self, bodies: list[bytes]):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.bodies, self.served = list(bodies), 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                outer.served += 1
                body = (
                    outer.bodies.pop(0) if outer.bodies else _raw_message([{"type": "text", "text": "done"}])
                )
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _raw_message(content: list[dict], stop: str = "end_turn") -> bytes:
    return json.dumps(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 10},
        }
    ).encode()


def _deep_reply(depth: int) -> bytes:
    call = {"type": "tool_use", "id": "toolu_1", "name": "grep", "input": {"pattern": "x", "path": "@"}}
    return _raw_message([call], "tool_use").replace(b'"@"', b"[" * depth + b"1" + b"]" * depth)


@pytest.mark.anyio
@pytest.mark.parametrize("depth", [3_000, 990])
async def test_a_reply_nested_too_deeply_fails_its_job_never_the_batch(tmp_path: Path, depth: int) -> None:
    """The batch's first reply holds a tool input nested ``depth`` deep (past what Python's json parses,
    or just under it): that job fails on a malformed reply; the backend is not taken for unusable, so the
    next job of the batch runs and succeeds."""
    ws = _workspace(tmp_path)
    server = _RawServer([_deep_reply(depth)])
    raw = AnthropicModel(base_url=server.url, api_key="k", max_retries=0, timeout=20)
    batch = Batch(
        run_dir=tmp_path / "run",
        specs=[_spec("deep", ws), _spec("next", ws)],
        model=raw,
        compactor=Compactor(Summarizer(raw, "claude-haiku-5-5", requests_per_minute=10_000)),
        summary_model="claude-haiku-5-5",
        concurrency=1,
        handle_signals=False,
    )
    try:
        with anyio.fail_after(60):
            out = await run_batch(batch)
    finally:
        await raw.aclose()
        server.close()
    deep, after = out.results["deep"], out.results["next"]
    assert deep.status == "failed" and "nested too deeply" in (deep.error or ""), deep.error
    assert "cannot connect" not in (deep.error or "")
    assert after.status == "succeeded", (after.status, after.error)
