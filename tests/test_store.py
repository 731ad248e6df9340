"""JobStore: persisted outputs under hostile tool_use ids never leave ``tool-results/`` nor overwrite
another id's output; whole files are atomic; JSONL is appended in order; the disk quota counts what a
resumed job already had, refuses before writing, and never refuses the final documents."""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.rundir.docs import TOOL_RESULTS
from runner.rundir.store import QUOTA_SLACK, DiskQuotaExceeded, JobStore, read_jsonl, safe_name
from runner.rundir.trees import remove_tree

HOSTILE_IDS = [
    "../../x",
    "x" * 5_000,
    "",
    "a/b",
    "a_b",
    "a?b",
    "/etc/passwd",
    "..",
    ".",
    "tool-results/../../y",
    "a\0b",
    "ä/ö",
    "CON",
    "a.2",
    "a",
    "toolu_01AbC",
    " ",
    "\n",
]


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


@pytest.mark.anyio
async def test_hostile_ids_stay_inside_tool_results_and_never_collide(store: JobStore, tmp_path: Path):
    paths = {}
    for i, tool_use_id in enumerate(HOSTILE_IDS):
        content = f"output {i} of {tool_use_id!r}\n" * 3
        rel = await store.persist_output(tool_use_id, content)
        paths[tool_use_id] = (rel, content)
        target = store.resolve(rel)
        assert target.parent == (store.dir / TOOL_RESULTS).resolve(), rel
        assert len(target.name) < 120, "file names stay short even for a 5,000-char id"
    assert len({rel for rel, _ in paths.values()}) == len(HOSTILE_IDS), "every id gets its own file"
    for tool_use_id, (rel, content) in paths.items():  # nobody overwrote anybody
        assert (store.dir / rel).read_text(encoding="utf-8") == content, tool_use_id
    # nothing was written anywhere but tool-results/ (and the job's own empty subdirectories)
    outside = [p for p in files_under(tmp_path) if (store.dir / TOOL_RESULTS) not in p.parents]
    assert outside == []


@pytest.mark.anyio
async def test_ids_that_sanitize_alike_keep_both_results(store: JobStore):
    assert safe_name("a/b").startswith("a_b") and safe_name("a?b").startswith("a_b")
    rel_slash = await store.persist_output("a/b", "slash")
    rel_under = await store.persist_output("a_b", "underscore")
    rel_query = await store.persist_output("a?b", "query")
    assert len({rel_slash, rel_under, rel_query}) == 3
    assert (store.dir / rel_slash).read_text() == "slash"
    assert (store.dir / rel_under).read_text() == "underscore"
    assert (store.dir / rel_query).read_text() == "query"


@pytest.mark.anyio
async def test_an_id_that_spells_another_ids_sanitized_name_does_not_overwrite_it(store: JobStore):
    first = await store.persist_output("a/b", "from a/b")
    stem = Path(first).stem  # e.g. "a_b-1234abcd5678", itself a valid id
    second = await store.persist_output(stem, "from the look-alike")
    assert first != second
    assert (store.dir / first).read_text() == "from a/b"
    assert (store.dir / second).read_text() == "from the look-alike"


@pytest.mark.anyio
async def test_a_second_store_on_the_same_directory_does_not_overwrite(store: JobStore):
    """A resumed job opens a new JobStore on the directory: files already there are respected."""
    rel = await store.persist_output("toolu_1", "first process")
    again = JobStore(store.dir)
    await again.open()
    assert await again.persist_output("toolu_1", "first process") == rel  # same bytes: same file
    other = await again.persist_output("toolu_1", "second process, other content")
    assert other != rel
    assert (store.dir / rel).read_text() == "first process"
    assert (store.dir / other).read_text() == "second process, other content"


@pytest.mark.anyio
async def test_reserve_is_deterministic_and_content_addressed(store: JobStore):
    a = store.reserve("toolu_9", "x")
    assert store.reserve("toolu_9", "x") == a
    b = store.reserve("toolu_9", "y")
    assert b != a
    assert store.reserve("toolu_9", "y") == b


@pytest.mark.anyio
async def test_resolve_refuses_paths_outside_the_job_directory(store: JobStore):
    for rel in ("../x", "/etc/passwd", "tool-results/../../x"):
        with pytest.raises(ValueError):
            store.resolve(rel)
    os.symlink("/etc", store.dir / "tool-results" / "link")
    with pytest.raises(ValueError):
        store.resolve("tool-results/link/passwd")


@pytest.mark.anyio
async def test_symlinks_planted_in_the_job_directory_are_never_written_through(
    store: JobStore, tmp_path: Path
):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("untouched")
    rel = store.reserve("toolu_link", "new content")
    os.symlink(outside / "victim.txt", store.dir / rel)  # a link where the output is about to go
    await store.write_output(rel, "new content")
    assert (outside / "victim.txt").read_text() == "untouched"
    assert not (store.dir / rel).is_symlink() and (store.dir / rel).read_text() == "new content"
    # tool-results/ itself swapped for a link to elsewhere: refused, nothing written there
    (store.dir / TOOL_RESULTS).rename(store.dir / "old-results")
    os.symlink(outside, store.dir / TOOL_RESULTS)
    with pytest.raises(ValueError):
        await store.persist_output("toolu_after_swap", "content")
    assert sorted(p.name for p in outside.iterdir()) == ["victim.txt"]


@pytest.mark.anyio
async def test_persisted_output_is_byte_exact_including_newlines_and_unicode(store: JobStore):
    content = 'line\r\nother\rline\n\ttab "q" \\ é 中文 🙂 \u2028 end'
    rel = await store.persist_output("toolu_x", content)
    assert (store.dir / rel).read_bytes() == content.encode("utf-8")
    assert not [p for p in (store.dir / TOOL_RESULTS).iterdir() if p.name.endswith(".tmp")]


@pytest.mark.anyio
async def test_a_cancelled_write_neither_tears_nor_overtakes_the_next_write(store: JobStore):
    """A session cancelled mid-checkpoint then writes its final metrics.json: the final one must win.

    The cancel must land while the worker thread writes; on a loaded machine the poll can miss that
    window (the write ends first), so such a round is not counted and another is played."""
    cancelled_mid_write = rounds = 0
    while cancelled_mid_write < 3:
        rounds += 1
        assert rounds <= 30, f"only {cancelled_mid_write} of {rounds - 1} rounds caught the write in flight"
        written = anyio.Event()

        async def checkpoint(written: anyio.Event) -> None:
            await store.write_json("metrics.json", {"status": "running", "pad": "x" * 20_000_000})
            written.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(checkpoint, written)
            with anyio.fail_after(30):
                while not list(store.dir.glob(".metrics.json.*.tmp")) and not written.is_set():
                    await anyio.sleep(0.0002)  # until the worker thread is writing (or is done)
            cancelled_mid_write += not written.is_set()
            tg.cancel_scope.cancel()
        await store.write_json("metrics.json", {"status": "succeeded"})
        await anyio.sleep(0.3)  # room for a straggling write to land, if one were still running
        assert json.loads((store.dir / "metrics.json").read_text()) == {"status": "succeeded"}
    assert not list(store.dir.glob(".metrics.json.*"))  # no temporary or spare file is left


@pytest.mark.anyio
async def test_a_flush_writes_outputs_then_appends_records(store: JobStore):
    store.queue([("tool-results/a.txt", "A"), ("tool-results/b.txt", "B")], {"other.jsonl": []})
    store.queue_records("events.jsonl", [{"n": 1}, {"n": 2}])
    await store.flush()
    store.queue_records("events.jsonl", [{"n": 3}])
    await store.flush()
    assert (store.dir / "tool-results/a.txt").read_text() == "A"
    assert (store.dir / "tool-results/b.txt").read_text() == "B"
    records, warnings = read_jsonl(store.dir / "events.jsonl")
    assert records == [{"n": 1}, {"n": 2}, {"n": 3}] and warnings == []
    assert not (store.dir / "other.jsonl").exists()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ids=st.lists(st.one_of(st.sampled_from(HOSTILE_IDS), st.text(max_size=80)), min_size=1, max_size=12),
    data=st.data(),
)
def test_any_ids_any_contents_each_result_keeps_its_own_file(tmp_path_factory, ids, data):
    """Property: whatever the ids (repeated, empty, look-alike, path-like), each (id, content) pair gets a
    file under tool-results/ that holds exactly that content."""
    contents = [data.draw(st.text(max_size=200)) for _ in ids]
    root = tmp_path_factory.mktemp("store")

    async def main():
        store = JobStore(root / "job")
        await store.open()
        saved = [(await store.persist_output(i, c), c) for i, c in zip(ids, contents, strict=True)]
        for rel, content in saved:
            target = store.resolve(rel)
            assert target.parent == (store.dir / TOOL_RESULTS).resolve()
            assert target.read_bytes() == content.encode("utf-8", "surrogatepass")
        by_path: dict[str, set[tuple[str, str]]] = {}
        for i, (rel, content) in zip(ids, saved, strict=True):
            by_path.setdefault(rel, set()).add((i, content))
        assert all(len(v) == 1 for v in by_path.values()), "two different (id, content) pairs share a file"

    anyio.run(main)


def test_a_checkpoint_swaps_names_with_its_spare_and_makes_no_new_file(tmp_path):
    """Rewriting a checkpoint exchanges it with its spare: after the first two writes the same two
    inodes hold the newest text and the one before, whatever the lengths; the last write is a fresh
    file and the spare goes."""
    import runner.rundir.store
    from runner.rundir.store import retire_spare, spare_of, swap_in_sync

    if runner.rundir.store._renameat2() is None:
        pytest.skip("no renameat2 on this system: the fallback is tested below")
    path = tmp_path / "metrics.json"
    texts = ['{"turns": 1, "pad": "' + "x" * 5000 + '"}\n', '{"turns": 2}\n', '{"turns": 3, "n": 33}\n']
    swap_in_sync(path, texts[0])
    swap_in_sync(path, texts[1])
    inodes = {path.stat().st_ino, spare_of(path).stat().st_ino}
    assert path.read_text() == texts[1] and spare_of(path).read_text() == texts[0]
    swap_in_sync(path, texts[2])
    assert (
        path.read_text() == texts[2] and spare_of(path).read_text() == texts[1]
    )  # no tail of the longer text
    assert {path.stat().st_ino, spare_of(path).stat().st_ino} == inodes
    retire_spare(path, '{"status": "succeeded"}\n')
    assert path.stat().st_ino not in inodes, (
        "the last write is a fresh file: no reader of a checkpoint sees it change"
    )
    assert json.loads(path.read_text()) == {"status": "succeeded"} and list(tmp_path.iterdir()) == [path]


def test_without_an_exchange_a_checkpoint_is_still_whole(tmp_path, monkeypatch):
    """Where renameat2 is missing (not Linux, an old libc) the spare is renamed over the file."""
    import runner.rundir.store
    from runner.rundir.store import spare_of, swap_in_sync

    monkeypatch.setattr(runner.rundir.store, "_exchange_works", False)
    path = tmp_path / "metrics.json"
    for n in range(3):
        swap_in_sync(path, f'{{"turns": {n}}}\n')
        assert json.loads(path.read_text()) == {"turns": n} and not spare_of(path).exists()


@pytest.mark.anyio
async def test_opening_a_job_directory_removes_spares_an_earlier_process_left(tmp_path):
    """A run killed between checkpoints leaves its spare; the store that continues the job removes it."""
    job = tmp_path / "job"
    job.mkdir()
    left = job / ".metrics.json.999999999.spare"
    left.write_text('{"turns": 1}\n')
    (job / "metrics.json").write_text('{"turns": 2}\n')
    await JobStore(job).open()
    assert not left.exists() and (job / "metrics.json").read_text() == '{"turns": 2}\n'


@pytest.mark.anyio
async def test_the_disk_quota_counts_what_is_there_and_never_refuses_the_final_documents(tmp_path: Path):
    job = tmp_path / "job"
    (job / TOOL_RESULTS).mkdir(parents=True)
    (job / TOOL_RESULTS / "old.txt").write_text("o" * 5_000)  # a resumed job's output
    (job / "transcript.jsonl").write_text("t" * 1_000 + "\n")
    store = JobStore(job)
    await store.open()
    assert store.bytes_used == 6_001
    store.max_bytes = 8_000
    store.queue(lines={"transcript.jsonl": ["x" * 1_000]})
    await store.flush()  # fits: 7,002
    store.queue(files={"metrics.json": "m" * 500})
    await store.flush()  # a checkpoint counts too: 7,502
    store.queue(outputs=[(f"{TOOL_RESULTS}/new.txt", "n" * 600)])
    with pytest.raises(DiskQuotaExceeded, match="over its disk quota max_job_bytes = 8,000"):
        await store.flush()
    assert not (job / TOOL_RESULTS / "new.txt").exists()  # refused before anything was written
    with pytest.raises(DiskQuotaExceeded):  # and from then on, even a small write
        await store.write_text("job.json", "{}")
    await store.write_json("metrics.json", {"status": "disk_quota"})  # the last words are written
    await store.write_text("final.md", "r" * (QUOTA_SLACK * 2))
    final = (job / "final.md").read_text()
    assert len(final) < QUOTA_SLACK + 1_000 and "[cut: " in final and "max_job_bytes = 8,000" in final
    assert json.loads((job / "metrics.json").read_text()) == {"status": "disk_quota"}


@pytest.mark.anyio
async def test_a_job_directory_of_any_depth_opens(tmp_path: Path):
    """A resumed job's directory holding a chain of directories 3,000 deep (past Python's recursion
    limit and PATH_MAX), made by another process as a job's bash would: its store opens and counts it."""
    import subprocess
    import sys

    job = tmp_path / "job"
    (job / "scratch").mkdir(parents=True)
    code = (
        "import os\nfor _ in range(3000):\n    os.mkdir('d'); os.chdir('d')\nopen('bottom', 'w').write('x')"
    )
    subprocess.run([sys.executable, "-c", code], cwd=job / "scratch", check=True, timeout=30)
    (job / "transcript.jsonl").write_text("t" * 1_000 + "\n")
    (job / "scratch" / "d" / "d" / "near.txt").write_text("n" * 500)
    try:
        store = JobStore(job)
        await store.open()
        assert store.bytes_used == 1_001 + 500  # what a path can name; the bottom, past PATH_MAX, is left out
    finally:
        remove_tree(job / "scratch", ignore_errors=True)  # pytest's own clean-up recurses


@pytest.mark.anyio
async def test_a_tool_use_id_past_200_characters_is_not_run_and_not_kept(tmp_path: Path) -> None:
    """A hostile server's megabyte ids: the call is refused, answered under its own id (so the request's
    fresh id pairs with it), and the job-long records hold nothing of it but a hash."""
    from runner.tools.toolset import Toolset

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
    assert all(len(owner) < 100 for owner in store._owners.values())  # noqa: SLF001


@pytest.mark.anyio
async def test_a_flush_the_quota_could_not_count_keeps_its_writes_for_the_next(tmp_path: Path) -> None:
    """When the store's count of the job's bytes fails, nothing queued is dropped: the next flush
    writes it."""
    store = JobStore(tmp_path / "job")
    await store.open()
    store.queue(lines={"events.jsonl": ['{"n": 1}']})
    real = store._charge  # noqa: SLF001 - the store's own accounting, failing once on purpose
    calls = [0]

    def charge(*args: object, **kwargs: object) -> None:
        calls[0] += 1
        if calls[0] == 1:
            raise OSError("the count failed")
        real(*args, **kwargs)

    store._charge = charge  # type: ignore[method-assign]  # noqa: SLF001
    with pytest.raises(OSError, match="the count failed"):
        await store.flush()
    await store.flush()
    assert (tmp_path / "job" / "events.jsonl").read_text() == '{"n": 1}\n'
