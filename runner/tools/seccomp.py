"""The seccomp filter every sandboxed command runs under: a classic BPF program that bubblewrap
loads (``--seccomp FD``) just before it starts the command.

Guarantees:

- Pure: :func:`program` returns the program's bytes; nothing here touches the running process.
- A system call of another ABI than the machine's (32-bit ``int 0x80`` on x86_64, x32) fails with
  ``ENOSYS``: the tables below are per architecture, so a foreign ABI could otherwise name a denied
  call by another number.
- Denied, with ``EPERM``: debugging or reading other processes (``ptrace``, ``process_vm_*``,
  ``pidfd_getfd``), mounting and namespaces (``mount`` and the whole new mount API, ``open_tree_attr``
  included, ``pivot_root``, ``chroot``, ``unshare``, ``setns``, ``clone`` asking for a new user
  namespace), the kernel's keyrings, ``bpf``, ``perf_event_open``, ``userfaultfd``, ``io_uring`` (its
  requests bypass this filter), modules, ``kexec``, ``reboot``, ``swapon``, ``syslog``, ``acct``,
  quotas, file handles (``open_by_handle_at`` reads any file of a mounted file system by inode),
  ``iopl``/``ioperm``/``modify_ldt`` (x86's descriptor tables, a kernel attack surface no tool needs),
  ``personality`` (every call, the query too: no tool needs it, and a persona such as
  ``ADDR_NO_RANDOMIZE`` or ``READ_IMPLIES_EXEC`` weakens what the command runs), ``move_pages`` and
  ``migrate_pages`` (moving the memory of processes between NUMA nodes). ``statmount`` and ``listmount``
  fail with ``ENOSYS``, as on a kernel without them (``/proc/self/mountinfo`` says the same to tools).
- Sockets by an allow-list of families: ``AF_UNIX``, ``AF_INET`` and ``AF_INET6`` only when the job
  may use the network, else ``EPERM`` (a unix socket in the workspace could reach a host service);
  every other family (``AF_NETLINK``, ``AF_VSOCK``, which reaches the host through no network
  namespace, ``AF_PACKET``, ``AF_BLUETOOTH``...) fails with ``EAFNOSUPPORT``, whatever the job's
  network. ``socketpair`` (a connected pair, reaching nothing) is allowed for ``AF_UNIX`` alone.
- No file made world-writable by a call here: a ``chmod`` family call whose mode has ``S_IWOTH``
  fails with ``EPERM``, and extended attributes cannot be set (``setxattr`` and its kin fail with
  ``EOPNOTSUPP``, as on a file system without them: a POSIX ACL would grant what ``chmod`` may not,
  and a default ACL on a directory would override the umask of every file made in it later). A file
  created with a mode of ``0o666`` stays allowed (every program creates so and relies on the umask):
  the sandbox's shell sets ``umask 022``, and what a command that lowers its umask makes is fixed
  when the call ends (:func:`runner.tools.sandbox.fix_modes`).
- ``clone3`` fails with ``ENOSYS`` (its flags are behind a pointer a filter cannot read); the C
  library then falls back to ``clone``, whose flags are checked. So does ``openat2`` (its mode is
  behind a pointer too): callers fall back to ``openat``. ``fallocate`` fails with ``EOPNOTSUPP``:
  it takes gigabytes of disk in one call, faster than any watch of the free space can see (the C
  library's ``posix_fallocate`` then writes block by block, at the speed of ordinary writes).
- No setuid or setgid file: a ``chmod`` family call (``chmod``, ``fchmod``, ``fchmodat``,
  ``fchmodat2``) or a call that creates a file (``open``, ``openat``, ``creat``, ``mknod``,
  ``mknodat``) whose mode has ``S_ISUID`` or ``S_ISGID`` fails with ``EPERM``. When the runner is
  root, a root-owned workspace is written as root on disk (its owner, through the idmapped mount), so
  such a file would run as root for whoever on the host executes it.
- Every other call is allowed: this is a deny list in the spirit of Codex's Linux sandbox and
  Anthropic's sandbox-runtime, on top of bubblewrap's namespaces and an unprivileged uid.
"""

from __future__ import annotations

import errno
import platform
import struct

# <linux/audit.h>
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
X32_SYSCALL_BIT = 0x40000000
CLONE_NEWUSER = 0x10000000
AF_UNIX, AF_INET, AF_INET6 = 1, 2, 10

# Calls denied outright, by number per architecture (<asm/unistd_64.h>, <asm-generic/unistd.h>).
DENIED: dict[str, dict[str, int]] = {
    "x86_64": {
        "ptrace": 101,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "pidfd_getfd": 438,
        "mount": 165,
        "umount2": 166,
        "pivot_root": 155,
        "chroot": 161,
        "unshare": 272,
        "setns": 308,
        "open_tree": 428,
        "move_mount": 429,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "mount_setattr": 442,
        "keyctl": 250,
        "add_key": 248,
        "request_key": 249,
        "bpf": 321,
        "perf_event_open": 298,
        "userfaultfd": 323,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "init_module": 175,
        "finit_module": 313,
        "delete_module": 176,
        "kexec_load": 246,
        "kexec_file_load": 320,
        "reboot": 169,
        "swapon": 167,
        "swapoff": 168,
        "syslog": 103,
        "acct": 163,
        "quotactl": 179,
        "quotactl_fd": 443,
        "open_by_handle_at": 304,
        "name_to_handle_at": 303,
        "iopl": 172,
        "ioperm": 173,
        "uselib": 134,
        "modify_ldt": 154,
        "personality": 135,
        "move_pages": 279,
        "migrate_pages": 256,
    },
    "aarch64": {
        "ptrace": 117,
        "process_vm_readv": 270,
        "process_vm_writev": 271,
        "pidfd_getfd": 438,
        "mount": 40,
        "umount2": 39,
        "pivot_root": 41,
        "chroot": 51,
        "unshare": 97,
        "setns": 268,
        "open_tree": 428,
        "move_mount": 429,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "mount_setattr": 442,
        "keyctl": 219,
        "add_key": 217,
        "request_key": 218,
        "bpf": 280,
        "perf_event_open": 241,
        "userfaultfd": 282,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "init_module": 105,
        "finit_module": 273,
        "delete_module": 106,
        "kexec_load": 104,
        "kexec_file_load": 294,
        "reboot": 142,
        "swapon": 224,
        "swapoff": 225,
        "syslog": 116,
        "acct": 89,
        "quotactl": 60,
        "quotactl_fd": 443,
        "open_by_handle_at": 265,
        "name_to_handle_at": 264,
        "personality": 92,
        "move_pages": 239,
        "migrate_pages": 238,
    },
}
# Calls newer than the headers of many machines (their numbers are the same on both architectures,
# as every call's since 424): denied with EPERM, but for ENOSYS_CALLS.
DENIED_NEWER: dict[str, dict[str, int]] = {
    arch: {"open_tree_attr": 467, "statmount": 457, "listmount": 458} for arch in ("x86_64", "aarch64")
}
ENOSYS_CALLS = frozenset({"statmount", "listmount"})  # answered as a kernel without them would
# Setting an extended attribute (a POSIX ACL is one): fails with EOPNOTSUPP.
XATTR_SETS: dict[str, dict[str, int]] = {
    "x86_64": {"setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "setxattrat": 463},
    "aarch64": {"setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "setxattrat": 463},
}
# Calls whose arguments are checked.
CLONE = {"x86_64": 56, "aarch64": 220}
CLONE3 = {"x86_64": 435, "aarch64": 435}
OPENAT2 = {"x86_64": 437, "aarch64": 437}
FALLOCATE = {"x86_64": 285, "aarch64": 47}
SOCKET = {"x86_64": 41, "aarch64": 198}
SOCKETPAIR = {"x86_64": 53, "aarch64": 199}
SET_ID_BITS = 0o6000  # S_ISUID | S_ISGID
WORLD_WRITABLE = 0o002  # S_IWOTH: refused to the chmod family (CHMOD_CALLS)
# Calls that set a file's mode, with the index of their mode argument (aarch64 has no legacy calls).
MODE_CALLS: dict[str, dict[str, tuple[int, int]]] = {
    "x86_64": {
        "chmod": (90, 1),
        "fchmod": (91, 1),
        "fchmodat": (268, 2),
        "fchmodat2": (452, 2),
        "open": (2, 2),
        "openat": (257, 3),
        "creat": (85, 1),
        "mknod": (133, 1),
        "mknodat": (259, 2),
    },
    "aarch64": {
        "fchmod": (52, 1),
        "fchmodat": (53, 2),
        "fchmodat2": (452, 2),
        "openat": (56, 3),
        "mknodat": (33, 2),
    },
}
CHMOD_CALLS = frozenset({"chmod", "fchmod", "fchmodat", "fchmodat2"})  # of MODE_CALLS: set a mode

# <linux/filter.h>, <linux/seccomp.h>
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_NR, _ARCH, _ARG0 = 0, 4, 16  # offsets in struct seccomp_data (arg0's low 32 bits, little-endian)
_ARG_SIZE = 8


def native_arch() -> str:
    machine = platform.machine()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def supported(arch: str | None = None) -> bool:
    return (arch or native_arch()) in AUDIT_ARCH


def _op(code: int, k: int, jt: int = 0, *, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def _fail(err: int) -> bytes:
    return _op(_RET, _ERRNO | err)


def _refuse_bits(number: int, arg: int, bits: int) -> list[bytes]:
    """Call ``number`` with any of ``bits`` set in its argument ``arg`` fails with EPERM; the call's
    number is loaded again after."""
    return [
        _op(_JEQ, number, jf=3),
        _op(_LD_W_ABS, _ARG0 + _ARG_SIZE * arg),
        _op(_JSET, bits, jf=1),
        _fail(errno.EPERM),
        _op(_LD_W_ABS, _NR),
    ]


def program(*, allow_unix_sockets: bool, arch: str | None = None, network: bool | None = None) -> bytes:
    """The filter for ``arch`` (default: this machine's) as ``struct sock_filter`` records.
    ``allow_unix_sockets``: ``socket(AF_UNIX)`` allowed; ``network``: ``AF_INET`` and ``AF_INET6`` allowed
    (default: as ``allow_unix_sockets``, the runner allows both with the job's network)."""
    arch = arch or native_arch()
    if arch not in AUDIT_ARCH:
        raise ValueError(f"no seccomp filter for the {arch} architecture")
    inet = allow_unix_sockets if network is None else network
    ops = [_op(_LD_W_ABS, _ARCH), _op(_JEQ, AUDIT_ARCH[arch], jt=1), _fail(errno.ENOSYS), _op(_LD_W_ABS, _NR)]
    if arch == "x86_64":
        ops += [_op(_JGE, X32_SYSCALL_BIT, jf=1), _fail(errno.ENOSYS)]
    denied = {**DENIED[arch], **DENIED_NEWER[arch]}
    for name, number in sorted(denied.items(), key=lambda item: item[1]):
        ops += [_op(_JEQ, number, jf=1), _fail(errno.ENOSYS if name in ENOSYS_CALLS else errno.EPERM)]
    for number in sorted(XATTR_SETS[arch].values()):
        ops += [_op(_JEQ, number, jf=1), _fail(errno.EOPNOTSUPP)]
    ops += [_op(_JEQ, CLONE3[arch], jf=1), _fail(errno.ENOSYS)]
    ops += [_op(_JEQ, OPENAT2[arch], jf=1), _fail(errno.ENOSYS)]
    ops += [_op(_JEQ, FALLOCATE[arch], jf=1), _fail(errno.EOPNOTSUPP)]
    for name, (number, mode_arg) in sorted(MODE_CALLS[arch].items(), key=lambda item: item[1]):
        ops += _refuse_bits(number, mode_arg, SET_ID_BITS | (WORLD_WRITABLE if name in CHMOD_CALLS else 0))
    ops += _refuse_bits(CLONE[arch], 0, CLONE_NEWUSER)  # clone: flags are its first argument on both arches
    # socketpair: AF_UNIX only (its first argument, the family)
    ops += [
        _op(_JEQ, SOCKETPAIR[arch], jf=4),
        _op(_LD_W_ABS, _ARG0),
        _op(_JEQ, AF_UNIX, jt=1),
        _fail(errno.EAFNOSUPPORT),
        _op(_RET, _ALLOW),
    ]
    # socket: the allow-list of families; the last check of the program, so its branches end it
    families = [(AF_UNIX, allow_unix_sockets), (AF_INET, inet), (AF_INET6, inet)]
    ops += [_op(_JEQ, SOCKET[arch], jf=1 + 2 * len(families) + 1), _op(_LD_W_ABS, _ARG0)]
    for family, allowed in families:
        ops += [_op(_JEQ, family, jf=1), _op(_RET, _ALLOW) if allowed else _fail(errno.EPERM)]
    ops.append(_fail(errno.EAFNOSUPPORT))
    ops.append(_op(_RET, _ALLOW))
    return b"".join(ops)
