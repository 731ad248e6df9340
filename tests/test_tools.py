"""The toolset over a real workspace with its real file tools (ours, under the SDK's ``agent_toolset``
definitions): a model's mistake always becomes an ``is_error`` tool_result it can read, never an
exception; ``recall`` stays inside the job directory and pages. The sandbox, cut results and hostile calls are
in test_sandbox.py and test_tool_trust.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.offline.readback import recall_page, without_footer
from runner.tools.recall import RECALL_PAGE_CHARS
from runner.tools.toolset import Toolset


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "pkg").mkdir(parents=True)
    (ws / "pkg" / "mod.py").write_text('"""Module."""\n\ndef f():\n    return 1  # TODO: more\n')
    (ws / "notes.txt").write_text("hello\n")
    (tmp_path / "outside.txt").write_text("secret outside the workspace\n")
    (ws / "escape").symlink_to(tmp_path / "outside.txt")
    (ws / "escape-dir").symlink_to(tmp_path)
    return ws


def call(name, input, id="toolu_1"):  # noqa: A002
    return {"type": "tool_use", "id": id, "name": name, "input": input}


def assert_error(result: dict, *words: str) -> None:
    assert result["type"] == "tool_result" and result["tool_use_id"]
    assert result.get("is_error") is True, result
    text = result["content"] if isinstance(result["content"], str) else str(result["content"])
    assert text.strip(), result
    for word in words:
        assert word in text, (word, text)


MISTAKES = [
    pytest.param(call("read", {"file_path": "/etc/passwd"}), ("outside",), id="absolute-path-outside"),
    pytest.param(call("read", {"file_path": "../outside.txt"}), ("outside",), id="relative-path-outside"),
    pytest.param(call("read", {"file_path": "escape"}), ("outside",), id="symlink-to-file-outside"),
    pytest.param(
        call("read", {"file_path": "escape-dir/outside.txt"}), ("outside",), id="symlink-dir-outside"
    ),
    pytest.param(call("glob", {"pattern": "*", "path": "/etc"}), ("outside",), id="glob-outside"),
    pytest.param(call("grep", {"pattern": "root", "path": "/etc/passwd"}), ("outside",), id="grep-outside"),
    pytest.param(call("read", {"file_path": "no-such-file.py"}), ("no such file",), id="missing-file"),
    pytest.param(call("read", {"file_path": "pkg"}), (), id="read-a-directory"),
    pytest.param(call("read", {"file_path": "a\x00b"}), (), id="nul-in-path"),
    pytest.param(call("teleport", {"to": "mars"}), ("unknown tool", "teleport", "read"), id="unknown-tool"),
    pytest.param(call("bash", {"command": "ls"}), ("unknown tool",), id="tool-not-offered"),
    pytest.param(call("read", "pkg/mod.py"), ("JSON object", "str"), id="input-is-a-string"),
    pytest.param(call("read", ["pkg/mod.py"]), ("JSON object",), id="input-is-a-list"),
    pytest.param(call("read", None), ("JSON object",), id="input-is-null"),
    pytest.param(call("read", {}), ("file_path",), id="missing-required-arg"),
    pytest.param(call("grep", {"path": "."}), ("pattern",), id="grep-missing-pattern"),
    pytest.param(call("read", {"file_path": 42}), ("file_path",), id="wrong-arg-type"),
    pytest.param(call("read", {"file_path": "pkg/mod.py", "bogus": 1}), (), id="unexpected-arg"),
    pytest.param(call("grep", {"pattern": "([unclosed"}), (), id="bad-regex"),
    pytest.param(call(["read"], {"file_path": "notes.txt"}), ("tool name",), id="name-not-a-string"),
    pytest.param(call(None, {}), ("tool name",), id="name-missing"),
    pytest.param(call("recall", {"path": "../../etc/passwd"}), ("outside",), id="recall-escape"),
    pytest.param(call("recall", {"path": "/etc/passwd"}), ("outside",), id="recall-absolute"),
    pytest.param(call("recall", {}), ("path",), id="recall-missing-path"),
    pytest.param(
        call("recall", {"path": "tool-results/none.txt"}), ("no such file",), id="recall-missing-file"
    ),
    pytest.param(
        call("recall", {"path": "transcript.jsonl", "offset": -1}), ("offset",), id="recall-bad-offset"
    ),
    pytest.param(
        call("recall", {"path": "transcript.jsonl", "limit": "all"}), ("limit",), id="recall-bad-limit"
    ),
    pytest.param(call("recall", "transcript.jsonl"), ("JSON object",), id="recall-input-string"),
]


@pytest.mark.anyio
@pytest.mark.parametrize("tool_call, words", MISTAKES)
async def test_mistakes_become_error_results(workspace, store, tool_call, words):
    async with Toolset(str(workspace), ("read", "glob", "grep"), store) as tools:
        result = await tools.run(tool_call)
    assert_error(result, *words)
    assert result["tool_use_id"] == "toolu_1"
    assert "secret outside" not in str(result["content"])


@pytest.mark.anyio
async def test_a_batch_of_mistakes_answers_every_call_in_order(workspace, store):
    calls = [
        call("read", {"file_path": "notes.txt"}, "a"),
        call("nope", {}, "b"),
        call("read", "x", "c"),
        call("read", {"file_path": "/etc/passwd"}, "d"),
        call("glob", {"pattern": "**/*.py"}, "e"),
    ]
    async with Toolset(str(workspace), ("read", "glob", "grep"), store) as tools:
        results = await tools.run_batch(calls)
    assert [r["tool_use_id"] for r in results] == ["a", "b", "c", "d", "e"]
    assert [bool(r.get("is_error")) for r in results] == [False, True, True, True, False]
    assert "hello" in results[0]["content"]
    assert "mod.py" in results[4]["content"]


@pytest.mark.anyio
async def test_good_calls_work(workspace, store):
    async with Toolset(str(workspace), ("read", "glob", "grep"), store) as tools:
        names = {d["name"] for d in tools.definitions()}
        read = await tools.run(call("read", {"file_path": str(workspace / "pkg" / "mod.py")}))
        grep = await tools.run(call("grep", {"pattern": "TODO"}))
        compact = await tools.run(call("compact", {}))
    assert names == {"read", "glob", "grep", "recall", "memory", "compact"}
    assert not read.get("is_error") and "def f" in read["content"]
    assert not grep.get("is_error") and "mod.py" in grep["content"]
    assert not compact.get("is_error") and tools.compact_requested


@pytest.mark.anyio
async def test_recall_reads_only_inside_the_job_directory_and_pages(tmp_path, workspace, store):
    text = "".join(f"line {i:05d}\n" for i in range(5000))  # 55,000 chars
    rel = await store.persist_output("toolu_big", text)
    (store.dir / "link-out").symlink_to(tmp_path / "outside.txt")
    async with Toolset(str(workspace), ("read",), store) as tools:
        first = await tools.run(call("recall", {"path": rel}))
        page = await tools.run(call("recall", {"path": rel, "offset": 11, "limit": 22}))
        last = await tools.run(call("recall", {"path": rel, "offset": len(text) - 11}))
        past = await tools.run(call("recall", {"path": rel, "offset": len(text) + 100}))
        link = await tools.run(call("recall", {"path": "link-out"}))
        up = await tools.run(call("recall", {"path": "tool-results/../../../outside.txt"}))
    assert not first.get("is_error")
    assert first["content"].startswith(text[:RECALL_PAGE_CHARS])
    assert recall_page(first["content"]) == (1, 3, 0, RECALL_PAGE_CHARS, len(text))
    assert f"next page: offset {RECALL_PAGE_CHARS}" in first["content"]
    assert page["content"].startswith("line 00001\nline 00002\n")
    assert "next page: offset 33" in page["content"]
    assert last["content"].startswith("line 04999\n") and "end of file" in last["content"]
    assert not past.get("is_error") and "end of file" in past["content"]
    assert_error(link, "outside")
    assert_error(up, "outside")

    # every page, read in order, gives back the whole file
    pieces, offset = [], 0
    async with Toolset(str(workspace), ("read",), store) as tools:
        while True:
            got = (await tools.run(call("recall", {"path": rel, "offset": offset, "limit": 7000})))["content"]
            page, pages, _, end, _ = recall_page(got)
            pieces.append(without_footer(got))
            if page == pages:
                assert got.endswith("end of file]")
                break
            offset = end
    assert "".join(pieces) == text


@pytest.mark.anyio
async def test_recall_of_a_large_file_holds_a_chunk_not_the_file(workspace, store):
    import tracemalloc

    unit = "héllo wörld €\n".encode() + b"\xff"  # multibyte characters split across chunks, a bad byte
    shown = unit.decode(errors="replace")  # 15 characters of 19 bytes
    copies = (64 << 20) // len(unit)  # 64 MiB
    (store.dir / "tool-results" / "big.txt").write_bytes(unit * copies)
    offsets = [0, 7, len(shown) * copies // 2 + 3, len(shown) * copies - 5]
    calls = [
        call("recall", {"path": "tool-results/big.txt", "offset": o, "limit": 40}, f"toolu_r{i}")
        for i, o in enumerate(offsets)
    ]
    async with Toolset(str(workspace), ("read",), store) as tools:
        tracemalloc.start()
        try:
            results = await tools.run_batch(calls)  # read-only: the four run at once
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < 32 << 20, (
        peak
    )  # a chunk and its text a call; reading the file whole took over 160 MiB a call
    for offset, result in zip(offsets, results, strict=True):
        assert not result.get("is_error"), result
        start = offset % len(shown)
        want = (shown * 4)[start : start + min(40, len(shown) * copies - offset)]
        assert without_footer(result["content"]) == want
        assert recall_page(result["content"])[2:] == (offset, offset + len(want), len(shown) * copies)


@pytest.mark.anyio
async def test_recall_refuses_a_file_over_its_cap(workspace, store):
    from runner.tools.recall import RECALL_MAX_BYTES

    with open(store.dir / "tool-results" / "huge.txt", "wb") as f:
        f.truncate(RECALL_MAX_BYTES + 1)  # sparse: no disk used
    async with Toolset(str(workspace), ("read",), store) as tools:
        result = await tools.run(call("recall", {"path": "tool-results/huge.txt", "offset": 5, "limit": 3}))
    assert_error(result, "tool-results/huge.txt", f"{RECALL_MAX_BYTES + 1} bytes", "more than recall reads")


@pytest.mark.anyio
async def test_bash_bad_input_is_an_error_result(workspace, store):
    async with Toolset(str(workspace), ("bash",), store) as tools:
        result = await tools.run(call("bash", {"command": 123}))
        missing = await tools.run(call("bash", {}, "toolu_2"))
    assert_error(result, "command")
    assert_error(missing, "command")
