"""Resume continues from the compacted context the job had (``context.jsonl``), not a rebuilt one.

A job that compacts hard is killed with SIGKILL (a real subprocess) at several points, resumed each
time, and compared with the same job run without interruption: the same turns and tool calls, and no
range summarized twice.

This holds with any model: the job is driven here by a scripted model (``tests/scripted.py``: it reads
the email package's modules one a turn, taking notes), which answers a request alike in every process."""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

import pytest
from conftest import CliRunner, kill_runner_when
from scripted import ScriptedModel, files_under, play_instead_of_the_stand_in, reads, scripted_runner

from runner.agent.runjob import Services
from runner.agent.session import Session
from runner.compaction.compactor import CompactionState, Compactor
from runner.compaction.context import Recorder
from runner.compaction.summarizer import Summarizer
from runner.config import Settings
from runner.jobs import load_job
from runner.rundir.store import JobStore, read_jsonl

JOB = """name = "a"
workspace = "{stdlib}/email"
prompt = "Survey the email package."
[limits]
context_char_limit = 20000
batch_char_limit = 40000
large_result_chars = 5000
"""


EMAIL = Path(sysconfig.get_paths()["stdlib"]) / "email"


def _model() -> ScriptedModel:
    return ScriptedModel(reads(files_under(EMAIL)), final="# Report\nThe email package.", notes=2500)


def _setup(tmp: Path) -> Path:
    """Job ``a`` in ``tmp``; the scripted model's file."""
    (tmp / "jobs").mkdir()
    (tmp / "jobs" / "a.toml").write_text(JOB)
    (tmp / "config.toml").write_text('[runner]\nbackend = "offline"\n')  # the scripted model's seam
    return _model().save(tmp / "script.json")


def _run_dir(tmp: Path) -> Path | None:
    runs = sorted((tmp / "runs").glob("*")) if (tmp / "runs").exists() else []
    return runs[0] if runs else None


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


def _start_and_kill(tmp: Path, argv: list[str], at_line: int) -> bool:
    """Start ``argv`` (the runner on the scripted model); SIGKILL it once the transcript has ``at_line``
    lines. False when it ended first."""

    def at_line_reached() -> bool:
        run_dir = _run_dir(tmp)
        return run_dir is not None and _lines(run_dir / "a" / "transcript.jsonl") >= at_line

    return kill_runner_when(at_line_reached, cwd=tmp, argv=argv)


def _outcome(run_dir: Path) -> dict:
    job = run_dir / "a"
    metrics = json.loads((job / "metrics.json").read_text())
    transcript, _ = read_jsonl(job / "transcript.jsonl")
    events, _ = read_jsonl(job / "events.jsonl")
    events = [
        e for e in events if "chars_before" in e
    ]  # compactions only (not model_call, retries, last_call)
    summaries = [e for e in events if e["stage"] in ("compact_history", "compact_tool", "reactive_compact")]
    stages: dict[str, int] = {}
    for e in events:
        stages[e["stage"]] = stages.get(e["stage"], 0) + 1
    return {
        "stages": stages,
        "chars_before": [e["chars_before"] for e in events],
        "status": metrics["status"],
        "turns": metrics["turns"],
        "calls": [
            (b["name"], b["input"])
            for m in transcript
            if m["role"] == "assistant" and isinstance(m["content"], list)
            for b in m["content"]
            if b.get("type") == "tool_use"
        ],
        "summaries": len(summaries),
        "summary_files": len(list((job / "summaries").glob("*.md"))),
    }


def test_killed_four_times_resumes_like_an_uninterrupted_run(
    tmp_path: Path, run_cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The uninterrupted run and the last resume in this process, the killed segments real processes."""
    play_instead_of_the_stand_in(monkeypatch, _model())
    whole = tmp_path / "whole"
    whole.mkdir()
    _setup(whole)
    done = run_cli("run", "jobs", cwd=whole)
    assert done.returncode == 0, done.stderr
    expected = _outcome(_run_dir(whole))
    assert expected["status"] == "succeeded" and expected["summaries"] >= 3  # the job compacts hard

    killed = tmp_path / "killed"
    killed.mkdir()
    script = _setup(killed)
    kills = 0
    argv = scripted_runner(script, "run", "jobs")
    lines = _lines(_run_dir(whole) / "a" / "transcript.jsonl")
    for at_line in (lines // 8, lines * 3 // 8, lines * 5 // 8, lines * 7 // 8):
        if _start_and_kill(killed, argv, at_line):
            kills += 1
        argv = scripted_runner(script, "resume", str(_run_dir(killed)))
    assert kills >= 3
    final = run_cli("resume", str(_run_dir(killed)), cwd=killed)
    assert final.returncode == 0, final.stderr
    got = _outcome(_run_dir(killed))
    assert got["status"] == "succeeded"
    # the job went on from where it was: its calls those of the uninterrupted run, none made twice
    assert got["turns"] == expected["turns"], (got, expected)
    assert got["calls"] == expected["calls"], (got, expected)
    assert got["summaries"] == expected["summaries"], (got, expected)  # nothing summarized twice
    # the context never jumps back to the whole transcript (which would be snipped and compacted again)
    assert got["stages"].get("snip", 0) == expected["stages"].get("snip", 0), (got, expected)
    assert max(got["chars_before"]) <= 1.2 * max(expected["chars_before"]), (got, expected)
    assert (
        got["summary_files"] <= expected["summary_files"] + kills
    )  # at most one redone per kill mid-summary


@pytest.mark.anyio
async def test_every_context_record_decodes_to_the_window_it_was_written_from(tmp_path: Path) -> None:
    """Ground truth: the window in memory at each write, compared with the decoding of that line."""
    task = tmp_path / "a.toml"
    task.write_text(JOB)
    spec = load_job(task, Settings())
    store = JobStore(tmp_path / "run" / "a")
    await store.open()
    windows: list[list] = []
    record = CompactionState.context_record

    def spy(self: CompactionState) -> dict:
        windows.append([json.loads(json.dumps(m)) for m in self.window.messages])
        return record(self)

    CompactionState.context_record = spy  # type: ignore[method-assign]
    try:
        session = Session(
            spec,
            services=Services(model=_model(), compactor=Compactor(Summarizer(None, "s")), summary_model="s"),
            store=store,
        )
        result = await session.run()
    finally:
        CompactionState.context_record = record  # type: ignore[method-assign]
    assert result.status == "succeeded"
    records, warnings = read_jsonl(store.dir / "context.jsonl")
    transcript, _ = read_jsonl(store.dir / "transcript.jsonl")
    assert not warnings and len(records) == len(windows) > 10
    assert any("summary" in json.dumps(r) for r in records) and any(
        '"saved"' in json.dumps(r) for r in records
    )
    for record_line, window in zip(records, windows, strict=True):
        entries = Recorder().decode(
            record_line["entries"], transcript[: record_line["n"]], store, active_request=spec.prompt
        )
        assert [e.message for e in entries] == window
    # the newest record plus the transcript written after it is the window the job ended with
    rebuilt = CompactionState(limits=spec.limits, active_request=spec.prompt)
    assert await rebuilt.resume(transcript, store)
    assert rebuilt.window.messages == session.state.window.messages
    assert rebuilt.transcript_len == len(transcript)
    # by reference: the records together are far smaller than the windows they describe
    assert (store.dir / "context.jsonl").stat().st_size * 3 < sum(len(json.dumps(w)) for w in windows)
