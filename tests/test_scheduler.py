"""The scheduler: per-job isolation, timeouts, turn and cost limits, a batch of 50, the concurrency limit,
and Ctrl-C on a real ``runner run`` subprocess.

These hold with any model: the jobs are driven here by a scripted model (``tests/scripted.py``: it lists
the workspace, reads its three files one a turn, then reports, naming its job's prompt), with a per-job
twist chosen by a word in the job's prompt; the Ctrl-C run plays it in a real runner process."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import time
from pathlib import Path

import anyio
import pytest
from conftest import runner_env
from scripted import ScriptedModel, reads, scripted_runner

from runner.compaction.compactor import Compactor
from runner.compaction.summarizer import Summarizer
from runner.config import ConfigError, Limits, Settings
from runner.execution.core import Batch, BatchResult, Dispatch, run_batch_with
from runner.execution.scheduler import run_batch
from runner.jobs import JobSpec, find_task_files, load_jobs
from runner.messages import request_problems, text_of, tool_results
from runner.models.base import BackendUnusable, Reply, Request
from runner.rundir.store import read_jsonl

FILES = ["README.txt", "pkg/__init__.py", "pkg/core.py"]
TURNS = [("glob", {"pattern": "**/*"}), *reads(FILES)]
CALLS = len(TURNS) + 1  # a job's model calls: its turns of tool calls, then its report


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "pkg").mkdir(parents=True)
    (ws / "pkg" / "__init__.py").write_text('"""A tiny package."""\n')
    (ws / "pkg" / "core.py").write_text(
        '"""Core."""\n\nclass A:\n    pass\n\n\ndef f():\n    return 1  # TODO\n'
    )
    (ws / "README.txt").write_text("read me\n" * 20)
    return ws


def spec(name: str, workspace: Path, prompt: str | None = None, **limits) -> JobSpec:
    return JobSpec(
        name=name,
        source=workspace.parent / f"{name}.toml",
        prompt=prompt or f"Survey it ({name}).",
        workspace=workspace,
        model="claude-sonnet-4-5",
        system=None,
        tools=("read", "glob", "grep"),
        limits=Limits(**limits),
    )


def batch(run_dir: Path, specs: list[JobSpec], model, concurrency: int = 4) -> Batch:
    return Batch(
        run_dir=run_dir,
        specs=specs,
        model=model,
        compactor=Compactor(Summarizer(None, "claude-haiku-4-5")),
        summary_model="claude-haiku-4-5",
        concurrency=concurrency,
        handle_signals=False,
    )


def prompt_of(request: Request) -> str:
    return text_of(request.messages[0])


def report(request: Request) -> str:
    """The scripted model's report: its job's prompt, and what it read."""
    return f"# Survey\n\n{prompt_of(request)}: {len(FILES)} files read.\n"


class Wrapping:
    """The scripted model, with a per-job twist chosen by a word in the job's prompt."""

    name = "wrapping"
    server_compaction = False

    def __init__(self) -> None:
        self.inner = ScriptedModel(TURNS, final=report)
        self.active = 0
        self.peak = 0
        self.calls = 0

    async def create(self, request: Request) -> Reply:
        self.active += 1
        self.calls += 1
        self.peak = max(self.peak, self.active)
        try:
            prompt = prompt_of(request)
            if "EXPLODE" in prompt:
                raise RuntimeError("the model backend fell over for this job only")
            if "SLEEPY" in prompt:
                await anyio.sleep(3600)
            await anyio.sleep(0.002)  # a real call takes time: let others overlap
            return await self.inner.create(request)
        finally:
            self.active -= 1

    async def aclose(self) -> None:
        return None


def run_doc(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())


def metrics(run_dir: Path, name: str) -> dict:
    return json.loads((run_dir / name / "metrics.json").read_text())


def assert_transcript_valid(job_dir: Path) -> list[dict]:
    messages, warnings = read_jsonl(job_dir / "transcript.jsonl")
    assert not warnings
    assert messages and messages[0]["role"] == "user"
    end = len(messages)
    while (
        end
        and messages[end - 1]["role"] == "assistant"
        and any(b.get("type") == "tool_use" for b in messages[end - 1]["content"])
    ):
        end -= 1  # a job stopped between a reply and its tool results
    assert request_problems(messages[:end]) == []
    return messages


@pytest.mark.anyio
async def test_one_failing_job_does_not_stop_the_others(tmp_path, workspace):
    specs = [spec(f"ok-{i}", workspace) for i in range(5)]
    specs.insert(2, spec("bad", workspace, prompt="EXPLODE please"))
    result = await run_batch(batch(tmp_path / "run", specs, Wrapping()))
    statuses = {name: r.status for name, r in result.results.items()}
    assert statuses == {**{f"ok-{i}": "succeeded" for i in range(5)}, "bad": "failed"}
    assert not result.ok and not result.interrupted
    bad = metrics(tmp_path / "run", "bad")
    assert bad["status"] == "failed" and "RuntimeError" in bad["error"] and "fell over" in bad["error"]
    assert bad["turns"] == 0  # its first call failed: nothing was answered
    document = run_doc(tmp_path / "run")
    assert document["state"] == "finished"
    assert {j["job"]: j["status"] for j in document["jobs"]} == statuses
    assert document["totals"]["succeeded"] == 5 and document["totals"]["failed"] == 1
    for i in range(5):  # each job ran its whole script, its own report its final.md
        assert metrics(tmp_path / "run", f"ok-{i}")["turns"] == CALLS
        messages = assert_transcript_valid(tmp_path / "run" / f"ok-{i}")
        results = [r for message in messages for r in tool_results(message)]
        assert len(results) == len(TURNS) and not any(r.get("is_error") for r in results)
        final = (tmp_path / "run" / f"ok-{i}" / "final.md").read_text()
        assert final == f"# Survey\n\nSurvey it (ok-{i}).: 3 files read.\n"


@pytest.mark.anyio
async def test_timeout_ends_the_job_with_its_files_written(tmp_path, workspace):
    specs = [spec("slow", workspace, prompt="SLEEPY survey", timeout_s=0.5), spec("quick", workspace)]
    result = await run_batch(batch(tmp_path / "run", specs, Wrapping()))
    assert result.results["slow"].status == "timeout"
    assert result.results["quick"].status == "succeeded"
    assert metrics(tmp_path / "run", "quick")["turns"] == CALLS
    job_dir = tmp_path / "run" / "slow"
    m = metrics(tmp_path / "run", "slow")
    assert m["status"] == "timeout" and "timed out" in m["error"]
    assert json.loads((job_dir / "job.json").read_text())["limits"]["timeout_s"] == 0.5
    messages = assert_transcript_valid(job_dir)
    assert messages == [{"role": "user", "content": "SLEEPY survey"}]  # no call ever came back
    assert m["turns"] == 0
    # the last call (without tools) did not come back within the reserve: a report built from the history
    assert (job_dir / "final.md").read_text().startswith("> **Partial report** (status `timeout`")
    assert {j["job"]: j["status"] for j in run_doc(tmp_path / "run")["jobs"]} == {
        "slow": "timeout",
        "quick": "succeeded",
    }


@pytest.mark.anyio
async def test_max_turns_ends_the_job(tmp_path, workspace):
    specs = [spec("short", workspace, max_turns=2), spec("normal", workspace)]
    result = await run_batch(batch(tmp_path / "run", specs, Wrapping()))
    assert result.results["short"].status == "max_turns"
    assert result.results["normal"].status == "succeeded"
    m = metrics(tmp_path / "run", "short")
    assert m["status"] == "max_turns" and m["turns"] == 2 and "max_turns" in m["error"]
    assert metrics(tmp_path / "run", "normal")["turns"] == CALLS
    messages = assert_transcript_valid(tmp_path / "run" / "short")
    # one turn of the script (its glob), then the last call, without tools, for the report
    assert [message["role"] for message in messages] == ["user", "assistant", "user", "assistant"]
    assert [b["name"] for b in messages[1]["content"] if b["type"] == "tool_use"] == ["glob"]
    said = "# Survey\n\nSurvey it (short).: 3 files read.\n"
    assert messages[3]["content"] == [{"type": "text", "text": said}]
    final = (tmp_path / "run" / "short" / "final.md").read_text()
    assert final.startswith("> **Partial report** (status `max_turns`") and final.endswith(said)


@pytest.mark.anyio
async def test_max_cost_ends_the_job(tmp_path, workspace):
    specs = [spec("pricey", workspace, max_cost_usd=0.0001), spec("normal", workspace)]
    result = await run_batch(batch(tmp_path / "run", specs, Wrapping()))
    assert result.results["pricey"].status == "budget_exceeded"
    assert result.results["normal"].status == "succeeded"
    m = metrics(tmp_path / "run", "pricey")
    assert m["status"] == "budget_exceeded" and m["cost_usd"] >= 0.0001 and "max_cost_usd" in m["error"]
    # the first call has no cost to estimate from, and alone costs more than the cap: the job stops
    # after it, without a last call (nothing is left for one)
    assert m["turns"] == 1
    assert metrics(tmp_path / "run", "normal")["turns"] == CALLS


@pytest.mark.anyio
async def test_fifty_offline_jobs_all_succeed(tmp_path, workspace):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    for i in range(50):
        (jobs / f"job-{i:02d}.toml").write_text(
            f'prompt = "Survey the package, copy {i}."\nworkspace = "../ws"\n'
        )
    files, missing = find_task_files([jobs])
    specs, errors = load_jobs(files, Settings())
    assert len(specs) == 50 and not errors and not missing
    model = Wrapping()
    result = await run_batch(batch(tmp_path / "run", specs, model, concurrency=8))
    assert result.ok
    document = run_doc(tmp_path / "run")
    assert document["state"] == "finished"
    assert sorted(j["job"] for j in document["jobs"]) == [f"job-{i:02d}" for i in range(50)]
    assert all(j["status"] == "succeeded" for j in document["jobs"])
    assert document["totals"]["jobs"] == document["totals"]["succeeded"] == 50
    for i in range(50):
        m = metrics(tmp_path / "run", f"job-{i:02d}")
        assert (m["status"], m["turns"]) == ("succeeded", CALLS)
        final = (tmp_path / "run" / f"job-{i:02d}" / "final.md").read_text()
        assert final == f"# Survey\n\nSurvey the package, copy {i}.: 3 files read.\n"
    assert model.calls == 50 * CALLS
    assert model.peak <= 8


@pytest.mark.anyio
@pytest.mark.parametrize("concurrency", [1, 3])
async def test_capacity_limiter_bounds_concurrent_model_calls(tmp_path, workspace, concurrency):
    model = Wrapping()
    specs = [spec(f"j{i}", workspace) for i in range(12)]
    result = await run_batch(batch(tmp_path / "run", specs, model, concurrency=concurrency))
    assert result.ok
    assert model.calls == 12 * CALLS
    assert model.peak <= concurrency
    if concurrency > 1:
        assert model.peak >= 2  # jobs did overlap: the limit, not a lock, is what bounded them


@pytest.mark.anyio
async def test_cancelling_the_batch_writes_every_started_job(tmp_path, workspace):
    specs = [spec(f"j{i}", workspace, prompt=f"SLEEPY {i}") for i in range(6)]
    out: list[BatchResult] = []

    async def go():
        out.append(await run_batch(batch(tmp_path / "run", specs, Wrapping(), concurrency=2)))

    with anyio.move_on_after(1):
        await go()
    document = run_doc(tmp_path / "run")
    assert all(j["status"] == "cancelled" for j in document["jobs"]), document["jobs"]
    started = [d for d in (tmp_path / "run").iterdir() if d.is_dir()]
    assert len(started) == 2
    for job_dir in started:
        assert json.loads((job_dir / "metrics.json").read_text())["status"] == "cancelled"


# --- Ctrl-C on a real `runner run` --------------------------------------------------------------------------


def test_ctrl_c_cancels_the_run_and_records_every_job(tmp_path, workspace):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    for i in range(200):
        (jobs / f"job-{i:03d}.toml").write_text(
            f'prompt = "Survey the package ({i})."\nworkspace = "../ws"\n'
        )
    (tmp_path / "config.toml").write_text('[runner]\nconcurrency = 2\nbackend = "offline"\n')
    # each job reads README.txt a line a turn (20 turns of 10 ms at least: 0.2 s a job on 2 lanes), so
    # SIGINT finds most jobs not started however fast the machine
    lines = [("read", {"file_path": "README.txt", "view_range": [k, k]}) for k in range(1, 21)]
    script = ScriptedModel(lines, final="# Report\n", delay=0.01)
    proc = subprocess.Popen(
        scripted_runner(script.save(tmp_path / "script.json"), "run"),
        cwd=tmp_path,
        env=runner_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        document = None
        while time.monotonic() < deadline and proc.poll() is None:
            runs = list((tmp_path / "runs").glob("*/run.json")) if (tmp_path / "runs").exists() else []
            try:
                document = json.loads(runs[0].read_text()) if runs else None
            except (OSError, json.JSONDecodeError):
                document = None
            # a job has started: the batch (and its signal handler) is up
            if document and any(j["status"] != "queued" for j in document["jobs"]):
                break
            time.sleep(0.02)
        assert document is not None and proc.poll() is None, "the run never got going"
        time.sleep(0.3)  # let the running jobs get some work done
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stdout + stderr, stderr
    [run_dir] = [p for p in (tmp_path / "runs").iterdir() if not p.is_symlink()]
    document = json.loads((run_dir / "run.json").read_text())
    assert document["state"] == "interrupted"
    assert f"`runner resume {Path('runs') / run_dir.name}` continues them" in stderr  # the command to type
    assert len(document["jobs"]) == 200
    statuses = {j["job"]: j["status"] for j in document["jobs"]}
    assert "cancelled" in statuses.values()
    assert sum(s == "cancelled" for s in statuses.values()) > 150  # most never started
    for name, status in statuses.items():
        job_dir = run_dir / name
        if status == "cancelled":
            if (job_dir / "metrics.json").exists():  # started, then cancelled: its files say so
                assert json.loads((job_dir / "metrics.json").read_text())["status"] == "cancelled"
                assert (job_dir / "job.json").exists()
                if (job_dir / "transcript.jsonl").exists():  # whole lines, a valid history
                    assert_transcript_valid(job_dir)
            continue
        assert status == "succeeded", (name, status)  # a job that ended before SIGINT ran its script
        m = json.loads((job_dir / "metrics.json").read_text())
        assert (m["status"], m["turns"]) == ("succeeded", len(lines) + 1)
        assert (job_dir / "final.md").read_text() == "# Report\n"
    assert "interrupted" in stderr


# --- a failure of one job stays its own -----------------------------------------------------------------


@pytest.mark.anyio
async def test_a_job_whose_directory_cannot_be_made_fails_alone(tmp_path, workspace):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "blocked").write_text("a file where the job directory should go")
    specs = [spec("blocked", workspace), spec("fine", workspace)]
    result = await run_batch(batch(run_dir, specs, Wrapping()))
    assert result.results["fine"].status == "succeeded"
    assert result.results["blocked"].status == "failed"


@pytest.mark.anyio
async def test_error_text_with_brackets_does_not_crash_the_display(tmp_path, workspace):
    from rich.console import Console

    from runner.ui.display import PlainDisplay

    class Bracketed(Wrapping):
        async def create(self, request):
            if "BRACKETS" in prompt_of(request):
                raise RuntimeError("bad value [/x] in reply")
            return await super().create(request)

    specs = [spec("brackets", workspace, prompt="BRACKETS"), spec("fine", workspace)]
    console = Console(file=io.StringIO(), width=200)
    result = await run_batch(batch(tmp_path / "run", specs, Bracketed()), PlainDisplay(console))
    assert result.results["brackets"].status == "failed"
    assert "[/x]" in console.file.getvalue()


# --- the batch core, with a dispatch of its own -------------------------------------------------------------


class Scripted(Dispatch):
    """Each job succeeds at once, but ``fatal`` meets an unusable backend; the hooks called are noted."""

    def __init__(self, fatal: str | None = None, refuse: Exception | None = None):
        self.fatal = fatal
        self.refuse = refuse
        self.calls: list[str] = []

    async def start(self, tasks) -> None:
        self.calls.append("start")
        if self.refuse:
            raise self.refuse

    async def run(self, spec, record, resumed):
        self.calls.append(f"run {spec.name}")
        if spec.name == self.fatal:
            record.status, record.error = "failed", "http://x: 401 AuthenticationError"
            raise BackendUnusable(record.error)
        record.status = "succeeded"
        return record

    async def cancel(self) -> None:
        self.calls.append("cancel")

    async def finish(self) -> None:
        self.calls.append("finish")

    async def close(self) -> None:
        self.calls.append("close")


@pytest.mark.anyio
async def test_an_unusable_backend_stops_any_dispatch_and_the_rest_is_not_started(tmp_path, workspace):
    dispatch = Scripted(fatal="a")
    specs = [spec(n, workspace) for n in ("a", "b", "c")]
    result = await run_batch_with(batch(tmp_path / "run", specs, ScriptedModel([]), concurrency=1), dispatch)
    assert result.fatal == "http://x: 401 AuthenticationError" and not result.interrupted
    assert dispatch.calls == ["start", "run a", "cancel", "finish", "close"]
    document = json.loads((tmp_path / "run" / "run.json").read_text())
    assert document["state"] == "finished"
    assert [(j["job"], j["status"], j["error"]) for j in document["jobs"]] == [
        ("a", "failed", "http://x: 401 AuthenticationError"),
        ("b", "not_started", "not started: http://x: 401 AuthenticationError"),
        ("c", "not_started", "not started: http://x: 401 AuthenticationError"),
    ]


@pytest.mark.anyio
async def test_a_dispatch_that_cannot_start_raises_its_error_and_writes_nothing(tmp_path, workspace):
    dispatch = Scripted(refuse=ConfigError(["the workers cannot see the run directory"]))
    with pytest.raises(ConfigError):  # itself, not in an exception group
        await run_batch_with(batch(tmp_path / "run", [spec("a", workspace)], ScriptedModel([])), dispatch)
    assert dispatch.calls == ["start"]
    assert not (tmp_path / "run" / "run.json").exists()
