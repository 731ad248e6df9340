"""The git commit a workspace has checked out and its paths that differ from it, read by ``git`` run in
the sandbox: the manifest's git record (``manifest.jsonl``'s head).

A repository's own configuration can make git run commands (``core.fsmonitor``, filters in
``.gitattributes``, a submodule's configuration), and a workspace's ``.git`` is whatever an earlier job's
tools, or a commit, left there. So git never runs as the runner.

Guarantees:
- git runs only under bubblewrap (:mod:`runner.tools.sandbox`): the workspace read-only, no network,
  an environment built from scratch (no key of the runner's), never root, with a deadline. Whatever a
  repository's configuration makes it run is sandboxed like a ``bash`` call.
- The sandbox holds the repository (the nearest directory at or above the workspace that has a ``.git``),
  read-only, so git can read its store; git is asked about the workspace's paths only. A repository
  whose store is elsewhere (a ``.git`` file naming another directory: a worktree, a submodule) gives
  no git record.
- No sandbox on this machine (``bwrap_problem``), or no ``.git`` above the workspace: no git record,
  and nothing is run.
- Read-only: no index lock taken (``GIT_OPTIONAL_LOCKS=0``), fsmonitor off, submodules not entered.
- An answer that did not come whole (git failed, timed out, or its output passed the sandbox's cap)
  gives the commit with ``complete: False``; no commit, or not a repository: no git record.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

from ..rundir.store import in_thread
from .sandbox import OUTPUT_LIMIT, bwrap_problem, run_command

GIT_TIMEOUT_S = 10.0
SEPARATOR = "\x1e"  # between the three answers: the commit, the workspace's prefix, the status
_GIT = (
    "GIT_OPTIONAL_LOCKS=0 GIT_CONFIG_NOSYSTEM=1 GIT_TERMINAL_PROMPT=0 LC_ALL=C "
    "git -c core.fsmonitor=false -c core.untrackedCache=false -c safe.directory='*'"
)


def git_command(workspace: str) -> str:
    """The one shell command that prints the three answers, each after :data:`SEPARATOR`; its exit code
    says which step failed (3: no commit, 4: no status)."""
    here = shlex.quote(workspace)
    return (
        f"cd {here} || exit 3; "
        f"commit=$({_GIT} rev-parse --verify -q HEAD 2>/dev/null) || exit 3; "
        f"printf '\\036%s\\036' \"$commit\"; "
        f"{_GIT} rev-parse --show-prefix 2>/dev/null; printf '\\036'; "
        f"{_GIT} status --porcelain=v1 -z --untracked-files=all --ignore-submodules=all -- . "
        "2>/dev/null || exit 4"
    )


def parse(output: str, *, exit_code: int | None, whole: bool) -> dict[str, Any] | None:
    """The git record from :func:`git_command`'s output (pure): the commit, the dirty paths relative to
    the workspace, and whether the status came whole (``whole``: not cut at the sandbox's output cap;
    a cut status loses its last, partial record). Paths that are not UTF-8 show their bytes as ``\\xNN``,
    as the sandbox decodes them."""
    if exit_code == 3 or SEPARATOR not in output:
        return None
    _, commit, prefix, status = (output.split(SEPARATOR, 3) + ["", "", ""])[:4]
    if not whole:
        status = status.rpartition("\0")[0]
    commit, prefix = commit.strip(), prefix.strip()
    if not commit:
        return None
    dirty: list[str] = []
    records = iter(status.split("\0"))
    for record in records:
        if len(record) < 4:
            continue
        code, path = record[:2], record[3:]
        if code[0] in "RC":  # a rename or copy: its source follows as the next record
            next(records, None)
        dirty.append(path.removeprefix(prefix))
    complete = exit_code == 0 and whole
    return {"commit": commit, "dirty": sorted(set(dirty)), "complete": complete}


def repository_of(workspace: Path) -> Path | None:
    """The nearest directory at or above ``workspace`` (resolved) with a ``.git`` entry, or None."""
    here = workspace.resolve()
    for directory in (here, *here.parents):
        if os.path.lexists(directory / ".git"):
            return directory
    return None


async def git_state(workspace: Path) -> dict[str, Any] | None:
    """The workspace's git record, read in the sandbox; None when there is no sandbox here, no git, or
    no repository with a commit."""
    repository = await in_thread(repository_of, abandon_on_cancel=False)(workspace)
    if repository is None or await in_thread(bwrap_problem, abandon_on_cancel=False)() is not None:
        return None
    done = await run_command(
        git_command(str(workspace.resolve())),
        workspace=str(repository),
        writable=False,
        network=False,
        sandbox="bwrap",
        timeout_s=GIT_TIMEOUT_S,
    )
    return parse(done.output, exit_code=done.exit_code, whole=done.total_bytes <= OUTPUT_LIMIT)
