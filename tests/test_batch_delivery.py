"""``delivery = "batch"``: jobs' calls (their summaries too) sent as Message Batches through the real SDK
against the emulator: the same reports and token counts as live at half the cost, errored, expired
and canceled requests sent again, a deadline that moves calls live, and the configuration.

This holds with any model: the emulator answers every job's calls, live or batched, with a scripted
model (``tests/scripted.py``): a glob, the six modules read one a turn with notes enough to make the
job summarize, then a report listing the files whose reads it sees answered."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Literal

import pytest
from conftest import kill_runner_when, runner_env
from scripted import ScriptedModel, answered_reads, reads

from runner.compaction.compactor import Compactor
from runner.compaction.summarizer import Summarizer
from runner.config import ConfigError, Limits, deadline_at, load_settings
from runner.emulator.config import Batches, BatchHostile, EmulatorConfig, Fault
from runner.emulator.server import running_emulator
from runner.execution.scheduler import Batch, run_batch
from runner.jobs import JobSpec
from runner.models.anthropic import AnthropicModel
from runner.models.base import Request
from runner.models.batches import Batcher, BatchModel, custom_id_of
from runner.pricing import PriceTable, Usage
from runner.rundir.store import read_jsonl

pytestmark = pytest.mark.anyio
SUMMARY_MODEL = "claude-haiku-5-5"
MODULES = [f"m{i}.py" for i in range(6)]
TURNS = 1 + len(MODULES) + 1  # a job's calls: the glob, a read a turn, the report
HEADER = "# Report\n\nFiles read:\n"


def report_of_reads(request: Request) -> str:
    """The files whose read the request shows answered (what the job's summaries left of its history)."""
    paths = answered_reads(request)
    return HEADER + "".join(f"- {p}\n" for p in paths)


def survey_model() -> ScriptedModel:
    return ScriptedModel([("glob", {"pattern": "*.py"}), *reads(MODULES)], final=report_of_reads, notes=600)


@pytest.fixture(scope="module")
def server():
    with running_emulator(EmulatorConfig()) as handle:
        yield handle


@pytest.fixture(autouse=True)
def scripted(request) -> ScriptedModel | None:
    """For a test that uses the emulator: the model it answers every job's calls with (summaries are
    the emulator's own)."""
    if "server" not in request.fixturenames:
        return None
    model = survey_model()
    request.getfixturevalue("server").state.replies = lambda _batch_size: model
    return model


def job_calls(stats: dict) -> int:
    """The calls the emulator answered with the model (live or batched): all but the summaries."""
    return stats["requests"] + stats["batch_requests"] - stats["summary_requests"]


def check_jobs(run_dir: Path, results: dict) -> None:
    """Each job ran its whole script and its report is the script's."""
    for name, result in results.items():
        assert result.status == "succeeded", (name, result.error)
        assert result.turns == TURNS, (name, result.turns)
        assert (run_dir / name / "final.md").read_text().startswith(HEADER)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    ws = tmp_path_factory.mktemp("ws")
    for i in range(6):
        (ws / f"m{i}.py").write_text(
            f'"""Module {i}."""\n\n' + "".join(f"def f{j}():\n    return {j}\n" for j in range(i + 2))
        )
    return ws


def spec(name: str, workspace: Path) -> JobSpec:
    """A survey small enough to be quick, with a context limit that makes it summarize."""
    return JobSpec(
        name=name,
        source=Path(f"{name}.toml"),
        prompt="Survey this workspace.",
        workspace=workspace,
        model="claude-sonnet-5-5",
        system="You survey code.",
        tools=("read", "glob", "grep"),
        limits=Limits(max_retries=8, timeout_s=120, context_char_limit=3000, keep_recent_results=1),
    )


async def run(
    server,
    run_dir: Path,
    workspace: Path,
    *,
    batch: bool,
    jobs: int = 10,
    run_deadline: bool = False,
    cache_ttl: Literal["1h", "5m"] = "1h",
    **batcher,
):
    """``run_deadline``: the batcher's deadline is the run's too, every job's timeout ending by it (as
    ``runner run`` wires them); ``cache_ttl``: ``[runner] batch_cache_ttl``."""
    raw = AnthropicModel(base_url=server.base_url, api_key="test-key", max_retries=8)
    model = summaries = raw
    if batch:
        batcher = {"window_s": 0.1, "poll_s": 0.05, "poll_max_s": 0.2, "live_s": 0.3, **batcher}
        shared = Batcher(raw, **batcher)
        model = BatchModel(shared, raw, cache_ttl=cache_ttl)
        summaries = BatchModel(shared, raw, owns_live=False, cache_ttl=cache_ttl)
    summarizer = Summarizer(summaries, SUMMARY_MODEL, requests_per_minute=10_000)
    job_batch = Batch(
        run_dir=run_dir,
        specs=[spec(f"job{i}", workspace) for i in range(jobs)],
        model=model,
        compactor=Compactor(summarizer),
        summary_model=SUMMARY_MODEL,
        concurrency=jobs,
        handle_signals=False,
        deadline=batcher.get("deadline") if run_deadline else None,
    )
    try:
        return await run_batch(job_batch)
    finally:
        await model.aclose()


def totals(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())["totals"]


def tokens(run_dir: Path) -> dict:
    return {k: v for k, v in totals(run_dir).items() if k.endswith("_tokens")}


def model_calls(job_dir: Path) -> list[dict]:
    events, _ = read_jsonl(job_dir / "events.jsonl")
    return [e for e in events if e.get("stage") == "model_call"]


async def ten_jobs(server, workspace: Path, tmp_path: Path, cache_ttl: Literal["1h", "5m"]):
    """Ten jobs live, then in batch delivery with ``cache_ttl``: (live, batched, live stats, batch stats)."""
    server.reconfigure(EmulatorConfig(batches=Batches(turnaround_s=0.05)))
    live = await run(server, tmp_path / "live", workspace, batch=False)
    live_stats = server.stats()
    server.reconfigure(EmulatorConfig(batches=Batches(turnaround_s=0.05)))
    batched = await run(server, tmp_path / "batch", workspace, batch=True, cache_ttl=cache_ttl)
    stats = server.stats()

    check_jobs(tmp_path / "live", live.results)
    check_jobs(tmp_path / "batch", batched.results)
    assert job_calls(live_stats) == job_calls(stats) == 10 * TURNS  # every call answered once
    assert stats["requests"] == 0 and stats["batch_requests"] == live_stats["requests"]
    assert stats["batch_outcomes"]["succeeded"] == stats["batch_requests"]
    assert stats["batches"]["created"] < stats["batch_requests"]  # calls of several jobs share a batch
    assert stats["summary_requests"] == live_stats["summary_requests"] > 0  # summaries went by batch too
    for name, result in live.results.items():
        assert (tmp_path / "batch" / name / "final.md").read_text() == (
            tmp_path / "live" / name / "final.md"
        ).read_text()
        assert batched.results[name].turns == result.turns
    for name in live.results:  # each job: every call billed by the batch, priced at half
        metrics = json.loads((tmp_path / "batch" / name / "metrics.json").read_text())
        assert metrics["batch_usage"] == metrics["usage"]
        assert metrics["batch_summarizer_usage"] == metrics["summarizer_usage"]
        calls = model_calls(tmp_path / "batch" / name)
        assert metrics["batch_calls"] >= len(calls) and all(c["batch"].startswith("msgbatch_") for c in calls)
        live_metrics = json.loads((tmp_path / "live" / name / "metrics.json").read_text())
        assert "batch_usage" not in live_metrics
        assert all("batch" not in c for c in model_calls(tmp_path / "live" / name))
    return live, batched, live_stats, stats


async def test_ten_jobs_in_batch_delivery_report_as_live_with_the_same_tokens_at_half_the_cost(
    server, workspace, tmp_path
):
    # batch_cache_ttl = "5m": the same requests as live, so the same tokens, at the batch discount
    await ten_jobs(server, workspace, tmp_path, "5m")
    assert tokens(tmp_path / "batch") == tokens(tmp_path / "live")
    assert tokens(tmp_path / "batch").get("cache_creation_1h_input_tokens", 0) == 0
    assert totals(tmp_path / "batch")["cost_usd"] == pytest.approx(  # ten costs, each rounded to 1e-6
        totals(tmp_path / "live")["cost_usd"] / 2, abs=10e-6
    )


# the most a request's input grows by with the 1-hour TTL: at most 4 breakpoints, each 13 characters more
# (`, "ttl": "1h"`), 4 characters a token, and one more for the rounding up of the request's total
MARKER_TOKENS = 4 * 13 // 4 + 1


async def test_ten_jobs_in_batch_delivery_by_default_write_their_cache_for_an_hour(
    server, workspace, tmp_path
):
    _, batched, live_stats, _ = await ten_jobs(server, workspace, tmp_path, "1h")
    batch_tokens, live_tokens = tokens(tmp_path / "batch"), tokens(tmp_path / "live")
    # every cache write a 1-hour write (priced 2x input), none of live's
    assert batch_tokens["cache_creation_1h_input_tokens"] == batch_tokens["cache_creation_input_tokens"] > 0
    assert live_tokens.get("cache_creation_1h_input_tokens", 0) == 0
    assert batch_tokens["output_tokens"] == live_tokens["output_tokens"]
    # the only other difference: the emulator counts the breakpoints' `"ttl": "1h"` as input, so each
    # request's prompt is a few tokens longer, never shorter (nothing expires in this run: the turns come
    # well within the emulator's 5 minutes, so the same prefixes are read and written as live)
    prompt = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    live_in, batch_in = (sum(t[k] for k in prompt) for t in (live_tokens, batch_tokens))
    assert live_in < batch_in <= live_in + live_stats["requests"] * MARKER_TOKENS
    # priced as its tokens say: the batch discount on the 1-hour write rate, so more than half of live
    prices = PriceTable()
    priced = sum(
        prices.cost("claude-sonnet-5-5", r.usage) + prices.cost(SUMMARY_MODEL, r.summarizer_usage)
        for r in batched.results.values()
    )
    assert totals(tmp_path / "batch")["cost_usd"] == pytest.approx(priced / 2, abs=10e-6)
    assert totals(tmp_path / "batch")["cost_usd"] > totals(tmp_path / "live")["cost_usd"] / 2


async def test_errored_expired_and_canceled_requests_are_sent_again(server, workspace, tmp_path):
    faults = Batches(
        turnaround_s=0.05,
        errored=Fault(rate=0.15),
        expired=Fault(rate=0.1),
        canceling=Fault(schedule=[2]),
        errored_type="api_error",
    )
    server.reconfigure(EmulatorConfig(seed=3, batches=faults))
    result = await run(server, tmp_path / "run", workspace, batch=True, jobs=6)
    stats = server.stats()
    check_jobs(tmp_path / "run", result.results)
    outcomes = stats["batch_outcomes"]
    assert outcomes["errored"] and outcomes["expired"] and outcomes["canceled"], outcomes
    assert sum(r.retries for r in result.results.values()) == (
        outcomes["errored"] + outcomes["expired"] + outcomes["canceled"]
    )
    assert stats["requests"] == 0  # every one recovered through a later batch


async def test_a_request_the_api_refuses_fails_the_call_as_live(server):
    server.reconfigure(EmulatorConfig(batches=Batches(turnaround_s=0.05), context_window_tokens=2_000))
    raw = AnthropicModel(base_url=server.base_url, api_key="test-key", max_retries=0)
    model = BatchModel(Batcher(raw, window_s=0.01, poll_s=0.02), raw)
    request = Request(
        model="claude-sonnet-5-5",
        messages=[{"role": "user", "content": "x " * 20_000}],
        tools=[],
        max_tokens=100,
    )
    from runner.models.base import PromptTooLong

    try:
        with pytest.raises(PromptTooLong):
            await model.create(request)
    finally:
        await model.aclose()


async def test_a_deadline_moves_calls_live_and_the_run_ends_before_it(server, workspace, tmp_path):
    server.reconfigure(EmulatorConfig(batches=Batches(turnaround_s=0.5)))
    deadline = time.time() + 2.5
    result = await run(server, tmp_path / "run", workspace, batch=True, jobs=4, deadline=deadline)
    ended = time.time()
    stats = server.stats()
    check_jobs(tmp_path / "run", result.results)
    assert stats["batch_requests"] > 0 and stats["requests"] > 0  # some calls by batch, the rest live
    assert stats["batches"]["canceled"] == 0
    assert stats["batches"]["created"] >= 2  # the turnaround was learned from the first
    assert all(b.ended_at.timestamp() < deadline for b in server.state.batches.values())
    assert ended < deadline + 1.0  # after the last batch, what was left went live (~0.5 s of calls)
    assert totals(tmp_path / "run")["cost_usd"] < sum(  # what the batch answered cost half
        PriceTable().cost("claude-sonnet-5-5", r.usage) + PriceTable().cost(SUMMARY_MODEL, r.summarizer_usage)
        for r in result.results.values()
    )


async def test_a_batch_in_flight_at_the_deadline_is_cancelled_and_its_calls_go_live(
    server, workspace, tmp_path
):
    server.reconfigure(EmulatorConfig(batches=Batches(turnaround_s=30.0, cancel_s=0.05)))
    started = time.monotonic()
    result = await run(server, tmp_path / "run", workspace, batch=True, jobs=3, deadline=time.time() + 1.0)
    stats = server.stats()
    check_jobs(tmp_path / "run", result.results)
    assert stats["batches"] == {"created": 1, "ended": 1, "canceled": 1}
    assert stats["batch_outcomes"]["canceled"] == 3 and stats["requests"] > 0
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("stall", ["a batch that does not end", "a results download that drips"])
async def test_the_deadline_governor_sends_calls_live_in_time_for_every_job_to_succeed(
    server, workspace, tmp_path, stall
):
    """The run's deadline is every job's too (its loop ends before it, the report's reserve kept): a
    batch that cannot answer by then is cancelled, or its stalled download ended, in time for the calls
    to go live and the jobs to succeed, not to end ``timeout`` waiting for it."""
    if stall == "a batch that does not end":
        batches = Batches(turnaround_s=60.0, cancel_s=0.05)
    else:
        batches = Batches(turnaround_s=0.05, hostile=BatchHostile(kind="drip_results", interval_s=0.5))
    server.reconfigure(EmulatorConfig(batches=batches))
    # each job's loop ends 0.7 s before the deadline (its report's reserve), its calls' cut-off 5 s before
    # that (1.3 s in: the first calls are batched, then go live), a stalled download ends 2.5 s before it
    deadline = time.time() + 7.0
    result = await run(
        server,
        tmp_path / "run",
        workspace,
        batch=True,
        jobs=3,
        deadline=deadline,
        live_s=5.0,
        run_deadline=True,
    )
    stats = server.stats()
    check_jobs(tmp_path / "run", result.results)
    assert stats["batches"]["created"] >= 1 and stats["requests"] > 0  # batched first, then live
    assert time.time() < deadline + 1.0


# --- delivery per job ------------------------------------------------------------------------------


MIXED_CONFIG = (
    '[runner]\nbackend = "anthropic"\ndelivery = "live"\nbatch_window_s = 0.1\nbatch_poll_s = 0.05\n'
    "batch_poll_max_s = 0.2\n"
    "deadline_s = 300\n"  # one deadline for the night, far enough that no batch job needs to go live
    '[limits]\ndelivery = "batch"\ncontext_char_limit = 3000\nkeep_recent_results = 1\n'
    '[jobs.urgent-b]\ndelivery = "live"\n'
)


def test_a_night_mixing_live_and_batch_jobs_sends_each_on_its_own_delivery(
    server, workspace, tmp_path, run_cli
):
    """[runner] delivery = "live" (the default), [limits] delivery = "batch", one task file "live", one
    [jobs.<name>] "live", one task file "batch": each job's calls (its summaries too) go its own way."""
    server.reconfigure(EmulatorConfig(batches=Batches(turnaround_s=0.2)))
    root = tmp_path / "night"
    (root / "jobs").mkdir(parents=True)
    delivery = {
        "bulk-a": "",
        "bulk-b": 'delivery = "batch"\n',
        "urgent-a": 'delivery = "live"\n',
        "urgent-b": "",
    }
    for name, line in delivery.items():
        (root / "jobs" / f"{name}.toml").write_text(
            f'name = "{name}"\nworkspace = "{workspace}"\nprompt = "Survey this workspace ({name})."\n{line}'
        )
    (root / "config.toml").write_text(MIXED_CONFIG)
    started = time.time()
    done = run_cli(
        "run", "jobs", "--json", cwd=root, ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="k"
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    stats = server.stats()
    run_dir = Path(doc["run_dir"])
    assert {j["job"]: j["status"] for j in doc["jobs"]} == dict.fromkeys(delivery, "succeeded")
    assert max(b.ended_at.timestamp() for b in server.state.batches.values()) < started + 300
    calls = {name: model_calls(run_dir / name) for name in delivery}
    for name in ("bulk-a", "bulk-b"):
        assert calls[name] and all(c.get("batch") for c in calls[name]), name
    for name in ("urgent-a", "urgent-b"):
        assert calls[name] and not any(c.get("batch") for c in calls[name]), name
    limits = {n: json.loads((run_dir / n / "job.json").read_text())["limits"]["delivery"] for n in delivery}
    assert limits == {"bulk-a": "batch", "bulk-b": "batch", "urgent-a": "live", "urgent-b": "live"}
    jobs = {j["job"]: j for j in doc["jobs"]}
    assert jobs["bulk-a"]["batch_calls"] > 0 and jobs["urgent-a"].get("batch_calls", 0) == 0
    live_calls = sum(len(calls[n]) for n in ("urgent-a", "urgent-b"))
    batch_calls = sum(len(calls[n]) for n in ("bulk-a", "bulk-b"))
    summaries = {n: jobs[n].get("compactions", {}).get("compact_history", 0) for n in delivery}
    assert all(summaries.values())  # every job summarized: its summaries went its own way too
    assert stats["requests"] == live_calls + summaries["urgent-a"] + summaries["urgent-b"]
    assert stats["batch_requests"] == batch_calls + summaries["bulk-a"] + summaries["bulk-b"]
    assert live_calls == batch_calls == 2 * TURNS and job_calls(stats) == 4 * TURNS  # each script whole
    for name in delivery:
        assert jobs[name]["turns"] == TURNS and (run_dir / name / "final.md").read_text().startswith(HEADER)
    assert (run_dir / "batches.jsonl").is_file()


def test_a_job_without_delivery_follows_the_run_and_a_live_job_never_reaches_the_batcher(server):
    class Refusing:  # a batcher that no live call may reach
        async def create(self, request, *, live):
            raise AssertionError("a live job's call reached the batcher")

    class Live:
        name, server_compaction = "live", False

        def __init__(self):
            self.seen: list[str | None] = []

        async def create(self, request):
            self.seen.append(request.delivery)
            return "reply"

    live = Live()
    request = Request(model="m", messages=[{"role": "user", "content": "hi"}], tools=[], max_tokens=10)
    run_live = BatchModel(Refusing(), live, default="live")  # type: ignore[arg-type]
    run_batch_ = BatchModel(Refusing(), live, default="batch")  # type: ignore[arg-type]
    import anyio

    async def go():
        assert await run_live.create(request) == "reply"  # no delivery: the run's, live
        assert await run_batch_.create(replace(request, delivery="live")) == "reply"
        with pytest.raises(AssertionError, match="reached the batcher"):
            await run_batch_.create(request)  # no delivery: the run's, batch
        with pytest.raises(AssertionError, match="reached the batcher"):
            await run_live.create(replace(request, delivery="batch"))

    anyio.run(go)
    assert live.seen == [None, "live"]


# --- pieces ------------------------------------------------------------------------------------


def test_custom_ids_name_the_job_and_turn_within_the_api_pattern():
    params = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    cid = custom_id_of("survey/the ünïcode job" * 5, 12, params)
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", cid) and "-t12-" in cid
    assert custom_id_of("a", 1, params) == custom_id_of("a", 1, dict(params))
    assert custom_id_of("a", 1, params) != custom_id_of("a", 1, {**params, "max_tokens": 2})


def test_the_deadline_is_the_next_local_clock_time_or_seconds_from_now():
    now = time.mktime((2026, 3, 1, 23, 0, 0, 0, 0, -1))
    assert deadline_at(None, None, now) is None
    assert deadline_at(None, 90.0, now) == now + 90
    assert deadline_at("06:30", None, now) == time.mktime((2026, 3, 2, 6, 30, 0, 0, 0, -1))
    assert deadline_at("23:30", None, now) == time.mktime((2026, 3, 1, 23, 30, 0, 0, 0, -1))


def test_batch_delivery_settings_and_the_discount_load_strictly(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(
        '[runner]\ndelivery = "batch"\ndeadline = "06:30"\nbatch_window_s = 5\n'
        "[prices]\nbatch_discount = 0.4\n[prices.sonnet]\ninput = 3.0\noutput = 15.0\n"
    )
    settings = load_settings(path)
    assert settings.runner.delivery == "batch" and settings.runner.deadline == "06:30"
    assert settings.runner.batch_cache_ttl == "1h"  # the default: a batch turn outlasts five minutes
    table = PriceTable(settings.prices)
    assert table.batch_discount == 0.4 and PriceTable().batch_discount == 0.5
    usage = Usage(input_tokens=1000, output_tokens=100)
    assert table.cost_with_batch("sonnet", usage, usage) == pytest.approx(0.4 * table.cost("sonnet", usage))
    assert table.cost_with_batch("sonnet", usage, Usage()) == table.cost("sonnet", usage)
    for bad, named in (
        ('[runner]\ndelivery = "later"\n', "runner.delivery"),
        ('[runner]\nbatch_cache_ttl = "1d"\n', "runner.batch_cache_ttl"),
        ("[runner]\nbatch_cache_ttl = 3600\n", "runner.batch_cache_ttl"),
        ('[runner]\ndeadline = "6.30"\n', "runner.deadline"),
        ("[prices]\nbatch_discount = 1.5\n", "prices.batch_discount"),
        ("[prices]\nbatch_discount = true\n", "prices.batch_discount"),
        ("[prices]\nsonnet = 0.5\n", "prices.sonnet"),
    ):
        path.write_text(bad)
        with pytest.raises(ConfigError, match=re.escape(named)):
            load_settings(path)


# --- crash-safe: kill -9 with a batch in flight, then resume; Ctrl-C ------------------------------

CONFIG = (
    '[runner]\nbackend = "anthropic"\ndelivery = "batch"\nbatch_window_s = 0.1\nbatch_poll_s = 0.05\n'
    "batch_poll_max_s = 0.2\n"
)


def _project(root: Path, workspace: Path) -> Path:
    (root / "jobs").mkdir(parents=True)
    for name in ("alpha", "beta"):
        (root / "jobs" / f"{name}.toml").write_text(
            f'name = "{name}"\nworkspace = "{workspace}"\nprompt = "Survey this workspace ({name})."\n'
            "[limits]\ncontext_char_limit = 3000\nkeep_recent_results = 1\n"
        )
    (root / "config.toml").write_text(CONFIG)
    return root


def _env(server) -> dict[str, str]:
    return runner_env(ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="emulator")


def _resume(run_dir: Path, cwd: Path, server) -> subprocess.CompletedProcess[str]:
    """``runner resume run_dir``, a real process against the emulator ``server``."""
    return subprocess.run(
        [sys.executable, "-m", "runner", "resume", str(run_dir)],
        cwd=cwd,
        env=_env(server),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _batches_recorded(root: Path, lines: int) -> Callable[[], bool]:
    """Whether the run under ``root`` has recorded ``lines`` batches in its ``batches.jsonl``."""

    def ready() -> bool:
        found = list((root / "runs").glob("*/batches.jsonl"))
        return bool(found) and found[0].read_text().count("\n") >= lines

    return ready


def test_kill_9_with_a_batch_in_flight_then_resume_pays_for_no_request_twice(server, workspace, tmp_path):
    server.reconfigure(EmulatorConfig(batches=Batches(turnaround_s=0.05)))
    whole = _project(tmp_path / "intact", workspace)  # paths as long as the killed run's: the same tokens
    done = subprocess.run(
        [sys.executable, "-m", "runner", "run", "jobs"],
        cwd=whole,
        env=_env(server),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    expected = server.stats()
    assert job_calls(expected) == 2 * TURNS
    for name in ("alpha", "beta"):
        final = next((whole / "runs").glob(f"*/{name}/final.md"))
        assert final.read_text().startswith(HEADER)
        assert json.loads((final.parent / "metrics.json").read_text())["turns"] == TURNS

    server.reconfigure(EmulatorConfig(batches=Batches(turnaround_s=0.6)))
    killed = _project(tmp_path / "killed", workspace)
    # killed while the second batch is in flight
    assert kill_runner_when(_batches_recorded(killed, 2), "run", "jobs", cwd=killed, env=_env(server))
    run_dir = next((killed / "runs").glob("*/batches.jsonl")).parent
    # the batches the resume creates end as fast as the intact run's (the two in the journal keep the
    # 0.6 s they were created with); the stats go on counting: no reset
    server.state.config = EmulatorConfig(batches=Batches(turnaround_s=0.05))
    resumed = _resume(run_dir, killed, server)
    assert resumed.returncode == 0, resumed.stderr
    stats = server.stats()
    for name in ("alpha", "beta"):
        assert (run_dir / name / "final.md").read_text() == next(
            (whole / "runs").glob(f"*/{name}/final.md")
        ).read_text()
    # every request answered once: the same requests and tokens as the run never killed
    assert stats["batch_outcomes"]["succeeded"] + stats["requests"] == expected["batch_outcomes"]["succeeded"]
    assert stats["tokens"] == expected["tokens"]
    assert job_calls(stats) == job_calls(expected)
    recorded = [json.loads(line) for line in (run_dir / "batches.jsonl").read_text().splitlines()]
    assert len(recorded) == stats["batches"]["created"] and all(
        r["batch"].startswith("msgbatch_") for r in recorded
    )


def test_a_resumed_batch_run_goes_on_by_batch_though_the_config_says_live_now(server, workspace, tmp_path):
    """run.json records the run's delivery and resume keeps it, as it keeps the backend and models: a
    night killed half way is finished at the batch price, not silently at the live one; --delivery
    still chooses."""
    server.reconfigure(EmulatorConfig(batches=Batches(turnaround_s=0.3)))
    killed = _project(tmp_path / "killed", workspace)
    assert kill_runner_when(_batches_recorded(killed, 2), "run", "jobs", cwd=killed, env=_env(server))
    run_dir = next((killed / "runs").glob("*/batches.jsonl")).parent
    assert json.loads((run_dir / "run.json").read_text())["delivery"] == "batch"
    (killed / "config.toml").write_text(CONFIG.replace('delivery = "batch"\n', ""))  # live by default now
    server.state.config = EmulatorConfig(batches=Batches(turnaround_s=0.05))
    live_before = server.stats()["requests"]
    resumed = _resume(run_dir, killed, server)
    assert resumed.returncode == 0, resumed.stderr
    assert server.stats()["requests"] == live_before  # no call went live
    for name in ("alpha", "beta"):
        metrics = json.loads((run_dir / name / "metrics.json").read_text())
        assert metrics["status"] == "succeeded" and metrics["batch_calls"] >= metrics["turns"], metrics
    assert json.loads((run_dir / "run.json").read_text())["delivery"] == "batch"


def test_ctrl_c_cancels_the_batches_in_flight_and_writes_every_job(server, workspace, tmp_path):
    import signal

    server.reconfigure(EmulatorConfig(batches=Batches(turnaround_s=60.0, cancel_s=0.05)))
    root = _project(tmp_path / "run", workspace)
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "run", "jobs"],
        cwd=root,
        env=_env(server),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    recorded, deadline = _batches_recorded(root, 1), time.monotonic() + 30
    while not recorded():
        assert proc.poll() is None, "the run ended before its batches were recorded"
        assert time.monotonic() < deadline, "no batch was recorded in time"
        time.sleep(0.02)
    run_dir = next((root / "runs").glob("*/batches.jsonl")).parent
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode != 0
    stats = server.stats()
    assert stats["batches"]["canceled"] == stats["batches"]["created"] >= 1, stderr
    for name in ("alpha", "beta"):
        assert (run_dir / name / "final.md").exists() and (run_dir / name / "metrics.json").exists()
