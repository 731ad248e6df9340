"""The README's multi-machine setup on one machine: a cluster started with ``ray start --head``, then
``runner run --executor ray --ray-address auto`` joins it (and does not start a Ray of its own). With
no cluster running, ``auto`` is one error line and exit 2. Real ``ray`` and ``runner`` subprocesses."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import runner_env

RAY = Path(sys.executable).with_name("ray")


def _env() -> dict[str, str]:
    env = runner_env(RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)  # ``auto`` must find the cluster on its own
    return env


def _jobs(tmp: Path) -> None:
    (tmp / "jobs").mkdir()
    for name, tree in (("a", "json"), ("b", "email")):
        (tmp / "jobs" / f"{name}.toml").write_text(f'prompt = "Survey."\nworkspace = "{{stdlib}}/{tree}"\n')


def _run(tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runner", "run", "jobs", "--executor", "ray", "--ray-address", "auto"],
        cwd=tmp,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.fixture()
def head():
    if not RAY.exists() or shutil.which("ray", path=str(RAY.parent)) is None:
        pytest.skip("Ray is not installed (the `ray` extra)")
    subprocess.run([str(RAY), "stop", "--force"], env=_env(), capture_output=True, timeout=120)
    started = subprocess.run(
        [
            str(RAY),
            "start",
            "--head",
            "--num-cpus",
            "2",
            "--include-dashboard=false",
            "--disable-usage-stats",
        ],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    if started.returncode != 0:
        pytest.skip(f"`ray start --head` cannot start a cluster on this machine: {started.stderr[-500:]}")
    try:
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                "import ray; ray.init(address='auto', log_to_driver=False); "
                "print(ray.get_runtime_context().get_node_id())",
            ],
            env=_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert probe.returncode == 0, probe.stderr[-2000:]
        yield probe.stdout.strip().splitlines()[-1]  # the head node's id
    finally:
        subprocess.run([str(RAY), "stop", "--force"], env=_env(), capture_output=True, timeout=120)


def test_auto_joins_a_cluster_started_with_ray_start(head, tmp_path):
    _jobs(tmp_path)
    done = _run(tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = (tmp_path / "runs" / "latest").resolve()
    document = json.loads((run_dir / "run.json").read_text())
    assert sorted(j["status"] for j in document["jobs"]) == ["succeeded", "succeeded"]
    for name in ("a", "b"):
        worker = json.loads((run_dir / name / "metrics.json").read_text())["worker"]
        assert worker["node_id"] == head, (worker, head)  # ran on the cluster that `ray start` made
        assert (run_dir / name / "final.md").read_text().strip()


def test_auto_without_a_cluster_is_one_error_line(tmp_path):
    if not RAY.exists():
        pytest.skip("Ray is not installed (the `ray` extra)")
    subprocess.run([str(RAY), "stop", "--force"], env=_env(), capture_output=True, timeout=120)
    _jobs(tmp_path)
    done = _run(tmp_path)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert done.returncode == 2, done.stderr[-3000:]
    assert len(errors) == 1 and "runner.ray_address" in errors[0] and "auto" in errors[0], done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").glob("*/a/metrics.json"))
