"""The CLI as a user runs it (in this process, through ``runner.cli.main``: :func:`conftest.run_cli`), no API
key, the offline backend: the README's demo on the embedded stand-in (its own result: ``stand_in``), every
other run on a scripted model."""

from __future__ import annotations

import json
import re
import subprocess
import sysconfig
from pathlib import Path

import pytest
from conftest import run_cli_once
from scripted import ScriptedModel, play_instead_of_the_stand_in

from runner.messages import request_problems
from runner.rundir.store import read_jsonl

REPO = Path(__file__).resolve().parent.parent
DEMO_JOBS = ("project-self", "stdlib-asyncio", "stdlib-email", "stdlib-json")
METRIC_KEYS = {
    "job",
    "status",
    "turns",
    "wall_s",
    "usage",
    "cost_usd",
    "compactions",
    "persisted_bytes",
    "error",
}
USAGE_KEYS = {"input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"}
PIPELINE = {"tool_result_budget", "snip", "micro_compact", "fit_tool_results", "compact_history"}


def no_traceback(proc: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_validate_the_repos_own_jobs(run_cli):
    proc = run_cli("validate", cwd=REPO)
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    for name in DEMO_JOBS:
        assert f"ok     {name} " in proc.stdout


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path_factory.mktemp("demo-runs")
    proc = run_cli_once("run", "--output-dir", str(out), cwd=REPO)
    runs = [p for p in out.iterdir() if not p.is_symlink()]
    assert len(runs) == 1, (proc.stdout, proc.stderr)
    return proc, runs[0]


@pytest.mark.stand_in  # the demo's own result
def test_demo_run_succeeds_and_prints_the_table(demo_run):
    proc, run_dir = demo_run
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    assert "offline model" in proc.stderr  # said loudly
    for name in DEMO_JOBS:
        # a pipe: the narrow table (80 columns), "ok" for succeeded
        assert re.search(rf"^{re.escape(name)}\s+ok\s", proc.stdout, re.M), proc.stdout
    assert f"files: {run_dir}" in proc.stdout
    document = json.loads((run_dir / "run.json").read_text())
    assert document["state"] == "finished" and document["backend"] == "offline"
    assert {j["job"]: j["status"] for j in document["jobs"]} == dict.fromkeys(DEMO_JOBS, "succeeded")
    assert document["totals"]["succeeded"] == document["totals"]["jobs"] == len(DEMO_JOBS)
    # the table's totals and rows are the jobs' records as they ended: tokens and compactions too
    totals = document["totals"]
    assert totals["input_tokens"] > 0
    shown = f"{totals['input_tokens']:,} in / {totals['output_tokens']:,} out tokens"
    assert shown in proc.stdout, proc.stdout
    asyncio_row = next(line for line in proc.stdout.splitlines() if line.startswith("stdlib-asyncio"))
    metrics = json.loads((run_dir / "stdlib-asyncio" / "metrics.json").read_text())
    compactions = sum(metrics["compactions"].values())
    assert compactions > 0 and re.search(rf"\s{compactions}\s", asyncio_row), asyncio_row


@pytest.mark.stand_in  # the demo's own files
@pytest.mark.parametrize("name", DEMO_JOBS)
def test_demo_job_files(demo_run, name):
    _, run_dir = demo_run
    job_dir = run_dir / name
    spec = json.loads((job_dir / "job.json").read_text())
    assert spec["name"] == name and Path(spec["workspace"]).is_dir()
    assert (job_dir / "events.jsonl").is_file()
    assert (job_dir / "tool-results").is_dir()
    assert (job_dir / "final.md").read_text().startswith("# Survey of")

    metrics = json.loads((job_dir / "metrics.json").read_text())
    assert METRIC_KEYS <= set(metrics)
    assert set(metrics["usage"]) >= USAGE_KEYS and all(
        isinstance(metrics["usage"][k], int) for k in USAGE_KEYS
    )
    assert metrics["job"] == name and metrics["status"] == "succeeded" and metrics["error"] is None
    assert metrics["turns"] >= 2 and metrics["wall_s"] >= 0 and metrics["cost_usd"] > 0
    assert isinstance(metrics["compactions"], dict) and isinstance(metrics["persisted_bytes"], int)

    # the transcript: every line is JSON, and the messages reload as a valid request at every user boundary
    lines = (job_dir / "transcript.jsonl").read_text(encoding="utf-8").splitlines()
    messages = [json.loads(line) for line in lines]
    _, warnings = read_jsonl(job_dir / "transcript.jsonl")
    assert not warnings
    assert request_problems(messages, spec["prompt"]) == []
    for end, message in enumerate(messages, 1):
        if message["role"] == "user":
            assert request_problems(messages[:end]) == [], f"invalid prefix ending at message {end}"
    assert sum(m["role"] == "assistant" for m in messages) == metrics["turns"]

    # every placeholder path names a file that exists and holds what was removed
    for event in read_jsonl(job_dir / "events.jsonl")[0]:
        for rel in event.get("paths", []):
            assert (job_dir / rel).is_file(), rel
    persisted = sum(p.stat().st_size for p in (job_dir / "tool-results").iterdir())
    assert (persisted > 0) == (metrics["persisted_bytes"] > 0)


@pytest.mark.stand_in  # the demo's own result
def test_asyncio_job_uses_the_whole_pipeline_and_loses_no_file(demo_run):
    _, run_dir = demo_run
    metrics = json.loads((run_dir / "stdlib-asyncio" / "metrics.json").read_text())
    assert PIPELINE <= {stage for stage, n in metrics["compactions"].items() if n > 0}, metrics["compactions"]
    final = (run_dir / "stdlib-asyncio" / "final.md").read_text()
    every_file = final.split("## Every file", 1)[1]
    listed = set(re.findall(r"^\| ([^|]+\.py) \|", every_file, flags=re.M))
    asyncio_dir = Path(sysconfig.get_paths()["stdlib"]) / "asyncio"
    real = {
        str(p.relative_to(asyncio_dir)) for p in asyncio_dir.rglob("*.py") if "__pycache__" not in p.parts
    }
    assert real and listed == real, (sorted(real - listed), sorted(listed - real))


def test_report_prints_the_table(small_project, model, run_cli):
    (small_project / "jobs" / "short.toml").write_text(
        'prompt = "survey"\nworkspace = "../ws"\n[limits]\nmax_turns = 1\n'
    )
    assert run_cli("run", cwd=small_project).returncode == 1
    [run_dir] = [p for p in (small_project / "runs").iterdir() if not p.is_symlink()]
    proc = run_cli("report", str(run_dir), cwd=run_dir.parent)
    no_traceback(proc)
    assert proc.returncode == 1, proc.stderr  # as the run's: not every job succeeded
    assert proc.stdout.startswith(f"run {run_dir} (finished)\n"), proc.stdout
    # a pipe: the narrow table (80 columns), "ok" for succeeded, the jobs' turns as the script played them
    words = [line.split() for line in proc.stdout.splitlines()]
    rows = {w[0]: w[1:3] for w in words if w and w[0] in ("one", "two", "short")}
    assert rows == {"one": ["ok", "2"], "two": ["ok", "2"], "short": ["max_turns", "1"]}, proc.stdout
    lines = proc.stdout.splitlines()
    table = lines[1 : lines.index(next(line for line in lines if line.startswith("short: ")))]
    assert len(table) == 5 and max(len(line) for line in table) <= 80, proc.stdout  # heading, rows, legend
    assert "short: reached max_turns = 1; to let it go on, raise max_turns" in proc.stdout
    assert "\n3 jobs, 2 succeeded, 1 max_turns;" in proc.stdout, proc.stdout


def test_report_on_a_directory_that_is_not_a_run(tmp_path, run_cli):
    proc = run_cli("report", str(tmp_path), cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2 and "run.json" in proc.stderr
    (tmp_path / "run.json").write_text("[1, 2]")
    proc = run_cli("report", str(tmp_path), cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2 and "run.json" in proc.stderr


REPORT = "# Survey\n\na.py sets x = 1."


@pytest.fixture
def model(monkeypatch) -> ScriptedModel:
    """What a run of the small project plays instead of the stand-in: each job reads a.py (its first
    turn), then reports (its second)."""
    scripted = ScriptedModel([("read", {"file_path": "a.py"})], final=REPORT)
    play_instead_of_the_stand_in(monkeypatch, scripted)
    return scripted


def job_prompts(model: ScriptedModel) -> list[str]:
    """The prompts of the jobs the model was called for, each once, in the order of their first call."""
    return list(dict.fromkeys(r.messages[0]["content"] for r in model.requests))


@pytest.fixture
def small_project(tmp_path: Path) -> Path:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.py").write_text('"""A."""\nx = 1\n')
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "one.toml").write_text('prompt = "survey"\nworkspace = "../ws"\n')
    (tmp_path / "jobs" / "two.toml").write_text('prompt = "survey again"\nworkspace = "../ws"\n')
    return tmp_path


def test_unknown_only_name_is_a_usage_error(small_project, run_cli):
    proc = run_cli("run", "--only", "three", cwd=small_project)
    no_traceback(proc)
    assert proc.returncode == 2
    assert "three" in proc.stderr and "--only" in proc.stderr
    assert not (small_project / "runs").exists()


def test_only_runs_the_named_job(small_project, model, run_cli):
    proc = run_cli("run", "--only", "two", "--backend", "offline", cwd=small_project)
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    [run_dir] = [p for p in (small_project / "runs").iterdir() if not p.is_symlink()]
    assert [j["job"] for j in json.loads((run_dir / "run.json").read_text())["jobs"]] == ["two"]
    assert job_prompts(model) == ["survey again"] and len(model.requests) == 2
    assert sorted(p.name for p in run_dir.iterdir() if p.is_dir()) == ["two"]


@pytest.mark.parametrize("value", ["0", "-3", "10000000"])
def test_bad_concurrency_is_a_usage_error(small_project, value, run_cli):
    proc = run_cli("run", "--concurrency", value, cwd=small_project)
    no_traceback(proc)
    assert proc.returncode == 2
    assert "--concurrency" in proc.stderr
    assert not (small_project / "runs").exists()


@pytest.mark.parametrize(
    "args", [["run", "--concurrency", "two"], ["frobnicate"], ["run", "--backend", "gpt"]]
)
def test_argparse_errors_exit_2(small_project, args, run_cli):
    proc = run_cli(*args, cwd=small_project)
    assert proc.returncode == 2
    no_traceback(proc)


def test_missing_jobs_directory_is_a_usage_error(tmp_path, run_cli):
    proc = run_cli("run", "nowhere", cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2 and "nowhere" in proc.stderr
    proc = run_cli("validate", cwd=tmp_path)
    assert proc.returncode == 2
    no_traceback(proc)


def test_a_failed_job_makes_exit_code_1(small_project, model, run_cli):
    (small_project / "jobs" / "short.toml").write_text(
        'prompt = "survey"\nworkspace = "../ws"\n[limits]\nmax_turns = 1\n'
    )
    proc = run_cli("run", "--backend", "offline", cwd=small_project)
    no_traceback(proc)
    assert proc.returncode == 1
    [run_dir] = [p for p in (small_project / "runs").iterdir() if not p.is_symlink()]
    document = json.loads((run_dir / "run.json").read_text())
    jobs = {j["job"]: (j["status"], j["turns"]) for j in document["jobs"]}
    # short is cut after the read the script asked for: its report was never the script's to give
    assert jobs == {"one": ("succeeded", 2), "two": ("succeeded", 2), "short": ("max_turns", 1)}
    assert (run_dir / "one" / "final.md").read_text().strip() == REPORT


def test_an_invalid_task_file_stops_the_run_as_validate_does(small_project, run_cli):
    (small_project / "jobs" / "broken.toml").write_text('prompt = "x"\n')
    (small_project / "jobs" / "worse.toml").write_text(
        'prompt = "x"\nworkspace = "../ws"\ntools = ["shell"]\n'
    )
    validate = run_cli("validate", cwd=small_project)
    proc = run_cli("run", "--backend", "offline", cwd=small_project)
    no_traceback(proc)
    assert validate.returncode == 2 and proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [line for line in validate.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 2, errors  # one line per bad file here: each has one bad field
    assert any("broken.toml: workspace:" in line for line in errors), errors
    assert any("worse.toml: tools.0:" in line for line in errors), errors
    assert not (small_project / "runs").exists()  # nothing started, the good jobs neither


def test_anthropic_backend_without_a_key_is_a_usage_error(small_project, run_cli):
    proc = run_cli("run", "--backend", "anthropic", cwd=small_project)
    no_traceback(proc)
    assert proc.returncode == 2 and "ANTHROPIC_API_KEY" in proc.stderr


def test_output_dir_that_is_a_file_is_a_usage_error(small_project, run_cli):
    (small_project / "taken").write_text("a file, not a directory")
    proc = run_cli("run", "--backend", "offline", "--output-dir", "taken", cwd=small_project)
    no_traceback(proc)
    assert proc.returncode == 2 and "taken" in proc.stderr


def test_a_job_table_for_no_job_is_warned_about(small_project, run_cli):
    (small_project / "config.toml").write_text("[jobs.one]\nmax_turns = 30\n[jobs.onee]\nmax_turns = 3\n")
    proc = run_cli("validate", cwd=small_project)
    no_traceback(proc)
    assert proc.returncode == 0
    assert "warning: config.toml: jobs.onee:" in proc.stderr and "jobs.one:" not in proc.stderr


def test_task_file_lookalikes_are_named_not_ignored(small_project, run_cli):
    jobs = small_project / "jobs"
    for name in ("upper.TOML", "task.yaml", "task.json", ".#lock.yaml"):
        (jobs / name).write_text('prompt = "x"\n')
    proc = run_cli("validate", cwd=small_project)
    no_traceback(proc)
    assert proc.returncode == 0  # the *.toml files still load; the others are warned about, one line each
    warned = [line for line in proc.stderr.splitlines() if line.startswith("warning:") and "not read" in line]
    assert sorted(line.split(": ")[1].rsplit("/", 1)[-1] for line in warned) == [
        "task.json",
        "task.yaml",
        "upper.TOML",
    ]


def test_batch_delivery_on_the_offline_model_says_it_has_no_effect(small_project, model, run_cli):
    """The warning is the CLI's (from the settings, before any call), whatever the model then does."""
    proc = run_cli("run", "--only", "one", "--delivery", "batch", cwd=small_project)
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    warned = [line for line in proc.stderr.splitlines() if "delivery = batch" in line]
    assert len(warned) == 1 and warned[0].startswith(
        "warning: delivery = batch has no effect on the offline model"
    ), proc.stderr
    assert len(model.requests) == 2  # the job ran as live delivery runs it
    live = run_cli("run", "--only", "one", cwd=small_project)
    assert live.returncode == 0, live.stderr
    assert "delivery = batch" not in live.stderr


def test_errors_with_brackets_are_shown_verbatim_on_one_line(small_project, run_cli):
    long_dir = small_project / ("d" * 150)
    long_dir.mkdir()
    (long_dir / "x[red]y[bold].toml").write_text('name = "[/x]"\nprompt = "p"\nworkspace = "."\n')
    proc = run_cli("validate", str(long_dir), cwd=small_project)
    no_traceback(proc)
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()
    assert "x[red]y[bold].toml: name:" in line and "'[/x]'" in line


def test_only_leaves_out_an_invalid_task_file_it_does_not_name(small_project, model, run_cli):
    (small_project / "jobs" / "broken.toml").write_text('prompt = "x"\n')
    assert run_cli("run", "--only", "broken", "--backend", "offline", cwd=small_project).returncode == 2
    assert not (small_project / "runs").exists() and model.requests == []
    proc = run_cli("run", "--only", "one", "--backend", "offline", cwd=small_project)
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    assert "broken" not in proc.stdout + proc.stderr
    [run_dir] = [p for p in (small_project / "runs").iterdir() if not p.is_symlink()]
    assert [j["job"] for j in json.loads((run_dir / "run.json").read_text())["jobs"]] == ["one"]
    assert job_prompts(model) == ["survey"]
