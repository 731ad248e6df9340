"""One job's budget for what its sandboxed calls hold: the calls of a job and of its subagents share
one count of sandboxes at once and, where the machine gives one, one memory and process cgroup.

Without it every call had its own limits (:mod:`runner.tools.sandbox`: 4 GiB of memory, 256
processes), so a job with four subagents held four calls' worth (16 GiB), and a batch at
concurrency 32 held process limits that together reached ``pid_max``.

Guarantees:

- At most ``limits.max_sandboxes`` sandboxed calls of one job run at once, its subagents' included
  (:func:`sandbox_slot`, around every call :func:`runner.tools.sandbox.run_command` makes): a further
  call waits for one of them to end, within its own deadline. This holds everywhere. A job's own calls
  run one at a time (a reply with ``bash`` runs its calls in order), so the count is its subagents':
  each subagent's session runs inside :meth:`JobBudget.entered` of its job's budget.
- Where the machine delegates cgroups to the runner, a job's calls together get one memory and one
  process limit (:meth:`JobBudget.memory_bytes`, :meth:`JobBudget.processes`: ``max_sandboxes`` calls'
  worth), in one cgroup made under the runner's own (:func:`cgroup_parents`): cgroup v2, where the
  runner's cgroup, or its parent when that is the runner's (marked delegated, or the root of a
  container's own hierarchy), hands out ``memory`` and ``pids`` and is writable; cgroup v1, in the
  runner's own ``memory`` and ``pids`` cgroups. A call is placed in it before it starts (:func:`placed`:
  the launcher's first act, before it execs), so nothing of it runs outside; the call then makes no
  cgroup of its own. Never at the top of the hierarchy, outside the runner's own limits. Elsewhere
  (no cgroup to make, one that fails to make) the calls keep their own per-call limits.
- The cgroup lives while a call of the job runs: made by the first, removed by the last to end (its
  processes reaped first); one left by a runner that was killed is removed by the next one made
  beside it.
- :func:`host_problems`: whether ``concurrency`` jobs' budgets fit the host (its RAM by
  ``os.sysconf``, its ``/proc/sys/kernel/pid_max``); ``runner validate`` and ``runner run`` print
  each that does not as a warning line naming the numbers.
"""

from __future__ import annotations

import contextvars
import itertools
import os
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass, field
from functools import lru_cache

import anyio

from ..config import Limits
from ..rundir.store import in_thread

CGROUP_ROOT = "/sys/fs/cgroup"
CGROUP_PREFIX = "runner-job-"
HOST_SHARE = 0.9  # of the host's RAM and pid_max the jobs' budgets may take together (the rest: the rest)
_numbers = itertools.count(1)


@dataclass(frozen=True)
class Parent:
    """Where a job's cgroup is made: ``path`` (a directory of a cgroup file system) and which limits it
    takes there: ``"v2"`` (memory and pids), ``"memory"`` or ``"pids"`` (cgroup v1's hierarchies)."""

    path: str
    kind: str


@dataclass(eq=False)
class JobBudget:
    """One job's sandboxes: how many at once, and the memory and processes of all of them together.
    ``call_memory``/``call_processes``: one call's own limits (:mod:`runner.tools.sandbox`'s)."""

    sandboxes: int
    call_memory: int
    call_processes: int
    parents: Sequence[Parent] | None = None  # None: found on this machine (cgroup_parents)
    slots: anyio.Semaphore = field(init=False)
    running: int = 0  # calls holding a slot now
    cgroups: tuple[str, ...] = ()  # the job's cgroups while a call runs (empty: none could be made)
    most: int = 0  # the most calls that ran at once

    def __post_init__(self) -> None:
        self.slots = anyio.Semaphore(self.sandboxes)

    @classmethod
    def for_limits(cls, limits: Limits, call_memory: int, call_processes: int) -> JobBudget:
        return cls(limits.max_sandboxes, call_memory, call_processes)

    @property
    def memory_bytes(self) -> int:
        return self.sandboxes * self.call_memory

    @property
    def processes(self) -> int:
        return self.sandboxes * self.call_processes

    @contextmanager
    def entered(self) -> Iterator[None]:
        """The calls made inside (in this task and the tasks it starts) are this job's."""
        token = JOB.set(self)
        try:
            yield
        finally:
            JOB.reset(token)

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[tuple[str, ...]]:
        """One of the job's sandboxes, for one call: the ``cgroup.procs`` files the call's first process
        writes itself into (empty: none; the call then limits itself)."""
        async with self.slots:
            self.running += 1
            self.most = max(self.most, self.running)
            try:
                if self.running == 1:
                    parents = cgroup_parents() if self.parents is None else self.parents
                    self.cgroups = make_cgroups(parents, self.memory_bytes, self.processes)
                yield tuple(os.path.join(c, "cgroup.procs") for c in self.cgroups)
            finally:
                self.running -= 1
                if self.running == 0 and self.cgroups:
                    made, self.cgroups = self.cgroups, ()
                    with anyio.CancelScope(shield=True):
                        await remove_cgroups(made)


JOB: contextvars.ContextVar[JobBudget | None] = contextvars.ContextVar("job_budget", default=None)


@asynccontextmanager
async def sandbox_slot() -> AsyncIterator[tuple[str, ...]]:
    """Around one sandboxed call: a slot of the calling job's budget (none outside a budget: a call
    of a job without subagents, which runs its calls one at a time), and the ``cgroup.procs`` files
    its first process joins (:func:`placed`)."""
    budget = JOB.get()
    if budget is None:
        yield ()
        return
    async with budget.slot() as procs:
        yield procs


def placed(argv: list[str], procs: Sequence[str]) -> list[str]:
    """``argv`` started inside the cgroups whose ``cgroup.procs`` files are ``procs``: a shell writes
    its pid into each, then execs ``argv`` (same pid, same descriptors). A cgroup it cannot join is
    left out (the slot still counts the call)."""
    if not procs:
        return argv
    return ["/bin/sh", "-c", _JOIN, "sh", str(len(procs)), *procs, *argv]


# $1: how many cgroup.procs files follow; each gets the shell's pid; then the rest is exec'd
_JOIN = 'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ 2>/dev/null >"$1"; shift; n=$((n-1)); done; exec "$@"'


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _own_paths(proc_cgroup: str) -> dict[str, str]:
    """The runner's cgroup per hierarchy (``""``: v2's unified one) from ``/proc/self/cgroup``."""
    found: dict[str, str] = {}
    for line in (_read(proc_cgroup) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                found[controller] = parts[2]
    return found


def _hands_out(path: str, *controllers: str) -> bool:
    listed = (_read(os.path.join(path, "cgroup.subtree_control")) or "").split()
    return all(c in listed for c in controllers)


def _writable(path: str) -> bool:
    return os.access(path, os.W_OK) and os.access(os.path.join(path, "cgroup.procs"), os.W_OK)


def _delegated(path: str) -> bool:
    """Whether systemd handed the cgroup at ``path`` to its unit (``Delegate=yes`` marks it so)."""
    for name in ("trusted.delegate", "user.delegate"):
        with suppress(OSError, AttributeError):
            if os.getxattr(path, name) == b"1":
                return True
    return False


def cgroup_parents(root: str = CGROUP_ROOT, proc_cgroup: str = "/proc/self/cgroup") -> tuple[Parent, ...]:
    """Where this runner may make a job's cgroups (the Guarantees); empty where nowhere."""
    if root == CGROUP_ROOT and proc_cgroup == "/proc/self/cgroup":
        return _machine_parents()
    return _parents(root, proc_cgroup)


@lru_cache(maxsize=1)
def _machine_parents() -> tuple[Parent, ...]:
    return _parents(CGROUP_ROOT, "/proc/self/cgroup")


def _parents(root: str, proc_cgroup: str) -> tuple[Parent, ...]:
    own = _own_paths(proc_cgroup)
    if os.path.exists(os.path.join(root, "cgroup.controllers")):  # cgroup v2 mounted at the root
        if "" not in own:
            return ()
        here = os.path.normpath(os.path.join(root, own[""].lstrip("/")))
        candidates = [here]
        if here != os.path.normpath(root):
            up = os.path.dirname(here)
            # the runner's too: its unit's (delegated), or a container's own hierarchy (its root has
            # limits of its own, memory.max; the machine's root has none)
            top = os.path.normpath(up) == os.path.normpath(root)
            if _delegated(up) or (top and os.path.exists(os.path.join(up, "memory.max"))):
                candidates.append(up)
        for path in candidates:
            if _hands_out(path, "memory", "pids") and _writable(path):
                return (Parent(path, "v2"),)
        return ()
    found = []
    for kind in ("memory", "pids"):
        if kind not in own:
            return ()
        path = os.path.normpath(os.path.join(root, kind, own[kind].lstrip("/")))
        if not os.path.isdir(path) or not _writable(path):
            return ()
        found.append(Parent(path, kind))
    return tuple(found)


def _limits(kind: str, memory: int, processes: int) -> list[tuple[str, int, bool]]:
    """``(file, value, required)`` a job's cgroup is given."""
    if kind == "v2":
        return [("memory.max", memory, True), ("memory.swap.max", 0, False), ("pids.max", processes, True)]
    if kind == "memory":
        return [("memory.limit_in_bytes", memory, True), ("memory.memsw.limit_in_bytes", memory, False)]
    return [("pids.max", processes, True)]


def make_cgroups(parents: Sequence[Parent], memory: int, processes: int) -> tuple[str, ...]:
    """A job's cgroup under each of ``parents``, with its limits; nothing (and nothing left behind)
    when any of them cannot be made."""
    made: list[str] = []
    name = f"{CGROUP_PREFIX}{os.getpid()}-{next(_numbers)}"
    try:
        for parent in parents:
            _remove_stale(parent.path)
            where = os.path.join(parent.path, name)
            os.mkdir(where, 0o755)
            made.append(where)
            for file, value, required in _limits(parent.kind, memory, processes):
                try:
                    with open(os.path.join(where, file), "w") as f:
                        f.write(str(value))
                except OSError:
                    if required:
                        raise
    except OSError:
        for where in made:
            remove_dir(where, tries=1)
        return ()
    return tuple(made)


def remove_dir(where: str, tries: int) -> bool:
    """Remove the (empty) directory ``where``, trying ``tries`` times 20 ms apart (a cgroup is empty only
    once the kernel has let its processes go); whether it is gone."""
    for i in range(tries):
        try:
            os.rmdir(where)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if i + 1 < tries:
                time.sleep(0.02)
    return False


async def remove_cgroups(made: Sequence[str]) -> None:
    """Remove a job's cgroups once its calls have ended: at once when the kernel has let their
    processes go, else from a thread, trying for a second."""
    left = [where for where in made if not remove_dir(where, tries=1)]
    if left:
        await in_thread(lambda: [remove_dir(where, tries=50) for where in left], abandon_on_cancel=False)()


def _remove_stale(parent: str) -> None:
    """The job cgroups beside a new one whose runner is gone (a killed runner leaves its own)."""
    try:
        names = [n for n in os.listdir(parent) if n.startswith(CGROUP_PREFIX)]
    except OSError:
        return
    for name in names:
        pid = name.removeprefix(CGROUP_PREFIX).split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            remove_dir(os.path.join(parent, name), tries=1)


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def job_sandboxes(limits: Limits, tools: Sequence[str]) -> int:
    """How many sandboxed calls a job with ``tools`` may run at once: none without ``bash``, one
    without ``task`` (its calls run in order), else as many as its subagents and its budget allow."""
    if "bash" not in tools:
        return 0
    if "task" not in tools:
        return 1
    return min(limits.max_sandboxes, limits.max_subagents)


def host_ram() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def pid_max(path: str = "/proc/sys/kernel/pid_max") -> int | None:
    text = _read(path)
    return int(text) if text and text.strip().isdigit() else None


def host_problems(
    concurrency: int,
    jobs: Sequence[tuple[Limits, Sequence[str]]],
    *,
    call_memory: int,
    call_processes: int,
    ram: int | None = None,
    pids: int | None = None,
) -> list[str]:
    """One line per budget that ``concurrency`` of ``jobs`` (each ``(limits, tools)``) running at once
    would take past :data:`HOST_SHARE` of the host: memory (``ram``, default the host's RAM) and
    processes (``pids``, default its ``pid_max``). The largest jobs' budgets are summed."""
    sandboxes = sorted((job_sandboxes(limits, tools) for limits, tools in jobs), reverse=True)
    sandboxes = [n for n in sandboxes[:concurrency] if n]
    if not sandboxes:
        return []
    ram = host_ram() if ram is None else ram
    pids = pid_max() if pids is None else pids
    at_once, most = len(sandboxes), sandboxes[0]
    memory, processes = sum(sandboxes) * call_memory, sum(sandboxes) * call_processes
    problems = []
    gib = 1024**3
    if ram and memory > HOST_SHARE * ram:
        fit = max(1, int(HOST_SHARE * ram // (most * call_memory)))
        problems.append(
            f"concurrency {concurrency}: {at_once} jobs with bash at once, up to {most} sandboxes each "
            f"(limits.max_sandboxes) x {call_memory / gib:g} GiB a call = {memory / gib:g} GiB of "
            f"sandbox memory ({most * call_memory / gib:g} GiB a job), over {HOST_SHARE:.0%} of this "
            f"host's {ram / gib:.1f} GiB of RAM (os.sysconf): lower [runner] concurrency to {fit} or "
            "limits.max_sandboxes"
        )
    if pids and processes > HOST_SHARE * pids:
        fit = max(1, int(HOST_SHARE * pids // (most * call_processes)))
        problems.append(
            f"concurrency {concurrency}: {at_once} jobs with bash at once, up to {most} sandboxes each "
            f"x {call_processes} processes a call = {processes:,} processes ({most * call_processes} a "
            f"job), over {HOST_SHARE:.0%} of this host's pid_max {pids:,} (/proc/sys/kernel/pid_max): "
            f"lower [runner] concurrency to {fit} or limits.max_sandboxes"
        )
    return problems
