"""How a cut glob is narrowed: the patterns of a split match exactly what the cut one matched, each
name once, and a directory whose names all begin alike is not narrowed one character a level."""

from __future__ import annotations

import fnmatch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.offline.listing import NAME_CLASSES, split

pytestmark = pytest.mark.stand_in

NAME_CHARS = "abcdeftuvxyzBQ_.0-9~é"
entry = st.text(alphabet=NAME_CHARS, min_size=1, max_size=12).filter(lambda n: n not in (".", ".."))
names = st.lists(entry, min_size=1, max_size=60, unique=True)  # names a directory's entries can have


def matched(pattern: str, pool: list[str]) -> set[str]:
    return {n for n in pool if fnmatch.fnmatchcase(n, pattern)}


def assert_partition(pattern: str, parts: list[str], pool: list[str]) -> None:
    want = matched(pattern, pool)
    for name in pool:
        hits = [p for p in parts if fnmatch.fnmatchcase(name, p)]
        assert len(hits) == (1 if name in want else 0), (pattern, name, hits, parts)


@settings(max_examples=300, deadline=None)
@given(pool=names, data=st.data())
def test_every_split_matches_each_name_once_and_nothing_more(pool: list[str], data: st.DataObject) -> None:
    pattern = "*"
    for _ in range(4):  # narrow a few levels, as a survey does with the answers it is shown
        want = sorted(matched(pattern, pool))
        shown = data.draw(st.lists(st.sampled_from(want), unique=True, max_size=8)) if want else []
        parts = split(pattern, shown)
        assert_partition(pattern, parts, pool)
        narrower = [p for p in parts if p.endswith("*") and p != pattern]
        if not narrower:
            return
        pattern = data.draw(st.sampled_from(narrower))


def test_names_that_begin_alike_are_narrowed_after_their_common_beginning() -> None:
    pool = [f"beta_{w}_{k}.py" for w in ("agent", "file", "tool", "message") for k in range(60)]
    shown = pool[::7]
    parts = split("*", shown)
    assert_partition("*", parts, pool)
    assert all(p.startswith("beta_[") for p in parts if matched(p, pool))  # one level of classes finds them
    assert sorted(p for p in parts if p.startswith("beta_[")) == sorted(f"beta_{c}*" for c in NAME_CLASSES)


def test_without_a_common_beginning_the_split_is_by_name_classes() -> None:
    assert split("*", ["alpha.py", "beta.py"]) == [c + "*" for c in NAME_CLASSES]
    assert split("ab*") == ["ab" + c + "*" for c in NAME_CLASSES] + ["ab"]


@pytest.mark.parametrize("template", ["user_{:03d}.py", "{:04d}_migration.py", "{}"])
def test_a_directory_of_numbered_names_is_listed_in_a_few_levels(template: str) -> None:
    """300 names that differ in their digits only: every cut answer (over 200, its first 200 shown)
    splits into patterns that match fewer, so the listing ends; before digits had classes of their own,
    ``user_[!a-zA-Z]*`` matched all 300 again at every level."""
    pool = [template.format(i) for i in range(300)]
    queue, answered, asked = ["*"], set(), 0
    while queue:
        pattern = queue.pop()
        asked += 1
        assert asked < 200, "the narrowing does not end"
        got = matched(pattern, pool)
        if len(got) <= 200:
            answered |= got
            continue
        parts = split(pattern, sorted(got)[:200])
        assert_partition(pattern, parts, pool)
        queue += [p for p in parts if p != pattern]
    assert answered == set(pool)


def test_no_split_asks_for_a_name_no_entry_can_have() -> None:
    for shown in (["beta_a", "beta_b"], [".hidden_a", ".hidden_b"], ["..a", "..b"]):
        parts = split("*", shown)
        assert not {"", ".", ".."} & set(parts), parts
        assert_partition("*", parts, [*shown, ".x", "...", "beta", "z"])


def test_a_class_in_the_prefix_leaves_out_the_common_character() -> None:
    pool = ["beta_x", "beta_y", "alpha", "c", "b", "bz", "zeta"]
    parts = split("[a-f]*", ["beta_x", "beta_y"])
    assert_partition("[a-f]*", parts, pool)
    assert "[ac-f]*" in parts  # the names of [a-f]* that do not begin with b


def test_a_common_beginning_with_pattern_syntax_stops_before_it() -> None:
    pool = ["x[1].txt", "x[2].txt", "x-1", "x"]
    parts = split("*", ["x[1].txt", "x[2].txt"])
    assert_partition("*", parts, pool)
    assert all("[[" not in p for p in parts)


# --- the TODO lines of a part's own files, read off a whole read ---------------------------------------


def test_todo_lines_read_off_a_file_are_the_grep_tools(tmp_path) -> None:
    from runner.offline import memory_survey as ms
    from runner.tools.grep_worker import grep

    files = {
        "crlf.py": b"x = 1\r\n# TODO: one\r\nTODOs = 2\r\n# FIXME two\r\n",
        "long.py": b"# TODO "
        + b"x" * 1992
        + b"\n# TODO "
        + b"x" * 1993  # 2,000 bytes, then 2,001
        + b"\n# XXX short\n# TODO "
        + b"y" * 1994,  # 2,001 without a newline
        "nul.py": b"\x00# TODO hidden\n# TODO hidden too\n",
        "last.py": b"pass\n# XXX at the end without a newline",
        "uni.py": "é = 'TODO'\n# todo not upper\nß # FIXME\n".encode(),
    }
    hits = {}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        found = grep({"pattern": ms.TODO_PATTERN, "path": name, "workspace": str(tmp_path), "max_files": 10})
        want = [] if found["text"] == "no matches" else found["text"].split("\n")
        turn = ms.Turn(ms.State(scope="d/.", root=str(tmp_path)))
        ms._todo_lines_of(turn, name, data.decode())
        got = [ms.unescape(e) for e in turn.appends["todo"]]
        places = [ms.todo_place(str(tmp_path), line) for line in want]
        assert got == [f"{path}:{number}" for path, number, _ in places], (name, got, want)
        assert turn.appends["shown"] == [f"{p}:{n}: {hit.strip()[:100]}" for p, n, hit in places]
        assert turn.state.todo["hits"] == len(want)
        hits[name] = [int(n) for _, n, _ in places]
    # the cases bite: a line at the limit is shown whole, one byte over it cut around its match (the
    # SDK's grep skips it), a file with a NUL not at all
    assert hits == {
        "crlf.py": [2, 4],
        "long.py": [1, 2, 3, 4],
        "nul.py": [],
        "last.py": [2],
        "uni.py": [1, 3],
    }
    long = grep({"pattern": ms.TODO_PATTERN, "path": "long.py", "workspace": str(tmp_path), "max_files": 10})
    lines = long["text"].split("\n")
    assert lines[0] == f"{tmp_path}/long.py:1:# TODO " + "x" * 1992
    assert (
        lines[1]
        == f"{tmp_path}/long.py:2:# TODO " + "x" * 193 + "... [line of 2,001 bytes, cut around the match]"
    )
    assert lines[3].endswith(":4:# TODO " + "y" * 193 + "... [line of 2,001 bytes, cut around the match]")
