"""One writer per run directory, names from disk checked, a resumed run keeps its backend: the lock's
contenders real ``runner`` subprocesses, the rest in this process (``run_cli``).

This holds with any model: the jobs are driven here by a scripted model (``tests/scripted.py``: it
reads the email package's modules one a turn), in place of the offline stand-in."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import sysconfig
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import CliRunner, runner_env
from scripted import ScriptedModel, files_under, play_instead_of_the_stand_in, reads, scripted_runner

from runner.rundir.store import read_jsonl

EMAIL = Path(sysconfig.get_paths()["stdlib"]) / "email"


def _model() -> ScriptedModel:
    return ScriptedModel(reads(files_under(EMAIL)), final="# Report")


@pytest.fixture
def scripted_cli(run_cli: CliRunner, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """The CLI in this process, its offline model the scripted one."""
    play_instead_of_the_stand_in(monkeypatch, _model())
    return run_cli


def scripted_process(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A real runner process with ``args`` in ``cwd``, its offline model the scripted one."""
    return subprocess.run(
        scripted_runner(_model().save(cwd / "script.json"), *args),
        cwd=cwd,
        env=runner_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _ended_run(tmp: Path, run: CliRunner, jobs: int = 1, max_turns: int = 3) -> Path:
    """A finished run whose jobs stopped on max_turns (so resume has work to do)."""
    (tmp / "jobs").mkdir()
    for i in range(jobs):
        (tmp / "jobs" / f"j{i}.toml").write_text(
            f'workspace = "{{stdlib}}/email"\nprompt = "Survey ({i})."\n[limits]\nmax_turns = {max_turns}\n'
        )
    (tmp / "config.toml").write_text('[runner]\nbackend = "offline"\nconcurrency = 1\n')
    first = run("run", "jobs", cwd=tmp)
    assert first.returncode == 1, first.stderr
    for i in range(jobs):
        (tmp / "jobs" / f"j{i}.toml").write_text(
            f'workspace = "{{stdlib}}/email"\nprompt = "Survey ({i})."\n'
        )
    return next((tmp / "runs").iterdir())


def test_a_second_writer_exits_2_naming_the_holder(tmp_path: Path, scripted_cli: CliRunner) -> None:
    run_dir = _ended_run(tmp_path, scripted_cli)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom pathlib import Path\n"
            "from runner.rundir.lock import hold_run_dir\n"
            "with hold_run_dir(Path(sys.argv[1])):\n    print('held', flush=True)\n"
            "    time.sleep(60)\n",
            str(run_dir),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        second = scripted_process("resume", str(run_dir), "--limits-from-config", cwd=tmp_path)
        assert second.returncode == 2
        [line] = [x for x in second.stderr.splitlines() if x.startswith("error:")]
        assert f"pid {holder.pid}" in line, second.stderr
        assert json.loads((run_dir / "j0" / "metrics.json").read_text())["status"] == "max_turns"  # untouched
    finally:
        holder.kill()
        holder.wait()
    # the holder died: the kernel released its lock
    assert scripted_cli("resume", str(run_dir), "--limits-from-config", cwd=tmp_path).returncode == 0


def test_two_resumes_at_once_run_each_job_once(tmp_path: Path, scripted_cli: CliRunner) -> None:
    run_dir = _ended_run(tmp_path, scripted_cli, jobs=4)
    argv = scripted_runner(
        _model().save(tmp_path / "script.json"), "resume", str(run_dir), "--limits-from-config"
    )
    first = subprocess.Popen(
        argv, cwd=tmp_path, env=runner_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    lock = run_dir / ".lock"
    while first.poll() is None and not (lock.exists() and lock.read_text().strip() == str(first.pid)):
        time.sleep(0.001)
    first.send_signal(signal.SIGSTOP)  # the first resume holds the run, mid-work (a slow night)
    try:
        second = subprocess.run(
            argv, cwd=tmp_path, env=runner_env(), capture_output=True, text=True, timeout=120
        )
    finally:
        first.send_signal(signal.SIGCONT)
    assert first.wait(timeout=120) == 0
    assert second.returncode == 2 and f"pid {first.pid}" in second.stderr, second.stderr
    for transcript in run_dir.glob("*/transcript.jsonl"):
        messages, _ = read_jsonl(transcript)
        ids = Counter(
            b["id"]
            for m in messages
            if isinstance(m["content"], list)
            for b in m["content"]
            if b.get("type") == "tool_use"
        )
        assert ids and max(ids.values()) == 1, transcript


def test_a_hostile_job_json_never_writes_outside_the_run(tmp_path: Path, scripted_cli: CliRunner) -> None:
    (tmp_path / "w").mkdir()
    run_dir = _ended_run(tmp_path / "w", scripted_cli)
    job_json = run_dir / "j0" / "job.json"
    doc = json.loads(job_json.read_text())
    doc["name"] = "../../ESCAPED"
    job_json.write_text(json.dumps(doc))
    run = json.loads((run_dir / "run.json").read_text())
    run["jobs"].append({"job": "../../ALSO", "status": "failed"})
    (run_dir / "run.json").write_text(json.dumps(run))
    before = {p for p in tmp_path.rglob("*") if run_dir not in p.parents}
    done = scripted_cli("resume", str(run_dir), "--limits-from-config", cwd=tmp_path / "w")
    assert "Traceback" not in done.stderr
    assert done.returncode == 1  # the job with the bad job.json fails, with a reason
    after = {p for p in tmp_path.rglob("*") if run_dir not in p.parents}
    assert after == before
    assert not list(tmp_path.rglob("ESCAPED")) and not list(tmp_path.rglob("ALSO"))
    metrics = json.loads((run_dir / "j0" / "metrics.json").read_text())
    assert metrics["status"] == "failed" and "ESCAPED" in metrics["error"]


def test_resume_without_the_key_refuses_instead_of_switching_backend(
    tmp_path: Path, scripted_cli: CliRunner
) -> None:
    run_dir = _ended_run(tmp_path, scripted_cli)
    run = json.loads((run_dir / "run.json").read_text())
    run["backend"] = "anthropic"
    (run_dir / "run.json").write_text(json.dumps(run))
    started = time.monotonic()
    done = scripted_cli("resume", str(run_dir), "--limits-from-config", cwd=tmp_path)
    assert done.returncode == 2 and time.monotonic() - started < 60
    [line] = [x for x in done.stderr.splitlines() if x.startswith("error:")]
    assert "ANTHROPIC_API_KEY" in line and "Traceback" not in done.stderr, done.stderr
    assert json.loads((run_dir / "run.json").read_text())["backend"] == "anthropic"
    assert json.loads((run_dir / "j0" / "metrics.json").read_text())["status"] == "max_turns"


def test_a_budget_exceeded_job_stays_ended_unless_its_limit_was_raised(
    tmp_path: Path, scripted_cli: CliRunner
) -> None:
    (tmp_path / "jobs").mkdir()
    task = tmp_path / "jobs" / "b.toml"
    task.write_text('workspace = "{stdlib}/email"\nprompt = "Survey."\n[limits]\nmax_cost_usd = 0.05\n')
    (tmp_path / "config.toml").write_text('[runner]\nbackend = "offline"\n')
    assert scripted_cli("run", "jobs", cwd=tmp_path).returncode == 1
    run_dir = next((tmp_path / "runs").iterdir())
    ended = (run_dir / "b" / "metrics.json").read_bytes()
    assert json.loads(ended)["status"] == "budget_exceeded"
    task.write_text('workspace = "{stdlib}/email"\nprompt = "Survey."\n[limits]\nmax_cost_usd = 50\n')
    kept = scripted_cli("resume", str(run_dir), cwd=tmp_path)  # the run's own limit: no new spending
    assert kept.returncode == 1 and "kept as it is" in kept.stderr
    assert (run_dir / "b" / "metrics.json").read_bytes() == ended
    raised = scripted_cli("resume", str(run_dir), "--limits-from-config", cwd=tmp_path)
    assert raised.returncode == 0, raised.stderr
    after = json.loads((run_dir / "b" / "metrics.json").read_text())
    assert after["status"] == "succeeded" and after["cost_usd"] > json.loads(ended)["cost_usd"]


def test_resume_only_one_job(tmp_path: Path, scripted_cli: CliRunner) -> None:
    run_dir = _ended_run(tmp_path, scripted_cli, jobs=2)
    done = scripted_cli("resume", str(run_dir), "--limits-from-config", "--only", "j1", cwd=tmp_path)
    assert done.returncode == 1  # j0 is still not done
    statuses = {j["job"]: j["status"] for j in json.loads((run_dir / "run.json").read_text())["jobs"]}
    assert statuses == {"j0": "max_turns", "j1": "succeeded"}
    unknown = scripted_cli("resume", str(run_dir), "--only", "nope", cwd=tmp_path)
    assert unknown.returncode == 2 and "--only: no job named 'nope'" in unknown.stderr


def test_a_job_whose_workspace_is_gone_is_not_resumed_on_nothing(
    tmp_path: Path, scripted_cli: CliRunner
) -> None:
    """Its workspace moved away since the run: resume says so and keeps the job as it was recorded (its
    status, turns and spend), never surveys the empty place and calls that a success."""
    import shutil

    shutil.copytree(EMAIL, tmp_path / "ws", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "jobs").mkdir()
    task = tmp_path / "jobs" / "e.toml"
    task.write_text('workspace = "../ws"\nprompt = "Survey it."\n[limits]\nmax_turns = 3\n')
    (tmp_path / "config.toml").write_text('[runner]\nbackend = "offline"\n')
    assert scripted_cli("run", "jobs", cwd=tmp_path).returncode == 1
    run_dir = next(p for p in (tmp_path / "runs").iterdir() if not p.is_symlink())
    transcript = (run_dir / "e" / "transcript.jsonl").read_bytes()
    before = json.loads((run_dir / "e" / "metrics.json").read_text())
    before["status"] = "cancelled"  # as Ctrl-C leaves it: a job resume goes on with
    (run_dir / "e" / "metrics.json").write_text(json.dumps(before))
    (tmp_path / "ws").rename(tmp_path / "ws.gone")
    done = scripted_cli("resume", str(run_dir), cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    said = f"e: not resumed: {run_dir / 'e' / 'job.json'}: workspace: '{tmp_path / 'ws'}' does not exist"
    assert said in done.stderr, done.stderr
    after = json.loads((run_dir / "e" / "metrics.json").read_text())
    kept = ("status", "turns", "cost_usd")
    assert [after[k] for k in kept] == [before[k] for k in kept], after
    assert (run_dir / "e" / "transcript.jsonl").read_bytes() == transcript


def test_limits_from_config_says_why_a_task_file_gives_none_today(
    tmp_path: Path, scripted_cli: CliRunner
) -> None:
    """--limits-from-config with a task file that does not load today: resume says so, naming the file
    and the field, before it says the limit was not raised (never silently the recorded limits)."""
    run_dir = _ended_run(tmp_path, scripted_cli)
    (tmp_path / "jobs" / "j0.toml").write_text(
        'workspace = "{stdlib}/email"\nprompt = "Survey (0)."\n[limits]\nmax_turns = "many"\n'
    )
    done = scripted_cli("resume", str(run_dir), "--limits-from-config", cwd=tmp_path)
    notes = [line for line in done.stderr.splitlines() if line.startswith("resume: j0:")]
    assert "its recorded limits are kept" in notes[0] and "max_turns" in notes[0], done.stderr
    assert str(tmp_path / "jobs" / "j0.toml") in notes[0], done.stderr
    assert "its limit was not raised" in notes[1], done.stderr


def test_a_latest_that_is_no_link_is_said_not_silently_left_stale(
    tmp_path: Path, scripted_cli: CliRunner
) -> None:
    """runs/latest copied as a directory (a copy that followed the link): the run says it could not point
    it at itself, since report, view and the nightly diff read latest."""
    (tmp_path / "runs" / "latest").mkdir(parents=True)
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "j.toml").write_text('workspace = "{stdlib}/email"\nprompt = "Survey."\n')
    (tmp_path / "config.toml").write_text('[runner]\nbackend = "offline"\n')
    done = scripted_cli("run", "jobs", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    [warning] = [line for line in done.stderr.splitlines() if "latest" in line]
    assert warning.startswith("warning:") and "not pointed at this run" in warning, done.stderr
    assert (tmp_path / "runs" / "latest").is_dir() and not (tmp_path / "runs" / "latest").is_symlink()


def test_a_job_of_an_older_run_named_as_the_run_directory_s_files_is_kept_not_dropped(
    tmp_path: Path, scripted_cli: CliRunner
) -> None:
    """A run made before `view` was reserved: resume keeps that job's row as it was (a note says why)
    and goes on with the others, never drops its row and its spend from run.json."""
    run_dir = _ended_run(tmp_path, scripted_cli, jobs=2)
    run = json.loads((run_dir / "run.json").read_text())
    [row] = [r for r in run["jobs"] if r["job"] == "j0"]
    row["job"] = "view"
    (run_dir / "run.json").write_text(json.dumps(run))
    (run_dir / "j0").rename(run_dir / "view")
    done = scripted_cli("resume", str(run_dir), "--limits-from-config", cwd=tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    assert "job 'view': the run directory's own files take that name now; kept" in done.stderr, done.stderr
    rows = {r["job"]: r for r in json.loads((run_dir / "run.json").read_text())["jobs"]}
    assert set(rows) == {"view", "j1"} and rows["view"]["cost_usd"] == row["cost_usd"], rows
    assert rows["j1"]["status"] == "succeeded", rows


def test_resuming_a_finished_api_run_without_the_key_has_nothing_to_refuse(
    tmp_path: Path, scripted_cli: CliRunner
) -> None:
    """Every job of an API run succeeded: resume has nothing to run, so it needs no key (it refused,
    exit 2, asking for ANTHROPIC_API_KEY)."""
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "j.toml").write_text('workspace = "{stdlib}/email"\nprompt = "Survey."\n')
    (tmp_path / "config.toml").write_text('[runner]\nbackend = "offline"\n')
    assert scripted_cli("run", "jobs", cwd=tmp_path).returncode == 0
    run_dir = next(p for p in (tmp_path / "runs").iterdir() if not p.is_symlink())
    run = json.loads((run_dir / "run.json").read_text())
    run["backend"] = "anthropic"
    (run_dir / "run.json").write_text(json.dumps(run))
    done = scripted_cli("resume", str(run_dir), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "no job of" in done.stderr and "is left to run" in done.stderr, done.stderr
