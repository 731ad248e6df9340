"""A mapping for what a job keeps for its whole length: its newest entries in memory, the rest on disk.

A job's store names every output it saved (and who owns it), its repeat guard counts every distinct
call, its tools remember every tool_use id: a few entries a call, each looked up again only now and
then (a repeat, a recall, a resumed name), and none can go while the job runs. As dicts they grew a
3,000-turn session's heap by 3 KiB a turn. :class:`SpillMap` keeps them off the heap past a bound.

Guarantees:
- At most :data:`IN_MEMORY` entries are held in memory. When a new key would pass that, every
  entry in memory moves to the spill file in one transaction and memory starts afresh, so the heap a
  map holds is bounded however long the job runs. A short job (most of them) never spills and never
  opens a file.
- A key is looked up in memory, then, once something spilled, in the file, unless the file's key
  filter (:class:`KeyFilter`, 6 to 9 bits a key in the file) says it was never spilled: what a
  map answers does not depend on where an entry sits. A newer value in memory shadows an older one
  in the file.
- The spill file is SQLite's private temporary database (``sqlite3.connect("")``): made in SQLite's
  temporary directory (the first writable of ``SQLITE_TMPDIR``, ``TMPDIR``, ``/var/tmp``,
  ``/usr/tmp``, ``/tmp``, ``.``), unlinked by SQLite as soon as it is opened, so nothing is left
  behind, even by a process killed with SIGKILL; its journal in memory (a failed spill rolls back),
  no fsync (it is scratch: a resumed job rebuilds its records from its files). SQLite caches at most
  :data:`CACHE_KIB` of its pages.
- A spill that fails (no room in the temporary directory, none writable) loses nothing: the entries
  stay in memory, the bound doubles (the next attempt comes later; the first spill that succeeds
  sets it back), and :attr:`SpillMap.problem` says why. A lookup the file can no longer answer
  (SQLite writes its pages out lazily, so even a read may need room) raises
  :class:`SpillUnreadable`, naming the directory to free: never a wrong answer (a name two outputs
  share, a repeat missed). The job fails saying so, and can be resumed.
- Keys are ``str``, ``bytes`` or ``int`` (one kind a map); values are ``str``, ``int``, ``float``, ``bool``,
  ``None`` or tuples of them (no lists, no dicts: a value comes back from the file as it went in).
  The file is only ever read by this process.
- Used by one thread at a time (the event loop's, or a worker's the loop waits for, as a resume's
  rebuild is): nothing here locks.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

IN_MEMORY = 2_048
CACHE_KIB = 256
_MISSING = object()


class SpillUnreadable(OSError):
    """The spill file could not answer (SQLite writes its pages out lazily, so a read can need room
    the temporary directory no longer has): the job fails, saying so, rather than answer wrongly."""


@contextmanager
def _readable() -> Iterator[None]:
    try:
        yield
    except sqlite3.Error as e:
        raise SpillUnreadable(
            f"a job's records kept in SQLite's temporary file could not be read back ({e}); give SQLite's "
            "temporary directory room (the first writable of SQLITE_TMPDIR, TMPDIR, /var/tmp, /usr/tmp, "
            "/tmp, .), then resume"
        ) from e


def _connect() -> sqlite3.Connection:
    db = sqlite3.connect("", isolation_level=None, check_same_thread=False)
    db.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
    db.execute("PRAGMA journal_mode = MEMORY")  # a failed spill rolls back (OFF would leave it torn)
    db.execute("PRAGMA synchronous = OFF")
    db.execute("CREATE TABLE m (k PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID")
    return db


class KeyFilter:
    """A Bloom filter of the keys in a spill file: ``may_hold`` is false for a key never added, so a
    lookup of a new key (the common one: a new call, a new output, a new id) asks no file; true for
    every key added, and for about 6% of the others (6 bits a key, 4 probes: each costs one lookup in
    the file; more bits would cost a long job's heap more than the lookups they save). Written here because
    it is 20 lines over Python's own (per process, randomized) ``hash``, which is all a filter that
    never leaves its process needs."""

    PROBES = 4
    BITS_PER_KEY = 6

    def __init__(self, capacity: int):
        self.capacity = max(capacity, 1)
        self.size = self.capacity * self.BITS_PER_KEY
        self.bits = bytearray(self.size // 8 + 1)
        self.count = 0

    def _start(self, key: Any) -> tuple[int, int]:
        h = (hash(key) * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF  # spread an int key's hash too
        return h & 0xFFFFFFFF, (h >> 32) | 1  # probe i is (low + i * high) mod size

    def add(self, key: Any) -> None:
        low, high = self._start(key)
        bits, size = self.bits, self.size
        for i in range(self.PROBES):
            j = (low + i * high) % size
            bits[j >> 3] |= 1 << (j & 7)
        self.count += 1

    def may_hold(self, key: Any) -> bool:
        low, high = self._start(key)
        bits, size = self.bits, self.size
        for i in range(self.PROBES):
            j = (low + i * high) % size
            if not bits[j >> 3] & (1 << (j & 7)):
                return False
        return True


def _key(key: Any) -> Any:
    """``key`` as SQLite stores it: a ``str`` as its UTF-8 bytes (a lone surrogate, which a tool_use id
    from JSON may hold, included)."""
    return key.encode("utf-8", "surrogatepass") if isinstance(key, str) else key


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


class SpillMap:
    """A dict-like map (``get``, ``[]``, ``in``, ``update``, ``setdefault``, ``pop``, ``clear``) whose
    entries past :data:`IN_MEMORY` live in an anonymous SQLite file (see the Guarantees)."""

    def __init__(self, in_memory: int = IN_MEMORY):
        self.in_memory = in_memory
        self._bound = in_memory  # what in_memory returns to after a failed spill has doubled it
        self._memory: dict[Any, Any] = {}
        self._db: sqlite3.Connection | None = None
        self._filter = KeyFilter(0)  # the keys the file holds, to skip it for a new one (sized at a spill)
        self.spilled = 0  # entries moved to the file so far (a key spilled twice counts twice)
        self.problem: str | None = None  # why the last spill failed (the entries stayed in memory)

    def _stored(self, key: Any) -> Any:
        if self._db is None:
            return _MISSING
        stored = _key(key)
        if not self._filter.may_hold(stored):  # never spilled: no need to ask the file
            return _MISSING
        with _readable():
            row = self._db.execute("SELECT v FROM m WHERE k = ?", (stored,)).fetchone()
        return _MISSING if row is None else _tuples(json.loads(row[0]))

    def get(self, key: Any, default: Any = None) -> Any:
        value = self._memory.get(key, _MISSING)
        if value is _MISSING:
            value = self._stored(key)
        return default if value is _MISSING else value

    def __getitem__(self, key: Any) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __contains__(self, key: Any) -> bool:
        return key in self._memory or self._stored(key) is not _MISSING

    def __setitem__(self, key: Any, value: Any) -> None:
        if key not in self._memory and len(self._memory) >= self.in_memory:
            self.spill()
        self._memory[key] = value

    def update(self, entries: dict[Any, Any]) -> None:
        for key, value in entries.items():
            self[key] = value

    def setdefault(self, key: Any, value: Any) -> Any:
        found = self.get(key, _MISSING)
        if found is _MISSING:
            self[key] = value
            return value
        return found

    def pop(self, key: Any, default: Any = None) -> Any:
        found = self.get(key, _MISSING)
        self._memory.pop(key, None)
        if self._db is not None:
            with _readable(), self._db:
                self._db.execute("DELETE FROM m WHERE k = ?", (_key(key),))
        return default if found is _MISSING else found

    def clear(self) -> None:
        self._memory = {}
        if self._db is not None:
            with _readable(), self._db:
                self._db.execute("DELETE FROM m")
            self._filter = KeyFilter(0)

    def memory_items(self) -> Iterator[tuple[Any, Any]]:
        """The entries held in memory (the newest ones), for tests and the benches."""
        return iter(self._memory.items())

    def spill(self) -> None:
        """Move every entry held in memory to the file now (it happens by itself at the bound; the
        session bench calls it to weigh what a job's heap holds besides its maps)."""
        rows = [(_key(k), json.dumps(v)) for k, v in self._memory.items()]
        try:
            if self._db is None:
                self._db = _connect()
            with self._db:
                self._db.execute("BEGIN")
                self._db.executemany("INSERT OR REPLACE INTO m (k, v) VALUES (?, ?)", rows)
        except sqlite3.Error as e:  # no room, or no temporary directory: the job goes on, in memory
            self.in_memory *= 2  # the rolled-back rows are still in memory; try again later
            self.problem = f"spill file: {e}"
            return
        for stored, _ in rows:  # first, so no key the file holds is ever missing from the filter
            self._filter.add(stored)
        if self._filter.count > self._filter.capacity:  # bigger, from the file's keys
            self._filter = self._grown(self._filter)
        self.spilled += len(rows)
        self._memory = {}  # a fresh dict: a dict emptied in place keeps its table
        self.in_memory = self._bound

    def _grown(self, full: KeyFilter) -> KeyFilter:
        """A filter half as big again as ``full``'s keys, of every key in the file; ``full`` itself
        (more false positives, never a false negative) when the file cannot be read through."""
        assert self._db is not None
        grown = KeyFilter(full.count * 3 // 2)
        try:
            for (stored,) in self._db.execute("SELECT k FROM m"):
                grown.add(stored)
        except sqlite3.Error:
            return full
        return grown

    def close(self) -> None:
        """Drop the spill file (SQLite deletes it) and what memory holds: the map is empty after. Its
        owner calls it when the job ends (a dropped connection would wait for a full garbage
        collection to let its file go)."""
        if self._db is not None:
            self._db.close()
            self._db = None
        self._memory = {}
        self._filter = KeyFilter(0)
