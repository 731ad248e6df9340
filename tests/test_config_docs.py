"""Issue 36, item 10: the README's configuration table is made from the settings models, so it cannot
drift from them; a job that ends ``max_turns`` says which key to raise, and
``RUNNER_JOBS__<NAME>__MAX_TURNS`` reaches a job that has a ``[jobs.<name>]`` section (which
``RUNNER_LIMITS__MAX_TURNS`` does not override)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import CliRunner
from scripted import ScriptedModel, play_instead_of_the_stand_in, reads

from runner.config import Limits, RunnerSection, SummarizerSection
from runner.config_table import BEGIN, END, config_table

REPO = Path(__file__).resolve().parent.parent


def test_the_readmes_config_table_is_the_one_made_from_the_settings_models() -> None:
    readme = (REPO / "README.md").read_text()
    assert BEGIN in readme and END in readme
    shown = readme[readme.index(BEGIN) + len(BEGIN) : readme.index(END)].strip("\n") + "\n"
    assert shown == config_table(), "run: python -m runner.config_table --write README.md"
    for section, model in (("runner", RunnerSection), ("summarizer", SummarizerSection), ("limits", Limits)):
        for name in model.model_fields:  # every key, batch delivery's and the deadline's too
            assert f"| `{section}.{name}` |" in shown, name
    assert "| `limits.max_turns` | 200 |" in shown and "| `runner.deadline_s` | none |" in shown


def test_a_job_out_of_turns_says_which_key_to_raise_and_the_jobs_env_key_reaches_it(
    tmp_path: Path, run_cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ws").mkdir()
    files = [f"m{i}.py" for i in range(10)]
    for i, name in enumerate(files):
        (tmp_path / "ws" / name).write_text(f"def f{i}():\n    return {i}\n")
    model = ScriptedModel(reads(files), final="Read them all.")  # 11 turns: more than any limit here
    play_instead_of_the_stand_in(monkeypatch, model)
    (tmp_path / "config.toml").write_text("[jobs.j]\nmax_turns = 300\n")
    (tmp_path / "j.toml").write_text('workspace = "ws"\nprompt = "Survey this workspace."\n')
    env = {"RUNNER_LIMITS__MAX_TURNS": "2", "RUNNER_JOBS__J__MAX_TURNS": "3"}
    done = run_cli("run", "j.toml", "--backend", "offline", "--output-dir", "runs", cwd=tmp_path, **env)
    assert done.returncode == 1, done.stdout + done.stderr
    metrics = json.loads(next((tmp_path / "runs").glob("*/j/metrics.json")).read_text())
    assert metrics["status"] == "max_turns" and metrics["turns"] == 3  # the job's key, not [limits]'s
    assert metrics["error"].startswith("reached max_turns = 3; to let it go on, raise max_turns")
    assert "RUNNER_JOBS__<NAME>__MAX_TURNS" in metrics["error"]
    assert len(model.requests) == 3  # three turns played, no fourth asked for
