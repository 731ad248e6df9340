"""Tools on real codebases and hostile model output.

Toolset level, on real files: any file can be read (a 1 MB file by line range, and page by page);
every cut result says so (glob's 200-match cap with the total, grep's walk cap); FIFOs are refused
before they are opened; a non-UTF-8 file name is escaped. Whole jobs through the real SDK against
the emulator's strict validation: each hostile tool call shape gets an error result and every
request stays valid; a 100 KB output is read back in full under a 20,000-char context limit; a
repeated call is caught and a model that keeps repeating ends ``stuck``. A batch: a job stuck in a
blocking tool ends at its timeout while the others finish.

These hold with any model: whole jobs are driven here by scripted models (the emulator's script, or
``tests/scripted.py``'s model), none by the offline stand-in.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import anyio
import pytest
from scripted import ScriptedModel

from runner.compaction.compactor import Compactor
from runner.compaction.summarizer import Summarizer
from runner.config import Limits
from runner.emulator.config import EmulatorConfig
from runner.emulator.server import running_emulator
from runner.execution.scheduler import Batch, run_batch
from runner.jobs import JobSpec
from runner.messages import request_problems, tool_results, tool_uses
from runner.models.anthropic import AnthropicModel
from runner.models.base import Reply, Request
from runner.offline.readback import binary_size, glob_cut, read_size, recall_page, without_footer
from runner.pricing import Usage
from runner.rundir.store import read_jsonl
from runner.tools import file_tools
from runner.tools.recall import recall_page_chars
from runner.tools.toolset import Toolset

pytestmark = pytest.mark.anyio


def call(name: str, args: Any, id: str = "toolu_1") -> dict:  # noqa: A002
    return {"type": "tool_use", "id": id, "name": name, "input": args}


# --- any file can be read -------------------------------------------------------------------------


async def test_a_1mb_file_is_read_by_line_range_and_page_by_page(tmp_path, store):
    lines = [f"line {i:06d} " + "x" * 60 for i in range(1, 15_001)]  # 15,000 lines, about 1 MB
    (tmp_path / "big.txt").write_text("\n".join(lines) + "\n")
    assert (tmp_path / "big.txt").stat().st_size > 1_000_000
    async with Toolset(str(tmp_path), ("read",), store) as tools:
        ranged = await tools.run(call("read", {"file_path": "big.txt", "view_range": [7000, 7004]}))
        whole = await tools.run(call("read", {"file_path": "big.txt"}, "toolu_2"))
        pages, start = [], 1
        notice = re.compile(r"^\[read: lines (\d+)-(\d+) of (\d+) .*next: view_range \[(\d+), (\d+)\]\]\n")
        first = notice.search(whole["content"])
        assert first and int(first.group(3)) == 15_000
        step = int(first.group(2))
        while start <= 15_000:
            got = await tools.run(
                call(
                    "read",
                    {"file_path": "big.txt", "view_range": [start, start + step - 1]},
                    f"toolu_p{start}",
                )
            )
            assert not got.get("is_error"), got
            pages.append(got["content"])
            start += step
    assert not ranged.get("is_error") and ranged["content"].split("\n") == lines[6999:7004]
    assert whole["content"].split("\n")[1] == lines[0] and not whole.get("is_error")
    assert read_size(whole["content"]) == (15_000, (tmp_path / "big.txt").stat().st_size)
    assert "\n".join(pages) == "\n".join(lines) + "\n"  # the pages together are the file, exactly


async def test_a_one_line_file_of_900_kb_is_read_by_byte_range_to_its_end(tmp_path, store):
    text = "<svg>" + "".join(f"<p id='{i}'>é</p>" for i in range(60_000)) + "</svg>"  # one line, multibyte
    (tmp_path / "one.svg").write_text(text)
    size = (tmp_path / "one.svg").stat().st_size
    assert size > 880_000
    async with Toolset(str(tmp_path), ("read",), store) as tools:
        first = await tools.run(call("read", {"file_path": "one.svg"}))
        assert not first.get("is_error"), first
        assert read_size(first["content"]) == (1, size)
        parts, k = [first["content"].split("\n", 1)[1]], 0
        nxt = re.search(r"next: byte_range \[(\d+), (\d+)\]", first["content"])
        while nxt:
            k += 1
            got = await tools.run(
                call(
                    "read", {"file_path": "one.svg", "byte_range": [int(nxt[1]), int(nxt[2])]}, f"toolu_b{k}"
                )
            )
            assert not got.get("is_error"), got
            head, body = got["content"].split("\n", 1)
            parts.append(body)
            nxt = re.search(r"next: byte_range \[(\d+), (\d+)\]", head)
        assert "the end of the file" in head
    assert "".join(parts) == text  # every character once: no page starts or ends inside one


@pytest.mark.parametrize(
    "byte_range", [[10**30, 10**31], [-1, 5], [5, 5], [True, 9], ["0", 9], [0], [0, 1, 2]]
)
async def test_a_bad_or_huge_byte_range_is_a_readable_error(tmp_path, store, byte_range):
    (tmp_path / "f.txt").write_text("hello\n")
    async with Toolset(str(tmp_path), ("read",), store) as tools:
        got = await tools.run(call("read", {"file_path": "f.txt", "byte_range": byte_range}))
    assert got.get("is_error") and got["content"].startswith("read: byte_range "), got  # past the end too


async def test_a_binary_file_read_says_its_size(tmp_path, store):
    (tmp_path / "lib.so").write_bytes(b"\x7fELF\x00\xff" * 100_000)
    (tmp_path / "small.bin").write_bytes(b"\xff\xfe\x00" * 10)
    async with Toolset(str(tmp_path), ("read",), store) as tools:
        big = await tools.run(call("read", {"file_path": "lib.so"}))
        small = await tools.run(call("read", {"file_path": "small.bin"}, "toolu_2"))
    assert big.get("is_error") and binary_size(big["content"]) == 600_000
    assert small.get("is_error") and binary_size(small["content"]) == 30


# --- cut results say so ---------------------------------------------------------------------------


async def test_a_300_match_glob_says_it_was_cut_and_how_many_there_are(tmp_path, store):
    for i in range(300):
        (tmp_path / f"m{i:03d}.py").write_text("x = 1\n")
    (tmp_path / "notes.txt").write_text("not a match\n")
    async with Toolset(str(tmp_path), ("glob",), store) as tools:
        cut = await tools.run(call("glob", {"pattern": "*.py"}))
        narrow = await tools.run(call("glob", {"pattern": "m1*.py"}, "toolu_2"))
    shown = [line for line in cut["content"].split("\n") if line.startswith("/")]
    assert len(shown) == 200 and glob_cut(cut["content"]) == (200, 300)
    assert glob_cut(narrow["content"]) is None and len(narrow["content"].split("\n")) == 100


async def test_grep_says_when_its_walk_stopped(tmp_path, store, monkeypatch):
    monkeypatch.setattr(file_tools, "WALK_MAX_ENTRIES", 50)  # the cap, lowered so the tree can be small
    for i in range(80):
        (tmp_path / f"f{i:02d}.txt").write_text("needle\n" if i % 2 else "hay\n")
    async with Toolset(str(tmp_path), ("grep",), store) as tools:
        cut = await tools.run(call("grep", {"pattern": "needle"}))
    assert "[grep: cut: the search stopped after 50 files" in cut["content"]


# --- no call can stall the loop ------------------------------------------------------------------


# every spelling names the FIFO ``pipe`` for the SDK (it collapses ``.``, ``..`` and a trailing ``/`` in
# the text before it follows links); ``s`` is a link to ``a/b``, and ``a/pipe`` is a regular file
@pytest.mark.parametrize("spelled", ["pipe", "pipe/", "pipe/.", "nope/../pipe", "s/../pipe", "./a/../pipe"])
async def test_fifos_are_refused_before_they_are_opened(tmp_path, store, spelled):
    ws = tmp_path / "ws"
    (ws / "a" / "b").mkdir(parents=True)
    os.mkfifo(ws / "pipe")
    (ws / "a" / "pipe").write_text("a regular file\n" * 30_000)  # over the one-read size, too
    (ws / "s").symlink_to("a/b")
    async with Toolset(str(ws), ("read", "write", "edit"), store) as tools:
        with anyio.fail_after(30):  # an open() of the FIFO would block here forever
            results = [
                await tools.run(call("write", {"file_path": spelled, "content": "x"}, "t1")),
                await tools.run(call("read", {"file_path": spelled}, "t2")),
                await tools.run(
                    call("edit", {"file_path": spelled, "old_string": "a", "new_string": "b"}, "t3")
                ),
            ]
    for result in results:
        assert result.get("is_error") and "not a regular file" in result["content"], result


async def test_what_a_path_outside_the_workspace_is_goes_unsaid(tmp_path, store):
    """A link out of the workspace to a directory holding a FIFO: the call is refused as outside,
    without saying that the target is a FIFO."""
    outside = tmp_path / "outside"
    outside.mkdir()
    os.mkfifo(outside / "p")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "out").symlink_to(outside)
    async with Toolset(str(ws), ("read", "write"), store) as tools:
        with anyio.fail_after(30):
            results = [
                await tools.run(call("read", {"file_path": "out/p"}, "t1")),
                await tools.run(call("write", {"file_path": "out/p", "content": "x"}, "t2")),
            ]
    for result in results:
        assert result.get("is_error") and "outside" in result["content"], result
        assert "not a regular file" not in result["content"] and "FIFO" not in result["content"]


async def test_a_big_directory_is_not_read_as_a_big_file(tmp_path, store):
    ws = tmp_path / "ws"
    big = ws / "big"
    big.mkdir(parents=True)
    for i in range(6_000):  # a directory whose st_size is over the one-read size on most filesystems
        (big / f"entry-with-a-rather-long-name-{i:05}").touch()
    if big.stat().st_size <= file_tools.DEFAULT_MAX_FILE_BYTES:
        pytest.skip(f"this filesystem gives a directory of 6,000 entries {big.stat().st_size} bytes")
    async with Toolset(str(ws), ("read",), store) as tools:
        result = await tools.run(call("read", {"file_path": "big"}))
    assert result.get("is_error") and "read failed" not in result["content"], result


# --- non-UTF-8 names ------------------------------------------------------------------------------


async def test_a_non_utf8_file_name_is_escaped_and_the_job_succeeds(tmp_path, store):
    ws = tmp_path / "ws"
    ws.mkdir()
    os.close(os.open(os.path.join(os.fsencode(ws), b"caf\xe9.py"), os.O_CREAT | os.O_WRONLY))
    (ws / "ok.py").write_text('"""Fine."""\n')
    async with Toolset(str(ws), ("glob",), store) as tools:
        listed = await tools.run(call("glob", {"pattern": "*"}))
    assert "caf\\xe9.py" in listed["content"]
    listed["content"].encode("utf-8")  # valid UTF-8
    store.queue_records("transcript.jsonl", [listed])
    await store.flush()
    spec = job("names", ws, ("read", "glob", "grep"))
    # a model that lists the workspace, searches it, reads the file by the name it was shown, and ok.py
    model = ScriptedModel(
        [
            ("glob", {"pattern": "*"}),
            ("grep", {"pattern": "Fine"}),
            ("read", {"file_path": "caf\\xe9.py"}),
            ("read", {"file_path": "ok.py"}),
        ]
    )
    result = await run_batch(
        Batch(
            run_dir=tmp_path / "run2",
            specs=[spec],
            model=model,
            compactor=Compactor(Summarizer(None, "none")),
            summary_model="none",
            concurrency=4,
            handle_signals=False,
        )
    )
    assert result.results["names"].status == "succeeded", result.results["names"].error
    transcript, warnings = read_jsonl(tmp_path / "run2" / "names" / "transcript.jsonl")
    answers = [b for m in transcript for b in tool_results(m)]
    assert not warnings and len(answers) == 4
    assert "caf\\xe9.py" in answers[0]["content"] and "ok.py" in answers[1]["content"]
    assert answers[3]["content"] and not answers[3].get("is_error")  # ok.py, read
    assert len(model.requests) == 5  # each result reached the model, and it ended


# --- whole jobs through the real SDK against the emulator ---------------------------------------


def job(
    name: str, workspace: Path, tools: tuple[str, ...] = ("read", "glob", "grep"), **limits: Any
) -> JobSpec:
    return JobSpec(
        name=name,
        source=Path(f"{name}.toml"),
        prompt=f"Work on this workspace ({name}).",
        workspace=workspace,
        model="claude-sonnet-5-5",
        system=None,
        tools=tools,
        limits=Limits(**{"max_retries": 0, "timeout_s": 120, **limits}),
    )


def use(id: Any, name: Any, args: Any) -> dict:  # noqa: A002
    return {"type": "tool_use", "id": id, "name": name, "input": args}


def reply(*blocks: dict, stop: str = "tool_use") -> dict:
    return {"content": list(blocks), "stop_reason": stop}


DONE = reply({"type": "text", "text": "Done."}, stop="end_turn")


async def run_scripted(tmp_path: Path, script: list[dict], spec: JobSpec) -> tuple[Any, dict, Path]:
    with running_emulator(EmulatorConfig(script=script, record_requests=True)) as emu:
        model = AnthropicModel(base_url=emu.base_url, api_key="emulator", max_retries=0)
        try:
            result = await run_batch(
                Batch(
                    run_dir=tmp_path / "run",
                    specs=[spec],
                    model=model,
                    compactor=Compactor(Summarizer(None, "none")),  # the script is the model only
                    summary_model="claude-haiku-5-5",
                    concurrency=1,
                    handle_signals=False,
                )
            )
        finally:
            await model.aclose()
        stats = emu.stats()
        recorded = emu.state.snapshot()["recorded_requests"]
    return result.results[spec.name], {"stats": stats, "requests": recorded}, tmp_path / "run" / spec.name


HOSTILE = {
    "input-not-an-object": [use("toolu_a", "read", ["a.py"])],
    "input-a-string": [use("toolu_a", "glob", "*.py")],
    "repeated-id": [use("toolu_a", "read", {"file_path": "a.py"}), use("toolu_a", "glob", {"pattern": "*"})],
    "id-repeats-an-earlier-turn": [use("toolu_first", "glob", {"pattern": "*"})],
    "id-not-a-string": [use(17, "read", {"file_path": "a.py"})],
    "id-missing": [{"type": "tool_use", "name": "read", "input": {"file_path": "a.py"}}],
    "name-not-a-string": [use("toolu_a", 5, {"file_path": "a.py"})],
    "everything-wrong": [use(None, None, 3), use(None, ["x"], None)],
}


@pytest.mark.parametrize("shape", list(HOSTILE))
async def test_a_hostile_call_gets_an_error_result_and_every_request_stays_valid(tmp_path, shape):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.py").write_text('"""A."""\n')
    script = [reply(use("toolu_first", "glob", {"pattern": "*"})), reply(*HOSTILE[shape]), DONE]
    result, seen, job_dir = await run_scripted(tmp_path, script, job("hostile", ws))
    assert result.status == "succeeded", result.error
    assert set(seen["stats"]["outcomes"]) == {"ok"}, seen["stats"]["outcomes"]  # 0 invalid requests
    for body in seen["requests"]:
        assert not request_problems(body["messages"]), request_problems(body["messages"])
    transcript, _ = read_jsonl(job_dir / "transcript.jsonl")
    at = max(i for i, m in enumerate(transcript) if tool_uses(m))  # the second reply with calls
    sent = [{k: v for k, v in u.items() if v is not None} for u in HOSTILE[shape]]  # JSON null: no field
    assert tool_uses(transcript[at]) == sent  # the transcript keeps what the model sent
    answers = tool_results(transcript[at + 1])
    assert len(answers) == len(HOSTILE[shape])
    bad = [a for a in answers if a.get("is_error")]
    assert bad, answers  # each shape has at least one broken call, and it says what was wrong
    for answer in bad:
        assert re.search(r"id|input|name", answer["content"]), answer


async def test_a_100kb_output_is_read_back_in_full_under_a_20000_char_limit(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    body = "".join(f"row {i:05d} {'z' * 40}\n" for i in range(2_100))  # about 100 KB
    (ws / "data.txt").write_text(body)
    limits = Limits(context_char_limit=20_000, max_retries=0, timeout_s=120)
    page = recall_page_chars(limits)
    saved = "tool-results/toolu_read.txt"
    offsets = list(range(0, len(body), page))
    script = [reply(use("toolu_read", "read", {"file_path": "data.txt"}))]
    script += [
        reply(use(f"toolu_r{k}", "recall", {"path": saved, "offset": off})) for k, off in enumerate(offsets)
    ]
    script.append(DONE)
    spec = job("recall", ws, context_char_limit=20_000)
    result, seen, job_dir = await run_scripted(tmp_path, script, spec)
    assert result.status == "succeeded", result.error
    assert set(seen["stats"]["outcomes"]) == {"ok"}
    assert (job_dir / saved).read_text() == body  # the read's output was saved (it did not fit)
    pieces = []
    for k, off in enumerate(offsets):  # the request after each recall carries that page whole
        answer = next(
            (
                b
                for body_ in seen["requests"]
                for m in body_["messages"]
                for b in tool_results(m)
                if b["tool_use_id"] == f"toolu_r{k}"
            ),
            None,
        )
        assert answer is not None, (k, result.turns, len(seen["requests"]))
        text = answer["content"] if isinstance(answer["content"], str) else answer["content"][0]["text"]
        number, pages, start, end, total = recall_page(text)
        assert (number, start, total) == (k + 1, off, len(body)) and pages == len(offsets)
        pieces.append(without_footer(text))
    assert "".join(pieces) == body


async def test_a_repeated_call_is_caught_and_a_model_that_keeps_repeating_is_stuck(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.py").write_text("# TODO: one\n")
    same = {"pattern": "TODO"}
    script = [reply(use(f"toolu_{k}", "grep", same)) for k in range(12)] + [DONE]
    result, seen, job_dir = await run_scripted(tmp_path, script, job("loop", ws))
    assert result.status == "stuck", (result.status, result.error)
    assert "grep" in result.error and "TODO" in result.error
    assert set(seen["stats"]["outcomes"]) == {"ok"}
    transcript, _ = read_jsonl(job_dir / "transcript.jsonl")
    answers = [b for m in transcript for b in tool_results(m)]
    assert [bool(a.get("is_error")) for a in answers[:3]] == [False] * 3  # run three times
    caught = answers[3]
    assert (
        caught.get("is_error")
        and "already made 3 times" in caught["content"]
        and "turn 1" in caught["content"]
    )
    where = re.search(r"saved at (\S+)", caught["content"]).group(1)
    assert "a.py:1:# TODO: one" in (job_dir / where).read_text()  # where its result is, really
    assert result.turns == 6  # three runs, then caught three times: stuck


# --- a blocked job ends at its timeout; the others go on ------------------------------------------


class Dispatch:
    """A scripted model for the job whose prompt names it, ``others`` for the rest."""

    name = "dispatch"
    server_compaction = False

    def __init__(self, scripts: dict[str, list[dict]], others: ScriptedModel):
        self.scripts = {k: list(v) for k, v in scripts.items()}
        self.others = others

    async def create(self, request: Request) -> Reply:
        first = request.messages[0]["content"]
        for key, script in self.scripts.items():
            if key in first and script:
                step = script.pop(0)
                return Reply(content=step["content"], stop_reason=step["stop_reason"], usage=Usage(1, 1))
        return await self.others.create(request)

    async def aclose(self) -> None:
        return None


async def test_a_job_blocked_in_a_tool_ends_at_its_timeout_while_the_others_finish(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    os.mkfifo(ws / "pipe")
    (ws / "a.py").write_text('"""A."""\n')
    fifo = [
        reply(use("toolu_w", "write", {"file_path": "pipe", "content": "x"})),
        reply(use("toolu_b", "bash", {"command": "cat pipe; sleep 600"})),
        DONE,
    ]
    specs = [
        job("fifo", ws, ("read", "glob", "grep", "write", "bash"), timeout_s=3),
        *(job(f"survey{i}", ws) for i in range(3)),
    ]
    result = await run_batch(
        Batch(
            run_dir=tmp_path / "run",
            specs=specs,
            model=Dispatch(
                {"(fifo)": fifo},
                ScriptedModel([("glob", {"pattern": "*.py"}), ("read", {"file_path": "a.py"})]),
            ),
            compactor=Compactor(Summarizer(None, "none")),
            summary_model="none",
            concurrency=4,
            handle_signals=False,
        )
    )
    stuck = result.results["fifo"]
    assert stuck.status == "timeout", (stuck.status, stuck.error)
    assert stuck.wall_s < 3 + 2  # the acceptance bound: within 2 s of its timeout
    assert {result.results[f"survey{i}"].status for i in range(3)} == {"succeeded"}
    transcript, _ = read_jsonl(tmp_path / "run" / "fifo" / "transcript.jsonl")
    write_result = next(b for m in transcript for b in tool_results(m) if b["tool_use_id"] == "toolu_w")
    assert write_result.get("is_error") and "not a regular file" in write_result["content"]
