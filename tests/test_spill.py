"""The spill map: what a job keeps for its whole length, bounded in memory, the rest in SQLite's
private temporary file. Answers are the same wherever an entry sits."""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import mounted_tmpfs

from runner.rundir.spill import KeyFilter, SpillMap, SpillUnreadable
from runner.rundir.store import JobStore
from runner.tools.toolset import Toolset


def test_it_answers_as_a_dict_does_wherever_an_entry_sits() -> None:
    """Random sets, pops, setdefaults and clears, checked against a dict after every step; the map
    spills many times, so entries sit in memory, in the file, and in both (a newer value shadowing)."""
    rng = random.Random(7)
    m, d = SpillMap(in_memory=16), {}
    keys = [f"toolu_{i}" for i in range(200)] + ["\ud800lone surrogate", ""]
    for step in range(5_000):
        key = rng.choice(keys)
        op = rng.random()
        if op < 0.6:
            value = (step, key, (step % 3, None)) if step % 2 else f"v{step}"
            m[key] = value
            d[key] = value
        elif op < 0.75:
            assert m.pop(key, "none") == d.pop(key, "none")
        elif op < 0.9:
            assert m.setdefault(key, 5) == d.setdefault(key, 5)
        elif op < 0.901:
            m.clear()
            d.clear()
        probe = rng.choice(keys)
        assert (probe in m) == (probe in d)
        assert m.get(probe) == d.get(probe)
        assert len(dict(m.memory_items())) <= 16
    assert m.spilled > 1_000
    for key in keys:
        assert m.get(key, "none") == d.get(key, "none")


def test_bytes_and_int_keys_are_kept_apart_from_each_other_by_kind() -> None:
    m = SpillMap(in_memory=2)
    for i in range(10):
        m[i.to_bytes(16, "big")] = i
    assert [m[i.to_bytes(16, "big")] for i in range(10)] == list(range(10))
    assert 3 not in m and b"missing" not in m


def test_a_short_life_never_opens_a_file_and_the_heap_stays_bounded() -> None:
    """Below the bound nothing spills (no SQLite at all); past it, however many entries, memory holds
    at most the bound."""
    m = SpillMap(in_memory=100)
    for i in range(100):
        m[f"k{i}"] = i
    assert m.spilled == 0 and m._db is None  # noqa: SLF001 - the map's own state, checked here
    for i in range(100, 20_000):
        m[f"k{i}"] = i
        assert len(dict(m.memory_items())) <= 100
    assert m["k0"] == 0 and m["k19999"] == 19_999


def test_the_spill_file_is_unlinked_while_in_use_so_a_killed_process_leaves_nothing(tmp_path: Path) -> None:
    """A real process spills into SQLITE_TMPDIR, then is killed with SIGKILL: no file is left there,
    and none was visible by name while it ran (SQLite unlinks it as soon as it is opened)."""
    tmp = tmp_path / "sqlite-tmp"
    tmp.mkdir()
    code = (
        "import os, sys, time\n"
        "from runner.rundir.spill import SpillMap\n"
        "m = SpillMap(in_memory=10)\n"
        "for i in range(50_000): m[f'k{i}'] = 'x' * 100\n"
        "def link(fd):\n"
        "    try: return os.readlink(f'/proc/self/fd/{fd}')\n"
        "    except OSError: return ''\n"
        "fds = [link(fd) for fd in os.listdir('/proc/self/fd')]\n"
        "print([f for f in fds if f.startswith(sys.argv[1])], flush=True)\n"
        "time.sleep(60)\n"
    )
    env = {**os.environ, "SQLITE_TMPDIR": str(tmp)}
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        line = child.stdout.readline()
        assert "(deleted)" in line, line  # the spill file is open, and already has no name
        assert list(tmp.iterdir()) == []
    finally:
        child.kill()
        child.wait()
    assert list(tmp.iterdir()) == []


def test_a_map_spilled_in_a_worker_thread_is_used_on_by_another() -> None:
    """A resumed job rebuilds its store's names in a worker thread the loop waits for, then goes on
    using them on the loop."""
    m = SpillMap(in_memory=4)
    worker = threading.Thread(target=lambda: [m.__setitem__(f"k{i}", i) for i in range(50)])
    worker.start()
    worker.join()
    assert m.spilled > 0
    m["k50"] = 50
    assert [m[f"k{i}"] for i in range(51)] == list(range(51))


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting the full file system needs root")
def test_a_full_temporary_directory_gives_a_clear_error_never_a_wrong_answer(tmp_path: Path) -> None:
    """SQLite's temporary directory is a real file system of 64 KiB: a spill fails for room (its
    entries stay in memory, and the map says why), and a lookup the file cannot answer raises
    SpillUnreadable naming the directory; every answer given is right."""
    code = (
        "from runner.rundir.spill import SpillMap\n"
        "m = SpillMap(in_memory=100)\n"
        "for i in range(20_000): m[f'k{i}'] = 'x' * 200\n"
        "print(m.problem, flush=True)\n"
        "for i in range(20_000): assert m[f'k{i}'] == 'x' * 200, i\n"
    )
    with mounted_tmpfs(tmp_path / "full", "64k") as full:
        env = {**os.environ, "SQLITE_TMPDIR": str(full)}
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert "full" in done.stdout.lower(), done.stdout  # the failed spill, said
    if done.returncode != 0:  # a read needed room: the clear error, not an AssertionError
        assert "SpillUnreadable" in done.stderr and "SQLITE_TMPDIR" in done.stderr, done.stderr
        assert "AssertionError" not in done.stderr


def test_a_failed_spill_keeps_its_entries_and_the_next_good_one_restores_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The temporary directory refuses the first spill (its entries stay in memory and the bound
    doubles); once a spill succeeds the bound is back where it was, so memory is bounded again."""
    from runner.rundir import spill

    real, refusals = spill._connect, iter([True])

    def connect_once_refused() -> sqlite3.Connection:
        if next(refusals, False):
            raise sqlite3.OperationalError("unable to open database file")
        return real()

    monkeypatch.setattr(spill, "_connect", connect_once_refused)
    m = SpillMap(in_memory=4)
    for i in range(5):  # the fifth entry asks for a spill, which is refused
        m[f"k{i}"] = i
    assert m.spilled == 0 and m.in_memory == 8 and "unable to open" in (m.problem or "")
    for i in range(5, 9):  # the ninth spills all eight, and the bound is 4 again
        m[f"k{i}"] = i
    assert m.spilled == 8 and m.in_memory == 4
    for i in range(9, 30):
        m[f"k{i}"] = i
        assert len(dict(m.memory_items())) <= 4
    assert [m[f"k{i}"] for i in range(30)] == list(range(30))
    m.close()


def test_the_key_filter_holds_every_key_added_and_few_others() -> None:
    """No key that went to the file is ever said to be absent (that would be a wrong answer); of the
    keys never added, about 6% are said to be maybe there (each costs one lookup in the file)."""
    added = KeyFilter(20_000)
    keys = [f"toolu_{i:024d}".encode() for i in range(20_000)]
    for key in keys:
        added.add(key)
    assert all(added.may_hold(key) for key in keys)
    others = [f"other_{i:024d}".encode() for i in range(50_000)]
    false = sum(added.may_hold(key) for key in others) / len(others)
    assert false < 0.08, false
    ints = KeyFilter(1_000)  # an int key's hash is itself: spread before probing
    for i in range(1_000):
        ints.add(i)
    assert sum(ints.may_hold(i) for i in range(1_000, 51_000)) / 50_000 < 0.08


class _FailingRebuild:
    """A connection whose full read of the keys fails part-way (a page write that meets a full disk)."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def execute(self, sql: str, *args: object) -> object:
        if sql.startswith("SELECT k FROM"):
            rows = self.db.execute(sql, *args).fetchall()

            def failing() -> Iterator[tuple]:
                yield from rows[:3]
                raise sqlite3.OperationalError("database or disk is full")

            return failing()
        return self.db.execute(sql, *args)

    def __enter__(self) -> sqlite3.Connection:
        return self.db.__enter__()

    def __exit__(self, *exc: object) -> object:
        return self.db.__exit__(*exc)

    def __getattr__(self, name: str) -> object:
        return getattr(self.db, name)


def test_a_filter_rebuild_that_fails_part_way_keeps_every_key_found() -> None:
    """Growing the key filter reads every key back from the file; when that read fails part-way, no
    key the file holds may be said absent (the store would hand out a name already taken)."""
    m = SpillMap(in_memory=4)
    for i in range(4):
        m[f"k{i}"] = i
    m["k4"] = 4  # the first spill: k0..k3 in the file
    m._db = _FailingRebuild(m._db)  # noqa: SLF001 - the map's own connection, failing on purpose
    for i in range(5, 40):
        m[f"k{i}"] = i  # more spills, each growing the filter through the failing read
    assert [m.get(f"k{i}") for i in range(40)] == list(range(40))
    assert all(f"k{i}" in m for i in range(40))


def _open_spill_files() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").endswith("(deleted)"):
                count += 1
        except OSError:
            pass
    return count


@pytest.mark.anyio
async def test_a_jobs_stores_and_tools_let_their_spill_files_go_when_it_ends(tmp_path: Path) -> None:
    """A store and a toolset that spilled close their files as they end (a dropped connection keeps
    its file until a full garbage collection)."""
    before = _open_spill_files()
    store = JobStore(tmp_path / "job")
    await store.open()
    for i in range(20_000):  # past SQLite's cache of the file's pages, so the file is made
        store.reserve(f"toolu_{i}", f"content {i}")
    async with Toolset(str(tmp_path), ("read",), store) as tools:
        for i in range(20_000):
            tools.repeats.record(f'["read", {{"file_path": "/f{i}"}}]', i, f"toolu_{i}")
        during = _open_spill_files()
        assert during > before
    store.close()
    assert _open_spill_files() <= before < during  # (an earlier test's dropped one may go meanwhile)


@pytest.mark.anyio
async def test_a_tool_use_id_past_200_characters_is_not_run_and_not_kept(tmp_path: Path) -> None:
    """A hostile server's megabyte ids: the call is refused, answered under its own id (so the request's
    fresh id pairs with it), and the job-long records hold nothing of it but a hash."""
    store = JobStore(tmp_path / "job")
    await store.open()
    (tmp_path / "a.txt").write_text("a\n")
    long_id = "toolu_" + "x" * 1_000_000
    async with Toolset(str(tmp_path), ("read",), store) as tools:
        [result] = await tools.run_batch(
            [{"type": "tool_use", "id": long_id, "name": "read", "input": {"file_path": "a.txt"}}]
        )
        assert result["is_error"] and result["tool_use_id"] == long_id
        assert "over 200" in str(result["content"])
        assert long_id not in tools._ids  # noqa: SLF001 - the toolset's own record, checked here
    rel = store.reserve(long_id, "its result")
    assert store.reserved_for(long_id, rel) and not store.reserved_for("toolu_other", rel)
    assert all(len(owner) < 100 for _, owner in store._owners.memory_items())  # noqa: SLF001


@pytest.mark.anyio
async def test_a_flush_the_quota_could_not_count_keeps_its_writes_for_the_next(tmp_path: Path) -> None:
    """The store's count of the job's bytes reads its records; when that fails (the spill file is
    unreadable), nothing queued is dropped: the next flush writes it."""
    store = JobStore(tmp_path / "job")
    await store.open()
    store.queue(lines={"events.jsonl": ['{"n": 1}']})
    real = store._charge  # noqa: SLF001 - the store's own accounting, failing once on purpose
    calls = [0]

    def charge(*args: object, **kwargs: object) -> None:
        calls[0] += 1
        if calls[0] == 1:
            raise SpillUnreadable("database or disk is full")
        real(*args, **kwargs)

    store._charge = charge  # type: ignore[method-assign]  # noqa: SLF001
    with pytest.raises(SpillUnreadable):
        await store.flush()
    await store.flush()
    assert (tmp_path / "job" / "events.jsonl").read_text() == '{"n": 1}\n'
