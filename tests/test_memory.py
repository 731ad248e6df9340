"""The memory tool (``memory_20250818`` on the job's ``memories/`` folder): its commands, its
confinement, its requests through the real SDK against the emulator, resume, and the index a
compaction leaves in the window."""

from __future__ import annotations

import email
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import regular_files, scripted_job, survey_rows
from scripted import ScriptedModel

import runner.tools.memory
from runner.agent.history import History
from runner.agent.runjob import Services
from runner.agent.session import Session
from runner.compaction.compactor import CompactionState, Compactor
from runner.compaction.summarizer import Summarizer
from runner.config import Limits
from runner.emulator.validation import validate
from runner.jobs import JobSpec
from runner.messages import text_of, tool_results, tool_uses
from runner.models.base import MEMORY_BETA
from runner.offline.model import OfflineModel
from runner.protocol import MEMORY_INDEX, MEMORY_INDEX_CHARS, memory_index
from runner.rundir.docs import JobMetrics
from runner.rundir.store import JobStore, read_jsonl
from runner.tools.memory import MEMORY_TOOL, MemoryTool
from runner.tools.memory_files import MAX_FILE_BYTES
from runner.tools.toolset import Toolset

pytestmark = pytest.mark.anyio

_MEMORY_ENTRY = re.compile(r"^  (/memories/\S+) \((\d+) bytes\)$", re.M)


def memory_index_entries(text: str) -> dict[str, int]:
    """The memory files an index in ``text`` names, with their sizes (as a reader of the index sees them)."""
    if MEMORY_INDEX not in text:
        return {}
    return {path: int(size) for path, size in _MEMORY_ENTRY.findall(text.split(MEMORY_INDEX, 1)[1])}


async def run(tool: MemoryTool, **args: object) -> dict:
    return await tool.run("toolu_1", dict(args))


async def test_the_commands_work_on_the_job_directory(tmp_path):
    tool = MemoryTool(str(tmp_path), page_chars=10_000)
    created = await run(tool, command="create", path="/memories/notes.md", file_text="one\ntwo\n")
    assert not created.get("is_error") and (tmp_path / "memories" / "notes.md").read_text() == "one\ntwo\n"
    view = await run(tool, command="view", path="/memories/notes.md")
    assert view["content"].endswith("     1\tone\n     2\ttwo")
    assert not (
        await run(tool, command="insert", path="/memories/notes.md", insert_line=0, insert_text="zero\n")
    ).get("is_error")
    assert not (
        await run(tool, command="str_replace", path="/memories/notes.md", old_str="two", new_str="2")
    ).get("is_error")
    assert (tmp_path / "memories" / "notes.md").read_text() == "zero\none\n2\n"
    part = await run(tool, command="view", path="/memories/notes.md", view_range=[2, 2])
    assert part["content"].endswith("     2\tone")
    assert not (await run(tool, command="create", path="/memories/notes.md", file_text="new\n")).get(
        "is_error"
    )
    assert (tmp_path / "memories" / "notes.md").read_text() == "new\n"  # create rewrites
    assert not (
        await run(tool, command="rename", old_path="/memories/notes.md", new_path="/memories/sub/moved.md")
    ).get("is_error")
    listing = await run(tool, command="view", path="/memories")
    assert "/memories/sub/moved.md" in listing["content"]
    assert not (await run(tool, command="delete", path="/memories/sub")).get("is_error")
    assert os.listdir(tmp_path / "memories") == []
    assert tool.generation == 6  # the writes made


async def test_a_long_file_is_viewed_a_page_at_a_time(tmp_path):
    tool = MemoryTool(str(tmp_path), page_chars=1_000)
    await run(
        tool, command="create", path="/memories/long.md", file_text="".join(f"line {n}\n" for n in range(500))
    )
    first = (await run(tool, command="view", path="/memories/long.md"))["content"]
    assert len(first) < 1_300 and "[memory: lines 1-" in first and "view the rest with view_range [" in first
    start = int(first.rsplit("view_range [", 1)[1].split(",")[0])
    rest = (await run(tool, command="view", path="/memories/long.md", view_range=[start, -1]))["content"]
    assert f"{start:>6}\tline {start - 1}" in rest


@pytest.mark.parametrize(
    "args",
    [
        {"command": "view", "path": "/memories/../x"},
        {"command": "create", "path": "/memories/../escape.md", "file_text": "x"},
        {"command": "view", "path": "/etc/passwd"},
        {"command": "create", "path": "/etc/passwd", "file_text": "x"},
        {"command": "create", "path": "memories/x", "file_text": "x"},
        {"command": "view", "path": "/memories/link"},
        {"command": "create", "path": "/memories/link", "file_text": "x"},
        {"command": "create", "path": "/memories/dirlink/x.md", "file_text": "x"},
        {"command": "rename", "old_path": "/memories/ok.md", "new_path": "/memories/../../moved.md"},
        {"command": "delete", "path": "/memories/.."},
        {"command": "view", "path": "/memories/\udcff"},
        {"command": "create", "path": "/memories/a.md", "file_text": "lone \ud800 surrogate"},
        {"command": "create", "path": "/memories/a.md", "file_text": "x" * (MAX_FILE_BYTES + 1)},
        {"command": "create", "path": "/memories/a.md"},
        {"command": "insert", "path": "/memories/ok.md", "insert_line": 99, "insert_text": "x"},
        {"command": "explode", "path": "/memories/ok.md"},
        {"command": "view", "path": 7},
    ],
)
async def test_a_path_out_of_memories_or_a_bad_input_is_an_error_result(tmp_path, args):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("secret\n")
    job = tmp_path / "job"
    (job / "memories").mkdir(parents=True)
    (job / "memories" / "ok.md").write_text("ok\n")
    (job / "memories" / "link").symlink_to(outside / "secret.md")
    (job / "memories" / "dirlink").symlink_to(outside)
    result = await run(MemoryTool(str(job)), **args)
    assert result["is_error"], result
    assert "secret" not in result["content"][-200:] or "secret.md" not in os.listdir(job / "memories")
    assert (outside / "secret.md").read_text() == "secret\n" and sorted(os.listdir(outside)) == ["secret.md"]
    assert not (tmp_path / "escape.md").exists() and not (tmp_path / "moved.md").exists()
    result["content"].encode("utf-8")  # valid text, whatever the input held


async def test_a_memories_folder_that_is_a_symlink_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    job = tmp_path / "job"
    job.mkdir()
    (job / "memories").symlink_to(outside)
    result = await run(MemoryTool(str(job)), command="create", path="/memories/x.md", file_text="x")
    assert result["is_error"] and os.listdir(outside) == []


async def test_a_memories_folder_swapped_for_a_symlink_between_calls_is_refused(tmp_path):
    """The folder is opened afresh (``O_NOFOLLOW``) at every command: a link put in its place after
    the tool has used it once leads nowhere, inside the job directory or out."""
    outside = tmp_path / "outside"
    outside.mkdir()
    job = tmp_path / "job"
    job.mkdir()
    tool = MemoryTool(str(job))
    assert not (await run(tool, command="create", path="/memories/a.md", file_text="a\n")).get("is_error")
    (job / "memories").rename(job / "old")
    (job / "memories").symlink_to(outside)
    for args in (
        {"command": "create", "path": "/memories/x.md", "file_text": "x"},
        {"command": "view", "path": "/memories"},
        {"command": "delete", "path": "/memories/a.md"},
    ):
        result = await run(tool, **args)
        assert result["is_error"] and "not a directory of the job" in result["content"], result
    assert os.listdir(outside) == [] and (job / "old" / "a.md").read_text() == "a\n"


def test_the_memory_tool_and_a_job_s_modules_import_without_the_sdk():
    """The SDK (about a second to import) comes in with the anthropic backend or the first request's
    tool definitions, not with the memory tool, the session or the scheduler."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, runner.tools.memory, runner.tools.toolset, runner.agent.session, "
            "runner.execution.scheduler, runner.tools.memory_files; "
            "assert 'anthropic' not in sys.modules, 'the SDK was imported'",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]


async def test_the_folder_has_a_size_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(runner.tools.memory, "MAX_TOTAL_BYTES", 1_000)
    tool = MemoryTool(str(tmp_path))
    assert not (await run(tool, command="create", path="/memories/a.md", file_text="x" * 600)).get("is_error")
    over = await run(tool, command="create", path="/memories/b.md", file_text="x" * 600)
    assert over["is_error"] and "limit" in over["content"] and not (tmp_path / "memories" / "b.md").exists()
    assert not (await run(tool, command="create", path="/memories/a.md", file_text="y" * 900)).get("is_error")


async def test_every_job_is_offered_memory_and_a_view_of_changed_memory_is_not_a_repeat(store, tmp_path):
    async with Toolset(str(tmp_path), ("read",), store, limits=Limits(max_repeated_calls=1)) as tools:
        assert MEMORY_TOOL in tools.definitions() and "memory" in tools.names
        view = {"command": "view", "path": "/memories"}
        calls = [
            {"type": "tool_use", "id": f"toolu_{n}", "name": "memory", "input": args}
            for n, args in enumerate(
                [
                    {"command": "create", "path": "/memories/a.md", "file_text": "a"},
                    view,
                    {"command": "create", "path": "/memories/b.md", "file_text": "b"},
                    view,
                    view,
                ]
            )
        ]
        results = [(await tools.run_batch([call], turn=n))[0] for n, call in enumerate(calls)]
    assert [bool(r.get("is_error")) for r in results] == [False, False, False, False, True]
    assert "already made" in results[-1]["content"]


def test_the_emulator_knows_the_memory_tool_and_its_beta():
    body = {
        "model": "m",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [MEMORY_TOOL],
    }
    assert validate(body, betas=[MEMORY_BETA], count_tokens=False, min_trigger=0) == []
    assert any("anthropic-beta" in p for p in validate(body, betas=[], count_tokens=False, min_trigger=0))
    odd = {**body, "tools": [{**MEMORY_TOOL, "description": "x"}]}
    assert validate(odd, betas=[MEMORY_BETA], count_tokens=False, min_trigger=0)
    renamed = {**body, "tools": [{**MEMORY_TOOL, "name": "notes"}]}
    assert validate(renamed, betas=[MEMORY_BETA], count_tokens=False, min_trigger=0)


async def test_memory_calls_through_the_sdk_are_valid_against_the_emulator(tmp_path):
    create = {
        "type": "tool_use",
        "id": "toolu_m1",
        "name": "memory",
        "input": {"command": "create", "path": "/memories/plan.md", "file_text": "- step one\n"},
    }
    view = {
        "type": "tool_use",
        "id": "toolu_m2",
        "name": "memory",
        "input": {"command": "view", "path": "/memories/plan.md"},
    }
    session, recorded, transcript = await scripted_job(
        tmp_path,
        [
            {"content": [create], "stop_reason": "tool_use"},
            {"content": [view], "stop_reason": "tool_use"},
            {"content": "Done.", "stop_reason": "end_turn"},
        ],
    )
    assert session.record.status == "succeeded", session.record.error
    assert len(recorded) == 3 and all(MEMORY_TOOL in r["tools"] for r in recorded)
    results = [
        b
        for m in transcript
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    assert not any(r.get("is_error") for r in results)
    assert "     1\t- step one" in results[1]["content"]
    assert (tmp_path / "job" / "memories" / "plan.md").read_text() == "- step one\n"


def test_the_index_fits_its_budget_and_names_what_it_leaves_out():
    assert memory_index([]) == ""
    few = memory_index([("/memories/a.md", 10), ("/memories/b.md", 2_000)])
    assert memory_index_entries(few) == {"/memories/a.md": 10, "/memories/b.md": 2_000}
    many = memory_index([(f"/memories/dir/file-{n:04}.md", n) for n in range(500)])
    assert len(many) <= MEMORY_INDEX_CHARS and "more (view /memories" in many
    assert not any(line.startswith("- ") for line in many.split("\n"))  # not note lines of a summary


async def test_a_history_compaction_leaves_the_memory_index_in_the_window(tmp_path):
    store = JobStore(tmp_path / "job")
    await store.open()
    (store.dir / "memories").mkdir()
    (store.dir / "memories" / "survey.md").write_text("- file: a.py | 10 | 1 |  | \n")
    state = CompactionState(limits=Limits(), active_request="Survey.")
    history = History(store, state)
    history.add({"role": "user", "content": "Survey."})
    for n in range(3):
        history.add(
            {"role": "assistant", "content": [{"type": "text", "text": f"turn {n}"}]},
            {"role": "user", "content": f"more {n}"},
        )
    state.window.mark_seen()
    await Compactor(Summarizer(None, "none")).compact_history(state, store)
    await store.flush()
    head = text_of(state.window.messages[0])
    assert MEMORY_INDEX in head and memory_index_entries(head) == {"/memories/survey.md": 28}
    rebuilt = CompactionState(limits=Limits(), active_request="Survey.")
    transcript, _ = read_jsonl(store.dir / "transcript.jsonl")
    again = JobStore(store.dir)
    assert await rebuilt.resume(transcript, again)  # context.jsonl keeps the index with the summary
    assert memory_index_entries(text_of(rebuilt.window.messages[0])) == {"/memories/survey.md": 28}


def memory_spec(workspace: Path, max_turns: int) -> JobSpec:
    return JobSpec(
        name="notes",
        source=Path("notes.toml"),
        prompt="Read the modules, keeping notes.",
        workspace=workspace,
        model="m",
        system=None,
        tools=("read", "glob", "grep"),
        limits=Limits(max_turns=max_turns),
    )


NOTES = "/memories/notes.md"
MEMORY_SCRIPT = [
    [
        ("memory", {"command": "create", "path": NOTES, "file_text": "- a.py: read\n"}),
        ("read", {"file_path": "a.py"}),
    ],
    [("memory", {"command": "insert", "path": NOTES, "insert_line": 1, "insert_text": "- b.py: read\n"})],
    ("read", {"file_path": "b.py"}),  # the resumed job's first turn
    ("memory", {"command": "view", "path": NOTES}),
    ("memory", {"command": "create", "path": "/memories/done.md", "file_text": "done\n"}),
]


def last_memory_view(request) -> str:
    """A report quoting the last result of a memory view the request carries."""
    views = {u["id"] for m in request.messages for u in tool_uses(m) if u["input"].get("command") == "view"}
    seen = [str(r["content"]) for m in request.messages for r in tool_results(m) if r["tool_use_id"] in views]
    return "# Notes\n\n" + (seen[-1] if seen else "(none)")


def services(model) -> Services:
    return Services(model=model, compactor=Compactor(Summarizer(None, "none")), summary_model="none")


async def stopped_after_two_turns(tmp_path: Path) -> tuple[Path, Path, ScriptedModel, JobMetrics]:
    """:data:`MEMORY_SCRIPT`'s job on a two-file workspace, stopped by max_turns after its two turns that
    write memory (and the last call's report): its workspace, job directory, model and result."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.py").write_text("a = 1\n")
    (ws / "b.py").write_text("b = 2\n")
    job = tmp_path / "job"
    store = JobStore(job)
    await store.open()
    model = ScriptedModel(MEMORY_SCRIPT, final=last_memory_view)
    first = await Session(memory_spec(ws, 3), services=services(model), store=store).run()
    return ws, job, model, first


async def test_a_resumed_job_sees_the_same_memory(tmp_path):
    """A job stopped after two turns that wrote memory (a create, then an insert: replayed twice, it
    would show twice) is resumed from its transcript: its memory is what it left, its next view of it
    shows exactly that, and its later writes go on from there."""
    ws, job, model, first = await stopped_after_two_turns(tmp_path)
    assert (first.status, first.turns) == ("max_turns", 3)  # two turns, then the last call's report
    kept = {p.name: p.read_text() for p in (job / "memories").iterdir()}
    assert kept == {"notes.md": "- a.py: read\n- b.py: read\n"}
    transcript, _ = read_jsonl(job / "transcript.jsonl")
    again = JobStore(job)
    await again.open()
    second = await Session(
        memory_spec(ws, 200), services=services(model), store=again, history=transcript
    ).run()
    assert second.status == "succeeded", second.error
    # the first segment's three calls (its report's too), the script's other three turns, the report
    assert second.turns == 3 + 3 + 1
    assert {p.name: p.read_text() for p in (job / "memories").iterdir()} == {**kept, "done.md": "done\n"}
    final, _ = read_jsonl(job / "transcript.jsonl")
    resumed = [u for m in final[len(transcript) :] for u in tool_uses(m)]
    assert [(u["name"], u["input"]) for u in resumed] == MEMORY_SCRIPT[2:]  # the rest, nothing made twice
    view = f"Here's the content of {NOTES} with line numbers:\n     1\t- a.py: read\n     2\t- b.py: read"
    assert (job / "final.md").read_text() == "# Notes\n\n" + view  # the view saw what the first segment left


async def test_a_memory_write_whose_turn_was_lost_is_made_once(tmp_path):
    """The job's insert ran, but its turn never reached the transcript (a kill between the two): the
    resumed job's memory is what its kept history made, so the insert it makes again shows once."""
    ws, job, model, _ = await stopped_after_two_turns(tmp_path)
    assert (job / "memories" / "notes.md").read_text() == "- a.py: read\n- b.py: read\n"
    transcript, _ = read_jsonl(job / "transcript.jsonl")
    kept = transcript[:3]  # the prompt, the first turn and its results: the insert's turn is lost
    (job / "transcript.jsonl").write_text("".join(json.dumps(m) + "\n" for m in kept))
    again = JobStore(job)
    await again.open()
    second = await Session(memory_spec(ws, 200), services=services(model), store=again, history=kept).run()
    assert second.status == "succeeded", second.error
    assert (job / "memories" / "notes.md").read_text() == "- a.py: read\n- b.py: read\n"
    view = f"Here's the content of {NOTES} with line numbers:\n     1\t- a.py: read\n     2\t- b.py: read"
    assert (job / "final.md").read_text() == "# Notes\n\n" + view


def survey_spec(max_turns: int) -> JobSpec:
    limits = Limits(
        context_char_limit=30_000, batch_char_limit=30_000, large_result_chars=8_000, max_turns=max_turns
    )
    return JobSpec(
        name="survey",
        source=Path("survey.toml"),
        prompt="Survey this package.",
        workspace=Path(email.__file__).parent,
        model="m",
        system=None,
        tools=("read", "glob", "grep"),
        limits=limits,
    )


@pytest.mark.stand_in
async def test_a_resumed_survey_goes_on_from_its_memory(tmp_path):
    """The stand-in's survey keeps its work in memory: resumed, it lists nothing again and appends its
    facts to what it had."""
    job = tmp_path / "job"
    store = JobStore(job)
    await store.open()
    first = await Session(survey_spec(8), services=services(OfflineModel()), store=store).run()
    assert first.status == "max_turns"
    kept = {p.name: p.read_text() for p in (job / "memories" / "survey").iterdir()}
    assert {"files-000.md", "facts-000.md"} <= set(kept)
    transcript, _ = read_jsonl(job / "transcript.jsonl")
    again = JobStore(job)
    await again.open()
    second = await Session(
        survey_spec(200), services=services(OfflineModel()), store=again, history=transcript
    ).run()
    assert second.status == "succeeded", second.error
    now = {p.name: p.read_text() for p in (job / "memories" / "survey").iterdir()}
    assert now["files-000.md"] == kept["files-000.md"]  # the listing was whole: nothing listed again
    assert now["facts-000.md"].startswith(kept["facts-000.md"])  # facts go on at the end
    facts = [
        json.loads(line)[0]
        for name in sorted((job / "memories" / "survey").glob("facts-*.md"))
        for line in name.read_text().splitlines()[1:]
    ]
    assert len(facts) == len(set(facts))  # every entry once: nothing read twice across the resume
    assert (
        set(survey_rows((job / "final.md").read_text(), job))
        == set(facts)
        == set(regular_files(Path(email.__file__).parent))
    )
    final, _ = read_jsonl(job / "transcript.jsonl")
    assert not any(
        b.get("name") == "glob"
        for m in final[len(transcript) :]
        if m["role"] == "assistant" and isinstance(m["content"], list)
        for b in m["content"]
    )  # it did not list the tree again
    assert "# Survey of" in (job / "final.md").read_text()


async def test_hidden_names_cannot_pass_the_folder_cap(tmp_path):
    from runner.tools.memory_files import MAX_TOTAL_BYTES

    tool = MemoryTool(str(tmp_path))
    blob = "x" * (MAX_FILE_BYTES - 10)
    results = [
        await run(tool, command="create", path=path, file_text=blob)
        for i in range(40)
        for path in (f"/memories/.h{i}", f"/memories/d{i}/.h")
    ]
    assert all(r["is_error"] and "hidden name" in r["content"] for r in results), results[0]
    assert not list((tmp_path / "memories").rglob(".*"))
    (tmp_path / "memories").mkdir(exist_ok=True)
    (tmp_path / "memories" / ".old").write_text(blob)  # a hidden file already there (not made by the tool)
    made = [await run(tool, command="create", path=f"/memories/v{i}", file_text=blob) for i in range(40)]
    moved = await run(tool, command="rename", old_path="/memories/v0", new_path="/memories/.v0")
    assert moved["is_error"] and "hidden name" in moved["content"]
    on_disk = sum(p.lstat().st_size for p in (tmp_path / "memories").rglob("*"))
    assert on_disk <= MAX_TOTAL_BYTES, on_disk  # the hidden file counted too
    assert sum(not r.get("is_error") for r in made) == MAX_TOTAL_BYTES // len(blob) - 1
    assert "over its" in made[-1]["content"]


async def test_a_memory_path_has_at_most_16_components(tmp_path):
    from runner.tools.memory_files import MAX_DEPTH

    tool = MemoryTool(str(tmp_path))
    deep = await run(
        tool, command="create", path="/memories/" + "/".join(["d"] * 1500) + "/note.md", file_text="x"
    )
    assert (
        deep["is_error"]
        and "1501 components deep" in deep["content"]
        and f"the {MAX_DEPTH}" in deep["content"]
    )
    assert not (tmp_path / "memories" / "d").exists()
    at_cap = "/memories/" + "/".join(["a"] * (MAX_DEPTH - 1)) + "/note.md"
    assert not (await run(tool, command="create", path=at_cap, file_text="x")).get("is_error")
    over = await run(
        tool, command="create", path="/memories/" + "/".join(["b"] * MAX_DEPTH) + "/n.md", file_text="x"
    )
    assert over["is_error"] and "components deep" in over["content"]
    # a rename cannot stack trees: /memories/a holds 15 levels; moving it under /memories/c/c would make 18
    moved = await run(tool, command="rename", old_path="/memories/a", new_path="/memories/c/c/a")
    assert moved["is_error"] and "levels of the directory moved there" in moved["content"], moved
    assert (tmp_path / "memories" / "a").is_dir() and not (tmp_path / "memories" / "c").exists()
    file_moved = await run(tool, command="rename", old_path=at_cap, new_path="/memories/c/note.md")
    assert not file_moved.get("is_error"), file_moved


async def test_a_resume_rebuilds_a_memory_folder_of_any_depth(tmp_path):
    """A memory folder holding a chain 3,000 deep (an older runner let a create make one): a resume's
    rebuild compares it and replaces it, without a RecursionError."""
    from runner.agent.continuation import rebuild_memory
    from runner.rundir.trees import remove_tree

    job = tmp_path / "job"
    (job / "memories").mkdir(parents=True)
    code = (
        "import os\nfor _ in range(3000):\n    os.mkdir('d'); os.chdir('d')\nopen('bottom', 'w').write('x')"
    )
    subprocess.run([sys.executable, "-c", code], cwd=job / "memories", check=True, timeout=30)
    (job / "memories" / "d" / "note.md").write_text("not made by the kept history")
    try:
        assert await rebuild_memory(job, []) is True  # no kept write made it: the folder is rebuilt, empty
        assert os.listdir(job / "memories") == [] and sorted(os.listdir(job)) == ["memories"]
    finally:
        remove_tree(job, ignore_errors=True)  # pytest's own clean-up recurses
