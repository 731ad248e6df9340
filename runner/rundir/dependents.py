"""The unchanged files of a workspace that import a changed one, found without running anything: an
incremental job's note names them ("unchanged, but depends on changed X").

A file's imports are read by the resolver registered for its suffix in :data:`RESOLVERS`: Python
(``.py``, ``.pyi``) through :mod:`ast` (``import a.b``, ``from a.b import c``, relative imports),
JavaScript and TypeScript through a regular expression (``import ... from '...'``, ``import '...'``,
``export ... from '...'``, ``require('...')``, ``import('...')``; relative specifiers only, a package
name is no file of the workspace). A resolver answers the files *of the workspace* a file imports, so
what a file's text says never reaches the model: only paths the manifest lists do.

Extending it: a resolver is a function ``(path, text, tree) -> set[str]`` (the importing file's
``/``-separated path, its text, the :class:`Tree` of the workspace's paths) that returns the paths of
``tree.files`` the file imports, never raising for any text; register it under each suffix it reads
(``RESOLVERS[".rb"] = ruby_imports``). It must stay pure: it sees the tree as a set of paths and the
one text, never the file system.

Python's absolute imports resolve from the workspace's top, the parent of each top-level package
(a directory with ``__init__.py`` whose parent has none: ``src/`` in a ``src/pkg/`` layout), the
importing file's own directory when it is no package (a script's siblings), and, when the top is a
package, from above it under the workspace's own name. ``import a.b.c`` imports ``a/__init__.py``
and ``a/b/__init__.py`` too. Only direct importers are listed (a file importing a dependent is not),
so a cycle of imports is no concern.

Guarantees:
- Pure where it decides: :func:`dependents_of` and the resolvers take texts and sets of paths.
- Bounded: :func:`find` reads only the unchanged regular files the manifest lists whose suffix has a
  resolver, each at most :data:`MAX_FILE_BYTES` (a larger one is skipped, unread), at most
  :data:`MAX_FILES` files and :data:`MAX_TOTAL_BYTES` in all (the rest skipped), and says what it
  skipped and why. A file whose text names no changed file's stem (its words, as whole words) is not
  parsed; that test reads each text once, in time linear in it, however many files changed.
- Beneath the workspace only: every directory on a file's path is opened ``O_NOFOLLOW`` relative to
  its parent's descriptor and the file ``O_NOFOLLOW | O_NONBLOCK`` relative to its directory's, then
  checked with ``fstat`` to be a regular file; no symlink is followed, no FIFO or device read.
- Never raises for a file's content: a syntax error, a null byte, nesting too deep for the parser,
  bytes that are not UTF-8: the file is skipped (``not parsable``) or read with replacements.
- Standard library only; :func:`find` is blocking (callers run it off the event loop).
"""

from __future__ import annotations

import ast
import os
import posixpath
import re
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from .manifest import FILE, Changes, Manifest

MAX_FILE_BYTES = 512 * 1024  # a larger file is not read (generated or vendored, rarely an importer)
MAX_FILES = 20_000  # files read at most
MAX_TOTAL_BYTES = 64 * 1024 * 1024  # bytes read at most
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
TOO_BIG, UNREADABLE, NOT_PARSABLE, PAST_LIMITS = (
    f"over {MAX_FILE_BYTES // 1024} KiB",
    "unreadable",
    "not parsable",
    "past the limits of one night",
)


class Tree:
    """The workspace's paths, as the resolvers see it: ``files`` (``/``-separated, relative), and the
    workspace's own name (a top that is a package is imported under it)."""

    def __init__(self, files: Iterable[str], *, name: str = "") -> None:
        self.files = frozenset(files)
        self.name = name

    @cached_property
    def packages(self) -> frozenset[str]:
        """The directories that are Python packages (they hold ``__init__.py``); ``""`` is the top."""
        return frozenset(
            posixpath.dirname(p)
            for p in self.files
            if posixpath.basename(p) in ("__init__.py", "__init__.pyi")
        )

    @cached_property
    def python_roots(self) -> tuple[str, ...]:
        """The directories an absolute import resolves from (``""`` first): the top, and the parent
        of each top-level package."""
        roots = {""}
        for package in self.packages:
            parent = posixpath.dirname(package)
            if package and parent not in self.packages:
                roots.add(parent)
        return tuple(sorted(roots, key=lambda r: (r != "", r)))


Resolver = Callable[[str, str, Tree], set[str]]


# --- Python --------------------------------------------------------------------------------------


def _join(*parts: str) -> str:
    return "/".join(p for p in parts if p)


def _module_files(tree: Tree, base: str, dotted: str) -> set[str]:
    """The files module ``dotted`` is, under directory ``base``: ``a/b.py`` or ``a/b/__init__.py``
    (and their ``.pyi``); ``dotted == ""`` is the package ``base`` itself."""
    path = _join(base, dotted.replace(".", "/"))
    names = [f"{path}.py", f"{path}.pyi"] if dotted else []
    names += [_join(path, "__init__.py"), _join(path, "__init__.pyi")]
    return {n for n in names if n in tree.files}


def _roots(tree: Tree, here: str) -> list[str]:
    """Where an absolute import in a file of directory ``here`` resolves from."""
    roots = list(tree.python_roots)
    if here not in tree.packages and here not in roots:
        roots.append(here)  # a script imports its siblings
    return roots


def _absolute(tree: Tree, here: str, dotted: str, *, parents: bool = True) -> set[str]:
    """The files ``import dotted`` runs in a file of directory ``here``: the module's and, with
    ``parents``, every enclosing package's ``__init__``."""
    parts = dotted.split(".")
    first = 1 if parents else len(parts)
    found: set[str] = set()
    for root in _roots(tree, here):
        for n in range(first, len(parts) + 1):
            found |= _module_files(tree, root, ".".join(parts[:n]))
    if "" in tree.packages and tree.name and parts[0] == tree.name:  # the top is the package named so
        rest = parts[1:]
        for n in range(first - 1 if parents else len(rest), len(rest) + 1):
            found |= _module_files(tree, "", ".".join(rest[:n]))
    return found


def _relative(tree: Tree, importer: str, level: int, *, module: str | None, names: list[str]) -> set[str]:
    """``from .module import names`` (``level`` dots) in ``importer``: the module, and each name that
    is a submodule. Nothing above the workspace's top."""
    base = posixpath.dirname(importer)
    for _ in range(level - 1):
        if not base:
            return set()
        base = posixpath.dirname(base)
    target = module or ""
    found = _module_files(tree, base, target)
    for name in names:
        found |= _module_files(tree, base, _join(target, name).replace("/", ".")) if name != "*" else set()
    return found


def python_imports(path: str, text: str, tree: Tree) -> set[str]:
    """The workspace's files a Python file imports (anywhere in it: a function, ``if TYPE_CHECKING``).
    Raises ValueError when the text is not Python (the caller counts it ``not parsable``)."""
    try:
        module = ast.parse(text, filename="<workspace file>")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise ValueError(type(e).__name__) from None
    here = posixpath.dirname(path)
    found: set[str] = set()
    for node in ast.walk(module):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found |= _absolute(tree, here, alias.name)
        elif isinstance(node, ast.ImportFrom):
            names = [alias.name for alias in node.names]
            if node.level:
                found |= _relative(tree, path, node.level, module=node.module, names=names)
            elif node.module:
                found |= _absolute(tree, here, node.module)
                for name in names:
                    if name != "*":  # ``from a import b``: b may be a module of package a
                        found |= _absolute(tree, here, f"{node.module}.{name}", parents=False)
    found.discard(path)
    return found


# --- JavaScript and TypeScript -------------------------------------------------------------------

JS_SUFFIXES = (".js", ".jsx", ".mjs", ".cjs", ".ts", ".tsx", ".mts", ".cts")
_JS_SPECIFIER = re.compile(
    r"""(?:\bfrom|\bimport|\brequire\s*\(|\bimport\s*\()\s*(['"`])([^'"`\n\\]{1,512})\1"""
)
_JS_AS_TS = {".js": (".ts", ".tsx"), ".jsx": (".tsx",), ".mjs": (".mts",), ".cjs": (".cts",)}


def js_imports(path: str, text: str, tree: Tree) -> set[str]:
    """The workspace's files a JavaScript or TypeScript file imports by a relative specifier
    (``./x``, ``../y/z.js``): the file itself, with one of :data:`JS_SUFFIXES`, its ``index``, or
    the TypeScript file a ``.js`` specifier stands for."""
    here = posixpath.dirname(path)
    found: set[str] = set()
    for match in _JS_SPECIFIER.finditer(text):
        spec = match[2].split("?", 1)[0]
        if not (spec in (".", "..") or spec.startswith(("./", "../"))):
            continue  # a package, an alias or a URL: no file of the workspace by its name
        target = posixpath.normpath(posixpath.join(here, spec))
        if target == ".." or target.startswith("../") or target.startswith("/"):
            continue
        target = "" if target == "." else target
        stem, suffix = posixpath.splitext(target)
        candidates = [
            target,
            *(target + s for s in JS_SUFFIXES),
            *(_join(target, "index" + s) for s in JS_SUFFIXES),
        ]
        candidates += [stem + s for s in _JS_AS_TS.get(suffix, ())]
        hit = next((c for c in candidates if c and c in tree.files), None)
        if hit is not None:
            found.add(hit)
    found.discard(path)
    return found


RESOLVERS: dict[str, Resolver] = {".py": python_imports, ".pyi": python_imports}
RESOLVERS.update({suffix: js_imports for suffix in JS_SUFFIXES})


def resolver_for(path: str) -> Resolver | None:
    return RESOLVERS.get(posixpath.splitext(path)[1])


# --- deciding ------------------------------------------------------------------------------------


@dataclass
class Dependents:
    """What :func:`find` found: ``on`` each changed path, the unchanged files that import it (sorted);
    how many files it parsed, and how many it skipped, by reason."""

    on: dict[str, list[str]] = field(default_factory=dict)
    examined: int = 0
    skipped: dict[str, int] = field(default_factory=dict)

    @property
    def files(self) -> list[str]:
        """Every unchanged file that imports a changed one, once, sorted."""
        return sorted({f for importers in self.on.values() for f in importers})

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1


def _stem(path: str) -> str:
    stem = posixpath.splitext(posixpath.basename(path))[0]
    return posixpath.basename(posixpath.dirname(path)) if stem in ("__init__", "index") else stem


_WORD = re.compile(r"\w+")


class ImportFilter:
    """Whether a text could import one of ``changed``: it holds, as whole words, every word of a changed
    file's stem (or its package's name, for an ``__init__``/``index``); a relative import of a
    package's top needs no name, so then every text could. Made once for all the texts of a night;
    each text is read once (time linear in its length, whatever the number of changed files)."""

    def __init__(self, changed: Iterable[str]) -> None:
        self.always = False
        self.by_first: dict[str, list[frozenset[str]]] = {}  # a stem's words, by one of them
        for path in changed:
            words = frozenset(_WORD.findall(_stem(path)))
            if not words or posixpath.splitext(posixpath.basename(path))[0] in ("__init__", "index"):
                self.always = True
            else:
                self.by_first.setdefault(min(words), []).append(words)

    def might_import(self, text: str) -> bool:
        if self.always:
            return True
        words = set(_WORD.findall(text))
        return any(stem <= words for w in words & self.by_first.keys() for stem in self.by_first[w])


def dependents_of(
    tree: Tree, changed: set[str], sources: Iterable[tuple[str, str]], *, result: Dependents | None = None
) -> Dependents:
    """Which of ``sources`` (``(path, text)`` of unchanged files) import one of ``changed``. Pure."""
    result = result if result is not None else Dependents()
    on: dict[str, set[str]] = {}
    names = ImportFilter(changed)
    for path, text in sources:
        resolver = resolver_for(path)
        if resolver is None or not names.might_import(text):
            continue
        try:
            imported = resolver(path, text, tree)
        except ValueError:
            result.skip(NOT_PARSABLE)
            continue
        result.examined += 1
        for target in imported & changed:
            on.setdefault(target, set()).add(path)
    result.on = {target: sorted(on[target]) for target in sorted(on)}
    return result


# --- reading, beneath the workspace --------------------------------------------------------------


def read_beneath(top: int, path: str, cap: int) -> bytes | str:
    """The bytes of regular file ``path`` beneath directory descriptor ``top``, no link followed; or
    why not (:data:`TOO_BIG`, :data:`UNREADABLE`)."""
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return UNREADABLE
    dir_fd = top
    try:
        for part in parts[:-1]:
            fd = os.open(part, _DIR_FLAGS, dir_fd=dir_fd)
            if dir_fd != top:
                os.close(dir_fd)
            dir_fd = fd
        fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return UNREADABLE
    finally:
        if dir_fd != top:
            os.close(dir_fd)
    with os.fdopen(fd, "rb") as f:
        try:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                return UNREADABLE
            if st.st_size > cap:
                return TOO_BIG
            data = f.read(cap + 1)
        except OSError:
            return UNREADABLE
    return TOO_BIG if len(data) > cap else data


def _sources(
    workspace: Path, paths: list[str], result: Dependents, *, sizes: dict[str, int]
) -> Iterator[tuple[str, str]]:
    """The texts of ``paths``, read beneath ``workspace`` within the bounds; what is left out counted."""
    top = os.open(workspace, _DIR_FLAGS)
    try:
        files = total = 0
        for path in paths:
            if sizes.get(path, 0) > MAX_FILE_BYTES:
                result.skip(TOO_BIG)
                continue
            if files >= MAX_FILES or total + sizes.get(path, 0) > MAX_TOTAL_BYTES:
                result.skip(PAST_LIMITS)
                continue
            data = read_beneath(top, path, MAX_FILE_BYTES)
            if isinstance(data, str):
                result.skip(data)
                continue
            files += 1
            total += len(data)
            yield path, data.decode("utf-8", "replace")
    finally:
        os.close(top)


def find(workspace: Path, manifest: Manifest, changes: Changes) -> Dependents:
    """The unchanged files of ``manifest`` (the workspace now) that import a file ``changes`` added,
    changed or removed. Blocking. OSError only when the workspace itself cannot be opened."""
    changed = set(changes.added) | set(changes.changed) | set(changes.removed)
    result = Dependents()
    if not changed:
        return result
    tree = Tree(
        [p for p, e in manifest.entries.items() if e.get("kind") == FILE] + changes.removed,
        name=workspace.name,
    )
    sizes = {p: int(e.get("size", 0)) for p, e in manifest.entries.items()}
    candidates = sorted(
        p
        for p, e in manifest.entries.items()
        if e.get("kind") == FILE and p not in changed and resolver_for(p) is not None
    )
    return dependents_of(tree, changed, _sources(workspace, candidates, result, sizes=sizes), result=result)
