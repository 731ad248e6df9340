"""Spend is never lost: a job killed with SIGKILL at 20 random moments (a real runner process each
time) and resumed after each kill ends with the cost, the usage (every token kind), the compaction
counts and the turns of the same job run without interruption, to the token; its ``wall_s`` counts
every segment it ran.

This holds with any model: it is driven here by a scripted model (``tests/scripted.py``: it reads the
workspace's files four a turn, taking notes, so the job compacts often; three of its turns read big
files), which answers a request alike
in every process (its turn read from the request), as the uninterrupted run's ground truth needs."""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import CliRunner, kill_runner_when, runner_env
from scripted import ScriptedModel, files_under, play_instead_of_the_stand_in, reads, scripted_runner

from runner.pricing import USAGE_KEYS
from runner.rundir.store import read_jsonl

KILLS = 20
FILES = 240  # the workspace: enough turns (and compactions) that 20 kills land across the job
BIG_FILES = 12


def _workspace(root: Path) -> None:
    """A small package of deterministic modules (nested, with docstrings, functions and TODOs)."""
    for d in range(FILES // 30):
        pkg = root / f"pkg{d}"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text(f'"""Package {d}."""\n')
        for i in range(29):
            body = [f'"""Module {d}.{i}: helpers for part {i}."""', "", "import os", ""]
            for k in range(6):
                todo = f"  # TODO check {k}" if k == i % 6 else ""
                body += [f"def f{k}(x):", f'    """Return x plus {k}."""', f"    return x + {k}{todo}", ""]
            body += [f"class C{i}:", '    """A class."""', "    def m(self):", "        return 1", ""]
            (pkg / f"mod{i}.py").write_text("\n".join(body))
    data = root / "data"
    data.mkdir()
    for k in range(BIG_FILES):  # read four at once, a batch over its limit: saved with a preview
        (data / f"table{k:02d}.txt").write_text("".join(f"row {k}.{r:04d} {'v' * 50}\n" for r in range(200)))


def _setup(tmp: Path, workspace: Path) -> Path:
    """A run of job ``a`` on ``workspace`` in ``tmp``; the scripted model's file (its script)."""
    (tmp / "jobs").mkdir(parents=True)
    (tmp / "jobs" / "a.toml").write_text(
        f'name = "a"\nworkspace = "{workspace}"\nprompt = "Survey this package."\n'
        "[limits]\ncontext_char_limit = 30000\nbatch_char_limit = 40000\nlarge_result_chars = 5000\n"
    )
    (tmp / "config.toml").write_text('[runner]\nbackend = "offline"\n')  # the scripted model's seam
    turns = reads(files_under(workspace), per_turn=4)
    for at, big in zip((3, 23, 43), reads(files_under(workspace, ".txt"), per_turn=4), strict=True):
        turns.insert(at, big)
    model = ScriptedModel(turns, final="# Report\nDone.", notes=1500)
    return model.save(tmp / "script.json")


def _run_dir(tmp: Path) -> Path | None:
    runs = [p for p in (tmp / "runs").glob("*") if not p.is_symlink()] if (tmp / "runs").exists() else []
    return runs[0] if runs else None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def _calls(job: Path) -> int:
    """Model calls on disk (lines of events.jsonl naming a model call)."""
    try:
        return job.joinpath("events.jsonl").read_bytes().count(b'"stage": "model_call"')
    except OSError:
        return 0


def _call_gap(job: Path) -> float:
    """The median time between a job's model calls (from its events.jsonl)."""
    times = [
        float(e["ts"])
        for line in job.joinpath("events.jsonl").read_text().splitlines()
        if (e := json.loads(line)).get("stage") == "model_call"
    ]
    return statistics.median(b - a for a, b in zip(times, times[1:], strict=False))


def _spend(job: Path) -> dict:
    metrics = json.loads((job / "metrics.json").read_text())
    return {
        "status": metrics["status"],
        "turns": metrics["turns"],
        "cost_usd": metrics["cost_usd"],
        "usage": {k: metrics["usage"].get(k, 0) for k in USAGE_KEYS},  # a count that is 0 may be left out
        "summarizer_usage": {k: metrics["summarizer_usage"].get(k, 0) for k in USAGE_KEYS},
        "compactions": metrics["compactions"],
        "persisted_bytes": metrics["persisted_bytes"],
    }


def _segment(tmp: Path, argv: list[str], delay: float, after_calls: int = 0) -> tuple[bool, float]:
    """Run ``argv`` (the runner on the scripted model); SIGKILL it ``delay`` seconds after its job first
    writes once its events.jsonl holds ``after_calls`` model calls (a random moment of its work).
    (killed, how long the process lived); not killed when it ended first."""
    start_size = _size((_run_dir(tmp) or tmp / "none") / "a" / "events.jsonl")
    started = time.monotonic()

    def wrote() -> bool:
        job = (_run_dir(tmp) or tmp / "none") / "a"
        return _size(job / "events.jsonl") != start_size and _calls(job) >= after_calls

    killed = kill_runner_when(wrote, cwd=tmp, then_after_s=delay, argv=argv)
    return killed, time.monotonic() - started


def test_twenty_kills_lose_no_spend(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    _workspace(workspace)
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    whole_script = _setup(whole, workspace)
    script = _setup(killed, workspace)
    done = subprocess.run(
        scripted_runner(whole_script, "run", "jobs"),
        cwd=whole,
        env=runner_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
    expected_dir = _run_dir(whole)
    assert expected_dir is not None
    expected = _spend(expected_dir / "a")
    total_calls = _calls(expected_dir / "a")
    work_s = json.loads((expected_dir / "a" / "metrics.json").read_text())["wall_s"]
    assert expected["turns"] >= 20, expected
    assert expected["compactions"].get("compact_history", 0) >= 3, expected  # the job compacts often

    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    kills, lived, argv = 0, 0.0, scripted_runner(script, "run", "jobs")
    at_calls: list[int] = []
    # where the kills land: spread over the job (a share of its calls each, then up to one call's
    # time more, so mid-turn), whatever the machine's load does to its pace; a call's time is the gap
    # between model calls (the job's wall also holds its start and end, many calls' time under load),
    # and the last target leaves a tenth of the calls, far more than one call's time, to land in
    per_call = _call_gap(expected_dir / "a")
    targets = sorted(int(rng.uniform(0.05, 0.9) * total_calls) for _ in range(KILLS))
    while kills < KILLS:
        delay = rng.uniform(0, per_call)
        was_killed, seconds = _segment(killed, argv, delay, after_calls=targets[kills])
        lived += seconds
        run_dir = _run_dir(killed)
        assert run_dir is not None
        if not was_killed:
            pytest.fail(f"the job ended after {kills} kills (seed {seed}); expected {KILLS}")
        kills += 1
        at_calls.append(_calls(run_dir / "a"))
        argv = scripted_runner(script, "resume", str(run_dir))
    started = time.monotonic()
    final = subprocess.run(
        argv,
        cwd=killed,
        env=runner_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    lived += time.monotonic() - started
    assert final.returncode == done.returncode, (
        final.stderr
    )  # 0, or 1 when the job ends stuck like the whole run
    run_dir = _run_dir(killed)
    assert run_dir is not None
    got = _spend(run_dir / "a")
    print(f"seed {seed}: {kills} kills at model calls {at_calls} of {total_calls}; {expected}")
    assert got == expected, (
        f"seed {seed}, kills at calls {at_calls}; {_first_difference(expected_dir, run_dir)}"
    )
    # the kills landed across the job, not all at its start
    assert max(at_calls) > total_calls // 3, at_calls
    # wall_s sums every segment: about the work of the whole job (the last segment ran a small part of
    # it), never more than the processes lived
    segments = json.loads((run_dir / "a" / "metrics.json").read_text())["wall_s"]
    assert 0.5 * work_s <= segments <= lived, (segments, work_s, lived)
    transcript, warnings = read_jsonl(run_dir / "a" / "transcript.jsonl")
    assert not warnings and transcript[-1]["role"] == "assistant"


def _first_difference(one: Path, other: Path) -> str:
    """Where two runs of job ``a`` first differ in their transcripts (for the failure message)."""
    a, _ = read_jsonl(one / "a" / "transcript.jsonl")
    b, _ = read_jsonl(other / "a" / "transcript.jsonl")
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            x, y = json.dumps(x), json.dumps(y)
            at = next((k for k, (p, q) in enumerate(zip(x, y, strict=False)) if p != q), min(len(x), len(y)))
            return (
                f"transcript line {i + 1} differs: {x[max(0, at - 150) : at + 100]!r} | "
                f"{y[max(0, at - 150) : at + 100]!r}"
            )
    return f"transcripts agree over {min(len(a), len(b))} lines (of {len(a)} and {len(b)})"


# ``python -c`` this, then N, then the scripted_runner's arguments (the tests' directory, the script, the
# runner's arguments): the runner on the scripted model, SIGKILLed by itself right after the write
# (JobStore.flush) that brings events.jsonl to N model_call lines: a kill at an exact moment
_KILLED_AFTER_CALLS = """
import os, signal, sys
from runner.rundir import store
calls = int(sys.argv.pop(1))
sys.path.insert(0, os.path.dirname(sys.argv.pop(1)))
import scripted
flush = store.JobStore.flush
async def flush_then_kill(self):
    await flush(self)
    events = self.dir / "events.jsonl"
    if events.exists() and events.read_bytes().count(b'"stage": "model_call"') >= calls:
        os.kill(os.getpid(), signal.SIGKILL)
store.JobStore.flush = flush_then_kill
scripted.main()
"""
SAVED_WITH_PREVIEW = ("fit_tool_results", "tool_result_budget")  # stages that leave a marker naming its file


def _named_again(events: list[dict]) -> int | None:
    """The model_call lines before the first micro_compact that names an output an earlier stage saved
    with a preview (the placeholder replaces that marker, the output is not saved again); None if none."""
    calls, saved = 0, set()
    for event in events:
        if event.get("stage") == "model_call":
            calls += 1
        elif event.get("stage") in SAVED_WITH_PREVIEW:
            saved.update(event["paths"])
        elif event.get("stage") == "micro_compact" and saved & set(event["paths"]):
            return calls
    return None


def test_killed_between_a_preview_and_its_placeholder_resumes_alike(
    tmp_path: Path, run_cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed after the write that holds a micro_compact of a result an earlier stage saved with a preview
    (the kill takes that micro_compact back, so the resumed job does it again): the resumed job knows the
    saved output is that result's (from its context record), names it again and saves nothing new, so its
    summaries, transcript and spend are the uninterrupted run's. (It saved the marker itself as a new
    ``.2.txt`` output, the next summary named that file, and the survey's state note named another
    summary.) The uninterrupted run and the resume in this process, the killed one a real process."""
    workspace = tmp_path / "ws"
    _workspace(workspace)
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    whole_script = _setup(whole, workspace)
    script = _setup(killed, workspace)
    play_instead_of_the_stand_in(monkeypatch, ScriptedModel.load(whole_script))
    done = run_cli("run", "jobs", cwd=whole)
    assert done.returncode in (0, 1), done.stderr
    expected_dir = _run_dir(whole)
    assert expected_dir is not None
    events, _ = read_jsonl(expected_dir / "a" / "events.jsonl")
    at = _named_again(events)
    assert at is not None, "the job never micro-compacts a result saved with a preview"
    first = subprocess.run(
        [sys.executable, "-c", _KILLED_AFTER_CALLS, str(at), *scripted_runner(script, "run", "jobs")[1:]],
        cwd=killed,
        env=runner_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    run_dir = _run_dir(killed)
    assert first.returncode == -signal.SIGKILL and run_dir is not None, first.stderr
    assert _calls(run_dir / "a") == at
    final = run_cli("resume", str(run_dir), cwd=killed)
    assert final.returncode == done.returncode, final.stderr
    assert _spend(run_dir / "a") == _spend(expected_dir / "a"), _first_difference(expected_dir, run_dir)
    assert _first_difference(expected_dir, run_dir).startswith("transcripts agree")
    assert sorted(p.name for p in (run_dir / "a" / "tool-results").iterdir()) == sorted(
        p.name for p in (expected_dir / "a" / "tool-results").iterdir()
    )
