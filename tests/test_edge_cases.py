"""Edge cases a long batch meets: paused turns, replies cut off mid tool call, oversized search output
on the offline model, resuming with raised limits or from another directory.

The runner's guarantees here hold with any model: they are driven by scripted models (the emulator's
script, or ``tests/scripted.py``'s model reading the json package's modules in place of the offline
stand-in); the tests of the stand-in's own survey are marked ``stand_in``."""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

import pytest
from conftest import CliRunner, scripted_job
from scripted import ScriptedModel, files_under, play_instead_of_the_stand_in, reads

from runner.messages import merge_adjacent, request_problems

pytestmark = pytest.mark.anyio
JSON = Path(sysconfig.get_paths()["stdlib"]) / "json"


@pytest.fixture
def scripted_cli(run_cli: CliRunner, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """The CLI in this process, its offline model a scripted one reading the json package's modules."""
    play_instead_of_the_stand_in(monkeypatch, ScriptedModel(reads(files_under(JSON)), final="# Report"))
    return run_cli


async def test_a_paused_turn_is_continued_in_the_same_assistant_message(tmp_path):
    use = {"type": "tool_use", "id": "toolu_1", "name": "glob", "input": {"pattern": "*.py"}}
    session, recorded, transcript = await scripted_job(
        tmp_path,
        [
            {"content": "Working on it", "stop_reason": "pause_turn"},
            {"content": [use], "stop_reason": "tool_use"},
            {"content": "Done.", "stop_reason": "end_turn"},
        ],
    )
    assert session.record.status == "succeeded", session.record.error
    assert all(not request_problems(r["messages"]) for r in recorded)
    assert not request_problems(merge_adjacent(transcript))  # the transcript reloads as one message per turn


async def test_tool_calls_in_a_reply_cut_off_by_max_tokens_are_not_run(tmp_path):
    cut = {"type": "tool_use", "id": "toolu_cut", "name": "read", "input": {"file_path": "a.py"}}
    session, recorded, transcript = await scripted_job(
        tmp_path,
        [
            {"content": [cut], "stop_reason": "max_tokens"},
            {"content": "Done.", "stop_reason": "end_turn"},
        ],
    )
    assert session.record.status == "succeeded"
    result = transcript[2]["content"][0]
    assert result["tool_use_id"] == "toolu_cut" and result["is_error"] and "cut off" in result["content"]


@pytest.mark.stand_in
def test_huge_search_output_does_not_loop_the_offline_model(tmp_path, run_cli):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "big.py").write_text('"""Big."""\n' + "# TODO: item\n" * 12_000)
    (ws / "small.py").write_text('"""Small."""\n')
    (tmp_path / "job.toml").write_text(f'workspace = "{ws}"\nprompt = "Survey."\n')
    done = run_cli("run", "job.toml", "--backend", "offline", "--output-dir", "runs", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    metrics = json.loads(next((tmp_path / "runs").glob("*/job/metrics.json")).read_text())
    assert metrics["status"] == "succeeded" and metrics["turns"] < 30
    transcript = [
        json.loads(line) for line in next((tmp_path / "runs").glob("*/job/transcript.jsonl")).open()
    ]
    recalls = [
        json.dumps(b["input"], sort_keys=True)
        for m in transcript
        if m["role"] == "assistant"
        for b in m["content"]
        if b.get("type") == "tool_use" and b["name"] == "recall"
    ]
    assert recalls and len(recalls) == len(set(recalls))  # the saved output read page by page, each page once


def test_resume_uses_todays_limits_and_works_from_another_directory(tmp_path, scripted_cli):
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "j.toml").write_text(
        'workspace = "{stdlib}/json"\nprompt = "Survey."\n[limits]\nmax_turns = 3\n'
    )
    first = scripted_cli("run", "jobs", "--backend", "offline", "--output-dir", "runs", cwd=tmp_path)
    assert first.returncode == 1
    run_dir = next(p for p in (tmp_path / "runs").iterdir() if not p.is_symlink())
    assert json.loads((run_dir / "j" / "metrics.json").read_text())["status"] == "max_turns"
    (tmp_path / "jobs" / "j.toml").write_text(
        'workspace = "{stdlib}/json"\nprompt = "Survey."\n[limits]\nmax_turns = 60\n'
    )
    kept = scripted_cli("resume", str(run_dir), cwd="/")
    assert kept.returncode == 1, kept.stderr  # the run's own limits: the job stays ended
    assert json.loads((run_dir / "j" / "metrics.json").read_text())["turns"] == 3
    again = scripted_cli("resume", str(run_dir), "--limits-from-config", cwd="/")
    assert again.returncode == 0, again.stderr
    metrics = json.loads((run_dir / "j" / "metrics.json").read_text())
    assert metrics["status"] == "succeeded" and metrics["turns"] > 3


def test_server_compaction_on_a_model_without_it_says_so_and_compacts_on_the_client(tmp_path, scripted_cli):
    (tmp_path / "j.toml").write_text(
        'workspace = "{stdlib}/json"\nprompt = "Survey."\n'
        '[limits]\ncompaction = "server"\ncontext_char_limit = 20_000\n'
    )
    done = scripted_cli("run", "j.toml", "--backend", "offline", "--output-dir", "runs", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "warning: " in done.stderr and '"server" needs the anthropic backend' in done.stderr
    assert 'uses "client" on the scripted model' in done.stderr
    metrics = json.loads(next((tmp_path / "runs").glob("*/j/metrics.json")).read_text())
    assert set(metrics["compactions"]) - {"tool_result_budget"}  # the client pipeline ran


@pytest.mark.stand_in
def test_a_job_the_offline_model_cannot_do_fails_with_a_reason(tmp_path, run_cli):
    (tmp_path / "ws").mkdir()  # beside the output directory: a workspace holding it is refused
    (tmp_path / "j.toml").write_text('workspace = "ws"\nprompt = "Run the tests."\ntools = ["bash"]\n')
    done = run_cli("run", "j.toml", "--backend", "offline", "--output-dir", "runs", cwd=tmp_path)
    assert done.returncode == 1
    metrics = json.loads(next((tmp_path / "runs").glob("*/j/metrics.json")).read_text())
    assert metrics["status"] == "failed" and "glob, read and grep" in metrics["error"]
