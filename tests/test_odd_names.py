"""File names that are not plain text (bytes that are not UTF-8, control characters, backslashes):
what a file tool shows names exactly one file, and given back to ``read``, ``grep`` or ``glob`` it
names that file; an escape never spells ``.``, ``..`` or ``/``, so it cannot leave the workspace."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from runner.config import Limits
from runner.tools import beneath
from runner.tools.toolset import Toolset

pytestmark = pytest.mark.anyio

TOOLS = ("read", "write", "edit", "glob", "grep")
# name (bytes) -> the one line the file holds; the shown form of each is distinct
ODD = {
    b"bad\xffname.py": "BAD-FF",
    b"lit\\xffname.py": "LITERAL-BACKSLASH-X-FF",  # a backslash, an x and two hex digits, as text
    b"half\xe2\x82.txt": "CUT-UTF8",  # the first two bytes of a three-byte character
    b"caf\xc3\xa9.txt": "REAL-E-ACUTE",  # valid UTF-8: shown as itself
    b"ctl\x01\x7f.txt": "CONTROL",
    b"new\nline.txt": "NEWLINE",
    b"tab\there.txt": "TAB",
    b"\\x2e\\x2e": "LITERAL-DOTS",  # a name that looks like an escape of ".."
    b"d\xe9r/inner\xfe.txt": "IN-ODD-DIR",
    b"two\\\\slashes.txt": "TWO-BACKSLASHES",
}


def call(name: str, args: object, id: str = "toolu_1") -> dict:  # noqa: A002
    return {"type": "tool_use", "id": id, "name": name, "input": args}


def text(result: dict) -> str:
    return result["content"] if isinstance(result["content"], str) else str(result["content"])


def odd_tree(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    for name, body in ODD.items():
        path = os.path.join(os.fsencode(ws), name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(f"{body} = 1\n".encode())
    return ws


async def listed(tools: Toolset, ws: Path) -> list[str]:
    """Every file ``glob **/*`` shows, relative to the workspace, as shown."""
    got = await tools.run(call("glob", {"pattern": "**/*"}, "g0"))
    assert not got.get("is_error"), got
    prefix = str(ws) + "/"
    lines = got["content"].split("\n")
    assert all(line.startswith(prefix) for line in lines), lines
    return [line[len(prefix) :] for line in lines if line != f"{prefix}d\\xe9r"]


@pytest.mark.parametrize("lookup", ["openat2", "walk"])
async def test_every_name_glob_shows_reads_back_its_own_file(tmp_path, store, monkeypatch, lookup):
    monkeypatch.setattr(beneath, "use_openat2", lookup == "openat2")
    ws = odd_tree(tmp_path)
    async with Toolset(str(ws), TOOLS, store) as tools:
        names = await listed(tools, ws)
        # one line per file (a newline in a name does not split it) and no two files shown alike
        assert len(names) == len(set(names)) == len(ODD), names
        for i, name in enumerate(names):
            rel, absolute = name, f"{ws}/{name}"
            for j, path in enumerate((rel, absolute)):
                got = await tools.run(call("read", {"file_path": path}, f"r{i}-{j}"))
                assert not got.get("is_error"), (name, got)
                assert got["content"] in {f"{b} = 1\n" for b in ODD.values()}, (name, got)
                grepped = await tools.run(call("grep", {"pattern": " = 1", "path": path}, f"p{i}-{j}"))
                assert grepped["content"].endswith(f"/{name}:1:{got['content'].strip()}"), (name, grepped)
            globbed = await tools.run(call("glob", {"pattern": name}, f"g{i}"))
            assert globbed["content"] == f"{ws}/{name}", (name, globbed)
        # and each shown name reads the very file it names
        for raw, body in ODD.items():
            shown = beneath.shown(os.fsdecode(raw))
            got = await tools.run(call("read", {"file_path": shown}, f"x-{body}"))
            assert got["content"] == f"{body} = 1\n", (raw, shown, got)


async def test_a_shown_name_is_one_file_and_an_absent_one_is_no_such_file(tmp_path, store):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "lit\\xffname.py").write_text("LITERAL\n")
    with open(os.path.join(os.fsencode(ws), b"lit\xffname.py"), "w") as f:
        f.write("BYTE\n")
    async with Toolset(str(ws), TOOLS, store) as tools:
        shown = sorted((await tools.run(call("glob", {"pattern": "lit*"})))["content"].split("\n"))
        assert shown == [f"{ws}/lit\\\\xffname.py", f"{ws}/lit\\xffname.py"], shown
        literal = await tools.run(call("read", {"file_path": "lit\\\\xffname.py"}, "a"))
        byte = await tools.run(call("read", {"file_path": "lit\\xffname.py"}, "b"))
        missing = await tools.run(call("read", {"file_path": "lit\\xfename.py"}, "c"))
        grep_missing = await tools.run(call("grep", {"pattern": "x", "path": "no\\xffne"}, "d"))
        glob_missing = await tools.run(call("glob", {"pattern": "lit\\xfe*"}, "e"))
        wrote = await tools.run(call("write", {"file_path": "new\\xfd.txt", "content": "W\n"}, "f"))
        edited = await tools.run(
            call("edit", {"file_path": "lit\\xffname.py", "old_string": "BYTE", "new_string": "EDITED"}, "g")
        )
    assert literal["content"] == "LITERAL\n" and byte["content"] == "BYTE\n", (literal, byte)
    assert missing.get("is_error") and "no such file or directory" in missing["content"], missing
    assert grep_missing.get("is_error") and "no such file or directory" in grep_missing["content"]
    assert glob_missing["content"] == "no matches", glob_missing
    assert not wrote.get("is_error") and (os.fsencode(ws) + b"/new\xfd.txt") in [
        os.path.join(os.fsencode(ws), n) for n in os.listdir(os.fsencode(ws))
    ]
    assert not edited.get("is_error"), edited
    with open(os.path.join(os.fsencode(ws), b"lit\xffname.py")) as f:
        assert f.read() == "EDITED\n"
    assert (ws / "lit\\xffname.py").read_text() == "LITERAL\n"


ESCAPES_OF_TEXT = [
    "\\x2e\\x2e/outside/secret.txt",
    "ws2/\\x2e\\x2e/\\x2e\\x2e/outside/secret.txt",
    "\\x2foutside/secret.txt",
    "sub\\x2f..\\x2f..\\x2foutside",
    "\\x5c",
    "caf\\xc3\\xa9.txt",  # bytes that are UTF-8 text ("é"): written as the text, never escaped
]


@pytest.mark.parametrize("lookup", ["openat2", "walk"])
@pytest.mark.parametrize("path", ESCAPES_OF_TEXT)
async def test_an_escape_of_text_is_refused_and_never_leaves_the_workspace(
    tmp_path, store, monkeypatch, lookup, path
):
    monkeypatch.setattr(beneath, "use_openat2", lookup == "openat2")
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "café.txt").write_text("INSIDE\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("SECRET-OUTSIDE\n")
    calls = [
        call("read", {"file_path": path}, "r"),
        call("read", {"file_path": f"{ws}/{path}"}, "ra"),
        call("grep", {"pattern": ".", "path": path}, "p"),
        call("glob", {"pattern": "*", "path": path}, "gp"),
        call("glob", {"pattern": path}, "g"),
        call("write", {"file_path": path, "content": "x"}, "w"),
    ]
    async with Toolset(str(ws), TOOLS, store, limits=Limits(sandbox="none")) as tools:
        results = [await tools.run(c) for c in calls]
    for c, result in zip(calls, results, strict=True):
        body = text(result)
        assert result.get("is_error"), (c, result)
        assert "SECRET-OUTSIDE" not in body and "INSIDE" not in body, (c, result)
        assert "escapes" in body, (c, result)  # said why, not "no such file"
    assert sorted(p.name for p in tmp_path.joinpath("outside").iterdir()) == ["secret.txt"]
    assert sorted(p.name for p in ws.iterdir()) == ["café.txt", "sub"]


def test_shown_and_back_is_exact_for_any_bytes():
    from runner.tools.beneath import from_shown, shown

    rng = random.Random(7)
    names = [bytes([b]) for b in range(1, 256) if b != 0x2F] + [b"\\\\x41", b"\\", b"a\\", b"\\x"]
    allowed = [b for b in range(1, 256) if b != 0x2F]  # any byte a name may hold
    for _ in range(3000):
        names.append(bytes(rng.choice(allowed) for _ in range(rng.randint(1, 12))))
    seen: dict[str, bytes] = {}
    for raw in names:
        text_ = shown(os.fsdecode(raw))
        text_.encode("utf-8")  # valid UTF-8
        assert not any(ord(c) < 0x20 or ord(c) == 0x7F for c in text_), (raw, text_)
        assert os.fsencode(from_shown(text_)) == raw, (raw, text_)
        assert seen.setdefault(text_, raw) == raw, (raw, seen[text_], text_)


def test_a_survey_reads_files_whose_names_are_not_text(tmp_path, run_cli):
    odd_tree(tmp_path)
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "s.toml").write_text('workspace = "../ws"\nprompt = "Survey this directory."\n')
    done = run_cli("run", "jobs", "--backend", "offline", "--output-dir", "runs", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    report = (tmp_path / "runs" / "latest" / "s" / "final.md").read_text(encoding="utf-8")
    assert "not readable" not in report and "could not be read" not in report.replace(
        "0 could not be read", ""
    ), report
    assert f"{len(ODD)} text files read" in report, report
    rows = {line.split(" | ")[0].lstrip("| ") for line in report.splitlines() if " chars | " in line}
    for raw in ODD:
        assert beneath.shown(os.fsdecode(raw)) in rows, (raw, rows)
