"""Attacks on the bash sandbox, for real, as the hostile model would make them.

CI runs as root (asserted below when ``CI`` is set), the case the sandbox must hold in: each test
makes the real write, fork or syscall and checks the host afterwards. A test is skipped, saying
why, only where this kernel lacks what it needs.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import uuid
from pathlib import Path

import anyio
import pytest
from conftest import mounted_tmpfs, scripted_job

from runner.tools import sandbox
from runner.tools.job_budget import pid_alive
from runner.tools.sandbox import MAX_PROCESSES, SANDBOX_UID, TMP_BYTES, bwrap_problem, run_command

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(bwrap_problem() is not None, reason=f"bwrap cannot start: {bwrap_problem()}"),
]
ROOT = os.geteuid() == 0
PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else None


def test_ci_runs_these_attacks_as_root():
    if os.environ.get("CI"):
        assert ROOT, "the sandbox's attack suite must run as root in CI"
    else:
        print(f"running as uid {os.geteuid()}")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "owned.txt").write_text("OWNER-ONLY\n")
    (ws / "owned.txt").chmod(0o600)
    return ws


async def sh(
    command: str, workspace: Path, *, writable: bool = False, network: bool = False, timeout_s: float = 30
) -> sandbox.CommandResult:
    return await run_command(
        command,
        workspace=str(workspace),
        writable=writable,
        network=network,
        sandbox="bwrap",
        timeout_s=timeout_s,
    )


def host_processes(marker: str) -> list[tuple[str, str]]:
    """The host uid and command line of every process whose command line holds ``marker``."""
    done = subprocess.run(["ps", "-ww", "-eo", "uid=,args="], capture_output=True, text=True, check=True)
    rows = [line.strip().split(None, 1) for line in done.stdout.splitlines()]
    return [(row[0], row[1]) for row in rows if len(row) == 2 and marker in row[1] and "ps -eo" not in row[1]]


async def test_the_command_is_never_root(workspace):
    marker = f"{uuid.uuid4().int % 1000 + 3000}.75"  # a unique sleep to find the command on the host by
    seen: list[str] = []

    async def look() -> None:
        for _ in range(50):
            done = subprocess.run(
                ["ps", "-ww", "-eo", "uid=,args="], capture_output=True, text=True, check=True
            )
            # the command's own process (the sleep it started), not the root launcher (sandbox_launch.py),
            # whose arguments carry the script until it drops every privilege and becomes bwrap
            rows = [line.split(None, 1) for line in done.stdout.splitlines()]
            seen.extend(row[0] for row in rows if len(row) == 2 and row[1].strip() == f"sleep {marker}")
            if seen:
                (workspace / "stop").touch()  # the command may end: its sleep was seen
                return
            await anyio.sleep(0.1)

    async with anyio.create_task_group() as tg:
        tg.start_soon(look)
        # the command keeps its sleep running until the host has seen it (a file in the workspace,
        # which the sandbox sees read-only), 5 s at most
        done = await sh(
            f"id -u; id -g; grep -E '^Cap(Eff|Prm|Bnd)|NoNewPrivs|^Seccomp:' /proc/self/status; "
            f"sleep {marker} & sleep 0.1; while [ ! -e stop ]; do "
            "sleep 0.1; [ $SECONDS -gt 5 ] && break; done; kill %1",
            workspace,
        )
    words = " ".join(done.output.split())
    assert words.startswith("1000 1000")
    assert "CapEff: 0000000000000000" in words and "CapBnd: 0000000000000000" in words
    assert "NoNewPrivs: 1" in words and "Seccomp: 2" in words
    assert seen and set(seen) == {str(SANDBOX_UID if ROOT else os.geteuid())}  # on the host: never uid 0


async def test_core_pattern_and_other_sysctls_cannot_be_written(workspace, tmp_path):
    before = Path("/proc/sys/kernel/core_pattern").read_text()
    hostname = Path("/proc/sys/kernel/hostname").read_text()
    marker = tmp_path / "ran-as-host-root"
    attack = (
        f"printf '#!/bin/sh\\ntouch {marker}\\n' > /tmp/s; chmod +x /tmp/s; "
        "echo '|/bin/sh /proc/%P/root/tmp/s' > /proc/sys/kernel/core_pattern; echo core=$?; "
        "echo pwned > /proc/sys/kernel/hostname; echo host=$?; "
        "echo 3 > /proc/sys/vm/drop_caches; echo drop=$?; "
        "echo b > /proc/sysrq-trigger; echo sysrq=$?; "
        "echo 1 > /sys/kernel/mm/ksm/run; echo sys=$?; "
        "ulimit -c unlimited; sleep 30 & kill -SEGV $!; wait; echo crashed"
    )
    done = await sh(attack, workspace)
    for name in ("core", "host", "drop", "sysrq", "sys"):
        assert f"{name}=1" in done.output, (name, done.output)
    assert "crashed" in done.output
    assert Path("/proc/sys/kernel/core_pattern").read_text() == before
    assert Path("/proc/sys/kernel/hostname").read_text() == hostname
    await anyio.sleep(0.5)  # a core handler would run now
    assert not marker.exists()


@pytest.mark.skipif(not ROOT, reason="root-only files are unreadable to a normal user anyway")
async def test_root_only_files_are_unreadable(workspace):
    secret = Path(f"/etc/runner-attack-{uuid.uuid4().hex}")
    secret.write_text("ROOT-ONLY-SECRET\n")
    secret.chmod(0o600)
    try:
        (workspace / "link").symlink_to(secret)
        done = await sh(f"cat /etc/shadow; cat {secret}; cat link; ls -l {secret}", workspace)
    finally:
        secret.unlink()
    assert "ROOT-ONLY-SECRET" not in done.output and "root:" not in done.output
    assert done.output.count("Permission denied") >= 3


@pytest.mark.skipif(not ROOT, reason="the workspace owner's mapping is what root sets up")
async def test_a_writable_workspace_is_written_as_its_owner(workspace):
    os.chown(workspace, 4321, 4321)
    os.chown(workspace / "owned.txt", 4321, 4321)
    done = await sh("cat owned.txt && echo made > new.txt && mkdir sub && echo ok", workspace, writable=True)
    assert "OWNER-ONLY" in done.output and "ok" in done.output, done.output
    made = (workspace / "new.txt").stat()
    assert (made.st_uid, made.st_gid) == (4321, 4321)  # on disk: the workspace's owner, never root
    assert (workspace / "sub").stat().st_uid == 4321
    read_only = await sh("cat owned.txt; echo x > other.txt; echo rc=$?", workspace)
    assert "OWNER-ONLY" in read_only.output and "rc=1" in read_only.output
    assert not (workspace / "other.txt").exists()


async def test_a_fork_bomb_ends_at_its_limits_and_leaves_the_host_alone(workspace):
    peak = 0
    name = f"bomb{uuid.uuid4().hex[:8]}"

    async def watch() -> None:
        nonlocal peak
        while True:
            found = host_processes(name)
            # not one of them is root on the host (but the root launcher, whose arguments carry the
            # script until it drops every privilege and becomes bwrap)
            assert "0" not in [uid for uid, args in found if "sandbox_launch.py" not in args], found
            peak = max(peak, len(found))
            await anyio.sleep(0.2)

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        done = await sh(
            f"{name}() {{ {name} | {name} & }}; {name}; sleep 2; echo still-here", workspace, timeout_s=4
        )
        tg.cancel_scope.cancel()
    assert "Resource temporarily unavailable" in done.output or "retry" in done.output
    assert 0 < peak <= MAX_PROCESSES + 8, peak  # bwrap and its init besides the call's own
    assert host_processes(name) == []  # nothing of it is left
    assert subprocess.run(["true"]).returncode == 0  # the host can still start a process


async def test_filling_the_writable_mounts_stops_at_their_size(workspace):
    done = await sh(
        "dd if=/dev/zero of=/tmp/fill bs=1M count=3000 2>&1 | grep -c 'No space left'; "
        "stat -c size=%s /tmp/fill; "
        "dd if=/dev/zero of=/dev/shm/fill bs=1M count=3000 2>&1 | grep -c 'No space left'; "
        "stat -c size=%s /dev/shm/fill; "
        "for d in / /home /root /var /run /dev /etc; do touch $d/x 2>/dev/null && echo wrote=$d; done; "
        "echo end",
        workspace,
    )
    lines = done.output.split()
    assert lines[0] == "1" and lines[2] == "1", done.output  # both writes stopped by a full file system
    sizes = [int(word.removeprefix("size=")) for word in lines if word.startswith("size=")]
    assert 0 < sizes[0] <= TMP_BYTES and 0 < sizes[1] <= TMP_BYTES
    assert "wrote=" not in done.output and "end" in done.output


@pytest.fixture
def small_disk(tmp_path: Path):
    """A real file system of 64 MiB (a tmpfs mounted here) holding a workspace."""
    with mounted_tmpfs(tmp_path / "small", "64m") as mount:
        (mount / "ws").mkdir()
        yield mount / "ws"


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(pause: float) -> str:
    """A command that writes 1 MiB files, one each ``pause`` seconds, until something stops it."""
    return (
        "i=0; while :; do head -c 1048576 /dev/zero > f$i$RANDOM || { echo FULL; break; }; "
        f"i=$((i+1)); sleep {pause}; done"
    )


@pytest.mark.skipif(not ROOT, reason="mounting the small file system needs root")
async def test_a_command_that_writes_without_end_leaves_the_disk_its_reserve(small_disk):
    """A writable call writes 1 MiB files, 10 a second, until something stops it: the runner kills it
    before the file system is full (no write ever failed for space), and the result says why. Under
    the reserve a call that takes no more space still runs (so rm can free it), one that writes on is
    killed once it has taken the slack, and a read-only call is never held back."""
    reserve = sandbox.disk_reserve(64 * 2**20)
    done = await sh(fill(0.1), small_disk, writable=True, timeout_s=60)
    assert done.stopped and done.exit_code is None, done.output
    assert "FULL" not in done.output and "No space left" not in done.output
    assert "kept free" in done.output and "killed" in done.output and "rm" in done.output
    assert 0 < free_bytes(small_disk) < reserve  # stopped within a poll of passing the reserve
    assert len(list(small_disk.iterdir())) >= 50  # it ran until the reserve, not stopped at once
    small = await sh("echo ran > ran.txt; cat ran.txt", small_disk, writable=True)
    assert small.exit_code == 0 and small.output.strip() == "ran"  # under the floor, a small write runs
    under = free_bytes(small_disk)
    again = await sh(fill(0.1), small_disk, writable=True, timeout_s=60)
    assert again.stopped and "FULL" not in again.output, again.output
    taken = under - free_bytes(small_disk)
    assert 0 < taken <= sandbox.disk_slack(reserve) + 2 * 2**20, taken  # the slack and one poll's writes
    freed = await sh("rm -f f*; echo freed", small_disk, writable=True)
    assert freed.exit_code == 0 and free_bytes(small_disk) > reserve
    assert (await sh("echo read-only", small_disk)).exit_code == 0


async def test_fallocate_is_refused_so_no_call_takes_the_disk_in_one_step(workspace):
    """fallocate(2) takes gigabytes in one call, faster than any watch of the free space: seccomp
    answers it EOPNOTSUPP, and the C library's posix_fallocate falls back to writing."""
    done = await sh(
        "fallocate -l 10M big; echo fallocate=$?",
        workspace,
        writable=True,
    )
    assert "fallocate=1" in done.output and "not supported" in done.output.lower(), done.output
    assert not (workspace / "big").exists() or (workspace / "big").stat().st_blocks == 0  # nothing taken


@pytest.mark.skipif(PYTHON is None, reason="no /usr/bin/python3 to make raw system calls with")
async def test_seccomp_denies_the_dangerous_calls(workspace):
    calls = (
        {
            "ptrace": 101,
            "keyctl": 250,
            "add_key": 248,
            "bpf": 321,
            "perf_event_open": 298,
            "userfaultfd": 323,
            "io_uring_setup": 425,
            "init_module": 175,
            "kexec_load": 246,
            "mount": 165,
            "unshare": 272,
            "open_by_handle_at": 304,
        }
        if sandbox.seccomp.native_arch() == "x86_64"
        else {
            "ptrace": 117,
            "keyctl": 219,
            "add_key": 217,
            "bpf": 280,
            "perf_event_open": 241,
            "userfaultfd": 282,
            "io_uring_setup": 425,
            "init_module": 105,
            "kexec_load": 104,
            "mount": 40,
            "unshare": 97,
            "open_by_handle_at": 265,
        }
    )
    script = (
        "import ctypes, os, socket\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"for name, nr in {calls!r}.items():\n"
        "    r = libc.syscall(nr, 0, 0, 0, 0, 0)\n"
        "    print(name, r, ctypes.get_errno())\n"
        "try:\n"
        "    socket.socket(socket.AF_UNIX); print('unix allowed')\n"
        "except PermissionError: print('unix denied')\n"
        "r = libc.syscall("
        + str(sandbox.seccomp.CLONE[sandbox.seccomp.native_arch()])
        + ", 0x10000000 | 17, 0, 0, 0, 0)\n"
        "print('clone_newuser', r, ctypes.get_errno())\n"
    )
    (workspace / "probe.py").write_text(script)
    closed = await sh(f"{PYTHON} probe.py; unshare -U true; echo unshare=$?", workspace)
    opened = await sh(f"{PYTHON} probe.py", workspace, network=True)
    for name in calls:
        assert f"{name} -1 1" in closed.output, (name, closed.output)  # EPERM
    assert "unix denied" in closed.output and "unix allowed" in opened.output
    assert "clone_newuser -1 1" in closed.output and "unshare=1" in closed.output


@pytest.mark.skipif(PYTHON is None, reason="no /usr/bin/python3 to make raw system calls with")
async def test_no_setuid_or_setgid_file_can_be_made_in_a_root_owned_workspace(workspace):
    """As root, a root-owned workspace is written as root on disk: a setuid file there would run as
    root for any host user. Every way to set the bits is tried, through libc and as raw system calls;
    the host then finds none."""
    assert workspace.stat().st_uid == os.geteuid()  # the runner's own (root's, in CI)
    arch = sandbox.seccomp.native_arch()
    raw = {name: number for name, (number, _) in sandbox.seccomp.MODE_CALLS[arch].items()}
    script = f"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
AT, CREATE = -100, os.O_CREAT | os.O_WRONLY
fd = os.open("plain", CREATE, 0o755)
def probe(label, result):
    print("probe", label, result, ctypes.get_errno())
for mode in (0o4755, 0o2755):
    name = b"f" + oct(mode).encode()
    probe(f"fchmod {{mode:o}}", libc.fchmod(fd, mode))
    probe(f"chmod {{mode:o}}", libc.chmod(b"plain", mode))
    probe(f"fchmodat {{mode:o}}", libc.fchmodat(AT, b"plain", mode, 0))
    probe(f"open {{mode:o}}", libc.open(name + b"o", CREATE, mode))
    probe(f"openat {{mode:o}}", libc.openat(AT, name + b"a", CREATE, mode))
    probe(f"creat {{mode:o}}", libc.creat(name + b"c", mode))
    probe(f"mknod {{mode:o}}", libc.mknod(name + b"n", 0o100000 | mode, 0))
args = {{
    "chmod": (b"plain", 0o4755), "fchmod": (fd, 0o4755), "creat": (b"r1", 0o4755),
    "open": (b"r2", CREATE, 0o4755), "mknod": (b"r3", 0o104755, 0), "mknodat": (AT, b"r4", 0o104755, 0),
    "fchmodat": (AT, b"plain", 0o4755, 0), "fchmodat2": (AT, b"plain", 0o4755, 0),
    "openat": (AT, b"r5", CREATE, 0o4755),
}}
for name, nr in {raw!r}.items():
    probe("raw " + name, libc.syscall(nr, *args[name]))
print("openat2", libc.syscall({sandbox.seccomp.OPENAT2[arch]}, AT, b"r6", 0, 0), ctypes.get_errno())
"""
    (workspace / "probe.py").write_text(script)
    done = await sh(
        f"{PYTHON} probe.py; cp /bin/sh ./sh-root && chmod 4755 ./sh-root; echo chmod=$?; "
        "chmod u+s ./sh-root; echo us=$?; chmod 755 ./sh-root; echo plain=$?; "
        "install -m 2755 /bin/sh ./sh-group; echo install=$?",
        workspace,
        writable=True,
    )
    probes = [line for line in done.output.splitlines() if line.startswith("probe ")]
    assert len(probes) == 14 + len(raw), done.output
    assert all(line.endswith(" -1 1") for line in probes), done.output  # EPERM, every one
    assert "openat2 -1 38" in done.output, done.output  # ENOSYS: callers fall back to openat
    assert "chmod=1" in done.output and "us=1" in done.output and "install=1" in done.output, done.output
    assert "plain=0" in done.output, done.output  # other modes are set as before
    modes = {p.name: p.lstat().st_mode for p in workspace.rglob("*")}
    assert "sh-root" in modes and not {n: oct(m) for n, m in modes.items() if m & 0o6000}, modes
    assert modes["sh-root"] & 0o777 == 0o755


@pytest.mark.skipif(PYTHON is None, reason="no /usr/bin/python3 to connect a unix socket with")
async def test_a_unix_socket_in_the_workspace_is_unreachable_without_network(workspace):
    path = workspace / "host.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(1)
    server.settimeout(0.1)
    (workspace / "connect.py").write_text(
        "import socket\ns = socket.socket(socket.AF_UNIX)\n"
        "s.connect('host.sock'); s.sendall(b'hello'); print('connected')\n"
    )
    try:
        done = await sh(f"{PYTHON} connect.py 2>&1 | tail -1", workspace)
        try:
            conn, _ = server.accept()
            conn.close()
            reached = True
        except TimeoutError:
            reached = False
    finally:
        server.close()
    assert "connected" not in done.output and "PermissionError" in done.output and not reached


async def test_seccomp_tables_match_this_machines_headers():
    arch = sandbox.seccomp.native_arch()
    header = {
        "x86_64": "/usr/include/x86_64-linux-gnu/asm/unistd_64.h",
        "aarch64": "/usr/include/asm-generic/unistd.h",
    }.get(arch)
    if header is None or not os.path.exists(header):
        pytest.skip(f"no kernel headers to check the {arch} table against")
    defined = {}
    for line in Path(header).read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "#define" and parts[1].startswith("__NR_") and parts[2].isdigit():
            defined[parts[1][5:]] = int(parts[2])
    table = {
        **sandbox.seccomp.DENIED[arch],
        "clone": sandbox.seccomp.CLONE[arch],
        "clone3": sandbox.seccomp.CLONE3[arch],
        "openat2": sandbox.seccomp.OPENAT2[arch],
        "fallocate": sandbox.seccomp.FALLOCATE[arch],
        "socket": sandbox.seccomp.SOCKET[arch],
        **{name: number for name, (number, _) in sandbox.seccomp.MODE_CALLS[arch].items()},
    }
    newer = {"fchmodat2"}  # Linux 6.6: older headers do not name it (its number is the same everywhere)
    assert {name: defined.get(name) for name in table if name in defined or name not in newer} == {
        name: number for name, number in table.items() if name in defined or name not in newer
    }


def test_the_launcher_leaves_no_mount_on_the_host(workspace):
    mounts = Path("/proc/self/mountinfo").read_text()
    anyio.run(sh, "true", workspace, backend="asyncio")
    assert Path("/proc/self/mountinfo").read_text() == mounts
    assert shutil.which("bash")


async def test_a_hostile_model_through_the_real_sdk_gets_nothing(tmp_path, monkeypatch):
    """The planted-instruction attack end to end: the emulator's script plays a model that calls bash
    with the escape, a read of root-only files and of the runner's environment."""
    key = "sk-ant-hostile-" + uuid.uuid4().hex
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    before = Path("/proc/sys/kernel/core_pattern").read_text()
    ws = tmp_path / "ws"
    ws.mkdir()
    attack = (
        "echo '|/bin/sh -c \"cat /proc/1/environ > /tmp/x\"' > /proc/sys/kernel/core_pattern; "
        "cat /etc/shadow; cat /proc/1/environ; env; for p in /proc/[0-9]*; do cat $p/environ; done; "
        "ls /root /home /run /var; echo done"
    )
    script = [
        {
            "content": [{"type": "tool_use", "id": "toolu_a1", "name": "bash", "input": {"command": attack}}],
            "stop_reason": "tool_use",
        },
        {"content": "Finished.", "stop_reason": "end_turn"},
    ]
    session, recorded, lines = await scripted_job(tmp_path, script, tools=("bash",), max_turns=5)
    assert session.record.status == "succeeded", session.record.error
    transcript = json.dumps(lines)
    assert "done" in transcript and "Read-only file system" in transcript  # the command really ran
    assert key not in transcript and key not in str(recorded)
    assert (
        "root:x" not in transcript and "root:*" not in transcript and "root:!" not in transcript
    )  # no /etc/shadow line
    assert "shadow: Permission denied" in transcript
    assert Path("/proc/sys/kernel/core_pattern").read_text() == before


@pytest.mark.parametrize("launcher", ["as the runner is", "without the root launcher"])
async def test_a_nested_workspace_swapped_for_a_link_is_refused_not_followed(tmp_path, monkeypatch, launcher):
    """Two jobs of a batch: A may write ``repo``, B's workspace is ``repo/pkg``. A swaps ``pkg`` for a
    link to a root-only directory; B's next calls (bash, a file tool) would follow the link as root to
    wherever it points. They are refused, and nothing is read or written there."""
    from runner.rundir.store import JobStore
    from runner.tools.toolset import Toolset

    if launcher != "as the runner is":  # bwrap binding the workspace from a descriptor (not root)
        monkeypatch.setattr(sandbox, "as_root", lambda: False)
    repo, victim = tmp_path / "repo", tmp_path / "victim"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "mod.py").write_text("x = 1\n")
    victim.mkdir(mode=0o700)
    (victim / "secret").write_text("VICTIM-SECRET\n")
    stores = [JobStore(tmp_path / "run" / name) for name in ("a", "b")]
    for store in stores:
        await store.open()
    outer = Toolset(str(repo), ("bash", "write"), stores[0])
    inner = Toolset(str(repo / "pkg"), ("bash", "read", "write"), stores[1])

    def use(name: str, args: dict, n: int) -> dict:
        return {"type": "tool_use", "id": f"toolu_{n}", "name": name, "input": args}

    before = await inner.run(use("bash", {"command": "cat mod.py"}, 1))
    assert "x = 1" in before["content"], before
    swapped = await outer.run(
        use("bash", {"command": f"rm -rf pkg && ln -s {victim} pkg && echo swapped"}, 2)
    )
    assert "swapped" in swapped["content"], swapped
    shell = await inner.run(use("bash", {"command": "cat secret; echo planted > planted; ls"}, 3))
    read = await inner.run(use("read", {"file_path": "secret"}, 4))
    write = await inner.run(use("write", {"file_path": "planted2", "content": "x"}, 5))
    for result in (shell, read, write):
        assert "VICTIM-SECRET" not in str(result["content"]), result
        assert "symbolic link" in str(result["content"]), result
    assert sorted(p.name for p in victim.iterdir()) == ["secret"]  # nothing was written there


@pytest.mark.skipif(not ROOT, reason="the memory cgroup is made by the root launcher")
@pytest.mark.skipif(PYTHON is None, reason="no /usr/bin/python3 to hold memory with")
@pytest.mark.xdist_group("cgroups")  # the next test makes a stale cgroup on purpose: not at the same time
async def test_a_calls_processes_together_stay_within_its_memory(workspace, monkeypatch):
    """Three processes of 150 MiB each, every one under the per-process limit, in a call allowed
    256 MiB in all: the kernel kills what passes it, and the call's cgroup is gone afterwards."""
    from runner.tools import sandbox_launch

    found = sandbox_launch.call_cgroup(os.getpid())
    if found is None:
        pytest.skip("this machine gives no memory cgroup to make (cgroup v1 memory, or v2's top)")
    parent = os.path.dirname(found[0])
    monkeypatch.setattr(sandbox, "CALL_MEMORY_BYTES", 256 * 1024**2)
    hold = "import time; b = bytearray(150 * 1024 * 1024); time.sleep(2); print('alive')"
    done = await sh(f'for i in 1 2 3; do {PYTHON} -c "{hold}" & done; wait; echo done', workspace)
    lines = done.output.splitlines()
    killed, alive = sum("Killed" in line for line in lines), lines.count("alive")
    assert "done" in lines and 1 <= killed <= 2 and alive == 3 - killed, done.output
    # the call's cgroup is gone: one left is another launcher's that still runs (a concurrent test's)
    prefix = sandbox_launch.CGROUP_PREFIX
    stale = [d for d in os.listdir(parent) if d.startswith(prefix) and not pid_alive(int(d[len(prefix) :]))]
    assert not stale


@pytest.mark.skipif(not ROOT, reason="the memory cgroup is made by the root launcher")
@pytest.mark.xdist_group("cgroups")
async def test_a_killed_runners_call_cgroups_are_removed_by_the_next_call(workspace):
    """A runner killed mid-call leaves its call's (empty) cgroup; the next call removes it, and never
    one whose launcher still runs."""
    from runner.tools import sandbox_launch

    found = sandbox_launch.call_cgroup(os.getpid())
    if found is None:
        pytest.skip("this machine gives no memory cgroup to make (cgroup v1 memory, or v2's top)")
    parent = os.path.dirname(found[0])
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = os.path.join(parent, f"{sandbox_launch.CGROUP_PREFIX}{dead.pid}")
    live = os.path.join(parent, f"{sandbox_launch.CGROUP_PREFIX}{os.getpid()}")  # this process runs
    os.mkdir(stale)
    os.mkdir(live)
    try:
        done = await sh("echo ok", workspace)
        assert "ok" in done.output
        assert not os.path.exists(stale) and os.path.isdir(live)
    finally:
        for path in (stale, live):
            if os.path.isdir(path):
                os.rmdir(path)
