"""The command line's front door, driven as a user drives it (``python -m runner`` in a subprocess): job
names the run directory takes for itself, ``view``'s and the servers' errors as one line and exit 2
(never a traceback), ports bound before a URL is printed, a closed stdout that is no error (and never
stops a run), ``replay``'s rows told apart on an 80-column pipe, ``validate`` reporting every problem.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import mounted_tmpfs, run_cli_process, runner_argv, runner_env

JOBS = ("alpha-survey", "beta-survey")


def task_file(jobs: Path, stem: str, workspace: Path, name: str | None = None) -> Path:
    jobs.mkdir(exist_ok=True)
    path = jobs / f"{stem}.toml"
    named = f'name = "{name}"\n' if name is not None else ""
    path.write_text(f'{named}prompt = "Survey this package."\nworkspace = "{workspace}"\n')
    return path


def one_error_line(proc: subprocess.CompletedProcess, *, needle: str) -> str:
    """The process's one error line, which names ``needle``; exit 2 and no traceback."""
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    errors = [line for line in proc.stderr.splitlines() if line.startswith(("error:", "runner "))]
    assert len(errors) == 1 and needle in errors[0], proc.stderr
    return errors[0]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    ws = tmp_path_factory.mktemp("ws")
    (ws / "pkg").mkdir()
    (ws / "pkg" / "__init__.py").write_text('"""A package."""\n\nVALUE = 1\n')
    (ws / "pkg" / "util.py").write_text("def helper():\n    return 2\n")
    return ws


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, workspace) -> Path:
    """A finished offline run of two jobs (made once; tests that write into a run copy it)."""
    root = tmp_path_factory.mktemp("front")
    for name in JOBS:
        task_file(root / "jobs", name, workspace)
    proc = run_cli_process("run", "jobs", "--backend", "offline", "--output-dir", "runs", cwd=root)
    assert proc.returncode == 0, proc.stderr
    return (root / "runs" / "latest").resolve()


def copied_run(run_dir: Path, tmp_path: Path) -> Path:
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, symlinks=True)
    return copy


# --- 1. names the run directory uses, and `view`'s errors ---------------------------------------------


@pytest.mark.parametrize("name", ["index.html", "view", "VIEW", "batches.jsonl", "Run.json"])
def test_a_job_may_not_take_a_name_the_run_directory_uses(tmp_path, workspace, name):
    path = task_file(tmp_path / "jobs", "job", workspace, name=name)
    for command in ("validate", "run"):
        proc = run_cli_process(command, "jobs", cwd=tmp_path)
        line = one_error_line(proc, needle=f"{path.relative_to(tmp_path)}: name:")
        assert repr(name) in line and "reserved" in line
    assert not (tmp_path / "runs").exists()  # nothing ran


def test_view_out_an_existing_directory_is_one_line_and_writes_nothing(run_dir, tmp_path):
    target = tmp_path / "pages"
    target.mkdir()
    proc = run_cli_process("view", str(run_dir), "--out", str(target), cwd=tmp_path)
    one_error_line(proc, needle=f"--out {target}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pages"]  # no pages-view/ beside it
    assert not any(target.iterdir())


def test_view_out_in_a_missing_directory_is_refused_not_made(run_dir, tmp_path):
    out = tmp_path / "missing" / "deeper" / "x.html"
    proc = run_cli_process("view", str(run_dir), "--out", str(out), cwd=tmp_path)
    one_error_line(proc, needle=f"--out {out}")
    assert not (tmp_path / "missing").exists()


def test_view_where_a_directory_is_in_the_way_is_one_line(run_dir, tmp_path):
    run = copied_run(run_dir, tmp_path)
    (run / "index.html").mkdir()  # as a job named index.html made it, before the name was reserved
    proc = run_cli_process("view", str(run), cwd=tmp_path)
    one_error_line(proc, needle=str(run / "index.html"))
    assert not (run / "view").exists()  # refused before any page was written
    (run / "index.html").rmdir()
    (run / "view" / f"{JOBS[0]}.html").mkdir(parents=True)  # a write fails half-way: still one line
    proc = run_cli_process("view", str(run), cwd=tmp_path)
    one_error_line(proc, needle="cannot write the view")


def test_view_of_a_read_only_run_is_one_line(run_dir, tmp_path):
    with mounted_tmpfs(tmp_path / "mnt", "16m") as mount:
        run = copied_run(run_dir, mount)
        done = subprocess.run(["mount", "-o", "remount,ro", str(mount)], capture_output=True)
        if done.returncode != 0:
            pytest.skip("cannot remount read-only here")
        proc = run_cli_process("view", str(run), cwd=tmp_path)
        one_error_line(proc, needle=f"{run / 'view'}: cannot write the view: Read-only file system")


# --- 2. ports: checked by argparse, bound before the URL is printed -----------------------------------


@pytest.fixture
def busy_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


def test_a_port_in_use_is_one_line_naming_it_and_no_url(run_dir, tmp_path, busy_port):
    for args in (("emulate",), ("view", str(run_dir), "--serve")):
        proc = run_cli_process(*args, "--port", str(busy_port), cwd=tmp_path, timeout=30)
        one_error_line(proc, needle=f"127.0.0.1:{busy_port}: cannot listen there")
        assert "http://" not in proc.stdout and "ANTHROPIC_BASE_URL" not in proc.stdout, proc.stdout


@pytest.mark.parametrize("port", ["99999", "65536", "-1", "http"])
def test_a_port_out_of_range_is_refused_by_its_flag(run_dir, tmp_path, port):
    for args in (("emulate",), ("view", str(run_dir), "--serve")):
        proc = run_cli_process(*args, "--port", port, cwd=tmp_path, timeout=30)
        one_error_line(proc, needle="argument --port: expected a port number from 0 (any free one) to 65535")


@pytest.mark.parametrize("command", ["emulate", "view"])
def test_a_server_prints_its_url_once_it_listens(run_dir, tmp_path, command):
    """--port 0: a free port, the one printed, listening by then."""
    args = ("emulate",) if command == "emulate" else ("view", str(run_dir), "--serve")
    proc = subprocess.Popen(
        runner_argv(*args, "--port", "0"),
        cwd=tmp_path,
        env=runner_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        port = int(re.search(r"http://127\.0\.0\.1:(\d+)", line).group(1))  # type: ignore[union-attr]
        assert port > 0, line
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # listening when it said so
    finally:
        proc.send_signal(2)
        proc.wait(timeout=20)
    assert proc.returncode in (0, 130)  # stopped; or interrupted before the server took its signals


# --- 3. a closed stdout ---------------------------------------------------------------------------------


def closed_stdout(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m runner ARGS`` whose stdout is a pipe nobody reads: its read end closed before it
    starts, so every write to stdout meets a broken pipe."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            runner_argv(*args),
            cwd=cwd,
            env=runner_env(COLUMNS="80"),
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=timeout,
        )
    finally:
        os.close(write)
    return subprocess.CompletedProcess(done.args, done.returncode, "", done.stderr)


@pytest.mark.parametrize(
    "args",
    [("report",), ("report", "--json"), ("replay", "--json"), ("replay",), ("diff", "--json"), ("view",)],
)
def test_a_closed_stdout_is_no_error_of_a_reading_command(run_dir, tmp_path, args):
    run = copied_run(run_dir, tmp_path)
    tail = {"replay": [str(run / JOBS[0])], "diff": [str(run), str(run)]}.get(args[0], [str(run)])
    proc = closed_stdout(*args[:1], *tail, *args[1:], cwd=tmp_path)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert "Exception ignored" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr  # every job succeeded, the runs do not differ


@pytest.mark.parametrize("as_json", [False, True])
def test_a_closed_stdout_never_stops_a_run(tmp_path, workspace, as_json):
    for name in JOBS:
        task_file(tmp_path / "jobs", name, workspace)
    args = ["run", "jobs", "--backend", "offline", "--output-dir", "runs"] + (["--json"] if as_json else [])
    started = time.time()
    proc = closed_stdout(*args, cwd=tmp_path)
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
    run = (tmp_path / "runs" / "latest").resolve()
    document = json.loads((run / "run.json").read_text())
    assert document["state"] == "finished"
    assert {j["job"]: j["status"] for j in document["jobs"]} == dict.fromkeys(JOBS, "succeeded")
    for name in JOBS:
        for file in ("job.json", "metrics.json", "transcript.jsonl", "events.jsonl", "final.md"):
            assert (run / name / file).stat().st_mtime >= started - 1, file
        assert json.loads((run / name / "metrics.json").read_text())["status"] == "succeeded"
        assert (run / name / "final.md").read_text().strip()


# --- 4. replay's rows on an 80-column pipe --------------------------------------------------------------


def test_replay_of_two_job_directories_tells_their_rows_apart(run_dir, tmp_path):
    proc = run_cli_process(
        "replay", str(run_dir / JOBS[0]), str(run_dir / JOBS[1]), cwd=tmp_path, COLUMNS="80"
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines[:-1]) <= 80, proc.stdout
    rows = [line for line in lines if line[:1] in ("a", "b", "…") and "$" in line]
    assert len(rows) == 2, proc.stdout
    names = [row.split()[0] for row in rows]
    assert names[0] != names[1], proc.stdout
    assert names[0].startswith("alpha") and names[1].startswith("beta"), names


# --- 6. validate reports every problem ------------------------------------------------------------------


def test_validate_reports_a_bad_config_and_a_bad_task_file_both(tmp_path, workspace):
    (tmp_path / "config.toml").write_text('[runner]\nconcurrency = "many"\n')
    task_file(tmp_path / "jobs", "good", workspace)
    (tmp_path / "jobs" / "bad.toml").write_text('prompt = "x"\n')  # no workspace
    proc = run_cli_process("validate", "jobs", cwd=tmp_path)
    assert "Traceback" not in proc.stderr and proc.returncode == 2, proc.stderr
    assert "config.toml: runner.concurrency" in proc.stderr, proc.stderr
    assert "jobs/bad.toml: workspace" in proc.stderr, proc.stderr


def test_no_task_files_names_the_directory_in_run_and_validate(tmp_path):
    (tmp_path / "empty").mkdir()
    lines = []
    for command in ("validate", "run"):
        proc = run_cli_process(command, "empty", cwd=tmp_path)
        lines.append(one_error_line(proc, needle="empty: no task files found"))
    assert lines[0] == lines[1]


# --- 5. the README's table of commands -------------------------------------------------------------------


def test_the_readmes_table_names_every_command_and_flag():
    """Each command has its row in the README's Commands table, naming every flag its --help lists (but
    --config, which every command reading one takes), and RUN_DIR in brackets where it may be left out."""
    import argparse

    from runner.cli import build_parser

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    table = readme.split("## Commands", 1)[1].split("\n## ", 1)[0]
    rows = {
        line.split("`")[1].split()[1]: line for line in table.splitlines() if line.startswith("| `runner ")
    }
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in commands.choices.items():
        assert name in rows, f"no row for `runner {name}`"
        flags = {f for a in parser._actions for f in a.option_strings if f.startswith("--")}
        missing = sorted(f for f in flags - {"--help", "--config"} if f"{f}" not in rows[name])
        assert not missing, f"runner {name}: {missing}"
        for action in parser._actions:
            if action.metavar == "RUN_DIR" and not action.option_strings and action.nargs == "?":
                assert "[RUN_DIR]" in rows[name], name


def test_a_broken_pipe_that_is_not_stdout_fails_the_command_in_one_line(monkeypatch, capsys):
    """A BrokenPipeError from another pipe (a worker's, a socket) that reaches the top is the command's
    failure, exit 1 and one line, not taken for a reader of stdout that has gone (exit 0, silent)."""
    from runner import cli

    def broken(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli, "dispatch", broken)
    assert cli.main(["report"]) == 1
    assert "error: BrokenPipeError: [Errno 32] Broken pipe" in capsys.readouterr().err
