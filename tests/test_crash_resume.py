"""SIGKILL the runner mid-batch (a real subprocess), then resume: every job ends succeeded, jobs that
had succeeded are untouched, and no file in the run directory is torn. (The resume runs in this
process, on the same scripted model.)

This holds with any model: the jobs are driven here by a scripted model (``tests/scripted.py``: 24
turns reading the email package's modules, then its report)."""

from __future__ import annotations

import json
import sysconfig
import time
from pathlib import Path

import pytest
from conftest import CliRunner, kill_runner_when
from scripted import ScriptedModel, files_under, play_instead_of_the_stand_in, reads, scripted_runner

from runner import cli
from runner.agent.continuation import last_complete_turn
from runner.messages import request_problems
from runner.rundir.docs import run_document
from runner.rundir.store import read_jsonl

JOBS = 12  # enough that jobs are still running at every kill point (a job takes ~0.2 s)
EMAIL = Path(sysconfig.get_paths()["stdlib"]) / "email"
REPORT = "## Every module read\n\nThe email package, surveyed."


def _setup(tmp: Path) -> Path:
    """The run's jobs and config in ``tmp``; the scripted model's file."""
    (tmp / "jobs").mkdir()
    for i in range(JOBS):
        (tmp / "jobs" / f"job{i}.toml").write_text(
            f'name = "job{i}"\nworkspace = "{{stdlib}}/email"\nprompt = "Survey the email package ({i})."\n'
            "[limits]\nbatch_char_limit = 60_000\ncontext_char_limit = 30_000\n"
        )
    (tmp / "config.toml").write_text('[runner]\nconcurrency = 2\nbackend = "offline"\noutput_dir = "runs"\n')
    model = ScriptedModel(reads(files_under(EMAIL)[:24]), final=REPORT, notes=200)
    return model.save(tmp / "script.json")


def _run_json(tmp: Path) -> tuple[Path | None, dict | None]:
    runs = [p for p in (tmp / "runs").glob("*") if not p.is_symlink()] if (tmp / "runs").exists() else []
    if not runs:
        return None, None
    try:
        return runs[0], json.loads((runs[0] / "run.json").read_text())
    except (OSError, json.JSONDecodeError):
        return runs[0], None


def _kill_when(tmp: Path, script: Path, ready) -> Path:
    def at_point() -> bool:
        run_dir, doc = _run_json(tmp)
        return run_dir is not None and ready(run_dir, doc)

    if not kill_runner_when(at_point, cwd=tmp, argv=scripted_runner(script, "run")):
        pytest.fail("the run finished before the kill point was reached")
    run_dir, _ = _run_json(tmp)
    assert run_dir is not None
    return run_dir


def _transcript_lines(run_dir: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in run_dir.glob("*/transcript.jsonl"))


def _succeeded(run_dir: Path) -> int:
    """Jobs succeeded by their own files (run.json, rewritten at most every half second, lags them: by
    the time it says two succeeded, a fast batch may have ended)."""
    done = 0
    for path in run_dir.glob("*/metrics.json"):
        try:
            done += json.loads(path.read_text())["status"] == "succeeded"
        except (OSError, ValueError, KeyError):
            continue
    return done


KILL_POINTS = {
    "first-messages": lambda run_dir, doc: _transcript_lines(run_dir) >= 3,
    "mid-job": lambda run_dir, doc: _transcript_lines(run_dir) >= 40,
    "after-two-succeeded": lambda run_dir, doc: _succeeded(run_dir) >= 2,
}


def _assert_not_torn(run_dir: Path) -> None:
    for path in run_dir.rglob("*.json"):
        json.loads(path.read_text())  # every whole file parses
    for path in run_dir.rglob("*.jsonl"):
        records, warnings = read_jsonl(path)
        assert records, path
        assert not warnings, warnings
    # a killed run's checkpoint spares are removed by the resume that continues their jobs (temporary
    # files of writes cut by the kill may stay: hidden names, never read)
    assert not list(run_dir.rglob(".*.spare"))


@pytest.fixture
def scripted_cli(run_cli: CliRunner, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """The CLI in this process, its offline model the scripted one :func:`_setup` saved."""

    def run(*args: str, cwd: Path) -> object:
        play_instead_of_the_stand_in(monkeypatch, ScriptedModel.load(cwd / "script.json"))
        return run_cli(*args, cwd=cwd)

    return run


@pytest.mark.parametrize("point", sorted(KILL_POINTS))
def test_sigkill_then_resume(tmp_path: Path, point: str, capsys, scripted_cli: CliRunner) -> None:
    script = _setup(tmp_path)
    run_dir = _kill_when(tmp_path, script, KILL_POINTS[point])
    # a dead run is told apart from a live one: the report, --json and the viewer's data say so
    document = run_document(run_dir)
    assert document["state"] == "interrupted"
    assert not {j["status"] for j in document["jobs"]} & {"running", "queued"}
    assert any("interrupted" == j["status"] for j in document["jobs"]), document["jobs"]
    assert cli.main(["report", str(run_dir)]) == 1
    assert f"runner resume {run_dir}" in " ".join(capsys.readouterr().out.split())
    # the jobs succeeded by their own files (run.json may lag them): resume must leave them be
    done_before = {
        path.parent.name: path.read_bytes()
        for path in run_dir.glob("*/metrics.json")
        if json.loads(path.read_text())["status"] == "succeeded"
    }
    if point == "after-two-succeeded":
        assert len(done_before) >= 2, done_before
    for metrics in run_dir.glob("*/metrics.json"):
        json.loads(metrics.read_text())  # never torn, even right after the kill
    for output in run_dir.glob("*/tool-results/*.txt"):
        output.read_text(encoding="utf-8")

    started = time.monotonic()
    resumed = scripted_cli("resume", str(run_dir), cwd=tmp_path)
    elapsed = time.monotonic() - started
    assert resumed.returncode == 0, resumed.stderr + resumed.stdout
    after = json.loads((run_dir / "run.json").read_text())
    assert len(after["jobs"]) == JOBS
    assert {j["status"] for j in after["jobs"]} == {"succeeded"}, (after["jobs"], resumed.stderr[-3000:])
    for name, metrics in done_before.items():  # succeeded jobs were not run again
        assert (run_dir / name / "metrics.json").read_bytes() == metrics
    _assert_not_torn(run_dir)
    for transcript in run_dir.glob("*/transcript.jsonl"):
        messages, _ = read_jsonl(transcript)
        assert not request_problems(messages), transcript
        assert messages[-1]["role"] == "assistant"
    for job in after["jobs"]:
        final = (run_dir / job["job"] / "final.md").read_text()
        assert REPORT in final  # the model's report, written once the job ended
    print(f"{point}: {len(done_before)} jobs kept, resume took {elapsed:.2f} s")


def test_half_written_lines_are_tolerated(tmp_path: Path, scripted_cli: CliRunner) -> None:
    script = _setup(tmp_path)
    run_dir = _kill_when(tmp_path, script, KILL_POINTS["mid-job"])
    # a job unfinished by its own files (run.json, rewritten at most every half second, may lag them)
    unfinished = [
        path.parent
        for path in sorted(run_dir.glob("*/transcript.jsonl"))
        if not (path.parent / "metrics.json").exists()
        or json.loads((path.parent / "metrics.json").read_text())["status"] != "succeeded"
    ]
    assert unfinished
    victim = unfinished[0]
    with open(victim / "transcript.jsonl", "a") as f:
        f.write('{"role": "assistant", "content": [{"type": "te')
    with open(victim / "events.jsonl", "a") as f:
        f.write('{"stage": "sn')
    resumed = scripted_cli("resume", str(run_dir), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "half-written last line" in resumed.stderr, resumed.stderr
    messages, warnings = read_jsonl(victim / "transcript.jsonl")
    assert not warnings and not request_problems(messages)


def test_last_complete_turn_drops_unanswered_calls() -> None:
    prompt = {"role": "user", "content": "do it"}
    call = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {}}]}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]}
    assert last_complete_turn([prompt, call]) == [prompt]
    assert last_complete_turn([prompt, call, result]) == [prompt, call, result]
    assert last_complete_turn([prompt, call, result, call]) == [prompt, call, result]
    assert last_complete_turn([]) == []


def test_resume_brings_a_lagging_run_json_up_to_date(tmp_path: Path, scripted_cli: CliRunner) -> None:
    """Killed right after the last jobs ended, run.json (rewritten at most every half second) can still
    say "running" for jobs whose own files say they succeeded: resume trusts the jobs' files."""
    _setup(tmp_path)
    done = scripted_cli("run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    run_dir, doc = _run_json(tmp_path)
    doc["state"] = "running"
    doc["jobs"][-1] = {"job": doc["jobs"][-1]["job"], "status": "running", "turns": 3}
    (run_dir / "run.json").write_text(json.dumps(doc))
    resumed = scripted_cli("resume", str(run_dir), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    after = json.loads((run_dir / "run.json").read_text())
    assert [j["status"] for j in after["jobs"]] == ["succeeded"] * JOBS and after["state"] == "finished"
