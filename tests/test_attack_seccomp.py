"""The seccomp filter's gaps (issue 40, part 5), closed and tried for real.

- Sockets by an allow-list of families: no ``AF_VSOCK`` (the host through no network namespace), no
  ``AF_NETLINK``, nothing but unix, IPv4 and IPv6, and those only with the job's network.
- ``modify_ldt``, ``personality`` (a new persona and the query), ``move_pages``/``migrate_pages`` and
  the rest of the mount API (``open_tree_attr``; ``statmount``/``listmount`` answer ENOSYS) refused.
- Nothing a sandboxed call writes is world-writable on the host: ``chmod`` to ``o+w`` and ACLs are
  refused, the shell's umask is 022, and what a command makes world-writable all the same (its own
  ``umask 0``, at any depth) loses the bit when the call ends.

The program is checked on both architectures by a small interpreter of classic BPF (pure); the calls
are made inside the real bubblewrap sandbox (as root in CI), skipped where bwrap cannot start.
"""

from __future__ import annotations

import errno
import os
import stat
import struct
import time
from pathlib import Path

import pytest

from runner.tools import seccomp
from runner.tools.sandbox import FIX_SLACK_S, bwrap_problem, fix_modes, run_command

PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else None
ALLOW = "allow"
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET, AF_VSOCK = 1, 2, 10, 16, 17, 40
READ = {"x86_64": 0, "aarch64": 63}
SANDBOX = pytest.mark.skipif(bwrap_problem() is not None, reason=f"bwrap cannot start: {bwrap_problem()}")
NEEDS_PYTHON = pytest.mark.skipif(PYTHON is None, reason="no /usr/bin/python3 to make raw system calls with")


def run_filter(program: bytes, arch: str, nr: int, *args: int, audit: int | None = None) -> str | int:
    """What the classic BPF ``program`` answers for the call: ALLOW or the errno it fails with."""
    ops = [struct.unpack("<HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    data = struct.pack("<iI", nr, seccomp.AUDIT_ARCH[arch] if audit is None else audit) + b"\0" * 8
    data += b"".join(struct.pack("<Q", a & (2**64 - 1)) for a in (*args, *([0] * (6 - len(args)))))
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = ops[pc]
        pc += 1
        if code == 0x20:
            acc = struct.unpack("<I", data[k : k + 4])[0]
        elif code in (0x15, 0x35, 0x45):
            hit = acc == k if code == 0x15 else acc >= k if code == 0x35 else bool(acc & k)
            pc += jt if hit else jf
        elif code == 0x06:
            return ALLOW if k == 0x7FFF0000 else (k & 0xFFFF if k >> 16 == 0x0005 else f"ret {k:#x}")
        else:
            raise AssertionError(f"an instruction the interpreter does not know: {code:#x}")


@pytest.mark.parametrize("arch", sorted(seccomp.AUDIT_ARCH))
@pytest.mark.parametrize("network", [False, True])
def test_the_program_on_both_architectures(arch: str, network: bool) -> None:
    program = seccomp.program(allow_unix_sockets=network, arch=arch)
    assert len(program) % 8 == 0 and len(program) // 8 < 4096

    def verdict(nr: int, *args: int) -> str | int:
        return run_filter(program, arch, nr, *args)

    for name, nr in {**seccomp.DENIED[arch], **seccomp.DENIED_NEWER[arch]}.items():
        expected = errno.ENOSYS if name in seccomp.ENOSYS_CALLS else errno.EPERM
        assert verdict(nr, 0xFFFFFFFF) == verdict(nr, 8) == expected, name
    for name in ("personality", "move_pages", "migrate_pages"):
        assert name in seccomp.DENIED[arch]
    assert ("modify_ldt" in seccomp.DENIED[arch]) == (arch == "x86_64")  # aarch64 has no LDT
    assert "open_tree_attr" in seccomp.DENIED_NEWER[arch]
    for nr in seccomp.XATTR_SETS[arch].values():
        assert verdict(nr) == errno.EOPNOTSUPP
    socket, pair = seccomp.SOCKET[arch], seccomp.SOCKETPAIR[arch]
    for family in (AF_NETLINK, AF_PACKET, AF_VSOCK, 0, 3, 44, 0xFFFF):
        assert verdict(socket, family) == errno.EAFNOSUPPORT, family
        assert verdict(pair, family) == errno.EAFNOSUPPORT, family
    for family in (AF_UNIX, AF_INET, AF_INET6):
        assert verdict(socket, family) == (ALLOW if network else errno.EPERM), family
    assert verdict(pair, AF_UNIX) == ALLOW
    modes = seccomp.MODE_CALLS[arch]
    for name, (nr, at) in modes.items():
        args = [0] * 6
        for mode in (0o777, 0o666, 0o002):
            args[at] = mode
            expected = errno.EPERM if name in seccomp.CHMOD_CALLS else ALLOW  # o+w: only chmod is refused
            assert verdict(nr, *args) == expected, (name, oct(mode))
        args[at] = 0o755
        assert verdict(nr, *args) == ALLOW, name
        args[at] = 0o4755
        assert verdict(nr, *args) == errno.EPERM, name
    assert verdict(READ[arch], 3, 0, 10) == ALLOW
    other = next(a for a in seccomp.AUDIT_ARCH.values() if a != seccomp.AUDIT_ARCH[arch])
    assert run_filter(program, arch, READ[arch], audit=other) == errno.ENOSYS
    if arch == "x86_64":
        assert verdict(seccomp.X32_SYSCALL_BIT | READ[arch]) == errno.ENOSYS


def test_the_newer_calls_match_the_headers_where_they_name_them() -> None:
    arch = seccomp.native_arch()
    header = {
        "x86_64": "/usr/include/x86_64-linux-gnu/asm/unistd_64.h",
        "aarch64": "/usr/include/asm-generic/unistd.h",
    }.get(arch)
    if header is None or not os.path.exists(header):
        pytest.skip(f"no kernel headers for {arch}")
    defined = {}
    for line in Path(header).read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "#define" and parts[1].startswith("__NR_") and parts[2].isdigit():
            defined[parts[1][5:]] = int(parts[2])
    table = {**seccomp.DENIED_NEWER[arch], **seccomp.XATTR_SETS[arch], "socketpair": seccomp.SOCKETPAIR[arch]}
    assert {n: defined[n] for n in table if n in defined} == {n: v for n, v in table.items() if n in defined}


# --- in the real sandbox ---------------------------------------------------------------------------

PROBE = r"""
import ctypes, errno, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = NAMES
def name_of(code):
    return errno.errorcode.get(code, str(code))
def sock(label, family, kind, address=None):
    try:
        s = socket.socket(family, kind)
    except OSError as e:
        print(label, "socket", name_of(e.errno)); return
    try:
        if address is not None:
            s.settimeout(2); s.connect(address)
        print(label, "open")
    except OSError as e:
        print(label, "open-connect", name_of(e.errno))
    finally:
        s.close()
sock("vsock", 40, socket.SOCK_STREAM, (2, 1024))  # the host's CID
sock("netlink", 16, socket.SOCK_RAW)
sock("packet", 17, socket.SOCK_RAW)
for name, args in (
    ("modify_ldt", (0, 0, 0)),
    ("personality_linux32", (0x0008,)),
    ("personality_no_aslr", (0x0040000,)),
    ("personality_query", (0xFFFFFFFF,)),
    ("move_pages", (0, 1, 0, 0, 0, 0)),
    ("migrate_pages", (0, 8, 0, 0)),
    ("open_tree_attr", (-100, b"/tmp", 1, 0, 0)),
    ("statmount", (0, 0, 0, 0)),
    ("listmount", (0, 0, 0, 0)),
):
    call = name.split("_")[0] if name.startswith("personality") else name
    if call in NR:
        r = libc.syscall(NR[call], *args)
        print(name, r, name_of(ctypes.get_errno()) if r == -1 else "")
print("personality now", open("/proc/self/personality").read().strip())
"""


async def sh(command: str, workspace: Path, *, writable: bool = False, network: bool = False):
    return await run_command(
        command, workspace=str(workspace), writable=writable, network=network, sandbox="bwrap", timeout_s=60
    )


@SANDBOX
@NEEDS_PYTHON
@pytest.mark.anyio
@pytest.mark.parametrize("network", [False, True])
async def test_the_calls_are_refused_in_the_sandbox(tmp_path: Path, network: bool) -> None:
    arch = seccomp.native_arch()
    names = {**seccomp.DENIED[arch], **seccomp.DENIED_NEWER[arch]}
    (tmp_path / "probe.py").write_text(PROBE.replace("NAMES", repr(names)))
    done = await sh(f"{PYTHON} probe.py", tmp_path, network=network)
    out = done.output
    assert done.exit_code == 0, out
    for family in ("vsock", "netlink", "packet"):
        assert f"{family} socket EAFNOSUPPORT" in out, out
    for name in ("personality_linux32", "personality_no_aslr", "personality_query", "move_pages"):
        assert f"{name} -1 EPERM" in out, out
    assert "migrate_pages -1 EPERM" in out and "open_tree_attr -1 EPERM" in out, out
    assert "statmount -1 ENOSYS" in out and "listmount -1 ENOSYS" in out, out
    assert ("modify_ldt -1 EPERM" in out) == (arch == "x86_64"), out
    assert "personality now 00000000" in out, out


@SANDBOX
@NEEDS_PYTHON
@pytest.mark.anyio
async def test_unix_and_ip_sockets_only_with_the_network(tmp_path: Path) -> None:
    script = (
        "import socket, errno\n"
        "for label, family in (('unix', 1), ('inet', 2), ('inet6', 10)):\n"
        "    try: socket.socket(family).close(); print(label, 'open')\n"
        "    except OSError as e: print(label, errno.errorcode[e.errno])\n"
        "a, b = socket.socketpair(); print('pair open')\n"
    )
    (tmp_path / "s.py").write_text(script)
    closed = (await sh(f"{PYTHON} s.py", tmp_path)).output
    opened = (await sh(f"{PYTHON} s.py", tmp_path, network=True)).output
    assert all(f"{label} EPERM" in closed for label in ("unix", "inet", "inet6")), closed
    assert all(f"{label} open" in opened for label in ("unix", "inet", "inet6")), opened
    assert "pair open" in closed and "pair open" in opened


def world_writable(root: Path) -> dict[str, str]:
    found = {}
    for entry in _entries(root):
        st = entry.lstat()
        if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o002:
            found[str(entry.relative_to(root))] = oct(st.st_mode)
    return found


def _entries(root: Path):
    stack = [root]
    while stack:
        for entry in stack.pop().iterdir():
            yield entry
            if entry.is_dir() and not entry.is_symlink():
                stack.append(entry)


@SANDBOX
@NEEDS_PYTHON
@pytest.mark.anyio
async def test_nothing_the_sandbox_writes_is_world_writable_on_the_host(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "theirs.txt").write_text("the operator's own\n")
    (ws / "theirs.txt").chmod(0o666)  # world-writable before any call: not the sandbox's doing
    time.sleep(FIX_SLACK_S + 0.2)
    script = r"""
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
open("plain", "w").write("x")
calls = {
    "chmod": lambda: os.chmod("plain", 0o777),
    "fchmod": lambda: os.fchmod(os.open("plain", os.O_RDONLY), 0o666),
}
for label, call in calls.items():
    try: call(); print(label, "done")
    except OSError as e: print(label, errno.errorcode[e.errno])
r = libc.syscall(FCHMODAT2, -100, b"plain", 0o777, 0)
print("fchmodat2", r, errno.errorcode.get(ctypes.get_errno()) if r else "")
try:
    entries = [(0x01, 7), (0x04, 7), (0x20, 7)]  # user::rwx group::rwx other::rwx
    acl = b"\x02\x00\x00\x00" + b"".join(tag.to_bytes(2, "little") + perm.to_bytes(2, "little")
                                      + b"\xff\xff\xff\xff" for tag, perm in entries)
    os.setxattr("plain", "system.posix_acl_access", acl); print("acl done")
except OSError as e: print("acl", errno.errorcode[e.errno])
os.umask(0)
os.close(os.open("made", os.O_CREAT | os.O_WRONLY, 0o777))
os.mkdir("dir", 0o777)
os.mkfifo("fifo", 0o666)
here = os.open(".", os.O_RDONLY)
for _ in range(300):
    os.mkdir("d", 0o777); below = os.open("d", os.O_RDONLY, dir_fd=here); os.close(here); here = below
    os.fchdir(here)
os.close(os.open("deep.txt", os.O_CREAT | os.O_WRONLY, 0o666))
print("inside", oct(os.stat("deep.txt").st_mode))
""".replace("FCHMODAT2", str(seccomp.MODE_CALLS[seccomp.native_arch()]["fchmodat2"][0]))
    (ws / "w.py").write_text(script)
    done = await sh(
        f"{PYTHON} w.py; chmod 0777 plain; echo chmod=$?; chmod a+w plain; echo aw=$?", ws, writable=True
    )
    out = done.output
    assert "chmod EPERM" in out and "fchmod EPERM" in out and "fchmodat2 -1 EPERM" in out, out
    assert "acl ENOTSUP" in out and "chmod=1" in out and "aw=1" in out, out
    assert "inside 0o100666" in out, out  # world-writable while the call ran, in its own umask
    assert world_writable(ws) == {"theirs.txt": "0o100666"}
    assert (ws / "made").stat().st_mode & 0o777 == 0o775 and (ws / "dir").stat().st_mode & 0o777 == 0o775
    assert (ws / "plain").stat().st_mode & 0o777 == 0o644  # the shell's umask 022
    deep = ws.joinpath(*(["d"] * 300), "deep.txt")
    assert oct(os.lstat(deep).st_mode) == "0o100664"
    # a read-only call changes no mode, a writable one leaves the operator's alone
    assert world_writable(ws) == {"theirs.txt": "0o100666"}


def test_the_mode_fix_follows_no_link_and_leaves_older_files(tmp_path: Path) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    target = outside / "host.txt"
    target.write_text("x")
    target.chmod(0o666)
    older = ws / "older.txt"
    older.write_text("x")
    older.chmod(0o666)
    since = time.time() + 0.5
    time.sleep(1.0)
    (ws / "link").symlink_to(target)
    (ws / "dir").mkdir()
    (ws / "dir").chmod(0o777)
    (ws / "dir" / "new").write_text("y")
    (ws / "dir" / "new").chmod(0o646)
    ws.chmod(0o777)  # the operator's workspace directory: never the call's to fix
    assert fix_modes(str(ws), since) == 2
    assert ws.stat().st_mode & 0o777 == 0o777
    assert target.stat().st_mode & 0o777 == 0o666 and older.stat().st_mode & 0o777 == 0o666
    assert (ws / "dir").stat().st_mode & 0o777 == 0o775 and (
        ws / "dir" / "new"
    ).stat().st_mode & 0o777 == 0o644
    assert fix_modes(str(tmp_path / "missing"), 0) == 0
