"""Issue 19, item 5: ``runner prune`` and ``[runner] keep_runs`` remove old runs, never one being written
nor ``runs/latest``'s target, and say what went and how many bytes it freed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from scripted import ScriptedModel, play_instead_of_the_stand_in

from runner import cli
from runner.rundir.lock import hold_run_dir
from runner.rundir.prune import PRUNING, parse_age, prune
from runner.rundir.trees import remove_tree

DAY = 86400.0


def make_run(runs: Path, name: str, age_days: float, payload: int = 1000) -> Path:
    """A finished run's directory as a run leaves it (run.json, one job's files), last written ``age_days``
    ago."""
    run = runs / name
    (run / "job" / "tool-results").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"run_id": name, "state": "finished", "jobs": [{"job": "job"}]}))
    (run / "job" / "metrics.json").write_text(json.dumps({"job": "job", "status": "succeeded"}))
    (run / "job" / "transcript.jsonl").write_text("x" * payload)
    (run / ".lock").write_text("")
    when = time.time() - age_days * DAY
    for path in (run / "run.json", run):
        os.utime(path, (when, when))
    return run


def size(run: Path) -> int:
    return sum(p.lstat().st_size for p in run.rglob("*") if not p.is_dir() or p.is_symlink())


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    runs = tmp_path / "runs"
    runs.mkdir()
    for i, age in enumerate([40, 35, 20, 10, 1]):  # run-0 the oldest
        make_run(runs, f"20261101-00000{i}-abcd", age, payload=1000 * (i + 1))
    os.symlink("20261101-000004-abcd", runs / "latest")
    return runs


def names(runs: Path) -> list[str]:
    return sorted(p.name for p in runs.iterdir() if not p.is_symlink())


def test_keep_removes_all_but_the_newest_and_counts_the_bytes(runs: Path) -> None:
    expected = sum(size(runs / f"20261101-00000{i}-abcd") for i in (0, 1, 2))
    result = prune(runs, keep=2)
    assert [r.path.name for r in result.removed] == [
        f"20261101-00000{i}-abcd" for i in (0, 1, 2)
    ]  # oldest first
    pid_written = 3 * len(
        f"{os.getpid()}\n"
    )  # each run's .lock, taken before it goes, holds the pruner's pid
    assert result.freed == expected + pid_written and expected > 6000
    assert names(runs) == ["20261101-000003-abcd", "20261101-000004-abcd"]
    assert not list(runs.glob(f"{PRUNING}*"))


def test_older_than_and_both_together(runs: Path) -> None:
    assert [r.path.name for r in prune(runs, older_than_s=30 * DAY, dry_run=True).removed] == [
        "20261101-000000-abcd",
        "20261101-000001-abcd",
    ]
    # with both: only what both select (beyond the 4 newest AND older than 30 days)
    assert [r.path.name for r in prune(runs, keep=4, older_than_s=30 * DAY).removed] == [
        "20261101-000000-abcd"
    ]
    assert len(names(runs)) == 4


def test_dry_run_removes_nothing_and_touches_no_file(runs: Path) -> None:
    before = {p: (p.stat().st_mtime, p.stat().st_size) for p in runs.rglob("*")}
    result = prune(runs, keep=1, dry_run=True)
    assert len(result.removed) == 4 and result.freed == sum(size(r.path) for r in result.removed)
    assert {p: (p.stat().st_mtime, p.stat().st_size) for p in runs.rglob("*")} == before


def test_never_the_latest_target_even_when_it_is_the_oldest(runs: Path) -> None:
    (runs / "latest").unlink()
    os.symlink("20261101-000000-abcd", runs / "latest")
    result = prune(runs, keep=0)
    assert names(runs) == ["20261101-000000-abcd"]
    assert result.kept == [(runs / "20261101-000000-abcd", f"{runs / 'latest'} points at it")]


def test_never_a_run_being_written(runs: Path) -> None:
    old = runs / "20261101-000000-abcd"
    with hold_run_dir(old):  # as `run` and `resume` hold it, in this process (flock is per open file)
        result = prune(runs, keep=0)
        dry = prune(runs, keep=0, dry_run=True)
        assert old.is_dir() and (old / "job" / "transcript.jsonl").is_file()
    assert [p for p, _ in result.kept] == [old, runs / "20261101-000004-abcd"]
    assert "writing this run" in result.kept[0][1] and str(os.getpid()) in result.kept[0][1]
    assert [p for p, _ in dry.kept] == [old, runs / "20261101-000004-abcd"]
    assert names(runs) == ["20261101-000000-abcd", "20261101-000004-abcd"]


def test_a_writer_in_another_process_keeps_its_run(runs: Path) -> None:
    old = runs / "20261101-000001-abcd"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom pathlib import Path\n"
            "from runner.rundir.lock import hold_run_dir\n"
            f"with hold_run_dir(Path({str(old)!r})):\n    print('held', flush=True)\n"
            "    time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        result = prune(runs, keep=1)
        assert old in [p for p, _ in result.kept] and old.is_dir()
    finally:
        holder.kill()
        holder.wait()
    assert prune(runs, keep=1).removed[0].path == old  # its writer gone: it goes too


def test_only_run_directories_go_and_symlinks_are_never_followed(runs: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me")
    old = runs / "20261101-000000-abcd"
    os.symlink(outside, old / "job" / "link-out")  # a link inside a run, out of it
    (runs / "notes").mkdir()  # not a run
    (runs / "notes" / "todo.md").write_text("mine")
    os.symlink(outside, runs / "20261101-999999-link")  # a link in the runs directory
    (runs / f"{PRUNING}20261001-000000-dead").mkdir()  # a prune interrupted between rename and delete
    prune(runs, keep=1)
    assert (outside / "precious.txt").read_text() == "keep me"
    assert (runs / "notes" / "todo.md").is_file() and (runs / "20261101-999999-link").is_symlink()
    assert not (runs / f"{PRUNING}20261001-000000-dead").exists()
    assert names(runs) == ["20261101-000004-abcd", "notes"]


def test_parse_age() -> None:
    assert parse_age("30d") == 30 * DAY and parse_age("12h") == 12 * 3600 and parse_age("2w") == 14 * DAY
    assert parse_age("1.5m") == 90
    for bad in ("30", "d", "30 days", "-1d", ""):
        with pytest.raises(cli.ConfigError):
            parse_age(bad)


# --- the command and keep_runs ----------------------------------------------------------------------------


@pytest.fixture
def project(runs: Path, monkeypatch: Any) -> Path:
    root = runs.parent
    monkeypatch.chdir(root)
    for key in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(key, raising=False)
    (root / "config.toml").write_text('[runner]\nbackend = "offline"\n')
    return root


def test_the_command_says_what_it_removed_and_what_it_freed(project: Path, capsys: Any) -> None:
    assert cli.main(["prune", "--keep", "3", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("would remove runs/20261101-000000-abcd (last written ") and out[0].endswith(
        ("bytes)", "KB)")
    )
    assert out[-1].startswith("prune runs: would remove 2 runs, would free ") and out[-1].endswith("; 3 kept")
    assert len(names(project / "runs")) == 5
    assert cli.main(["prune", "--older-than", "15d"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len([line for line in out if line.startswith("removed runs/")]) == 3
    assert out[-1].startswith("prune runs: removed 3 runs, freed ") and out[-1].endswith("; 2 kept"), out
    assert cli.main(["prune"]) == 2  # nothing to select by
    assert "--keep N or --older-than" in capsys.readouterr().err
    assert cli.main(["prune", "--older-than", "soon"]) == 2


def test_prune_names_the_config_it_took_its_output_directory_from(project: Path, capsys: Any) -> None:
    """It deletes, and it finds config.toml by walking up from where it runs: it says which one."""
    (project / "sub").mkdir()
    os.chdir(project / "sub")
    assert cli.main(["prune", "--keep", "3", "--dry-run"]) == 0
    assert f"config: {project / 'config.toml'}" in capsys.readouterr().err


def test_keep_runs_prunes_after_a_run(project: Path, capsys: Any, monkeypatch: Any) -> None:
    play_instead_of_the_stand_in(monkeypatch, ScriptedModel([("read", {"file_path": "a.py"})], final="A."))
    ws = project / "ws"
    ws.mkdir()
    (ws / "a.py").write_text('"""A."""\n')
    (project / "jobs").mkdir()
    (project / "jobs" / "one.toml").write_text(
        'prompt = "Survey."\nworkspace = "../ws"\n[limits]\nmax_turns = 4\n'
    )
    (project / "config.toml").write_text('[runner]\nbackend = "offline"\nkeep_runs = 2\n')
    assert cli.main(["validate"]) == 0
    assert cli.main(["run"]) == 0
    err = capsys.readouterr().err
    new = (project / "runs" / "latest").resolve()
    assert names(project / "runs") == sorted(["20261101-000004-abcd", new.name])
    assert "prune runs: removed 4 runs, freed " in err and "; 2 kept" in err
    assert err.index("end    one: succeeded, 2 turns") < err.index("prune runs: ")  # after the run's end
    assert (new / "one" / "final.md").read_text().strip() == "A."  # the new run kept whole
    (project / "config.toml").write_text("[runner]\nkeep_runs = 0\n")
    assert cli.main(["validate"]) == 2
    assert "runner.keep_runs" in capsys.readouterr().err


DEEP = 3_000  # levels: past Python's recursion limit, and, 2 bytes a level, past PATH_MAX (4,096)


def make_deep(where: Path, levels: int = DEEP) -> None:
    """A chain of ``levels`` directories ``d/d/...`` at ``where``, a file at its bottom and beside its top,
    made by another process the way a job's bash would (``mkdir d && cd d`` in a loop)."""
    where.mkdir(parents=True, exist_ok=True)
    code = (
        f"import os\nfor _ in range({levels}):\n    os.mkdir('d'); os.chdir('d')\n"
        "open('bottom', 'w').write('x' * 9)"
    )
    subprocess.run([sys.executable, "-c", code], cwd=where, check=True, timeout=30)
    (where / "top.txt").write_text("y" * 100)


def test_a_run_of_any_depth_is_measured_and_removed(runs: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me")
    old = runs / "20261101-000000-abcd"
    make_deep(old / "job" / "memories")
    os.symlink(outside, old / "job" / "memories" / "d" / "link-out")  # a link down the chain, out of the run
    dry = prune(runs, keep=4, dry_run=True)
    assert [r.path.name for r in dry.removed] == [old.name] and dry.removed[0].bytes >= 1_000 + 100
    try:
        result = prune(runs, keep=4)
        assert [r.path.name for r in result.removed] == [old.name] and not result.kept, result.kept
        assert not old.exists() and not list(runs.glob(f"{PRUNING}*"))
        assert (outside / "precious.txt").read_text() == "keep me"
    finally:
        remove_tree(runs, ignore_errors=True)  # on a failure: pytest's own clean-up recurses


def test_an_interrupted_prune_of_a_deep_run_is_finished_off(runs: Path) -> None:
    leftover = runs / f"{PRUNING}20261001-000000-dead"
    make_deep(leftover / "job")
    try:
        prune(runs, keep=10)
        assert not leftover.exists()
    finally:
        remove_tree(runs, ignore_errors=True)  # on a failure: pytest's own clean-up recurses
