"""Real attacks on the file tools (issue 24), as a hostile job on the same workspace would make them.

- A symlink race: a process swaps a real directory ``d`` and a symlink to a directory outside (or to
  ``/proc/self``) with ``renameat2(RENAME_EXCHANGE)`` in a tight loop while the toolset reads, writes,
  greps and globs through ``d`` thousands of times: nothing outside is ever read, listed or created,
  and the race really happened (some calls found the link and were refused, counted).
- A regular expression with exponential backtracking (``(a+)+$``): grep answers at its deadline with
  an error result, its process is gone, and the event loop never stalls (a 10 ms ticker's largest gap).
- Bad inputs (huge and negative numbers, NUL bytes, lone surrogates, wrong types), each an error
  result or a plain answer, never an exception; a directory deeper than a path can name is skipped.
- Symlinks that stay inside the workspace keep working.
"""

from __future__ import annotations

import errno
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from runner.config import Limits
from runner.tools import beneath
from runner.tools.toolset import Toolset

pytestmark = pytest.mark.anyio

RENAMEAT2 = {"x86_64": 316, "aarch64": 276}.get(platform.machine())
INSIDE, OUTSIDE = "INSIDE-TEXT-41", "OUTSIDE-MARKER-97"
SWAPPER = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
a, b = os.fsencode(sys.argv[1]), os.fsencode(sys.argv[2])
end = time.monotonic() + float(sys.argv[3])
n = 0
while time.monotonic() < end:
    for _ in range(500):
        if libc.syscall(ctypes.c_long(int(sys.argv[4])), ctypes.c_int(-100), a, \
ctypes.c_int(-100), b, 2) != 0:
            sys.exit(ctypes.get_errno())
        n += 1
"""

needs_renameat2 = pytest.mark.skipif(RENAMEAT2 is None, reason="renameat2 number unknown on this machine")


def call(name: str, args: object, id: str = "toolu_1") -> dict:  # noqa: A002
    return {"type": "tool_use", "id": id, "name": name, "input": args}


def text(result: dict) -> str:
    return result["content"] if isinstance(result["content"], str) else str(result["content"])


class Swapper:
    """A process exchanging ``ws/d`` (a real directory) and ``ws/x`` (a symlink) until stopped."""

    def __init__(self, ws: Path):
        self.process = subprocess.Popen(
            [sys.executable, "-c", SWAPPER, str(ws / "d"), str(ws / "x"), "60", str(RENAMEAT2)]
        )

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


def race_tree(tmp_path: Path, link_to: str | None = None) -> tuple[Path, Path]:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    (ws / "d").mkdir(parents=True)
    outside.mkdir()
    (ws / "d" / "secret.txt").write_text(f"{INSIDE}\n")
    (ws / "d" / "environ").write_text(f"{INSIDE}\n")
    (outside / "secret.txt").write_text(f"{OUTSIDE}\n")
    (outside / "outside-only.txt").write_text(f"{OUTSIDE}\n")
    (ws / "x").symlink_to(link_to or outside)
    return ws, outside


async def batches(tools: Toolset, calls: list[dict], size: int = 50) -> list[dict]:
    """Every call run (``Toolset.run``: the repeat guard of a batch would stop the same call after
    three), ``size`` at a time concurrently."""
    results: list[dict] = [{}] * len(calls)

    async def one(i: int) -> None:
        results[i] = await tools.run(calls[i])

    for at in range(0, len(calls), size):
        async with anyio.create_task_group() as tg:
            for i in range(at, min(at + size, len(calls))):
                tg.start_soon(one, i)
    return results


def tally(results: list[dict], secret: str) -> dict[str, int]:
    counts = {"attempted": len(results), "leaked": 0, "inside": 0, "refused": 0, "other": 0}
    for result in results:
        body = text(result)
        if secret in body:
            counts["leaked"] += 1
        elif INSIDE in body:
            counts["inside"] += 1
        elif result.get("is_error") and "outside" in body:
            counts["refused"] += 1
        else:
            counts["other"] += 1
    return counts


@needs_renameat2
@pytest.mark.parametrize("lookup", ["openat2", "walk"])
async def test_reads_through_a_swapped_symlink_never_leave_the_workspace(
    tmp_path, store, monkeypatch, lookup
):
    monkeypatch.setattr(beneath, "use_openat2", lookup == "openat2")
    ws, _ = race_tree(tmp_path)
    swapper = Swapper(ws)
    try:
        async with Toolset(str(ws), ("read",), store) as tools:
            results = await batches(
                tools, [call("read", {"file_path": "d/secret.txt"}, f"r{i}") for i in range(5000)]
            )
    finally:
        swapper.stop()
    counts = tally(results, OUTSIDE)
    print(f"read race ({lookup}): {counts}")
    assert counts["leaked"] == 0, counts
    assert counts["refused"] > 0 and counts["inside"] > 0, counts  # the race really happened, both ways


@needs_renameat2
async def test_a_swap_to_proc_self_never_reads_the_runners_environment(tmp_path, store, monkeypatch):
    canary = "canary-5e1f-0d2a-environ"
    monkeypatch.setenv("ATTACK_CANARY", canary)
    ws, _ = race_tree(tmp_path, link_to="/proc/self")
    swapper = Swapper(ws)
    try:
        async with Toolset(str(ws), ("read",), store) as tools:
            results = await batches(
                tools, [call("read", {"file_path": "d/environ"}, f"e{i}") for i in range(5000)]
            )
    finally:
        swapper.stop()
    counts = tally(results, canary)
    print(f"/proc/self race: {counts}")
    assert counts["leaked"] == 0, counts
    assert not any("ATTACK_CANARY" in text(r) or "PATH=" in text(r) for r in results)
    assert counts["refused"] > 0 and counts["inside"] > 0, counts


@needs_renameat2
@pytest.mark.parametrize("lookup", ["openat2", "walk"])
async def test_writes_through_a_swapped_symlink_create_nothing_outside(tmp_path, store, monkeypatch, lookup):
    monkeypatch.setattr(beneath, "use_openat2", lookup == "openat2")
    ws, outside = race_tree(tmp_path)
    swapper = Swapper(ws)
    try:
        async with Toolset(str(ws), ("read", "write", "edit"), store) as tools:
            results = await batches(
                tools,
                [
                    call("write", {"file_path": "d/new.txt", "content": f"{INSIDE}\n"}, f"w{i}")
                    for i in range(2000)
                ],
                size=1,
            )
            edits = await batches(
                tools,
                [
                    call(
                        "edit",
                        {"file_path": "d/secret.txt", "old_string": INSIDE, "new_string": INSIDE},
                        f"x{i}",
                    )
                    for i in range(500)
                ],
                size=1,
            )
    finally:
        swapper.stop()
    wrote = sum(1 for r in results if not r.get("is_error"))
    refused = sum(1 for r in results if r.get("is_error") and "outside" in text(r))
    print(
        f"write race ({lookup}): attempted {len(results)}, wrote {wrote}, refused {refused}; "
        f"edit: {sum(1 for r in edits if not r.get('is_error'))} edited"
    )
    assert sorted(os.listdir(outside)) == ["outside-only.txt", "secret.txt"]  # nothing created outside
    assert (outside / "secret.txt").read_text() == f"{OUTSIDE}\n"
    assert wrote > 0 and refused > 0, (wrote, refused)
    real = ws / "d" if (ws / "d").is_dir() and not (ws / "d").is_symlink() else ws / "x"
    assert (real / "new.txt").read_text() == f"{INSIDE}\n"
    assert not [n for n in os.listdir(real) if n.endswith("-tmp")]  # no temporary file left behind


@needs_renameat2
async def test_grep_and_glob_over_a_swapped_symlink_never_list_outside(tmp_path, store):
    ws, _ = race_tree(tmp_path)
    swapper = Swapper(ws)
    try:
        async with Toolset(str(ws), ("glob", "grep"), store) as tools:
            globs = await batches(
                tools,
                [call("glob", {"pattern": "*", "path": "d"}, f"g{i}") for i in range(1500)]
                + [call("glob", {"pattern": "d/*"}, f"h{i}") for i in range(1500)],
            )
            greps = await batches(
                tools,
                [call("grep", {"pattern": "MARKER|TEXT", "path": "d"}, f"p{i}") for i in range(150)],
                size=10,
            )
    finally:
        swapper.stop()
    for results in (globs, greps):
        assert not [r for r in results if OUTSIDE in text(r) or "outside-only" in text(r)]
    listed = sum(1 for r in globs if "secret.txt" in text(r))
    found = sum(1 for r in greps if INSIDE in text(r))
    refused = sum(1 for r in globs + greps if r.get("is_error") and "outside" in text(r))
    print(
        f"glob race: {len(globs)} calls, {listed} listed d; grep race: {len(greps)} calls, {found} found; "
        f"{refused} refused"
    )
    assert listed > 0 and found > 0 and refused > 0


# --- a regular expression that never ends ---------------------------------------------------------


def grep_workers() -> list[int]:
    """This process's children running the grep worker."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and b"runner.tools.grep_worker" in cmdline:
            found.append(int(pid))
    return found


async def test_a_catastrophic_regex_answers_at_its_deadline_and_never_stalls_the_loop(tmp_path, store):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "evil.txt").write_text(("a" * 40 + "b\n") * 50)
    gaps: list[float] = []

    async def ticker() -> None:
        last = time.monotonic()
        while True:
            await anyio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    kept = set(grep_workers())  # idle workers kept from earlier calls are not this call's
    async with Toolset(str(ws), ("grep",), store) as tools:
        tools.deadline_s = 1.5
        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker)
            started = time.monotonic()
            result = await tools.run(call("grep", {"pattern": "(a+)+$"}))
            took = time.monotonic() - started
            tg.cancel_scope.cancel()
    assert result.get("is_error") and "did not finish within 1.5 s" in text(result), result
    assert took < 1.5 + 2, took
    assert max(gaps) < 2.0, max(gaps)  # the loop ran on; in practice a few tens of ms
    assert set(grep_workers()) <= kept  # its worker killed and reaped, none left busy


async def test_a_cancelled_grep_kills_its_process(tmp_path, store):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "evil.txt").write_text(("a" * 40 + "b\n") * 50)
    kept = set(grep_workers())
    async with Toolset(str(ws), ("grep",), store) as tools:
        with anyio.move_on_after(0.5):
            await tools.run(call("grep", {"pattern": "(a+)+$"}))
    assert set(grep_workers()) <= kept


async def test_a_finished_grep_keeps_its_worker_for_the_next_call(tmp_path, store):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.py").write_text("def f():\n    pass\n")
    async with Toolset(str(ws), ("grep",), store) as tools:
        first = await tools.run(call("grep", {"pattern": "^def "}, "toolu_g1"))
        after_first = set(grep_workers())
        second = await tools.run(call("grep", {"pattern": "pass"}, "toolu_g2"))
        assert set(grep_workers()) == after_first  # the same worker answered: none started, none left
    assert "a.py:1:def f():" in text(first) and "a.py:2:    pass" in text(second)


async def test_one_job_s_catastrophic_greps_do_not_starve_another_job_s_grep(tmp_path, store):
    from runner.rundir.store import JobStore
    from runner.tools.grep_pool import MOST

    hostile_ws, victim_ws = tmp_path / "hostile", tmp_path / "victim"
    hostile_ws.mkdir()
    victim_ws.mkdir()
    (hostile_ws / "evil.txt").write_text(("a" * 40 + "b\n") * 50)
    (victim_ws / "notes.txt").write_text("hello TODO world\n")
    other = JobStore(tmp_path / "run" / "victim")
    await other.open()
    hostile, victim = Toolset(str(hostile_ws), ("grep",), store), Toolset(str(victim_ws), ("grep",), other)
    hostile.deadline_s = victim.deadline_s = 2.5
    found: dict[str, object] = {}

    async def attack() -> None:
        results = await hostile.run_batch([call("grep", {"pattern": "(a+)+$"}, f"g{i}") for i in range(MOST)])
        found["hostile"] = [bool(r.get("is_error")) for r in results]

    async def meanwhile() -> None:
        await anyio.sleep(0.5)  # the hostile batch holds its workers by now
        started = time.monotonic()
        result = await victim.run(call("grep", {"pattern": "TODO"}, "v1"))
        found["victim"] = (time.monotonic() - started, result)

    async with anyio.create_task_group() as tg:
        tg.start_soon(attack)
        tg.start_soon(meanwhile)
    took, result = found["victim"]
    assert not result.get("is_error") and "notes.txt:1:hello TODO world" in text(result), result
    assert took < 1.0, took  # it waited for no hostile grep (before: until their deadline, then failed)
    assert found["hostile"] == [True] * MOST  # each ran, or waited for its job's turn, to its deadline


async def test_a_subagent_has_its_job_s_share_and_another_job_its_own(tmp_path):
    from runner.tools.shares import share_of

    job = share_of(tmp_path / "run" / "job")
    assert share_of(tmp_path / "run" / "job" / "agents" / "job~1") is job
    assert share_of(tmp_path / "run" / "other") is not job


def peak_rss_mib(pid: int) -> int:
    """A process's peak resident memory (VmHWM), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    raise AssertionError(f"no VmHWM for {pid}")


def address_space_limit(pid: int) -> int:
    """A process's soft RLIMIT_AS in bytes (0: unlimited)."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max address space"):
            soft = line.split()[3]
            return 0 if soft == "unlimited" else int(soft)
    raise AssertionError(f"no address space limit for {pid}")


async def test_a_sparse_gigabyte_line_costs_the_grep_worker_little_memory(tmp_path, store):
    ws = tmp_path / "ws"
    ws.mkdir()
    with open(ws / "big.txt", "wb") as f:  # text, then a hole to 1 GiB: one line with no newline, no disk
        f.write(b"needle here\n" + b"a" * 4096)
        f.truncate(1 << 30)
    (ws / "small.txt").write_text("another needle\n")
    async with Toolset(str(ws), ("grep",), store) as tools:
        tools.deadline_s = 30
        result = await tools.run(call("grep", {"pattern": "needle"}))
        workers = grep_workers()  # the worker that answered is kept, idle
        peaks = {pid: peak_rss_mib(pid) for pid in workers}
        soft = {pid: address_space_limit(pid) for pid in workers}
    assert not result.get("is_error"), result
    assert "big.txt:1:needle here" in text(result) and "small.txt:1:another needle" in text(result)
    assert peaks and max(peaks.values()) < 100, peaks  # the old worker read the line whole: over 1 GiB
    assert all(0 < most <= 1 << 30 for most in soft.values()), soft  # each worker's RLIMIT_AS: 1 GiB at most


# --- bad inputs -----------------------------------------------------------------------------------

BAD = [
    ("read", {"file_path": "f.txt", "view_range": [10**30, 10**30 + 1]}),
    ("read", {"file_path": "f.txt", "view_range": [-5, 3]}),
    ("read", {"file_path": "f.txt", "view_range": [5, 2]}),
    ("read", {"file_path": "f.txt", "view_range": [1.5, 2]}),
    ("read", {"file_path": "f.txt", "view_range": "1-3"}),
    ("read", {"file_path": "f.txt", "view_range": [1, 2, 3]}),
    ("read", {"file_path": "big.txt", "view_range": [10**30, -1]}),
    ("read", {"file_path": 10**400}),
    ("read", {"file_path": ["f.txt"]}),
    ("read", {"file_path": "f\x00.txt"}),
    ("read", {"file_path": "\ud800"}),
    ("write", {"file_path": "a\x00b", "content": "x"}),
    ("write", {"file_path": "\udfff/x", "content": "x"}),
    ("write", {"file_path": "n.txt", "content": 5}),
    ("edit", {"file_path": "f.txt", "old_string": 5, "new_string": "x"}),
    ("edit", {"file_path": "f.txt", "old_string": "one", "new_string": "x", "replace_all": "yes"}),
    ("glob", {"pattern": "*\x00"}),
    ("glob", {"pattern": 3}),
    ("glob", {"pattern": "*", "path": "\x00"}),
    ("grep", {"pattern": "x", "path": "a\x00"}),
    ("grep", {"pattern": "x", "path": "\ud800"}),
    ("grep", {"pattern": "x{10000000000}"}),
    ("grep", {"pattern": None}),
    ("recall", {"path": "a\x00b"}),
    ("recall", {"path": "\ud800"}),
    ("recall", {"path": "x", "offset": 10**400, "limit": True}),
    ("bash", {"command": "echo hi\x00"}),
    ("bash", {"command": "echo hi", "timeout_ms": -1}),
    ("bash", {"command": "echo hi", "timeout_ms": "10"}),
]


@pytest.mark.parametrize("name, args", BAD, ids=[f"{n}-{i}" for i, (n, _) in enumerate(BAD)])
async def test_a_bad_input_is_an_error_result(tmp_path, store, name, args):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f.txt").write_text("one\ntwo\nthree\n")
    (ws / "big.txt").write_text("row\n" * 100_000)
    async with Toolset(
        str(ws), ("read", "write", "edit", "glob", "grep", "bash"), store, limits=Limits(sandbox="none")
    ) as tools:
        result = await tools.run(call(name, args))
    assert result.get("is_error") is True, result
    body = text(result)
    body.encode("utf-8")
    assert "failed:" not in body, body  # an answer about the input, not a tool's crash


async def test_huge_numbers_and_lone_surrogates_that_mean_something_are_answered(tmp_path, store):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f.txt").write_text("one\ntwo\nthree\n")
    rel = await store.persist_output("toolu_saved", "saved text\n")
    async with Toolset(
        str(ws), ("read", "write", "grep", "bash"), store, limits=Limits(sandbox="none")
    ) as tools:
        to_end = await tools.run(call("read", {"file_path": "f.txt", "view_range": [2, 10**400]}))
        wrote = await tools.run(call("write", {"file_path": "s.txt", "content": "a\ud800b"}, "t2"))
        grep = await tools.run(call("grep", {"pattern": "\ud800"}, "t3"))
        recall = await tools.run(call("recall", {"path": rel, "offset": 10**30}, "t4"))
        recall_huge = await tools.run(
            call("recall", {"path": rel, "offset": 10**400, "limit": 10**400}, "t5")
        )
        capped = await tools.run(call("bash", {"command": "echo hi", "timeout_ms": 10**400}, "t6"))
    assert to_end["content"] == "two\nthree\n"
    assert not wrote.get("is_error") and (ws / "s.txt").read_bytes() == b"a\\ud800b"
    assert grep["content"] == "no matches"
    for page in (recall, recall_huge):
        assert not page.get("is_error") and "end of file" in page["content"], page
    assert "hi" in capped["content"] and "capped at 600 s" in capped["content"], capped


# --- a tree deeper than a path can name -----------------------------------------------------------


async def test_a_directory_deeper_than_the_path_limit_is_skipped_not_a_failure(tmp_path, store):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "top.txt").write_text("needle at the top\n")
    fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(250):  # 250 levels of 20-character names: about 5,250 bytes of path
        os.mkdir("d" * 20, dir_fd=fd)
        child = os.open("d" * 20, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(os.open("deep.txt", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
    os.close(fd)
    async with Toolset(str(ws), ("glob", "grep"), store) as tools:
        listed = await tools.run(call("glob", {"pattern": "**/*.txt"}))
        everything = await tools.run(call("glob", {"pattern": "**"}, "t2"))
        found = await tools.run(call("grep", {"pattern": "needle"}, "t3"))
    assert not listed.get("is_error") and listed["content"].endswith("/top.txt"), listed
    assert not everything.get("is_error") and len(everything["content"].split("\n")) > 100
    assert not found.get("is_error") and "top.txt:1:needle at the top" in found["content"], found
    subprocess.run(["rm", "-rf", str(ws)], check=False)


# --- links inside the workspace keep working ------------------------------------------------------


@pytest.mark.parametrize("lookup", ["openat2", "walk"])
async def test_symlinks_that_stay_inside_work(tmp_path, store, monkeypatch, lookup):
    monkeypatch.setattr(beneath, "use_openat2", lookup == "openat2")
    ws = tmp_path / "ws"
    (ws / "real" / "sub").mkdir(parents=True)
    (ws / "real" / "sub" / "f.py").write_text("x = 1  # TODO\n")
    (ws / "rel-link").symlink_to("real/sub")
    (ws / "abs-link").symlink_to(ws / "real")
    (ws / "file-link.py").symlink_to("real/sub/f.py")
    (ws / "real" / "up").symlink_to("../rel-link")
    async with Toolset(str(ws), ("read", "write", "edit", "glob", "grep"), store) as tools:
        reads = [
            await tools.run(call("read", {"file_path": p}, f"r{i}"))
            for i, p in enumerate(["rel-link/f.py", "abs-link/sub/f.py", "file-link.py", "real/up/f.py"])
        ]
        wrote = await tools.run(call("write", {"file_path": "file-link.py", "content": "x = 2\n"}, "w"))
        edited = await tools.run(
            call("edit", {"file_path": "rel-link/f.py", "old_string": "2", "new_string": "3"}, "e")
        )
        globbed = await tools.run(call("glob", {"pattern": "rel-link/*.py"}, "g"))
        grepped = await tools.run(call("grep", {"pattern": "x =", "path": "rel-link"}, "p"))
    for result in reads:
        assert result["content"] == "x = 1  # TODO\n", result
    assert not wrote.get("is_error") and not edited.get("is_error"), (wrote, edited)
    assert (ws / "file-link.py").is_symlink() and (ws / "real" / "sub" / "f.py").read_text() == "x = 3\n"
    assert globbed["content"].endswith("/rel-link/f.py"), globbed
    assert grepped["content"].endswith("/real/sub/f.py:1:x = 3"), grepped


async def test_without_openat2_the_walk_takes_over(tmp_path, store, monkeypatch):
    """A kernel before 5.6 answers ENOSYS: the first call says so, and every lookup after it walks."""

    def enosys(*args: object, **kwargs: object) -> int:
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(beneath, "use_openat2", True)
    monkeypatch.setattr(beneath, "_openat2", enosys)
    ws, _ = race_tree(tmp_path)
    async with Toolset(str(ws), ("read",), store) as tools:
        inside = await tools.run(call("read", {"file_path": "d/secret.txt"}))
        out = await tools.run(call("read", {"file_path": "x/secret.txt"}, "t2"))
    assert beneath.use_openat2 is False
    assert inside["content"] == f"{INSIDE}\n"
    assert out.get("is_error") and "outside" in out["content"] and OUTSIDE not in out["content"]


async def test_many_greps_at_once_share_a_few_workers(tmp_path, store):
    from runner.tools.grep_pool import MOST

    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(30):
        (ws / f"m{i}.py").write_text("def f():\n    pass\n" * 200)
    kept = set(grep_workers())
    peak = 0

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, len(set(grep_workers()) - kept))
            await anyio.sleep(0.005)

    async with Toolset(str(ws), ("grep",), store) as tools:
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            results = await batches(tools, [call("grep", {"pattern": "pass$"}, f"g{i}") for i in range(40)])
            tg.cancel_scope.cancel()
    assert all(not r.get("is_error") and ".py:2:    pass" in text(r) for r in results), results[0]
    assert 0 < peak <= MOST, peak  # 40 calls at once, never more than MOST worker processes
