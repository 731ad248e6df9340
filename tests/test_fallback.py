"""The deterministic fallback summary keeps notes as keyed facts, through summaries of summaries."""

from __future__ import annotations

from runner.compaction.fallback import fallback_summary, note_lines
from runner.compaction.stages import summary_message
from runner.protocol import COMPACTED


def turn(n: int, text: str) -> list[dict]:
    use = {"type": "tool_use", "id": f"toolu_{n}", "name": "read", "input": {"file_path": f"/w/f{n}.py"}}
    return [
        {"role": "assistant", "content": [{"type": "text", "text": text}, use]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": "x"}]},
    ]


def test_a_newer_note_supersedes_an_older_one_with_the_same_key_through_two_summaries():
    first = [
        {"role": "user", "content": "Survey."},
        *turn(1, "- dir: a | | x 10 1 -\n- root: /w"),
        *turn(2, "- dir: a | | x 10 1 -; y 20 2 3\n- dir: b | | z"),
        *turn(3, "Next: read."),
    ]
    summary = fallback_summary(first)
    assert note_lines(first) == ["- dir: b | | z", "- dir: a | | x 10 1 -; y 20 2 3", "- root: /w"]
    # a summary of a summary: its notes keep their order (newest first), its file list is no note
    second = [
        summary_message(COMPACTED, "Survey.", summary, where="transcript.jsonl"),
        *turn(4, "- dir: b | | z 5 1 0"),
        *turn(5, "Next: grep."),
    ]
    assert "### Files read (paths under `/w/`)\n- f1.py\n- f2.py\n- f3.py\n" in summary
    assert note_lines(second) == ["- dir: b | | z 5 1 0", "- dir: a | | x 10 1 -; y 20 2 3", "- root: /w"]
    third = fallback_summary(second)
    assert third.count("- dir: b |") == 1 and "- dir: b | | z 5 1 0" in third


def test_a_line_that_looks_like_a_retiring_note_is_an_ordinary_note():
    """The fallback summary knows no model's conventions: a note is kept by its key, newest first,
    whatever it says; nothing a model writes makes it drop other notes."""
    first = [
        {"role": "user", "content": "Survey."},
        *turn(1, "- glob: * @ a | 0-1/1 | x, y\n- saved: tool-results/1.txt | glob | 9 | a | *"),
        *turn(
            2, "- dir: a | | x 10 1 -; y 20 2 3\n- retired-note: glob: * @ a\n- glob: * @ a | in its dir note"
        ),
        *turn(3, "Next: read."),
    ]
    assert note_lines(first) == [
        "- glob: * @ a | in its dir note",
        "- retired-note: glob: * @ a",
        "- dir: a | | x 10 1 -; y 20 2 3",
        "- saved: tool-results/1.txt | glob | 9 | a | *",
    ]
    summary = fallback_summary(first)
    assert "- glob: * @ a | 0-1/1" not in summary and "- saved: tool-results/1.txt" in summary


def test_the_oldest_notes_give_way_when_the_notes_outgrow_the_budget():
    notes = "\n".join(f"- dir: d{i:03} | | " + "x" * 80 for i in range(100))
    summary = fallback_summary(
        [{"role": "user", "content": "Go."}, *turn(1, notes), *turn(2, "Next: read.")], 2_000
    )
    assert "- dir: d099 |" in summary and "- dir: d000 |" not in summary
    assert "older notes left out" in summary


def reads(*paths: str) -> list[dict]:
    out: list[dict] = [{"role": "user", "content": "Go."}]
    for n, path in enumerate(paths):
        use = {"type": "tool_use", "id": f"toolu_{n}", "name": "read", "input": {"file_path": path}}
        out += [
            {"role": "assistant", "content": [use]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": "x"}],
            },
        ]
    return out


def test_the_files_read_are_listed_under_their_common_directory_only_when_that_is_exact():
    assert "### Files read (paths under `/w/x/`)\n- a.py\n- sub/b.py\n" in fallback_summary(
        reads("/w/x/a.py", "/w/x/sub/b.py")
    )
    for odd in (
        ("/w/./x/a.py", "/w/./x/b.py"),
        ("/w//x/a.py", "/w//x/b.py"),
        ("/a.py", "/b.py"),
        ("a.py", "b.py"),
    ):
        summary = fallback_summary(reads(*odd))
        assert "### Files read\n" + "".join(f"- {p}\n" for p in odd) in summary, summary
