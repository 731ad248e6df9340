"""Nightly runs that remember: the workspace manifest, an incremental job's baseline (found, or each
reason it is not), two nights through ``runner run``, ``--fresh``, resume of an incremental job, and
``runner diff``.

These hold with any model: the nights are driven here by a scripted model (``tests/scripted.py``: it
lists the workspace, keeps a note in its memory and reads one module, then reports a table of every
file and its lines, as the workspace has them), in place of the offline stand-in."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import kill_runner_when
from scripted import ScriptedModel, play_instead_of_the_stand_in, scripted_runner, subagent_results

from runner import protocol
from runner.agent.incremental import FRESH_FLAG, copy_agents, find_baseline
from runner.config import Limits
from runner.jobs import JobSpec
from runner.messages import request_problems, text_of, tool_uses
from runner.models.base import Request
from runner.offline import readback
from runner.rundir.docs import BASELINE_CHANGES, BASELINE_REPORT, MANIFEST
from runner.rundir.manifest import build, diff, read_manifest
from runner.rundir.store import read_jsonl
from runner.ui.diff import compare

PROMPT = "Survey this package."


def night_script(module: str = "__init__.py") -> list[tuple[str, dict]]:
    """A night's calls: list the modules, keep a note in memory, read ``module``."""
    return [
        ("glob", {"pattern": "**/*.py"}),
        ("memory", {"command": "create", "path": "/memories/notes.md", "file_text": "- listed, read\n"}),
        ("read", {"file_path": module}),
    ]


NIGHT = night_script()
CALLS = len(NIGHT) + 1  # a night's model calls: its script, then its report


def every_file(ws: Path) -> str:
    """A report: every regular file of ``ws`` (not under ``.git``) and its lines, a table row each."""
    files = sorted(
        p.relative_to(ws).as_posix()
        for p in ws.rglob("*")
        if p.is_file() and not p.is_symlink() and ".git" not in p.parts
    )
    rows = "".join(f"| {f} | {len((ws / f).read_bytes().splitlines())} |\n" for f in files)
    return f"# Survey\n\n## Every file\n\n| file | lines |\n|---|---:|\n{rows}"


def nights_model(monkeypatch: pytest.MonkeyPatch, ws: Path, module: str = "__init__.py") -> list[Request]:
    """The CLI's model for this test a scripted night on ``ws`` (reading ``module``): every request it
    answers, in order."""
    model = ScriptedModel(night_script(module), final=lambda _: every_file(ws))
    play_instead_of_the_stand_in(monkeypatch, model)
    return model.requests


def made(job: Path) -> list[tuple[str, dict]]:
    """Every tool call the job's transcript holds, in order."""
    lines = (job / "transcript.jsonl").read_text().splitlines()
    return [(u["name"], u["input"]) for line in lines for u in tool_uses(json.loads(line))]


def tree(tmp_path: Path) -> Path:
    """A copy of the standard library's json package, with a link inside, a link out, a dangling
    link, a FIFO and a .git directory."""
    ws = tmp_path / "ws"
    shutil.copytree(
        Path(sysconfig.get_paths()["stdlib"]) / "json", ws, ignore=shutil.ignore_patterns("__pycache__")
    )
    (ws / "sub").mkdir()
    (ws / "sub" / "notes.txt").write_text("notes\n")
    os.symlink("decoder.py", ws / "alias.py")
    os.symlink("/etc", ws / "etc")
    os.symlink("missing.py", ws / "dangling.py")
    os.mkfifo(ws / "queue")
    (ws / ".git").mkdir()
    (ws / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return ws


def test_manifest_of_a_real_tree(tmp_path: Path) -> None:
    ws = tree(tmp_path)
    manifest = build(ws)
    files = sorted(
        p.relative_to(ws).as_posix()
        for p in ws.rglob("*")
        if p.is_file() and not p.is_symlink() and ".git" not in p.parts
    )
    assert sorted(p for p, e in manifest.entries.items() if e["kind"] == "file") == files
    for path in files:
        data = (ws / path).read_bytes()
        assert manifest.entries[path]["size"] == len(data)
        assert manifest.entries[path]["sha256"] == hashlib.sha256(data).hexdigest()
    assert manifest.entries["alias.py"] == {"path": "alias.py", "kind": "symlink", "target": "decoder.py"}
    assert manifest.entries["etc"]["kind"] == "symlink" and not any(
        p.startswith("etc/") for p in manifest.entries
    )
    assert manifest.entries["dangling.py"]["kind"] == "symlink"
    assert manifest.entries["queue"] == {
        "path": "queue",
        "kind": "unreadable",
        "error": "a FIFO, not a regular file",
    }
    assert not any(p.startswith(".git") for p in manifest.entries)
    (tmp_path / MANIFEST).write_text(manifest.text())
    back, problem = read_manifest(tmp_path / MANIFEST)
    assert problem is None and back is not None and back.entries == manifest.entries
    assert back.files == len(files) and back.bytes == sum((ws / p).stat().st_size for p in files)


def test_manifest_diff(tmp_path: Path) -> None:
    ws = tree(tmp_path)
    before = build(ws)
    (ws / "new.py").write_text("x = 1\n")
    with (ws / "tool.py").open("a") as f:
        f.write("# changed\n")
    (ws / "scanner.py").unlink()
    os.remove(ws / "alias.py")
    os.symlink("encoder.py", ws / "alias.py")
    changes = diff(before, build(ws))
    assert (changes.added, changes.changed, changes.removed) == (
        ["new.py"],
        ["alias.py", "tool.py"],
        ["scanner.py"],
    )
    assert changes.unchanged == len(before.entries) - 3
    assert diff(before, before).total == 0


@pytest.mark.skipif(shutil.which("git") is None, reason="no git here")
def test_the_git_record_is_read_in_the_sandbox(tmp_path: Path) -> None:
    from runner.tools.git_state import git_state
    from runner.tools.sandbox import bwrap_problem

    if bwrap_problem() is not None:
        pytest.skip(f"no sandbox here: {bwrap_problem()}")
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "a.py").write_text("a = 1\n")
    (repo / "top.txt").write_text("top\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "one")
    commit = _git(repo, "rev-parse", "HEAD")
    (repo / "pkg" / "a.py").write_text("a = 2\n")
    (repo / "pkg" / "b.py").write_text("b = 1\n")
    assert build(repo / "pkg").git is None  # the walk never runs git
    record = anyio.run(git_state, repo / "pkg")  # a directory inside the repository: paths relative to it
    assert record == {"commit": commit, "dirty": ["a.py", "b.py"], "complete": True}
    (tmp_path / "plain").mkdir()
    assert anyio.run(git_state, tmp_path / "plain") is None  # not a repository: no git record


@pytest.mark.skipif(shutil.which("git") is None, reason="no git here")
def test_a_planted_fsmonitor_never_runs_as_the_runner(tmp_path: Path, monkeypatch) -> None:
    """A workspace's .git/config (an earlier job's bash wrote it) names a command git runs while it
    reads the status (core.fsmonitor). Run as the runner it would see its key and its uid, and write
    outside the workspace; in the sandbox it cannot."""
    from runner.tools.git_state import git_state
    from runner.tools.sandbox import bwrap_problem

    if bwrap_problem() is not None:
        pytest.skip(f"no sandbox here: {bwrap_problem()}")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.py").write_text("a = 1\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "one")
    marks = tmp_path / "marks"  # outside the workspace: only a process of the host can write here
    marks.mkdir(mode=0o777)
    marks.chmod(0o777)
    spy = f"sh -c 'id -u >> {marks}/ran; env >> {marks}/ran'"
    _git(repo, "config", "core.fsmonitor", spy)
    (repo / "a.py").write_text("a = 22\n")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-planted-test")
    record = anyio.run(git_state, repo)
    assert record is not None and "a.py" in record["dirty"]
    ran = (marks / "ran").read_text() if (marks / "ran").exists() else ""
    assert "sk-ant-planted-test" not in ran
    assert not ran, f"a command of the repository's config ran outside the sandbox: {ran[:200]!r}"


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    done = subprocess.run(
        ["git", "-C", str(repo), *args], check=True, env=env, capture_output=True, text=True
    )
    return done.stdout.strip()


def test_a_damaged_manifest_is_named(tmp_path: Path) -> None:
    ws = tree(tmp_path)
    text = build(ws).text()
    path = tmp_path / MANIFEST
    for damaged, says in (
        (text[:-40], "truncated"),
        (text.replace('"kind": "file"', '"kind": "?"', 1), "line"),
        ("\n".join(text.split("\n")[:3]) + "\n", "entries"),
        ("{}\n", "head"),
    ):
        path.write_text(damaged)
        manifest, problem = read_manifest(path)
        assert manifest is None and problem is not None and says in problem, problem
    assert read_manifest(tmp_path / "none.jsonl") == (None, f"{tmp_path / 'none.jsonl'}: missing")


# --- the baseline ----------------------------------------------------------------------------------


def spec_for(ws: Path, prompt: str = PROMPT) -> JobSpec:
    return JobSpec(
        name="survey",
        source=Path("survey.toml"),
        prompt=prompt,
        workspace=ws,
        model="m",
        system=None,
        tools=("read",),
        limits=Limits(incremental=True),
    )


def earlier_run(
    output: Path,
    run: str,
    ws: Path,
    *,
    status: str = "succeeded",
    prompt: str = PROMPT,
    workspace: Path | None = None,
    manifest: str | None = None,
    final: bool = True,
    created: float = 1000.0,
) -> Path:
    job = output / run / "survey"
    job.mkdir(parents=True)
    (job / "metrics.json").write_text(json.dumps({"job": "survey", "status": status, "cost_usd": 0.25}))
    (job / "job.json").write_text(json.dumps(spec_for(workspace or ws, prompt).to_json()))
    if final:
        (job / "final.md").write_text(f"# report of {run}\n")
    if manifest is None:
        m = build(ws)
        m.created = created
        manifest = m.text()
    if manifest:
        (job / MANIFEST).write_text(manifest)
    return job


@pytest.mark.parametrize(
    ("case", "kwargs", "reason"),
    [
        ("missing", None, "no earlier run of job survey"),
        ("failed", {"status": "failed"}, "ended failed"),
        ("another prompt", {"prompt": "Something else."}, "had another prompt"),
        ("another workspace", {"workspace": Path("/elsewhere")}, "had another workspace (/elsewhere)"),
        ("no manifest", {"manifest": ""}, f"has no usable {MANIFEST} (missing)"),
        (
            "damaged manifest",
            {"manifest": '{"manifest": 1, "created": 5, "entries": 9}\n{"path"\n'},
            "damaged",
        ),
        ("no final.md", {"final": False}, "has no final.md"),
    ],
)
def test_an_unusable_baseline_means_a_full_run_with_its_reason(
    tmp_path: Path, case: str, kwargs: dict[str, Any] | None, reason: str
) -> None:
    ws = tree(tmp_path)
    output = tmp_path / "runs"
    (output / "now").mkdir(parents=True)
    if kwargs is not None:
        earlier_run(output, "earlier", ws, **kwargs)
    baseline, why = find_baseline(spec_for(ws), output / "now", before=2000.0)
    assert baseline is None and why is not None and reason in why, why


def test_the_newest_usable_earlier_run_is_the_baseline(tmp_path: Path) -> None:
    ws = tree(tmp_path)
    output = tmp_path / "runs"
    (output / "now").mkdir(parents=True)
    earlier_run(output, "older", ws, created=1000.0)
    earlier_run(output, "old", ws, created=1500.0)
    earlier_run(output, "newest-failed", ws, status="failed", created=1800.0)
    earlier_run(output, "later", ws, created=2500.0)  # made after this run started: no earlier run
    baseline, why = find_baseline(spec_for(ws), output / "now", before=2000.0)
    assert why is None and baseline is not None and baseline.run == "old"
    assert baseline.metrics.cost_usd == 0.25 and baseline.manifest.created == 1500.0


# --- two nights through `runner run` ---------------------------------------------------------------


def project(tmp_path: Path) -> Path:
    """The tree (without ``queue``), an incremental task file of it and a config on the offline backend,
    which a test plays a scripted model on: the workspace."""
    ws = tree(tmp_path)
    (ws / "queue").unlink()
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "survey.toml").write_text(
        f'prompt = "{PROMPT}"\nworkspace = "../ws"\nincremental = true\n'
    )
    (tmp_path / "config.toml").write_text('[runner]\noutput_dir = "runs"\nbackend = "offline"\n')
    return ws


@pytest.fixture
def nightly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, list[Request]]:
    """A project: the tree, an incremental task file, a config on the scripted model; and every request
    the model is sent, in order."""
    ws = project(tmp_path)
    return tmp_path, ws, nights_model(monkeypatch, ws)


def change(ws: Path) -> None:
    (ws / "new_mod.py").write_text('"""New."""\nx = 1\n')
    with (ws / "tool.py").open("a") as f:
        f.write("# changed\n")
    (ws / "scanner.py").unlink()


def night(run_cli: Any, root: Path, *args: str) -> tuple[dict, str]:
    done = run_cli("run", "jobs", "--json", *args, cwd=root)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


def test_two_nights_the_second_starts_from_the_first(run_cli: Any, nightly: tuple) -> None:
    root, ws, requests = nightly
    first, stderr = night(run_cli, root)
    job = first["jobs"][0]
    assert (
        job["incremental"]["baseline"] is None
        and "no earlier run of job survey" in job["incremental"]["fresh"]
    )
    assert "job survey: a full run: no usable baseline" in stderr
    run1 = Path(first["run_dir"])
    assert (run1 / "survey" / MANIFEST).is_file()
    assert requests[0].messages == [{"role": "user", "content": PROMPT}]  # the prompt alone
    assert (job["status"], job["turns"], len(requests)) == ("succeeded", CALLS, CALLS)
    memories = sorted(
        p.relative_to(run1 / "survey").as_posix() for p in (run1 / "survey" / "memories").rglob("*.md")
    )
    assert memories == ["memories/notes.md"]

    change(ws)
    requests.clear()
    second, stderr = night(run_cli, root)
    run2 = Path(second["run_dir"])
    inc = second["jobs"][0]["incremental"]
    assert (inc["baseline"], inc["files_added"], inc["files_changed"], inc["files_removed"]) == (
        run1.name,
        1,
        1,
        1,
    )
    assert inc["baseline_cost_usd"] == round(first["jobs"][0]["cost_usd"], 6) and inc["fresh"] is None
    assert f"job survey: incremental from run {run1.name}: 1 files added, 1 changed, 1 removed" in stderr
    assert (second["jobs"][0]["turns"], len(requests)) == (CALLS, CALLS)  # the runtime added no call
    first_request = requests[0].messages
    assert not request_problems(first_request, PROMPT)
    assert (
        len(first_request) == 1 and first_request[0]["content"][0]["text"] == PROMPT
    )  # the window joined the two
    note = readback.incremental_of(first_request[0]["content"][1]["text"])
    assert note == {
        "run": run1.name,
        "report": BASELINE_REPORT,
        "changes": BASELINE_CHANGES,
        "added": 1,
        "changed": 1,
        "removed": 1,
        "unchanged": inc["files_unchanged"],
    }
    text = text_of(first_request[0])
    assert "added: new_mod.py" in text and "changed: tool.py" in text and "removed: scanner.py" in text
    assert f"its {len(memories)} memory files are your memory now" in text
    job2 = run2 / "survey"
    assert (job2 / "baseline-memories" / "notes.md").read_text() == "- listed, read\n"
    assert made(job2) == NIGHT  # the night's own calls, after the runtime's note
    assert readback.changes_of((job2 / BASELINE_CHANGES).read_text()) == {
        "added": ["new_mod.py"],
        "changed": ["tool.py"],
        "removed": ["scanner.py"],
    }
    assert (job2 / BASELINE_REPORT).read_text() == (run1 / "survey" / "final.md").read_text()
    transcript = [json.loads(line) for line in (job2 / "transcript.jsonl").read_text().splitlines()]
    assert transcript[0] == {"role": "user", "content": PROMPT}  # resume still finds its prompt alone
    assert readback.incremental_of(transcript[1]["content"]) == note

    assert run_cli("diff", str(run1), str(run2), cwd=root).returncode == 1
    shown = run_cli("diff", str(run1), str(run2), "--json", cwd=root)
    doc = json.loads(shown.stdout)
    assert shown.returncode == 1 and doc["jobs_changed"] == ["survey"]
    diffed = doc["jobs"][0]  # the reports' rows: one file added, one removed, one whose lines changed
    assert (diffed["added"], diffed["removed"], diffed["changed_units"]) == (
        ["new_mod.py"],
        ["scanner.py"],
        ["tool.py"],
    )

    requests.clear()
    third, stderr = night(run_cli, root, "--fresh")  # the same tree, in full
    inc3 = third["jobs"][0]["incremental"]
    assert (
        inc3["baseline"] is None
        and inc3["fresh"] == FRESH_FLAG
        and f"job survey: a full run: {FRESH_FLAG}" in stderr
    )
    assert requests[0].messages == [{"role": "user", "content": PROMPT}]  # the prompt alone
    run3 = Path(third["run_dir"])
    assert run_cli("diff", str(run2), str(run3), cwd=root).returncode == 0  # the same tree, the same report
    assert run_cli("diff", str(run2), "runs/latest", cwd=root).returncode == 0
    bad = run_cli("diff", str(run2), str(root / "jobs"), cwd=root)
    assert bad.returncode == 2 and str(root / "jobs") in bad.stderr


def test_a_resumed_incremental_job_keeps_its_baseline(run_cli: Any, nightly: tuple) -> None:
    root, ws, requests = nightly
    first, _ = night(run_cli, root)
    change(ws)
    second, _ = night(run_cli, root)
    run2, job2 = Path(second["run_dir"]), Path(second["run_dir"]) / "survey"
    kept = second["jobs"][0]["incremental"]
    lines = (job2 / "transcript.jsonl").read_text().splitlines()
    (job2 / "transcript.jsonl").write_text("\n".join(lines[:4]) + "\n")  # prompt, note, one turn
    metrics = json.loads((job2 / "metrics.json").read_text())
    (job2 / "metrics.json").write_text(json.dumps({**metrics, "status": "cancelled"}))
    (job2 / "final.md").unlink()
    (ws / "later.py").write_text("y = 2\n")  # a change after the job started: not this job's concern
    requests.clear()
    resumed = run_cli("resume", str(run2), cwd=root)
    assert resumed.returncode == 0, resumed.stderr
    after = json.loads((job2 / "metrics.json").read_text())
    assert after["status"] == "succeeded" and after["incremental"] == kept
    assert after["turns"] == CALLS  # the kept turn, the rest of the script, the report
    assert made(job2) == NIGHT  # from the kept turn on: nothing made twice
    transcript = [json.loads(line) for line in (job2 / "transcript.jsonl").read_text().splitlines()]
    assert transcript[0]["content"] == PROMPT and readback.incremental_of(transcript[1]["content"])
    assert sum(readback.incremental_of(str(m.get("content"))) is not None for m in transcript) == 1
    assert len(requests) == CALLS - 1
    assert readback.incremental_of(requests[0].messages[0]["content"][1]["text"])["run"] == kept["baseline"]
    assert (job2 / "final.md").read_text() == every_file(ws)


def test_a_baseline_the_runtime_cannot_use_means_a_full_run_with_its_reason(
    run_cli: Any, nightly: tuple
) -> None:
    root, ws, requests = nightly
    first, _ = night(run_cli, root)
    job1 = Path(first["run_dir"]) / "survey"
    (job1 / MANIFEST).write_text('{"manifest": 1, "created": 5, "entries": 9}\n{"path"\n')  # damaged
    change(ws)
    requests.clear()
    second, stderr = night(run_cli, root)
    inc = second["jobs"][0]["incremental"]
    assert inc["baseline"] is None and "damaged" in inc["fresh"] and "job survey: a full run:" in stderr
    assert requests[0].messages == [{"role": "user", "content": PROMPT}]  # no note: a night of its own
    job2 = Path(second["run_dir"]) / "survey"
    assert not (job2 / BASELINE_CHANGES).exists() and not (job2 / "baseline-memories").exists()
    assert (job2 / MANIFEST).is_file()  # the next night's baseline
    assert second["jobs"][0]["turns"] == CALLS


def test_a_killed_incremental_night_resumes_from_its_baseline_as_an_uninterrupted_one(
    run_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Night two, a real runner process, is killed with SIGKILL part way; ``runner resume`` keeps its
    baseline and its record and ends with the transcript, turns and report of the same night run
    without interruption."""
    ws = project(tmp_path)
    # the night: list, a note, then every module read a line range at a time (turns to kill in)
    ranges = [
        ("read", {"file_path": f, "view_range": [k, k + 4]})
        for f in ("decoder.py", "encoder.py")
        for k in range(1, 100, 5)
    ]
    model = ScriptedModel([*NIGHT, *ranges], final="# Survey\n\nEvery module read.\n")
    play_instead_of_the_stand_in(monkeypatch, model)
    first, _ = night(run_cli, tmp_path)
    baseline = Path(first["run_dir"])
    change(ws)
    script = model.save(tmp_path / "script.json")

    def runs() -> list[Path]:
        return [
            r for r in (tmp_path / "runs").iterdir() if r.is_dir() and not r.is_symlink() and r != baseline
        ]

    def transcript_lines() -> int:
        found = runs()
        try:
            return (found[0] / "survey" / "transcript.jsonl").read_bytes().count(b"\n") if found else 0
        except OSError:
            return 0

    killed = None
    for at_line in (20, 10, 6):  # the note and a few turns written (the run may end first: earlier then)
        argv = scripted_runner(script, "run", "jobs")
        if kill_runner_when(lambda at=at_line: transcript_lines() >= at, cwd=tmp_path, argv=argv):
            killed = runs()[0]
            break
        shutil.move(runs()[0], tmp_path / f"ended-{at_line}")
    assert killed is not None, "every night ended before its kill point"
    job = killed / "survey"
    assert not (job / "final.md").exists()
    kept = json.loads((job / "metrics.json").read_text()).get("incremental")
    resumed = run_cli("resume", str(killed), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    after = json.loads((job / "metrics.json").read_text())
    assert after["status"] == "succeeded" and after["incremental"]["baseline"] == baseline.name
    assert after["incremental"] == kept  # the record the killed night had written, kept

    shutil.move(killed, tmp_path / "resumed")  # out of the output directory: night 1 is the baseline again
    again, _ = night(run_cli, tmp_path)
    whole = Path(again["run_dir"]) / "survey"
    timing = ("manifest_s",)
    assert {k: v for k, v in again["jobs"][0]["incremental"].items() if k not in timing} == {
        k: v for k, v in after["incremental"].items() if k not in timing
    }
    assert again["jobs"][0]["turns"] == after["turns"] == len(model.turns) + 1
    resumed_job = tmp_path / "resumed" / "survey"
    assert read_jsonl(resumed_job / "transcript.jsonl")[0] == read_jsonl(whole / "transcript.jsonl")[0]
    assert (resumed_job / "final.md").read_text() == (whole / "final.md").read_text()
    assert sorted(os.listdir(resumed_job / "memories")) == sorted(os.listdir(whole / "memories"))


PART_TOOLS = ["read", "grep"]


def part(name: str) -> ScriptedModel:
    """A subagent's script: a note in its memory, a read of its part's module, its report."""
    return ScriptedModel(
        [
            ("memory", {"command": "create", "path": "/memories/part.md", "file_text": f"- {name}\n"}),
            ("read", {"file_path": f"{name}/mod.py"}),
        ],
        final=f"# Part {name}\n",
    )


def task(name: str) -> tuple[str, dict]:
    return ("task", {"description": f"part {name}", "prompt": f"Survey part {name}.", "tools": PART_TOOLS})


def naming_parts(carried: tuple[str, ...]) -> Any:
    """A parent's report: a row for each subagent whose result it got and each carried part, naming
    its final.md (as a report must, for the next night to carry it over)."""

    def report(request: Request) -> str:
        rows = [f"| `{h[2]}` | {h[1]} |" for h in subagent_results(request)] + [
            f"| `{c}/final.md` | carried |" for c in carried
        ]
        return "# Parts\n\n| report | status |\n|---|---|\n" + "".join(f"{row}\n" for row in rows)

    return report


def split_night(
    run_cli: Any, monkeypatch: pytest.MonkeyPatch, root: Path, tasks: list, carried: tuple[str, ...] = ()
) -> tuple[dict, Path, ScriptedModel]:
    """A night of a parent that hands out ``tasks`` (none: it only reports) to scripted subagents."""
    model = ScriptedModel(
        [tasks] if tasks else [],
        final=naming_parts(carried),
        subagents={f"Survey part {n}.": part(n) for n in ("a", "b")},
    )
    play_instead_of_the_stand_in(monkeypatch, model)
    done, _ = night(run_cli, root)
    assert done["jobs"][0]["status"] == "succeeded"
    return done, Path(done["run_dir"]) / "survey", model


def test_a_baseline_s_subagents_are_carried_over_and_one_given_again_is_replaced(
    run_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Night one hands out parts a and b; night two only a again (its file changed): b's subagent is
    carried over from night one, a's copy is removed when the new a starts; night three hands out
    nothing: both are carried over again, from night two's own copy and its own subagent."""
    ws = tmp_path / "ws"
    for name in ("a", "b"):
        (ws / name).mkdir(parents=True)
        (ws / name / "mod.py").write_text(f"{name} = 1\n")
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "survey.toml").write_text(
        f'prompt = "{PROMPT}"\nworkspace = "../ws"\nincremental = true\n'
        'tools = ["read", "glob", "grep", "task"]\n'
    )
    (tmp_path / "config.toml").write_text('[runner]\noutput_dir = "runs"\nbackend = "offline"\n')
    _, job1, _ = split_night(run_cli, monkeypatch, tmp_path, [task("a"), task("b")])
    assert sorted(os.listdir(job1 / "agents")) == ["1-part-a", "2-part-b"]

    (ws / "a" / "mod.py").write_text("a = 2\n")
    second, job2, model = split_night(
        run_cli, monkeypatch, tmp_path, [task("a")], ("baseline-agents/2-part-b",)
    )
    copied = [("baseline-agents/1-part-a", "Survey part a."), ("baseline-agents/2-part-b", "Survey part b.")]
    assert readback.agents_of((job2 / "tool-results" / "baseline-agents.txt").read_text()) == copied
    assert "its 2 subagents that succeeded are copied to baseline-agents/" in text_of(
        model.requests[0].messages[0]
    )
    assert sorted(os.listdir(job2 / "agents")) == ["1-part-a"]
    assert sorted(os.listdir(job2 / "baseline-agents")) == ["2-part-b"]  # a's copy: superseded, removed
    kept = job2 / "baseline-agents" / "2-part-b"
    assert sorted(os.listdir(kept)) == ["final.md", "job.json", "memories", "metrics.json"]
    assert (kept / "final.md").read_text() == "# Part b\n"
    assert (kept / "memories" / "part.md").read_text() == "- b\n"
    assert json.loads((kept / "job.json").read_text())["prompt"] == "Survey part b."
    assert second["jobs"][0]["incremental"]["files_changed"] == 1

    _, job3, _ = split_night(
        run_cli, monkeypatch, tmp_path, [], ("agents/1-part-a", "baseline-agents/2-part-b")
    )
    assert not (job3 / "agents").exists()
    copied = [("baseline-agents/1-part-a", "Survey part a."), ("baseline-agents/2-part-b", "Survey part b.")]
    assert readback.agents_of((job3 / "tool-results" / "baseline-agents.txt").read_text()) == copied
    for name, text in (("1-part-a", "# Part a\n"), ("2-part-b", "# Part b\n")):
        assert (job3 / "baseline-agents" / name / "final.md").read_text() == text


def subagent_dir(where: Path, prompt: str, status: str = "succeeded") -> None:
    (where / "memories" / "survey").mkdir(parents=True)
    (where / "metrics.json").write_text(json.dumps({"status": status}))
    (where / "job.json").write_text(json.dumps({"prompt": prompt}))
    (where / "final.md").write_text(f"# {prompt}\n")
    (where / "memories" / "survey" / "facts-000.md").write_text('# facts\n["a.py", "text", 1, 2]\n')


def test_the_subagents_a_baseline_report_names_are_copied_in_its_order_and_no_link_is_followed(
    tmp_path: Path,
) -> None:
    base, job = tmp_path / "base", tmp_path / "job"
    subagent_dir(base / "agents" / "1-email", "part email")
    subagent_dir(base / "agents" / "2-json", "part json", status="max_turns")  # did not succeed
    subagent_dir(base / "agents" / "3-unnamed", "a part the report does not name")
    subagent_dir(base / "baseline-agents" / "1-xml", "part xml, carried over by the baseline")
    subagent_dir(tmp_path / "outside", "outside")
    (base / "agents" / "4-link").symlink_to(tmp_path / "outside")
    (base / "agents" / "1-email" / "memories" / "survey" / "todo-000.md").symlink_to(
        tmp_path / "outside" / "final.md"
    )
    job.mkdir()
    report = "".join(
        f"| `{d}` | x | succeeded | 1 | `{d}/final.md` |\n"
        for d in ("baseline-agents/1-xml", "agents/1-email", "agents/2-json", "agents/4-link")
    )
    copied = copy_agents(base, job, report)
    assert copied == [
        ("baseline-agents/1-xml", "part xml, carried over by the baseline"),
        ("baseline-agents/1-email", "part email"),
    ]
    email = job / "baseline-agents" / "1-email"
    assert sorted(p.name for p in email.iterdir()) == ["final.md", "job.json", "memories", "metrics.json"]
    assert [p.name for p in (email / "memories" / "survey").iterdir()] == ["facts-000.md"]  # not the link
    assert readback.agents_of(protocol.agents_text(copied)) == copied


# --- the texts and the pure comparison ---------------------------------------------------------------


def test_the_change_lists_round_trip_and_the_note_keeps_its_budget() -> None:
    lists = {
        "added": [f"pkg/module_{i:04d}.py" for i in range(500)],
        "changed": ['odd "name".py', " lead", "a\nb"],
        "removed": [],
    }
    text = protocol.changes_text(run="r1", lists=lists, unchanged=7)
    assert readback.changes_of(text) == lists
    note = protocol.incremental_note(
        run="r1",
        when="today",
        report=BASELINE_REPORT,
        changes=BASELINE_CHANGES,
        memory="",
        lists=lists,
        unchanged=7,
    )
    assert len(note) < len(protocol.INCREMENTAL_NOTE) + protocol.CHANGES_INLINE_CHARS + 200
    assert "and 4" in note and "removed: (none)" in note
    assert readback.incremental_of(note)["added"] == 500
    assert readback.incremental_of("Survey this.") is None


def test_compare_reports_by_sections_and_by_rows() -> None:
    a = "# Findings\n\n## src/a.py\nuses eval\n\n## src/b.py\nok\n"
    b = "# Findings\n\n## src/a.py\nuses exec\n\n## src/c.py\nnew\n"
    result = compare("j", a, b)
    assert (result.unit, result.added, result.removed, result.changed) == (
        "sections",
        ["src/c.py"],
        ["src/b.py"],
        ["src/a.py"],
    )
    assert result.report_changed and result.diff.startswith("--- a/final.md\n+++ b/final.md\n")
    table = "## Every file\n\n| file | lines |\n|---|---:|\n| a.py | 3 |\n| b\\|c.py | 4 |\n"
    rows = compare("j", table, table.replace("| a.py | 3 |", "| a.py | 5 |") + "| d.py | 1 |\n")
    assert (rows.unit, rows.added, rows.removed, rows.changed) == ("rows", ["d.py"], [], ["a.py"])
    same = compare("j", a, a)
    assert not same.report_changed and same.diff == ""


def test_a_resumed_incremental_job_keeps_its_starting_memory(run_cli: Any, nightly: tuple) -> None:
    root, ws, _ = nightly
    first, _ = night(run_cli, root)
    (Path(first["run_dir"]) / "survey" / "memories" / "extra.md").write_text("remember me\n")
    change(ws)
    second, _ = night(run_cli, root)
    job2 = Path(second["run_dir"]) / "survey"
    assert (job2 / "memories" / "extra.md").read_text() == "remember me\n"
    assert (job2 / "baseline-memories" / "extra.md").read_text() == "remember me\n"
    lines = (job2 / "transcript.jsonl").read_text().splitlines()
    (job2 / "transcript.jsonl").write_text("\n".join(lines[:4]) + "\n")
    metrics = json.loads((job2 / "metrics.json").read_text())
    (job2 / "metrics.json").write_text(json.dumps({**metrics, "status": "cancelled"}))
    assert run_cli("resume", second["run_dir"], cwd=root).returncode == 0
    assert (job2 / "memories" / "extra.md").read_text() == "remember me\n"
    assert sorted(os.listdir(job2 / "memories")) == ["extra.md", "notes.md"]


# --- the unchanged files that import a changed one, over two nights ------------------------------------


def importing_project(root: Path, *, imports: str) -> Path:
    """A project of 30 modules in a package whose 5 ``user_*.py`` import ``lib.{imports}``, on the
    scripted model, incremental."""
    ws = root / "ws"
    (ws / "lib").mkdir(parents=True)
    (ws / "lib" / "__init__.py").write_text('"""The library."""\n')
    (ws / "lib" / "core.py").write_text('"""The core."""\n\n\ndef core():\n    return 1\n')
    (ws / "lib" / "other.py").write_text('"""Another."""\n\n\ndef other():\n    return 2\n')
    for i in range(5):
        (ws / f"user_{i}.py").write_text(
            f'"""User {i}."""\nfrom lib.{imports} import {imports}\n\n\n'
            f"def use_{i}():\n    return {imports}()\n"
        )
    for i in range(23):
        (ws / "lib" / f"leaf_{i:02d}.py").write_text(
            f'"""Leaf {i}."""\n\n\ndef leaf_{i}():\n    return {i}\n'
        )
    (root / "jobs").mkdir()
    (root / "jobs" / "survey.toml").write_text(
        f'prompt = "{PROMPT}"\nworkspace = "../ws"\nincremental = true\n'
    )
    (root / "config.toml").write_text('[runner]\noutput_dir = "runs"\nbackend = "offline"\n')
    return ws


def test_night_two_names_the_unchanged_importers_of_the_changed_module(
    run_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nights: dict[str, tuple[dict, str]] = {}
    for imports in ("core", "other"):  # 5 importers of the changed module; the plain night: none
        root = tmp_path / imports
        ws = importing_project(root, imports=imports)
        requests = nights_model(monkeypatch, ws, "user_0.py")
        night(run_cli, root)
        with (ws / "lib" / "core.py").open("a") as f:
            f.write("\n\ndef more():\n    return 3\n")
        requests.clear()
        done, stderr = night(run_cli, root)
        nights[imports] = (done, text_of(requests[0].messages[0]))
        assert imports != "core" or "(5 unchanged files import them)" in stderr
    second, note = nights["core"]
    users = [f"user_{i}.py" for i in range(5)]
    assert f"unchanged, but depends on changed lib/core.py: {', '.join(users)}" in note
    assert protocol.DEPENDENTS_HINT in note
    inc = second["jobs"][0]["incremental"]
    assert (inc["files_changed"], inc["files_dependent"], inc["dependents_skipped"]) == (1, 5, 0)
    saved = (Path(second["run_dir"]) / "survey" / BASELINE_CHANGES).read_text()
    assert readback.dependents_of(saved) == {"lib/core.py": users}
    assert readback.changes_of(saved) == {"added": [], "changed": ["lib/core.py"], "removed": []}
    plain, plain_note = nights["other"]
    assert "depends on changed" not in plain_note and plain["jobs"][0]["incremental"]["files_dependent"] == 0
    assert protocol.DEPENDENTS_HINT not in plain_note
    # the runtime adds no call (what a model makes of the note, e.g. the stand-in's cost with it against
    # without, is its own: test_incremental_offline.py)
    assert second["jobs"][0]["turns"] == plain["jobs"][0]["turns"] == CALLS


def test_a_slow_search_for_dependents_never_holds_a_night_past_its_timeout(
    run_cli: Any, nightly: tuple, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The search for the unchanged importers (like the manifest and the baseline) runs on a thread the
    job does not wait for once its time is up: a commit that makes it slow costs the job its timeout,
    never the night (the job used to wait for the thread, past its timeout and past Ctrl-C)."""
    import threading

    from runner.rundir import dependents

    root, ws, _ = nightly
    night(run_cli, root)
    change(ws)
    release, finished = threading.Event(), threading.Event()

    def slow_find(*args: Any) -> dependents.Dependents:
        release.wait(60)
        finished.set()
        return dependents.Dependents()

    monkeypatch.setattr(dependents, "find", slow_find)
    task = root / "jobs" / "survey.toml"
    task.write_text(task.read_text() + "[limits]\ntimeout_s = 3\n")
    try:
        done = run_cli("run", "jobs", "--json", cwd=root)
        assert not finished.is_set()  # the run ended while the search was still going
    finally:
        release.set()
    job = json.loads(done.stdout)["jobs"][0]
    assert job["status"] == "timeout" and "Traceback" not in done.stderr, job
    assert "AttributeError" not in (job["error"] or ""), job  # no last call before the tools were open
