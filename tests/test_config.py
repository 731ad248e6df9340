"""Settings: limits merge from four levels, lowest to highest: built-in defaults < config.toml ``[limits]``
< ``[jobs.<name>]`` < the task file's ``[limits]``; ``RUNNER_*`` environment variables override the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scripted import ScriptedModel, play_instead_of_the_stand_in

from runner.config import ConfigError, Limits, Settings, load_settings
from runner.jobs import JobSpec, load_job

DEFAULTS = Limits()

CONFIG = """
[runner]
concurrency = 4

[limits]
max_turns = 10
timeout_s = 100
max_output_tokens = 1000

[jobs.alpha]
max_turns = 20
timeout_s = 200
"""


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """No RUNNER_* variable from the developer's shell leaks into these tests."""
    import os

    for name in list(os.environ):
        if name.upper().startswith("RUNNER_"):
            monkeypatch.delenv(name)


def write_project(tmp_path: Path, config: str = CONFIG) -> Path:
    (tmp_path / "config.toml").write_text(config)
    (tmp_path / "ws").mkdir()
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    # alpha: has a [jobs.alpha] table and its own [limits]
    (jobs / "alpha.toml").write_text('prompt = "a"\nworkspace = "../ws"\n[limits]\nmax_turns = 30\n')
    # beta: no [jobs.beta] table, own [limits] with one key
    (jobs / "beta.toml").write_text('prompt = "b"\nworkspace = "../ws"\n[limits]\nmax_retries = 9\n')
    # gamma: nothing of its own
    (jobs / "gamma.toml").write_text('prompt = "g"\nworkspace = "../ws"\n')
    return tmp_path / "config.toml"


def limits_of(tmp_path: Path, settings: Settings, name: str) -> Limits:
    spec = load_job(tmp_path / "jobs" / f"{name}.toml", settings)
    assert isinstance(spec, JobSpec), spec
    return spec.limits


def test_defaults_without_a_config_file():
    settings = load_settings(None)
    assert settings.limits == DEFAULTS
    assert settings.runner.concurrency == 8
    assert settings.limits_for("anything") == DEFAULTS


def test_limits_merge_from_all_four_levels_in_order(tmp_path):
    settings = load_settings(write_project(tmp_path))
    alpha = limits_of(tmp_path, settings, "alpha")
    assert alpha.max_turns == 30  # task file [limits] beats [jobs.alpha] and [limits]
    assert alpha.timeout_s == 200  # [jobs.alpha] beats [limits]
    assert alpha.max_output_tokens == 1000  # [limits] beats the default
    assert alpha.max_retries == DEFAULTS.max_retries  # built-in default
    beta = limits_of(tmp_path, settings, "beta")
    assert (beta.max_turns, beta.timeout_s, beta.max_output_tokens, beta.max_retries) == (10, 100, 1000, 9)
    gamma = limits_of(tmp_path, settings, "gamma")
    assert (gamma.max_turns, gamma.timeout_s, gamma.max_output_tokens, gamma.max_retries) == (
        10,
        100,
        1000,
        DEFAULTS.max_retries,
    )
    assert gamma.batch_char_limit == DEFAULTS.batch_char_limit


def test_env_overrides_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_LIMITS__MAX_TURNS", "50")
    monkeypatch.setenv("RUNNER_RUNNER__CONCURRENCY", "3")
    settings = load_settings(write_project(tmp_path))
    assert settings.runner.concurrency == 3
    assert settings.limits.max_turns == 50
    assert settings.limits.timeout_s == 100  # the rest of [limits] still comes from the file
    gamma = limits_of(tmp_path, settings, "gamma")
    assert (gamma.max_turns, gamma.timeout_s) == (50, 100)
    alpha = limits_of(tmp_path, settings, "alpha")  # [jobs.alpha] and the task file still win over [limits]
    assert (alpha.max_turns, alpha.timeout_s) == (30, 200)


def test_env_overrides_a_job_table(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_JOBS__ALPHA__TIMEOUT_S", "250")
    settings = load_settings(write_project(tmp_path))
    alpha = limits_of(tmp_path, settings, "alpha")
    assert (alpha.max_turns, alpha.timeout_s) == (30, 250)


def test_env_without_a_config_file(monkeypatch):
    monkeypatch.setenv("RUNNER_LIMITS__COMPACTION", "off")
    monkeypatch.setenv("RUNNER_SUMMARIZER__REQUESTS_PER_MINUTE", "7")
    settings = load_settings(None)
    assert settings.limits.compaction == "off"
    assert settings.summarizer.requests_per_minute == 7


def test_bad_env_value_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_LIMITS__MAX_TURNS", "many")
    with pytest.raises(ConfigError) as info:
        load_settings(write_project(tmp_path))
    [problem] = info.value.problems
    assert "RUNNER_LIMITS__MAX_TURNS" in problem and "limits.max_turns" in problem


@pytest.mark.parametrize(
    "text, key",
    [
        ("[limits]\nmax_turns = true\n", "limits.max_turns"),
        ("[limits]\ntimeout_s = false\n", "limits.timeout_s"),
        ("[runner]\nconcurrency = true\n", "runner.concurrency"),
        ("[jobs.x]\nmax_turns = true\n", "jobs.x.max_turns"),
    ],
)
def test_booleans_are_not_numbers(tmp_path, text, key):
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert any(key in p for p in info.value.problems), info.value.problems
    value = "true" if "true" in text else "false"  # as the file writes it, not Python's True
    assert any(p.endswith(f"(got {value})") for p in info.value.problems), info.value.problems


def test_task_limits_error_names_task_file_and_key(tmp_path):
    settings = load_settings(write_project(tmp_path))
    task = tmp_path / "jobs" / "bad.toml"
    task.write_text('prompt = "p"\nworkspace = "../ws"\n[limits]\nsnip_target = 45\nsnip_trigger = 40\n')
    error = load_job(task, settings)
    assert not isinstance(error, JobSpec)
    assert len(error.problems) == 1 and str(task) in error.problems[0] and "snip_target" in error.problems[0]


def test_cross_level_conflict_is_caught_at_the_job(tmp_path):
    """[limits] alone is fine, the task file alone is fine, together they are not."""
    settings = load_settings(write_project(tmp_path, "[limits]\nlarge_result_chars = 5000\n"))
    task = tmp_path / "jobs" / "clash.toml"
    task.write_text('prompt = "p"\nworkspace = "../ws"\n[limits]\npreview_chars = 6000\n')
    error = load_job(task, settings)
    assert not isinstance(error, JobSpec) and "preview_chars" in error.message


def test_missing_config_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_settings(tmp_path / "nope.toml")
    assert "nope.toml" in info.value.problems[0]


def test_cli_uses_merged_limits_and_env(tmp_path, run_cli, monkeypatch):
    """The resolved limits land in job.json and in each job's calls; the env var reaches `runner run`."""
    write_project(tmp_path)
    (tmp_path / "ws" / "a.py").write_text("x = 1\n")
    model = ScriptedModel([("read", {"file_path": "a.py"})], final="a.py sets x.")
    play_instead_of_the_stand_in(monkeypatch, model)
    proc = run_cli(
        "run",
        "--output-dir",
        "out",
        cwd=tmp_path,
        RUNNER_LIMITS__MAX_OUTPUT_TOKENS="1234",
        RUNNER_RUNNER__BACKEND="offline",
    )
    assert proc.returncode == 0, proc.stderr
    [run_dir] = [p for p in (tmp_path / "out").iterdir() if not p.is_symlink()]
    got = {
        name: json.loads((run_dir / name / "job.json").read_text())["limits"]
        for name in ("alpha", "beta", "gamma")
    }
    assert {
        n: (v["max_turns"], v["timeout_s"], v["max_output_tokens"], v["max_retries"]) for n, v in got.items()
    } == {"alpha": (30, 200, 1234, 4), "beta": (10, 100, 1234, 9), "gamma": (10, 100, 1234, 4)}
    document = json.loads((run_dir / "run.json").read_text())
    assert document["concurrency"] == 4
    assert {j["job"]: (j["status"], j["turns"]) for j in document["jobs"]} == {
        n: ("succeeded", 2) for n in ("alpha", "beta", "gamma")
    }
    # what the model was asked with: each job's limits, not the config's
    asked = {(r.messages[0]["content"], r.max_tokens, r.max_retries) for r in model.requests}
    assert len(model.requests) == 6 and asked == {("a", 1234, 4), ("b", 1234, 9), ("g", 1234, 4)}


def test_a_job_table_is_checked_over_limits_not_over_the_defaults(tmp_path):
    """[jobs.x] is merged over [limits] before its checks across keys (once it was checked over the
    built-in defaults too, and refused: snip_target 100 over the default snip_trigger 50)."""
    path = tmp_path / "config.toml"
    path.write_text("[limits]\nsnip_trigger = 200\n[jobs.x]\nsnip_target = 100\n")
    settings = load_settings(path)
    assert (settings.limits_for("x").snip_target, settings.limits_for("x").snip_trigger) == (100, 200)


@pytest.mark.parametrize(
    "text, line",
    [
        ("[prices]\nbatch_discount = 2\n", "prices.batch_discount: expected a number from 0 to 1 (got 2)"),
        ("[prices]\nm = 3\n", "prices.m: expected a table of prices (input, output, ...) (got 3)"),
        ("[prices.m]\ninput = 1\n", "prices.m.output: required key is missing"),
        ("[jobs]\nx = 3\n", "jobs.x: expected a table of limits (got 3)"),
    ],
)
def test_one_line_per_problem(tmp_path, text, line):
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert info.value.problems == [f"{path}: {line}"]


def test_env_values_are_parsed_by_their_fields(monkeypatch):
    monkeypatch.setenv("RUNNER_PRICES__BATCH_DISCOUNT", "0.3")
    monkeypatch.setenv("RUNNER_LIMITS__CACHE_AWARE", "no")
    settings = load_settings(None)
    assert dict(settings.prices.items()) == {"batch_discount": 0.3} and settings.limits.cache_aware is False
    monkeypatch.setenv("RUNNER_LIMITS__MAX_TURNS", "true")
    with pytest.raises(ConfigError) as info:
        load_settings(None)
    assert info.value.problems == [
        "environment variable RUNNER_LIMITS__MAX_TURNS: limits.max_turns: Input should be a valid integer, "
        "unable to parse string as an integer (got 'true')"
    ]
