"""Whole jobs on the ``anthropic`` backend: the real SDK over real HTTP against the emulator.

Covers: a multi-turn job with parallel tool calls whose transcript reloads; 20 jobs with 20% of
requests failing (429/529/500/dropped connections) all succeeding; an RPM limit the batch adapts to;
and the API key never reaching any file the runner writes, nor the bash tool.

This holds with any model: each job plays a scripted model (``tests/scripted.py``) the emulator
serves: a glob, then the six modules read two a turn (parallel calls), then a report listing the
files whose reads it sees answered.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from scripted import ScriptedModel, answered_reads, reads

from runner.compaction.compactor import Compactor
from runner.compaction.summarizer import Summarizer
from runner.config import Limits
from runner.emulator.config import EmulatorConfig, Fault, Faults
from runner.emulator.server import running_emulator
from runner.execution.scheduler import Batch, run_batch
from runner.jobs import JobSpec
from runner.messages import request_problems, tool_results, tool_uses
from runner.models.adaptive import AdaptiveLimit, AdaptiveModel
from runner.models.anthropic import AnthropicModel
from runner.models.base import Request
from runner.rundir.store import read_jsonl

pytestmark = pytest.mark.anyio
SECRET = "sk-ant-test-9f3c1e77-never-write-me"
MODULES = [f"m{i}.py" for i in range(6)]
TURNS = 1 + len(MODULES) // 2 + 1  # a job's calls: the glob, three turns of two reads, the report


def report_of_reads(request: Request) -> str:
    """A report with a ``| path |`` row for each file whose read the request shows answered."""
    paths = answered_reads(request)
    return "# Report\n\n| file |\n|---|\n" + "".join(f"| {p} |\n" for p in paths)


def expected_report() -> str:
    return "# Report\n\n| file |\n|---|\n" + "".join(f"| {p} |\n" for p in MODULES)


def survey_model() -> ScriptedModel:
    return ScriptedModel([("glob", {"pattern": "*.py"}), *reads(MODULES, per_turn=2)], final=report_of_reads)


@pytest.fixture(scope="module")
def server():
    with running_emulator(EmulatorConfig()) as handle:
        yield handle


@pytest.fixture
def scripted(server) -> ScriptedModel:
    """The model the emulator answers with for this test."""
    scripted = survey_model()
    server.state.replies = lambda _batch_size: scripted
    return scripted


def check_job(run_dir: Path, name: str, result) -> None:
    """The job ran its whole script: its turns, its report the script's, every read answered."""
    assert result.status == "succeeded", result.error
    assert result.turns == TURNS
    assert (run_dir / name / "final.md").read_text().strip() == expected_report().strip()


def spec(name: str, workspace: Path, tools: tuple[str, ...] = ("read", "glob", "grep"), **limits) -> JobSpec:
    return JobSpec(
        name=name,
        source=Path(f"{name}.toml"),
        prompt=f"Survey this workspace ({name}).",
        workspace=workspace,
        model="claude-sonnet-5-5",
        system="You survey code.",
        tools=tools,
        limits=Limits(**{"max_retries": 8, "timeout_s": 120, **limits}),
    )


async def run(
    server, specs: list[JobSpec], run_dir: Path, concurrency: int, adaptive: AdaptiveLimit | None = None
):
    raw = AnthropicModel(
        base_url=server.base_url,
        api_key=SECRET,
        max_retries=8,
        on_rate_limited=adaptive.rate_limited if adaptive else None,
    )
    model = AdaptiveModel(raw, adaptive) if adaptive else raw
    summarizer = Summarizer(raw, "claude-haiku-5-5", requests_per_minute=10_000)
    batch = Batch(
        run_dir=run_dir,
        specs=specs,
        model=model,
        compactor=Compactor(summarizer),
        summary_model="claude-haiku-5-5",
        concurrency=concurrency,
        handle_signals=False,
    )
    try:
        return await run_batch(batch)
    finally:
        await raw.aclose()


def small_workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(6):
        (ws / f"m{i}.py").write_text(
            f'"""Module {i}."""\n\n' + "".join(f"def f{j}():\n    return {j}\n" for j in range(i + 2))
        )
    return ws


def check_transcript(job_dir: Path) -> list[dict]:
    messages, warnings = read_jsonl(job_dir / "transcript.jsonl")
    assert not warnings
    assert not request_problems(messages), request_problems(messages)
    assert messages[-1]["role"] == "assistant" and not tool_uses(messages[-1])  # complete: ends on the answer
    return messages


async def test_the_client_shards_share_one_tls_context_and_all_answer(server, scripted, tmp_path):
    """Shards are separate connection pools over one TLS context (making one costs ~20 ms of CPU)."""
    model = AnthropicModel(base_url=server.base_url, api_key=SECRET, max_retries=8, shards=4)
    try:
        assert len({id(c._client._transport.ssl_context) for c in model.clients}) == 1
        assert len({id(c._client) for c in model.clients}) == 4
        ws = small_workspace(tmp_path)
        batch = Batch(
            run_dir=tmp_path / "run",
            specs=[spec(f"j{i}", ws) for i in range(4)],
            model=model,
            compactor=Compactor(Summarizer(model, "claude-haiku-5-5")),
            summary_model="claude-haiku-5-5",
            concurrency=4,
            handle_signals=False,
        )
        result = await run_batch(batch)
    finally:
        await model.aclose()
    assert [r.status for r in result.results.values()] == ["succeeded"] * 4
    for name, job in result.results.items():
        check_job(tmp_path / "run", name, job)
    assert len(scripted.requests) == 4 * TURNS  # no request was lost or sent twice across the shards


async def test_multi_turn_job_with_parallel_calls_completes_and_reloads(server, scripted, tmp_path):
    server.reconfigure(EmulatorConfig(record_requests=True))
    result = await run(server, [spec("json", small_workspace(tmp_path))], tmp_path / "run", 1)
    check_job(tmp_path / "run", "json", result.results["json"])
    messages = check_transcript(tmp_path / "run" / "json")
    # the transcript holds the script's calls, two in one reply where it made two, each answered
    assert [[(u["name"], u["input"]) for u in tool_uses(m)] for m in messages if tool_uses(m)] == [
        [(name, args) for name, args in turn] for turn in scripted.turns
    ]
    answers = [b for m in messages for b in tool_results(m)]
    assert len(answers) == 1 + len(MODULES) and not any(b.get("is_error") for b in answers)
    assert result.results["json"].usage.cache_read_input_tokens > 0  # the prefix was read back from cache
    recorded = server.state.snapshot()["recorded_requests"]
    job_requests = [r for r in recorded if r.get("tools")]
    assert len(job_requests) == TURNS == len(scripted.requests)
    for body in job_requests:  # every request the runner sent is valid and holds the request once
        assert not request_problems(body["messages"], "Survey this workspace (json).")


async def test_twenty_jobs_survive_twenty_percent_faults(server, scripted, tmp_path):
    faults = Faults(
        rate_limit=Fault(rate=0.05),
        overloaded=Fault(rate=0.05),
        server_error=Fault(rate=0.05),
        drop=Fault(rate=0.05),
    )
    server.reconfigure(EmulatorConfig(faults=faults, retry_after_s=0.05, retry_after_ms=True, seed=7))
    ws = small_workspace(tmp_path)
    specs = [spec(f"job{i:02d}", ws) for i in range(20)]
    result = await run(server, specs, tmp_path / "run", 20)
    stats = server.state.snapshot()
    failed = {k: v for k, v in stats["outcomes"].items() if k != "ok"}
    assert sum(failed.values()) >= 20, stats["outcomes"]  # faults really happened
    assert {r.status for r in result.results.values()} == {"succeeded"}, {
        n: r.error for n, r in result.results.items() if r.status != "succeeded"
    }
    assert stats["outcomes"]["ok"] == 20 * TURNS  # each job's calls answered once
    for s in specs:
        check_transcript(tmp_path / "run" / s.name)
        check_job(tmp_path / "run", s.name, result.results[s.name])
    print(f"20 jobs: {stats['outcomes']}")


async def test_an_rpm_limit_is_met_with_few_429s(server, scripted, tmp_path):
    server.reconfigure(EmulatorConfig(rpm=40, window_s=1.0))
    ws = small_workspace(tmp_path)
    limit = AdaptiveLimit(maximum=12, cooldown_s=0.5)
    started = anyio.current_time()
    result = await run(server, [spec(f"r{i}", ws) for i in range(12)], tmp_path / "run", 12, limit)
    elapsed = anyio.current_time() - started
    stats = server.state.snapshot()
    ok, throttled = stats["outcomes"].get("ok", 0), stats["outcomes"].get("429", 0)
    assert ok == 12 * TURNS  # each job's calls answered once
    for name, job in result.results.items():
        check_job(tmp_path / "run", name, job)
    assert limit.decreases >= 1  # the batch did back off
    assert throttled <= ok * 0.25, stats["outcomes"]  # and most requests went through first time
    print(f"rpm 40/s: {ok} ok, {throttled} 429s, lowest limit {limit.lowest}, {elapsed:.1f} s")


class ByPrompt:
    """A model that answers each request with the scripted model of the prompt its first message is
    (over the API the prompt is a text block, so ``ScriptedModel``'s ``subagents`` do not see it)."""

    name = "scripted"
    server_compaction = False

    def __init__(self, models: dict[str, ScriptedModel]):
        self.models = models

    async def create(self, request: Request):
        first = request.messages[0]["content"]
        text = first if isinstance(first, str) else "".join(b.get("text", "") for b in first)
        return await self.models[text].create(request)

    async def aclose(self) -> None:
        return None


def test_the_api_key_is_written_nowhere(server, tmp_path):
    server.reconfigure(EmulatorConfig(api_key=SECRET))
    ws = small_workspace(tmp_path)
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "survey.toml").write_text(f'workspace = "{ws}"\nprompt = "Survey it."\n')
    (tmp_path / "jobs" / "shell.toml").write_text(
        f'workspace = "{ws}"\nprompt = "Survey it with a shell."\ntools = ["read", "glob", "grep", "bash"]\n'
    )
    # each job's model, told apart by its prompt: the shell job's prints its environment first
    shell = ScriptedModel(
        [("bash", {"command": "env; echo done"}), *survey_model().turns], final=report_of_reads
    )
    by_prompt = ByPrompt({"Survey it.": survey_model(), "Survey it with a shell.": shell})
    server.state.replies = lambda _batch_size: by_prompt
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("RUNNER_")},
        "ANTHROPIC_API_KEY": SECRET,
        "ANTHROPIC_BASE_URL": server.base_url,
    }
    done = subprocess.run(
        [sys.executable, "-m", "runner", "run", "jobs", "--output-dir", "runs"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout + done.stderr
    run_dir = next(p for p in (tmp_path / "runs").iterdir() if not p.is_symlink())
    for name in ("survey", "shell"):
        assert (run_dir / name / "final.md").read_text().strip() == expected_report().strip()
    assert len(shell.requests) == TURNS + 1 and len(by_prompt.models["Survey it."].requests) == TURNS
    # the shell job's bash call ran, and its output is in the transcript (without the key)
    messages = check_transcript(run_dir / "shell")
    [env_result] = [
        b for m in messages for b in tool_results(m) if b["tool_use_id"].startswith("toolu_sc0000")
    ]
    assert "done" in json.dumps(env_result) and not env_result.get("is_error")
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert len(files) >= 8  # run.json, and each job's job.json, transcript, final.md, metrics.json
    for path in files:
        assert SECRET.encode() not in path.read_bytes(), path


async def test_the_bash_tool_never_sees_the_key(tmp_path, monkeypatch):
    from runner.rundir.store import JobStore
    from runner.tools.toolset import Toolset

    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    store = JobStore(tmp_path / "job")
    await store.open()
    async with Toolset(str(tmp_path), ("bash",), store) as tools:
        result = await tools.run({"id": "t1", "name": "bash", "input": {"command": "env; echo done"}})
    assert "done" in json.dumps(result) and SECRET not in json.dumps(result)
