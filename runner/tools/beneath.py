"""Opening a path beneath a directory descriptor, so that nothing a job does to the tree (a symlink
swapped in between a check and an open, a link to ``/`` or ``/proc/self``) can make a file tool
open anything outside its root.

Guarantees:

- Every open here starts at a directory descriptor (a :class:`Root`), never at a path string of
  the whole file: on Linux 5.6 and later with ``openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)``,
  where the kernel resolves every component, symlinks included, and refuses any step out of the
  root; elsewhere (``ENOSYS``, another architecture) with a walk of one component at a time, each
  opened ``O_NOFOLLOW`` relative to the descriptor of its parent, symlinks read and resolved by hand
  (a ``..`` above the root, or an absolute target outside it, is refused). There is no check
  followed by a second lookup, so there is no race to win.
- A workspace is opened by its real path with no symlink on the way (:meth:`Root.open_exact`): a
  directory above it swapped for a link (by a job whose workspace holds it) is refused.
- Symlinks that stay inside the root keep working, absolute ones included (they are resolved by
  the walk against the root's own path); one leading out raises :class:`Outside`.
- :func:`open_regular` never blocks and never reads a FIFO, a device or a socket: the target is
  looked at with ``O_PATH`` (which opens nothing) and refused unless it is a regular file; the real
  open is ``O_NONBLOCK`` and checked again with ``fstat`` (a swap in between is refused).
- A model's path is checked as text first (:func:`relative`): a NUL byte or a character that is
  not text is a :class:`BadPath`; ``.``, ``..`` and a trailing ``/`` are collapsed in the text as the
  SDK did, so ``x/../f`` names ``f`` whatever ``x`` is.
- A name a tool shows (:func:`shown`) names exactly one file, and given back (:func:`from_shown`) it
  names that file: a byte that is not UTF-8 text is shown ``\\xNN`` (two lowercase hex digits, 80
  to ff), a control character (00 to 1f, 7f) too, and a backslash as ``\\\\``; the reverse maps those
  escapes back, byte for byte. No other escape is accepted: one of a printable ASCII character
  (``\\x2e``, ``\\x2f``, ``\\x5c``) or of bytes that are UTF-8 text is a :class:`BadPath`, so an escape
  never spells ``.``, ``..`` or ``/``, and the containment above holds for the decoded bytes. A
  backslash that starts no escape stands for itself.

Standard library only: the grep worker (:mod:`runner.tools.grep_worker`) imports it in a fresh ``python -I``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import re
import stat
from collections import deque
from contextlib import suppress
from dataclasses import dataclass

RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
_OPENAT2 = {"x86_64": 437, "aarch64": 437}.get(platform.machine())
MAX_HOPS = 40  # symlinks followed in one lookup, as the kernel does
PATH_MAX = 4096  # bytes of a path the kernel takes, its NUL included
_O_PATH = os.O_PATH | os.O_CLOEXEC
# errors after which openat2's refusal is checked by the walk: EXDEV (a step out, or an absolute
# link, which may land inside), ELOOP (a magic link, too many links), EAGAIN (a rename raced a ``..``)
_ASK_THE_WALK = (errno.EXDEV, errno.ELOOP, errno.EAGAIN)


class Outside(ValueError):
    """The path leads out of its root (a ``..`` too many, or a symlink out)."""


class BadPath(ValueError):
    """The path is not one a file can have (a NUL byte, a character that is not text)."""


class NotRegular(OSError):
    """The target exists and is not a regular file (a directory, a FIFO, a device, a socket)."""

    def __init__(self, mode: int):
        super().__init__(errno.EINVAL, "not a regular file")
        self.mode = mode


class MovedRoot(OSError):
    """A root given by its real path now has a symbolic link on the way to it."""

    def __init__(self, path: str):
        super().__init__(
            errno.ELOOP,
            f"the directory {path!r} is no longer where it was: a part of its path is now a symbolic "
            "link, which is not followed",
        )


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc: ctypes.CDLL | None = None
use_openat2 = _OPENAT2 is not None  # False after the first ENOSYS (or set so by a test)


def _openat2(dirfd: int, path: bytes, flags: int, *, resolve: int) -> int:
    """``openat2(dirfd, path, {flags, 0, resolve})``; OSError as os.open raises it."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    assert _OPENAT2 is not None
    how = _OpenHow(flags | os.O_CLOEXEC, 0, resolve)
    fd = _libc.syscall(
        ctypes.c_long(_OPENAT2),
        ctypes.c_int(dirfd),
        ctypes.c_char_p(path),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return int(fd)


@dataclass(frozen=True)
class Root:
    """A directory every lookup starts from: its descriptor, and its real path (used only to map an
    absolute symlink target that points back inside, never to open anything)."""

    fd: int
    real: str

    @classmethod
    def open(cls, path: str) -> Root:
        """The root at ``path`` (a directory the operator configured; its own links are followed)."""
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        return cls(fd, fd_path(fd) or os.path.realpath(path))

    @classmethod
    def open_exact(cls, path: str) -> Root:
        """The root at ``path``, an absolute real path (a workspace, resolved when its job was loaded),
        opened with no symbolic link anywhere on the way: a directory above it that a job swapped for
        a link since (one whose workspace holds that directory) is refused, never followed.
        :class:`MovedRoot` then."""
        if not os.path.isabs(path):
            raise MovedRoot(path)
        top = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fd = open_beneath(
                Root(top, "/"), path.strip("/") or ".", os.O_RDONLY | os.O_DIRECTORY, no_symlinks=True
            )
        except Outside:
            raise MovedRoot(path) from None
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise MovedRoot(path) from None
            raise
        finally:
            os.close(top)
        return cls(fd, path)

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> Root:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def sub(self, rel: str) -> Root:
        """The directory ``rel`` beneath this root, as a root of its own."""
        fd = open_beneath(self, rel, os.O_RDONLY | os.O_DIRECTORY)
        return Root(fd, fd_path(fd) or os.path.normpath(os.path.join(self.real, rel)))


def fd_path(fd: int) -> str | None:
    """The path the kernel has for ``fd`` (read, never followed)."""
    try:
        path = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    return path if path.startswith("/") else None


_SHOWN_AS_ESCAPE = re.compile("[\\\\\x00-\x1f\x7f\udc80-\udcff]")
_ESCAPE = re.compile(r"\\(\\|x[0-9a-fA-F]{2})")


def shown(name: str) -> str:
    """``name`` (a path as ``os`` decodes it: an undecodable byte carried as a surrogate) as the tools
    show it, valid UTF-8 on one line: such a byte and a control character as ``\\xNN``, a backslash
    as ``\\\\``; everything else as it is. :func:`from_shown` maps it back exactly."""
    return _SHOWN_AS_ESCAPE.sub(_escape_one, name)


def _escape_one(match: re.Match[str]) -> str:
    code = ord(match[0])
    if code == 0x5C:
        return "\\\\"
    return f"\\x{code - 0xDC00 if code >= 0xDC80 else code:02x}"


def from_shown(text: str) -> str:
    """A model's path (or glob pattern) with the escapes of :func:`shown` mapped back to what they
    stand for (a byte that is not text as its surrogate, as ``os`` decodes it). Raises
    :class:`BadPath` for an escape :func:`shown` never makes: of a printable ASCII character (a
    ``.`` or ``/`` is written as itself, never escaped), or of bytes that together are UTF-8 text."""
    if "\\" not in text:
        return text
    decoded = _ESCAPE.sub(_unescape_one, text)
    try:
        again = os.fsdecode(os.fsencode(decoded))
    except UnicodeError:
        raise BadPath("is not valid text (a lone surrogate)") from None
    if again != decoded:
        raise BadPath(
            "escapes bytes that are UTF-8 text (\\xNN is only for a byte that is not); write the text"
        )
    return decoded


def _unescape_one(match: re.Match[str]) -> str:
    if match[1] == "\\":
        return "\\"
    code = int(match[1][1:], 16)
    if 0x20 <= code <= 0x7E:
        raise BadPath(
            f"escapes the character {chr(code)!r} (\\{match[1]}): only a byte that is not text or a control "
            "character is escaped; write it as itself (a backslash as \\\\)"
        )
    return chr(0xDC00 + code) if code >= 0x80 else chr(code)


def relative(path: str, root_real: str, *also: str) -> str:
    """A model's ``path`` as a relative path beneath the root (``.`` for the root itself), collapsed
    in its text. An absolute path is accepted when it names something under the root's real path
    (or one of the other spellings of it in ``also``). Raises :class:`BadPath` or :class:`Outside`."""
    if "\x00" in path:
        raise BadPath("contains a NUL byte")
    try:
        os.fsencode(path)
    except UnicodeEncodeError:
        raise BadPath("is not valid text (a lone surrogate)") from None
    if path.startswith("/"):
        absolute = os.path.normpath(path)
        for root in (root_real, *(os.path.abspath(a) for a in also)):
            rel = _under(root, absolute)
            if rel is not None:
                return rel
        raise Outside(path)
    rel = os.path.normpath(path) if path else "."
    if rel == ".." or rel.startswith("../"):
        raise Outside(path)
    return rel


def _under(root_real: str, absolute: str) -> str | None:
    if absolute == root_real:
        return "."
    prefix = root_real.rstrip("/") + "/"
    return absolute[len(prefix) :] if absolute.startswith(prefix) else None


def open_beneath(root: Root, rel: str, flags: int, *, no_symlinks: bool = False) -> int:
    """A descriptor of ``rel`` (relative, already checked by :func:`relative`) beneath ``root``,
    opened with ``flags`` (no ``O_CREAT``). Symlinks are followed while they stay beneath (none at
    all with ``no_symlinks``). Raises :class:`Outside`, or OSError as ``open`` does."""
    global use_openat2
    if use_openat2:
        resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | (RESOLVE_NO_SYMLINKS if no_symlinks else 0)
        try:
            return _openat2(root.fd, os.fsencode(rel), flags, resolve=resolve)
        except OSError as e:
            if e.errno == errno.ENOSYS:
                use_openat2 = False
            elif e.errno not in _ASK_THE_WALK or (no_symlinks and e.errno == errno.ELOOP):
                raise
    found = _Walk(root, rel, flags, no_symlinks=no_symlinks, parent=False, create=False).run()
    assert isinstance(found, int)
    return found


def parent_beneath(root: Root, rel: str, *, create: bool = False) -> tuple[int, str]:
    """``(descriptor of the directory, name)`` where a file at ``rel`` lives: every directory on the
    way resolved beneath ``root`` (made when ``create``), and a symlink at the name itself followed
    while it stays beneath, as a write through it would. The name may not exist yet."""
    head, name = os.path.split(rel)
    if name in ("", ".", ".."):
        raise IsADirectoryError(errno.EISDIR, "is a directory")
    if use_openat2:
        try:
            fd = open_beneath(root, head or ".", _O_PATH | os.O_DIRECTORY)
        except FileNotFoundError:
            if not create:
                raise
        else:
            try:
                if not stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                    return fd, name
            except FileNotFoundError:
                return fd, name
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # a link at the name: the walk follows it
    found = _Walk(root, rel, _O_PATH, no_symlinks=False, parent=True, create=create).run()
    assert isinstance(found, tuple)
    return found


def open_regular(root: Root, rel: str, *, no_symlinks: bool = False) -> tuple[int, os.stat_result]:
    """``rel`` beneath ``root`` opened for reading, and its stat; :class:`NotRegular` (nothing
    opened) for a directory, FIFO, device or socket. Never blocks."""
    probe = open_beneath(root, rel, _O_PATH, no_symlinks=no_symlinks)
    try:
        seen = os.fstat(probe)
    finally:
        os.close(probe)
    if not stat.S_ISREG(seen.st_mode):
        raise NotRegular(seen.st_mode)
    fd = open_beneath(root, rel, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY, no_symlinks=no_symlinks)
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise NotRegular(found.st_mode)
        if (found.st_dev, found.st_ino) != (seen.st_dev, seen.st_ino):
            raise OSError(errno.EAGAIN, "the file changed while it was being opened")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, found


def _parts(path: str) -> list[str]:
    """The components of ``path`` that name something (no empty ones, no ``.``)."""
    return [p for p in path.split("/") if p not in ("", ".")]


def _not_a_directory() -> NotADirectoryError:
    return NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))


class _Walk:
    """The lookup without openat2 (:meth:`run`): one component at a time, each opened ``O_NOFOLLOW``
    relative to its parent's descriptor; a symlink is read and its target walked in its place (``..``
    pops back to a directory already held, so it cannot leave through a swapped link). It keeps the
    directories walked so far (``stack``: descriptors, the first the caller's root, the others closed
    when the walk ends), the components left (``todo``) and the symlinks followed (``hops``). Each step
    takes one component; a step that ends the walk returns its answer, any other returns None."""

    def __init__(self, root: Root, rel: str, flags: int, *, no_symlinks: bool, parent: bool, create: bool):
        self.root, self.rel, self.flags = root, rel, flags
        self.no_symlinks, self.parent, self.create = no_symlinks, parent, create
        self.stack = [root.fd]
        self.todo = deque(_parts(rel))
        self.hops = 0

    def run(self) -> int | tuple[int, str]:
        try:
            while True:
                found = self.step()
                if found is not None:
                    return found
        finally:
            for fd in self.stack[1:]:
                os.close(fd)

    def follow(self, dirfd: int, name: str) -> None:
        """Walk the target of the symlink ``name`` in ``dirfd`` in its place (an absolute one from the
        root, if it lies beneath it)."""
        self.hops += 1
        if self.hops > MAX_HOPS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
        target = os.readlink(name, dir_fd=dirfd)
        if not target:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))
        rest = list(self.todo)
        if target.startswith("/"):
            inside = _under(self.root.real, os.path.normpath(target))
            if inside is None:
                raise Outside(target)
            while len(self.stack) > 1:
                os.close(self.stack.pop())
            target = inside
        self.todo = deque([*_parts(target), *rest])

    def step(self) -> int | tuple[int, str] | None:
        if not self.todo:  # the root itself (or ``a/..``)
            if self.parent:
                raise IsADirectoryError(errno.EISDIR, "is a directory")
            return os.open(".", self.flags | os.O_CLOEXEC, dir_fd=self.stack[-1])
        name = self.todo.popleft()
        if name == "..":
            if len(self.stack) == 1:
                raise Outside(self.rel)
            os.close(self.stack.pop())
            return None
        top, last = self.stack[-1], not self.todo
        if last and self.parent:
            return self.at_parent(top, name)
        fd = self.component(top, name, last)
        return None if fd is None else self.opened(fd, top, name, last=last)

    def at_parent(self, top: int, name: str) -> tuple[int, str] | None:
        """The last component of a parent lookup: ``(top, name)``, or the link at ``name`` followed."""
        try:
            mode = os.stat(name, dir_fd=top, follow_symlinks=False).st_mode
        except FileNotFoundError:
            mode = 0
        if stat.S_ISLNK(mode) and not self.no_symlinks:
            self.follow(top, name)
            return None
        return os.dup(top), name

    def component(self, top: int, name: str, last: bool) -> int | None:
        """``name`` in ``top`` opened ``O_PATH | O_NOFOLLOW``; None when it was missing and has been
        made (a directory on the way, with ``create``): it is looked at again."""
        try:
            return os.open(name, _O_PATH | os.O_NOFOLLOW, dir_fd=top)
        except FileNotFoundError:
            if not self.create or last:
                raise
        with suppress(FileExistsError):
            os.mkdir(name, 0o777, dir_fd=top)
        self.todo.appendleft(name)
        return None

    def opened(self, fd: int, top: int, name: str, *, last: bool) -> int | None:
        """What the component ``name`` (``fd``, owned from here) makes of the walk: a link followed, a
        directory entered, or, the last one, the answer."""
        try:
            st = os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise
        if stat.S_ISLNK(st.st_mode):
            os.close(fd)
            self.through_link(top, name)
            return None
        if not last:
            if not stat.S_ISDIR(st.st_mode):
                os.close(fd)
                raise _not_a_directory()
            self.stack.append(fd)
            return None
        if self.flags & os.O_PATH:
            if self.flags & os.O_DIRECTORY and not stat.S_ISDIR(st.st_mode):
                os.close(fd)
                raise _not_a_directory()
            return fd
        os.close(fd)
        return self.reopen(top, name)

    def through_link(self, top: int, name: str) -> None:
        if self.no_symlinks:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
        try:
            self.follow(top, name)
        except OSError as e:
            if e.errno != errno.EINVAL:  # no longer a link: look again
                raise
            self.todo.appendleft(name)

    def reopen(self, top: int, name: str) -> int | None:
        """The last component opened with the caller's flags; None when it became a link since (it
        is looked at again, counted as a hop)."""
        try:
            return os.open(name, self.flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=top)
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
            self.todo.appendleft(name)
            self.hops += 1
            if self.hops > MAX_HOPS:
                raise
            return None
