"""The README's multi-machine setup on one machine: a cluster started with ``ray start --head`` (with
the README's token authentication, on the loopback only: this machine's stand-in for a private
network), then ``runner run --executor ray --ray-address auto`` joins it (and does not start a Ray of
its own). With no cluster running, ``auto`` is one error line and exit 2. Real ``ray`` and ``runner``
subprocesses; the test's cluster is stopped by its own process group, never ``ray stop`` (which would
stop every Ray of the machine)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import RAY_TESTS, runner_env, stop_shared_ray

pytestmark = RAY_TESTS

RAY = Path(sys.executable).with_name("ray")
TOKEN = secrets.token_hex(16)  # the cluster's, given to every process of it (the README's setup)


def _env() -> dict[str, str]:
    env = runner_env(
        RAY_USAGE_STATS_ENABLED="0",
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN=TOKEN,
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",  # a cluster of this one machine: on 127.0.0.1 only
    )
    env.pop("RAY_ADDRESS", None)  # ``auto`` must find the cluster on its own
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _processes() -> dict[int, tuple[str, str, int]]:
    """Every live process of this machine (not a zombie): its name, state and process group."""
    found = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            name, _, rest = Path(f"/proc/{entry}/stat").read_text().partition(" (")[2].rpartition(")")
        except OSError:
            continue
        fields = rest.split()
        if fields and fields[0] != "Z":
            found[int(entry)] = (name, fields[0], int(fields[2]))
    return found


def _gcs_servers() -> list[int]:
    """The pids of every Ray cluster's GCS server running on this machine (any user's)."""
    return [pid for pid, (name, _, _) in _processes().items() if name == "gcs_server"]


def _stop_group(proc: subprocess.Popen[str]) -> None:
    """Stop ``ray start --block`` and every process of its session (the cluster it started): SIGTERM,
    then SIGKILL for what is left after 10 s (its GCS server waits for no one)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            proc.poll()
            if not any(group == proc.pid for _, _, group in _processes().values()):
                return
            time.sleep(0.2)


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
def head(tmp_path):
    if not RAY.exists() or shutil.which("ray", path=str(RAY.parent)) is None:
        pytest.skip("Ray is not installed (the `ray` extra)")
    log = tmp_path / "ray-start.log"
    port = _free_port()
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [
                str(RAY),
                "start",
                "--head",
                "--block",
                "--port",
                str(port),
                "--num-cpus",
                "2",
                "--include-dashboard=false",
                "--disable-usage-stats",
            ],
            # stopped with SIGTERM: at once, not after draining the node for up to 30 s (Ray's default)
            env={**_env(), "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"},
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own process group: stopped with it, and nothing else
        )
    try:
        deadline = time.monotonic() + 180  # `ray start --block` says so once the cluster is up
        while "block forever" not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        if proc.poll() is not None or "block forever" not in log.read_text():
            tail = log.read_text()[-500:]
            pytest.skip(f"`ray start --head` cannot start a cluster on this machine: {tail}")
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                "import ray; ray.init(address='auto', log_to_driver=False); "
                "print(ray.get_runtime_context().get_node_id(), ray.nodes()[0]['NodeManagerAddress'])",
            ],
            env=_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert probe.returncode == 0, probe.stderr[-2000:]
        node_id, address = probe.stdout.strip().splitlines()[-1].split()
        assert address == "127.0.0.1", address  # the head listens on the loopback only
        yield node_id
    finally:
        _stop_group(proc)
        # what `ray stop` would do: the file `auto` reads, when it still names this cluster
        current = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
        if current.exists() and current.read_text().strip().endswith(f":{port}"):
            current.unlink()


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
    # the Ray group's shared instance (tests/conftest.py), when an earlier test of the group started it, is
    # this process's, no cluster for ``auto`` to find: stopped (the next test that asks for it starts it)
    stop_shared_ray()
    deadline = time.monotonic() + 30  # a cluster an earlier test stopped takes a few seconds to go
    while (running := _gcs_servers()) and time.monotonic() < deadline:
        time.sleep(0.5)
    if running:  # someone's cluster: ``auto`` would join it (and is not ours to stop)
        pytest.skip(f"a Ray cluster runs on this machine (gcs_server pids {running})")
    _jobs(tmp_path)
    done = _run(tmp_path)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert done.returncode == 2, done.stderr[-3000:]
    assert len(errors) == 1 and "runner.ray_address" in errors[0] and "auto" in errors[0], done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").glob("*/a/metrics.json"))
