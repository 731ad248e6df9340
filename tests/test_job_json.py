"""A job's ``job.json`` is written and read by one model, :class:`runner.jobs.JobSpec`, and keeps its
shape: ``tests/recorded/stdlib-json.job.json`` is a file the runner wrote before ``JobSpec`` became a
pydantic model (``runner run jobs``, offline); it reads back, writes back byte for byte (but for
limits added to :class:`runner.config.Limits` since, which come after the recorded ones at their
defaults), and its run resumes. A damaged ``job.json`` is one error line per field, naming the file
and the field."""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path
from typing import Any

import pytest
from scripted import ScriptedModel, play_instead_of_the_stand_in

from runner import cli
from runner.config import Limits, Settings
from runner.execution.resume import plan_resume
from runner.jobs import JobError, JobSpec, load_job

RECORDED = Path(__file__).parent / "recorded" / "stdlib-json.job.json"
RECORDED_WORKSPACE = "/root/.pyenv/versions/3.11.7/lib/python3.11/json"  # where that run's stdlib was
KEYS = ["name", "source", "prompt", "workspace", "model", "system", "tools", "limits"]


def written(spec: JobSpec) -> str:
    """``job.json`` as the job's store writes it (``JobStore.write_json``)."""
    return json.dumps(spec.to_json(), ensure_ascii=False, indent=2) + "\n"


def as_recorded(doc: dict[str, Any]) -> str:
    """``doc`` (a written ``job.json``) as text, without the limits added since the recording; those
    must come after the recorded ones, at their defaults."""
    recorded = json.loads(RECORDED.read_text(encoding="utf-8"))["limits"]
    limits = dict(doc["limits"])
    added = {k: limits.pop(k) for k in list(limits) if k not in recorded}
    assert list(doc["limits"])[: len(recorded)] == list(recorded)
    defaults = Limits().model_dump(mode="json")
    assert added == {k: defaults[k] for k in added}
    return json.dumps({**doc, "limits": limits}, ensure_ascii=False, indent=2) + "\n"


def recorded_text() -> str:
    """The recorded file, its workspace moved to this Python's standard library."""
    here = str(Path(sysconfig.get_paths()["stdlib"]) / "json")
    return RECORDED.read_text(encoding="utf-8").replace(json.dumps(RECORDED_WORKSPACE), json.dumps(here))


def test_a_recorded_job_json_reads_and_writes_back_byte_for_byte() -> None:
    text = RECORDED.read_text(encoding="utf-8")
    spec = JobSpec.model_validate(json.loads(text))
    assert (spec.name, spec.source, spec.workspace, spec.tools, spec.system, spec.limits.max_turns) == (
        "stdlib-json",
        Path("/work/main/jobs/stdlib-json.toml"),
        Path(RECORDED_WORKSPACE),
        ("read", "glob", "grep"),
        None,
        40,
    )
    assert list(spec.to_json()) == KEYS
    assert list(spec.to_json()["limits"]) == list(Limits.model_fields)
    assert as_recorded(spec.to_json()) == text


def test_a_loaded_task_file_round_trips(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    task = tmp_path / "j.toml"
    task.write_text(
        'prompt = "p \\u00e9"\nworkspace = "ws"\ntools = ["read", "bash"]\nsystem = "s"\n'
        '[limits]\nmax_cost_usd = 2.5\nsandbox = "none"\n'
    )
    spec = load_job(task, Settings())
    assert isinstance(spec, JobSpec)
    again = JobSpec.model_validate(json.loads(written(spec)))
    assert again == spec and written(again) == written(spec)
    assert spec.to_json()["source"] == str(task.absolute()) and spec.to_json()["tools"] == ["read", "bash"]


def test_a_job_json_without_system_or_with_unknown_keys_still_reads() -> None:
    doc = json.loads(RECORDED.read_text(encoding="utf-8"))
    del doc["system"]
    spec = JobSpec.model_validate({**doc, "added_later": 1})
    assert spec.system is None and "added_later" not in spec.to_json()


def _run_dir(tmp_path: Path, job_json: str | None, source: str | None = None) -> Path:
    run_dir = tmp_path / "runs" / "r1"
    (run_dir / "stdlib-json").mkdir(parents=True)
    entry: dict[str, Any] = {"job": "stdlib-json", "status": "failed"}
    if source:
        entry["source"] = source
    (run_dir / "run.json").write_text(
        json.dumps(
            {
                "run_id": "r1",
                "backend": "offline",
                "model": "claude-sonnet-5-5",
                "summary_model": "claude-haiku-5-5",
                "jobs": [entry],
            }
        )
    )
    if job_json is not None:
        (run_dir / "stdlib-json" / "job.json").write_text(job_json, encoding="utf-8")
    return run_dir


def test_a_run_with_a_recorded_job_json_resumes_and_rewrites_it_unchanged(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.toml").write_text('[runner]\nbackend = "offline"\n')
    model = ScriptedModel([("read", {"file_path": "decoder.py"})], final="json decodes.")
    play_instead_of_the_stand_in(monkeypatch, model)
    run_dir = _run_dir(tmp_path, recorded_text())
    plan = plan_resume(run_dir, Settings())
    assert not plan.errors and [s.name for s in plan.specs] == ["stdlib-json"]
    assert plan.specs[0].limits.max_turns == 40 and plan.specs[0].limits.timeout_s == 300.0
    assert cli.main(["resume", str(run_dir)]) == 0
    job_dir = run_dir / "stdlib-json"
    metrics = json.loads((job_dir / "metrics.json").read_text())
    assert (metrics["status"], metrics["turns"]) == ("succeeded", 2)
    assert (job_dir / "final.md").read_text().strip() == "json decodes."
    # the recorded prompt and tools are the ones the model is asked with
    recorded = json.loads(recorded_text())
    assert [r.messages[0]["content"] for r in model.requests] == [recorded["prompt"]] * 2
    offered = {t["name"] for t in model.requests[0].tools}  # the job's tools and the runner's own
    assert set(recorded["tools"]) <= offered and not offered & {"bash", "write", "edit"}, offered
    rewritten = (job_dir / "job.json").read_text(encoding="utf-8")  # by the session, as it started
    assert as_recorded(json.loads(rewritten)) == recorded_text()
    assert rewritten == written(JobSpec.model_validate(json.loads(rewritten)))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d["limits"].update(max_turns=0), "limits.max_turns"),
        (lambda d: d.pop("prompt"), "prompt"),
        (lambda d: d.update(tools=["read", "nuke"]), "tools.1"),
        (lambda d: d.update(name=5), "name"),
        (lambda d: d.update(limits="fast"), "limits"),
        (lambda d: d["limits"].update(surprise=True), "limits.surprise"),
    ],
)
def test_a_damaged_job_json_names_the_file_and_the_field(tmp_path: Path, change, field: str) -> None:
    doc = json.loads(recorded_text())
    change(doc)
    run_dir = _run_dir(tmp_path, json.dumps(doc))
    plan = plan_resume(run_dir, Settings())
    [error] = plan.errors
    job_json = run_dir / "stdlib-json" / "job.json"
    assert not plan.specs and error.name == "stdlib-json" and error.source == job_json
    assert [p.startswith(f"{job_json}: {field}: ") for p in error.problems] == [True], error.problems


def test_a_job_json_that_is_no_json_falls_back_to_the_task_file(tmp_path: Path) -> None:
    task = tmp_path / "stdlib-json.toml"
    task.write_text('prompt = "Survey."\nworkspace = "{stdlib}/json"\n')
    plan = plan_resume(_run_dir(tmp_path, recorded_text()[:200], source=str(task)), Settings())
    assert not plan.errors and [(s.name, s.prompt) for s in plan.specs] == [("stdlib-json", "Survey.")]
    plan = plan_resume(_run_dir(tmp_path / "other", "[1, 2]"), Settings())
    assert not plan.specs and isinstance(plan.errors[0], JobError)
    assert "no job.json and no task file" in plan.errors[0].message
