"""Prices from config.toml, and a run-wide max_cost_usd that stops spending cleanly.

This holds with any model: the jobs are driven here by a scripted model (``tests/scripted.py``: it
reads the package's modules one a turn; its usage counted from each request), in place of the offline
stand-in."""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

import pytest
from conftest import CliRunner
from scripted import ScriptedModel, files_under, play_instead_of_the_stand_in, reads

from runner.config import load_settings
from runner.pricing import PriceTable, Usage

STDLIB = Path(sysconfig.get_paths()["stdlib"])
REPORT = "# Report\n\nWhat the job read, in short."


@pytest.fixture
def scripted_cli(run_cli: CliRunner, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """The CLI in this process, its offline model a scripted one reading ``{stdlib}/email``'s modules."""
    model = ScriptedModel(reads(files_under(STDLIB / "email")), final=REPORT)
    play_instead_of_the_stand_in(monkeypatch, model)
    return run_cli


def test_price_table_defaults_overrides_and_fallback(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[prices."claude-sonnet-5-5"]\ninput = 2.0\noutput = 10.0\ncache_read = 0.5\n')
    table = PriceTable(load_settings(config).prices)
    usage = Usage(
        input_tokens=1_000_000,
        output_tokens=1_000_000,
        cache_creation_input_tokens=1_000_000,
        cache_read_input_tokens=1_000_000,
    )
    assert table.cost("claude-sonnet-5-5", usage) == 2.0 + 10.0 + 2.0 * 1.25 + 0.5
    assert table.cost("claude-haiku-5-5", usage) == 1.0 + 5.0 + 1.25 + 0.1  # family default
    assert table.cost("some-unknown-model", usage) == table.cost("claude-opus-5", usage)  # never free


def test_run_budget_stops_every_job(tmp_path: Path, scripted_cli: CliRunner) -> None:
    (tmp_path / "jobs").mkdir()
    for i in range(3):
        (tmp_path / "jobs" / f"j{i}.toml").write_text(
            f'workspace = "{{stdlib}}/email"\nprompt = "Survey {i}."\n'
        )
    (tmp_path / "config.toml").write_text(
        '[runner]\nbackend = "offline"\nconcurrency = 1\nmax_cost_usd = 0.05\n'
    )
    done = scripted_cli("run", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    run = json.loads(next((tmp_path / "runs").glob("*/run.json")).read_text())
    statuses = [j["status"] for j in run["jobs"]]
    assert statuses == ["budget_exceeded"] * 3, run["jobs"]
    assert "the run spent" in run["jobs"][-1]["error"]
    assert 0.03 <= run["totals"]["cost_usd"] <= 0.05  # it stopped at the line, not past it
    for job in run["jobs"]:  # what was paid for is on disk
        transcript = tmp_path / "runs" / run["run_id"] / job["job"] / "transcript.jsonl"
        if job["turns"]:
            lines = [json.loads(line) for line in transcript.read_text().splitlines()]
            assert sum(m["role"] == "assistant" for m in lines) == job["turns"]


def test_jobs_at_once_stop_at_the_run_budget_not_a_call_each_past_it(
    tmp_path: Path, run_cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four jobs at once under one run budget, each call 50 ms in flight: a call holds its estimated cost
    while it is in flight, so the run ends at its limit, not with one call of every job past it."""
    model = ScriptedModel(reads(files_under(STDLIB / "email")), final=REPORT, delay=0.05)
    play_instead_of_the_stand_in(monkeypatch, model)
    (tmp_path / "jobs").mkdir()
    for i in range(4):
        (tmp_path / "jobs" / f"j{i}.toml").write_text(
            f'workspace = "{{stdlib}}/email"\nprompt = "Survey {i}."\n'
        )
    (tmp_path / "config.toml").write_text(
        '[runner]\nbackend = "offline"\nconcurrency = 4\nmax_cost_usd = 0.05\n'
    )
    done = run_cli("run", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    run = json.loads(next((tmp_path / "runs").glob("*/run.json")).read_text())
    assert [j["status"] for j in run["jobs"]] == ["budget_exceeded"] * 4, run["jobs"]
    assert all("max_cost_usd is $0.05" in j["error"] for j in run["jobs"]), run["jobs"]
    assert len(model.requests) >= 8  # the jobs worked before the line
    assert 0.03 <= run["totals"]["cost_usd"] <= 0.05, run["totals"]


def test_a_small_budget_works_until_near_its_cap_then_reports(
    tmp_path: Path, scripted_cli: CliRunner
) -> None:
    """max_cost_usd = 0.05: the reserve kept for the report is what the job's own calls cost (not a fixed
    8,000 output tokens, which alone would cost more than the cap): it makes several turns, then one
    last call writes a short report, and the whole job stays under the cap."""
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "a.toml").write_text(
        'name = "a"\nworkspace = "{stdlib}/email"\nprompt = "Survey it."\n'
        'model = "claude-haiku-4-5"\n'  # priced as haiku: ~$0.005 a turn
        "[limits]\nmax_cost_usd = 0.05\ncontext_char_limit = 8000\n"
    )
    (tmp_path / "config.toml").write_text('[runner]\nbackend = "offline"\n')
    done = scripted_cli("run", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    job = next((tmp_path / "runs").glob("*/a"))
    metrics = json.loads((job / "metrics.json").read_text())
    assert metrics["status"] == "budget_exceeded", metrics
    assert "max_cost_usd $0.05" in metrics["error"] and "for the report" in metrics["error"]
    assert metrics["turns"] >= 6, metrics  # the turns before the report, and the report's
    assert metrics["cost_usd"] <= 0.05, metrics
    assert metrics["cost_usd"] >= 0.03, metrics  # it worked until near the cap
    events = [json.loads(line) for line in (job / "events.jsonl").read_text().splitlines()]
    assert [e["stage"] for e in events if e["stage"] in ("model_call", "last_call")][-2:] == [
        "last_call",
        "model_call",
    ]
    transcript = [json.loads(line) for line in (job / "transcript.jsonl").read_text().splitlines()]
    report = transcript[-1]
    assert report["role"] == "assistant" and report["content"][0]["text"] == REPORT  # the model wrote it
    final = (job / "final.md").read_text()
    assert "budget_exceeded" in final and report["content"][0]["text"][:200] in final


@pytest.mark.anyio
async def test_a_call_waits_while_the_calls_in_flight_hold_the_room_and_ends_only_on_what_was_spent() -> None:
    """The run's budget ($1): a call about to start holds its likely cost ($0.525 with the margin) while in
    flight. A second call that does not fit beside the first one's hold waits for it to be given back
    and then runs: its job is not ended while the run has spent next to nothing. A call that does not
    fit beside what was spent ends its job, saying so."""
    from types import SimpleNamespace

    import anyio

    from runner.agent.spend import JobEnded, Spend
    from runner.services import RunBudget

    budget = RunBudget(1.0)
    job = SimpleNamespace(run_budget=budget, call_estimate=lambda state: 0.5)
    job._run_spent = lambda: Spend._run_spent(job)  # type: ignore[arg-type]
    order: list[str] = []

    async def call(name: str) -> None:
        async with Spend.run_hold(job, None):  # type: ignore[arg-type]
            order.append(f"{name} in")
            await anyio.sleep(0.05)
            budget.charge(0.1)
            order.append(f"{name} out")

    async with anyio.create_task_group() as calls:
        calls.start_soon(call, "a")
        await anyio.sleep(0.01)
        calls.start_soon(call, "b")
    assert order == ["a in", "a out", "b in", "b out"]
    assert budget.held == 0 and round(budget.spent, 6) == 0.2
    budget.charge(0.3)  # spent $0.50: with $0.525 more the run reaches its $1
    with pytest.raises(JobEnded, match=r"the run spent \$0\.5000, its max_cost_usd is \$1, and this call"):
        async with Spend.run_hold(job, None):  # type: ignore[arg-type]
            pass
    assert budget.held == 0
