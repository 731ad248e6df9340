"""Started by the runner when it is root, once per sandboxed command: gives the command an
unprivileged uid and a workspace that uid may use, then becomes ``bwrap``.

Run as ``python -I -S sandbox_launch.py SPEC_JSON`` (standard library only: it imports nothing of
the runner). SPEC_JSON holds ``workspace``, ``stage`` (an empty directory every uid may traverse),
``uid``/``gid`` (the sandbox's host ids), ``writable`` and ``argv`` (bwrap's command line, whose
workspace source is ``stage``).

Guarantees:

- Everything happens in a private mount namespace of this process: nothing is mounted on the host,
  and nothing is left behind when the command ends, however it ends.
- The workspace is bind-mounted at ``stage`` through an **idmapped mount** (Linux 5.12+, and a file
  system that supports it: ext4, xfs, btrfs, tmpfs 6.3+, overlayfs 5.19+): files of the workspace's
  owner appear as the sandbox uid's, so an unprivileged uid can read (and, when ``writable``, write)
  them, and what it creates is owned on disk by the workspace's owner. Nothing is chmod'ed.
  Without idmapped mounts a read-only workspace is bound as it is (the sandbox then reads what
  every user may read); a writable one is refused with one line on stderr and exit 126.
- The workspace is opened by its real path with no symbolic link followed on the way, and mounted
  from that descriptor: a directory above it swapped for a link (by another job whose workspace holds
  it) is refused with one line on stderr and exit 126, never followed to wherever the link points.
- With ``memory_bytes``, the call's processes together get at most that much memory: this process
  moves into a memory cgroup of its own first (cgroup v1's memory hierarchy, or v2's top), which
  the runner removes once the call has ended (:func:`call_cgroup` names it by this process's pid).
  Where none can be made, the per-process limits (``ulimit``) are all there is.
- Before ``fexecve(bwrap)`` every privilege is dropped for good: supplementary groups cleared, real,
  effective and saved ids set to the sandbox's, so bwrap runs unprivileged in a user namespace and
  the command is never uid 0 on the host; and the umask is ``022``, whatever the runner's.
"""

import ctypes
import json
import os
import signal
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MS_BIND = 0x1000
AT_EMPTY_PATH = 0x1000
AT_FDCWD = -100
O_PATH = 0o10000000
OPEN_TREE_CLONE = 1
OPEN_TREE_CLOEXEC = os.O_CLOEXEC
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_IDMAP = 0x00100000
NR = {
    "x86_64": {"open_tree": 428, "move_mount": 429, "mount_setattr": 442},
    "aarch64": {"open_tree": 428, "move_mount": 429, "mount_setattr": 442},
}

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


class MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def fail(text: str, code: int = 126) -> None:
    os.write(2, f"sandbox: {text}\n".encode())
    os._exit(code)


def check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def syscall(name: str, *args: object) -> int:
    machine = os.uname().machine
    return check(libc.syscall(NR[machine][name], *args), name)


def userns_fd(owner_uid: int, owner_gid: int, uid: int, *, gid: int) -> int:
    """A user namespace whose id ``owner`` is the host's ``uid``: the mapping of the idmapped mount."""
    ready_r, ready_w = os.pipe()
    hold_r, hold_w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(ready_r)
        os.close(hold_w)
        code = 0 if libc.unshare(CLONE_NEWUSER) == 0 else 1
        os.write(ready_w, bytes([code]))
        os.read(hold_r, 1)  # until the parent has opened the namespace
        os._exit(0)
    os.close(ready_w)
    os.close(hold_r)
    try:
        if os.read(ready_r, 1) != b"\0":
            raise OSError("could not create a user namespace")
        with open(f"/proc/{child}/uid_map", "w") as f:
            f.write(f"{owner_uid} {uid} 1\n")
        with open(f"/proc/{child}/gid_map", "w") as f:
            f.write(f"{owner_gid} {gid} 1\n")
        return os.open(f"/proc/{child}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(hold_w)
        os.close(ready_r)
        os.waitpid(child, 0)


CGROUP_ROOT = "/sys/fs/cgroup"
CGROUP_PREFIX = "runner-sandbox-"


def call_cgroup(pid: int) -> tuple[str, bool] | None:
    """Where the memory cgroup of the call whose launcher is ``pid`` lives, and whether it is cgroup
    v2's: inside the memory cgroup the launcher started in (v1's memory hierarchy: this process's,
    the runner's own), or at the top (v2, when the top hands out the memory controller). None when
    neither can be made here."""
    unified = os.path.join(CGROUP_ROOT, "cgroup.subtree_control")
    try:
        if os.path.exists(unified):
            with open(unified) as f:
                if "memory" not in f.read().split():
                    return None
            return os.path.join(CGROUP_ROOT, f"{CGROUP_PREFIX}{pid}"), True
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            base = os.path.join(CGROUP_ROOT, "memory", path.lstrip("/"))
            return (os.path.join(base, f"{CGROUP_PREFIX}{pid}"), False) if os.path.isdir(base) else None
    return None


def confine_memory(limit: int) -> bool:
    """Move this process (and so everything the call starts) into a memory cgroup of its own, at most
    ``limit`` bytes of memory (and no swap where the kernel accounts it) for all its processes
    together; False, with nothing left behind, where this machine gives no cgroup to make."""
    found = call_cgroup(os.getpid())
    if found is None:
        return False
    where, unified = found
    settings = (
        [("memory.max", limit), ("memory.swap.max", 0)]
        if unified
        else [("memory.limit_in_bytes", limit), ("memory.memsw.limit_in_bytes", limit)]
    )
    try:
        os.mkdir(where, 0o755)
    except OSError:
        return False
    try:
        for name, value in settings:
            try:
                with open(os.path.join(where, name), "w") as f:
                    f.write(str(value))
            except FileNotFoundError:
                if name.startswith(("memory.swap", "memory.memsw")):  # no swap accounting here
                    continue
                raise
        with open(os.path.join(where, "cgroup.procs"), "w") as f:
            f.write("0")
    except OSError:
        os.rmdir(where)
        return False
    return True


def open_exact(path: str) -> int:
    """``path`` (absolute, real) as an ``O_PATH`` descriptor of the directory, one component at a time,
    each ``O_NOFOLLOW``: a symbolic link anywhere on the way is refused (``ENOTDIR``), never followed."""
    fd = os.open("/", O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    for part in (p for p in path.split("/") if p):
        try:
            found = os.open(part, O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        finally:
            os.close(fd)
        fd = found
    return fd


def idmapped(
    workspace_fd: int, stage: str, owner: os.stat_result, *, uid: int, gid: int, writable: bool
) -> None:
    tree = syscall("open_tree", workspace_fd, b"", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH)
    ns = userns_fd(owner.st_uid, owner.st_gid, uid, gid=gid)
    attr = MountAttr(MOUNT_ATTR_IDMAP | (0 if writable else MOUNT_ATTR_RDONLY), 0, 0, ns)
    syscall("mount_setattr", tree, b"", AT_EMPTY_PATH, ctypes.byref(attr), ctypes.sizeof(attr))
    syscall("move_mount", tree, b"", AT_FDCWD, stage.encode(), MOVE_MOUNT_F_EMPTY_PATH)
    os.close(ns)
    os.close(tree)


def main() -> None:
    spec = json.loads(sys.argv[1])
    workspace, stage, uid, gid = spec["workspace"], spec["stage"], spec["uid"], spec["gid"]
    try:
        binary = os.open(spec["argv"][0], os.O_RDONLY | os.O_CLOEXEC)  # run by descriptor: its path
        # may be one the sandbox uid cannot traverse (a virtualenv under /root)
        check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
        try:
            workspace_fd = open_exact(workspace)
        except OSError:
            fail(
                f"the workspace {workspace} is no longer where it was: a part of its path is now a "
                "symbolic link (or gone), which is not followed"
            )
        owner = os.fstat(workspace_fd)
        try:
            idmapped(workspace_fd, stage, owner, uid=uid, gid=gid, writable=spec["writable"])
        except OSError as e:
            if spec["writable"]:
                fail(
                    f"cannot give the sandbox's unprivileged uid write access to {workspace}: "
                    f"idmapped mounts are not available here ({e}); run the runner as the "
                    "workspace's owner, or list neither write nor edit"
                )
            source = f"/proc/self/fd/{workspace_fd}".encode()  # the directory opened above, not its path
            check(libc.mount(source, stage.encode(), None, MS_BIND | MS_REC, None), "bind")
        os.close(workspace_fd)
        if spec.get("memory_bytes"):
            confine_memory(int(spec["memory_bytes"]))
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        if os.getuid() == 0 or os.geteuid() == 0:
            fail("could not drop root")
    except OSError as e:
        fail(str(e))
    argv = spec["argv"]
    os.umask(0o022)  # nothing the command makes is world-writable unless it asks (the shell sets it too)
    for ignored_by_python in (
        signal.SIGPIPE,
        signal.SIGXFSZ,
    ):  # a command gets the default, as from the runner
        signal.signal(ignored_by_python, signal.SIG_DFL)
    os.execve(binary, argv, dict(os.environ))


if __name__ == "__main__":
    main()
