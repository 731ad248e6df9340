"""Walking and removing a directory tree of any depth, for what meets trees it did not make: a run's
job directories (prune), a job's directory (its store on resume), a memory folder (a resume's rebuild).

A sandboxed ``bash`` makes a chain of directories as deep as it likes (``mkdir d && cd d`` in a loop),
deeper than a path can name. ``os.walk``, ``Path.rglob`` and ``shutil.rmtree`` recurse in Python on
3.11 (a ``RecursionError`` past 1,000 levels) and hold a descriptor per level; these do neither.

Guarantees:

- No recursion, and a bounded number of descriptors whatever the depth: :func:`walk` keeps one
  directory open at a time, :func:`remove_tree` two.
- Links are never followed: a link is listed (with its own ``lstat``) and removed as a link; what it
  points at is never touched.
- :func:`walk` never raises for what is beneath its top: an entry that vanishes or cannot be opened,
  or lies deeper than a path can name (``ENAMETOOLONG``), is left out.
- :func:`remove_tree` removes a tree of any depth, a path too long to name included: a directory's
  files are unlinked, its subdirectories moved up into the top directory (renamed beneath its
  descriptor, in one file system), and the emptied directory removed, so nothing is ever reached
  through a long path.
- :func:`walk_beneath` walks beneath a directory descriptor, every directory opened ``O_NOFOLLOW``
  relative to its parent's, with at most :data:`OPEN_DIRS` descriptors open whatever the depth (a
  directory whose descriptor was closed is opened again from the nearest open one above it, each
  step checked to be the directory first seen): a tree deeper than its ``max_depth`` raises
  :class:`TooDeep`, never a ``RecursionError`` nor ``EMFILE``.
"""

from __future__ import annotations

import errno
import itertools
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_TAKEN = frozenset({errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR, errno.ENOTDIR})  # the spare name is used
OPEN_DIRS = 32  # directory descriptors walk_beneath holds at most (its caller's top not counted)


def walk(top: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """``(path, lstat)`` of every entry beneath ``top`` that is not a directory (files, links, ...), in
    no set order; directories are entered, never through a link."""
    stack = [top]
    while stack:
        here = stack.pop()
        with suppress(OSError):
            with os.scandir(here) as entries:
                for entry in entries:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISDIR(st.st_mode):
                        stack.append(Path(entry.path))
                    else:
                        yield Path(entry.path), st


def tree_bytes(top: Path) -> int:
    """The sizes of everything beneath ``top`` that is not a directory (a link counted as a link)."""
    return sum(st.st_size for _, st in walk(top))


def remove_tree(path: Path, *, ignore_errors: bool = False) -> None:
    """``path`` removed with everything beneath it (a link or a file: itself). Raises OSError as
    ``shutil.rmtree`` does (FileNotFoundError when there is nothing), unless ``ignore_errors``."""
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            os.unlink(path)
            return
        top = os.open(path, _DIR_FLAGS)
        try:
            _empty(top)
        finally:
            os.close(top)
        os.rmdir(path)
    except OSError:
        if not ignore_errors:
            raise


def _empty(top: int) -> None:
    """Everything in the directory ``top`` removed: a file or link unlinked; a directory's entries
    renamed up into ``top`` (to spare names), then the directory removed; until ``top`` is empty."""
    spare = itertools.count()
    while names := os.listdir(top):
        for name in names:
            with suppress(FileNotFoundError):  # gone meanwhile
                mode = os.stat(name, dir_fd=top, follow_symlinks=False).st_mode
                if not stat.S_ISDIR(mode):
                    os.unlink(name, dir_fd=top)
                    continue
                sub = os.open(name, _DIR_FLAGS, dir_fd=top)
                try:
                    for child in os.listdir(sub):
                        _clear(sub, child, top, spare=spare)
                finally:
                    os.close(sub)
                os.rmdir(name, dir_fd=top)


def _clear(sub: int, child: str, top: int, *, spare: Iterator[int]) -> None:
    """``child`` of ``sub`` unlinked, or, a directory, renamed into ``top`` under the first spare name
    free for it (one that replaces an empty directory there is free: all of it goes)."""
    try:
        if not stat.S_ISDIR(os.stat(child, dir_fd=sub, follow_symlinks=False).st_mode):
            os.unlink(child, dir_fd=sub)
            return
    except FileNotFoundError:
        return  # gone meanwhile
    while True:
        try:
            os.rename(child, f".rm-{next(spare)}", src_dir_fd=sub, dst_dir_fd=top)
            return
        except OSError as e:
            if e.errno not in _TAKEN:
                raise


# --- a walk beneath a directory descriptor, of any depth ---------------------------------------------


class TooDeep(OSError):
    """A directory lies deeper beneath the top than the walk's ``max_depth``."""

    def __init__(self, path: str, max_depth: int):
        super().__init__(errno.ELOOP, f"a directory more than {max_depth} levels deep")
        self.path = path  # the first one found, relative to the top (its first characters)
        self.max_depth = max_depth


@dataclass(frozen=True)
class Found:
    """One entry of a directory beneath the walk's top. ``dir_fd`` is its directory's descriptor, open
    until the walk goes on (use it at once); ``dir`` that directory's path relative to the top ("" for
    the top, else ending in ``/``; "" throughout when the walk keeps no paths); ``st`` its ``lstat``
    (None when that failed, ``error`` then says why). A directory that could not be entered is yielded
    a second time, with its ``st`` and the ``error``."""

    dir_fd: int
    dir: str
    name: str
    st: os.stat_result | None
    depth: int  # 1 for the top's own entries
    error: OSError | None = None


@dataclass
class _Frame:
    name: str  # beneath its parent's directory
    dir: str  # its path relative to the top, "" or ending in "/"
    ident: tuple[int, int]  # (st_dev, st_ino) when it was first opened
    fd: int | None
    subdirs: list[tuple[str, os.stat_result]] = field(default_factory=list)  # to enter, the next last


def walk_beneath(
    top: int,
    *,
    max_depth: int | None = None,
    skip: frozenset[str] = frozenset(),
    paths: bool = True,
    open_dirs: int = OPEN_DIRS,
    look: Callable[[os.stat_result], bool] | None = None,
) -> Iterator[Found]:
    """Every entry beneath the directory descriptor ``top`` (the caller's, never closed here), each
    directory's entries in name order, a directory yielded before it is entered; no link followed.
    ``skip``: names among the top's own entries left out (neither yielded nor entered). A directory that
    cannot be opened or listed, or was swapped for another after it was listed, is yielded again with
    its ``error``, not entered. :class:`TooDeep` before a directory more than ``max_depth`` levels down
    is entered. Without ``paths``, ``dir`` is always "" (a walk of any depth keeps no long paths).
    ``look``: given a directory's ``lstat``, whether all its entries are looked at and yielded; when it
    says no, only its subdirectories are (told from the listing's file types, no ``lstat`` of the rest).
    Raises OSError when ``top`` itself cannot be listed."""
    open_dirs = max(2, open_dirs)
    here = os.fstat(top)
    stack = [_Frame("", "", _ident(here), top)]
    try:
        yield from _list(stack[0], top, 1, skip=skip, every=look is None or look(here))
        while stack:
            frame = stack[-1]
            if not frame.subdirs:
                _close(stack.pop(), top)
                continue
            name, st = frame.subdirs.pop()
            depth = len(stack)  # of the directory about to be entered
            path = f"{frame.dir}{name}/" if paths else ""
            if max_depth is not None and depth > max_depth:
                raise TooDeep(path[:200] if paths else f"({depth} levels down)", max_depth)
            parent = _reopen(stack, top, open_dirs)
            if parent is None:  # a directory above was swapped meanwhile: what is left of it is left out
                frame.subdirs.clear()
                continue
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
            except OSError as e:
                yield Found(parent, frame.dir, name, st, depth, error=e)
                continue
            child = _Frame(name, path, _ident(st), fd)
            try:
                if _ident(os.fstat(fd)) != child.ident:
                    raise OSError(errno.EAGAIN, "replaced while it was walked")
                listed = list(_list(child, fd, depth + 1, skip=frozenset(), every=look is None or look(st)))
            except OSError as e:
                os.close(fd)
                yield Found(parent, frame.dir, name, st, depth, error=e)
                continue
            stack.append(child)
            for old in stack[1:-open_dirs]:  # the window: the oldest ones below the top are closed
                _close(old, top)
            yield from listed
    finally:
        for frame in stack:
            _close(frame, top)


def _ident(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _close(frame: _Frame, top: int) -> None:
    if frame.fd is not None and frame.fd != top:
        os.close(frame.fd)
    frame.fd = None


def _list(frame: _Frame, fd: int, depth: int, *, skip: frozenset[str], every: bool) -> Iterator[Found]:
    """The entries of ``frame``'s directory (open as ``fd``; all of them, or with ``every`` false only its
    subdirectories), its subdirectories noted in it to enter later. Listing first, so an OSError of the
    listing is raised before anything is yielded."""
    with os.scandir(fd) as listing:
        entries = sorted((entry for entry in listing if entry.name not in skip), key=lambda e: e.name)
    found: list[Found] = []
    for entry in entries:
        try:
            if not every and not entry.is_dir(follow_symlinks=False):  # its type from the listing
                continue
            st = entry.stat(follow_symlinks=False)  # lstat beneath fd
        except FileNotFoundError:
            continue  # gone meanwhile
        except OSError as e:
            found.append(Found(fd, frame.dir, entry.name, None, depth, error=e))
            continue
        if stat.S_ISDIR(st.st_mode):
            frame.subdirs.append((entry.name, st))
        found.append(Found(fd, frame.dir, entry.name, st, depth))
    frame.subdirs.reverse()
    return iter(found)


def _reopen(stack: list[_Frame], top: int, open_dirs: int) -> int | None:
    """The newest frame's descriptor; opened again when the window had closed it, from the nearest open
    frame above it one name at a time, each checked to be the directory first seen. None when one on
    the way is no longer that directory."""
    k = len(stack) - 1
    if stack[k].fd is not None:
        return stack[k].fd
    while stack[k].fd is None:
        k -= 1
    for frame in stack[k + 1 :]:
        parent = stack[k].fd
        assert parent is not None
        try:
            fd = os.open(frame.name, _DIR_FLAGS, dir_fd=parent)
        except OSError:
            return None
        frame.fd = fd
        if _ident(os.fstat(fd)) != frame.ident:
            return None
        k += 1
    for old in stack[1:-open_dirs]:
        _close(old, top)
    return stack[-1].fd
