"""``runner replay`` and ``bench/replay.py`` on histories of the shared format as other agents write them.

Every history here is built from code: parallel calls answered in one user message or in one message
each, tool names other than ``bash`` with nested, empty and large inputs, results as lists of text
blocks (an image among them), empty, null or marked ``is_error``, text-only turns, thinking blocks,
unicode of every kind (lone surrogates, NUL, U+2028 written raw), headers missing, short, with a
system prompt of blocks or counts that disagree with the body, repeated call ids, a huge result, a
long history, no calls at all. Each is replayed with every strategy; the outcomes are exact: the turns
judged, the needed facts, the counted skips, and every dumped request a valid Messages API request.
"""

from __future__ import annotations

import json
import random
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runner.cli import REPLAY_STRATEGIES, main
from runner.config import Limits
from runner.emulator.validation import validate
from runner.pricing import PriceTable
from runner.replay import HistoryError, ReplayOptions, compactor_contestant, load_history
from runner.replay import facts as facts_module
from runner.replay.engine import replay
from runner.replay.facts import FACT, facts_in, needed_facts
from runner.replay.history import MAX_DEPTH

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import replay as bench_replay  # noqa: E402

pytestmark = pytest.mark.anyio

Message = dict[str, Any]
SYSTEM = "You are a coding agent. Use the tools."
TASK = "Fix the failing test in the repository."
OPTIONS = ReplayOptions(model="claude-sonnet-5-5", summary_model="claude-haiku-5-5", prices=PriceTable())
BETAS = ("context-management-2025-06-27",)  # the clear strategy's requests carry context editing


# -- writing histories -------------------------------------------------------------------------------


def header(messages: list[Message], **extra: Any) -> dict[str, Any]:
    """A header line as the format describes it, its counts taken from ``messages``."""
    calls = [b for m in messages if m["role"] == "assistant" for b in _blocks(m) if b["type"] == "tool_use"]
    results = [b for m in messages if m["role"] == "user" for b in _blocks(m) if b["type"] == "tool_result"]
    sizes = [len(json.dumps(b.get("content"))) for b in results]
    out = {
        "source": "generated",
        "model": "some-model",
        "agent": "some-agent",
        "task": TASK,
        "system": SYSTEM,
        "assistant_turns": sum(1 for m in messages if m["role"] == "assistant"),
        "tool_calls": len(calls),
        "tool_results": len(results),
        "tool_result_chars": sum(sizes),
        "max_tool_result_chars": max(sizes, default=0),
        "license": "MIT",
    }
    return out | extra


def _blocks(message: Message) -> list[dict[str, Any]]:
    content = message["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def write(path: Path, messages: list[Message], head: dict[str, Any] | None, *, raw: bool = False) -> Path:
    """One JSON line each; ``raw``: non-ASCII characters written as themselves, not escaped."""
    lines = ([] if head is None else [head]) + messages
    path.write_text("\n".join(json.dumps(x, ensure_ascii=not raw) for x in lines) + "\n", encoding="utf-8")
    return path


def use(call_id: str, name: str, value: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": value}


def result(call_id: str, content: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": content, **extra}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def user(*blocks: dict[str, Any]) -> Message:
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks: dict[str, Any]) -> Message:
    return {"role": "assistant", "content": list(blocks)}


# -- the kinds of history ------------------------------------------------------------------------------

PARALLEL_NEEDED = {"compute_alpha_value", "beta_setting_two", "gamma_missing_dir", "src/pkg/module_alpha.py"}


def parallel(split: bool = False) -> list[Message]:
    """Claude Code style: three calls in one assistant message, their results (a string, a list of text
    blocks, an error) with a text block before them; with ``split`` each result is a user message of
    its own, as some converters write them. The next turn names a fact of each result."""
    results = [
        result("toolu_a1", "src/pkg/module_alpha.py:12: def compute_alpha_value():"),
        result("toolu_a2", [text("first line beta_setting_one"), text("second line beta_setting_two")]),
        result("toolu_a3", "grep: gamma_missing_dir: No such file", is_error=True),
    ]
    out = [
        user(text(TASK)),
        assistant(
            text("Looking at three places at once."),
            use("toolu_a1", "Grep", {"pattern": "compute", "path": "src", "-n": True}),
            use("toolu_a2", "Read", {"file_path": "/repo/settings.cfg"}),
            use("toolu_a3", "Grep", {"pattern": "x", "path": "elsewhere"}),
        ),
    ]
    out += [user(r) for r in results] if split else [user(text("(three results follow)"), *results)]
    out += [
        assistant(
            text("compute_alpha_value, beta_setting_two and gamma_missing_dir matter."),
            use(
                "toolu_b1",
                "str_replace_based_edit_tool",
                {"command": "view", "path": "src/pkg/module_alpha.py"},
            ),
        ),
        user(result("toolu_b1", "1\tdef compute_alpha_value():\n2\t    return beta_setting_two")),
        assistant(text("Done: compute_alpha_value returns beta_setting_two.")),
    ]
    return out


def tools() -> list[Message]:
    """One call each of tools named as other agents name them, inputs empty, nested and large; the
    last turn names facts two of them returned (one only inside a nested input's result)."""
    inputs: list[tuple[str, dict[str, Any]]] = [
        ("read_file", {}),
        ("str_replace_based_edit_tool", {"command": "view", "path": "src/app/main_module.py"}),
        ("Read", {"file_path": "/r/x.py", "offset": 0, "limit": 10}),
        ("Grep", {"pattern": "def ", "glob": "**/*.py", "output_mode": "content"}),
        ("execute_bash", {"command": "pytest -x tests/test_things.py", "timeout": None}),
        ("mcp__github__get_issue", {"owner": "o", "repo": "r", "nested": {"a": [1, {"b": {}}]}}),
        ("TodoWrite", {"todos": [{"content": "a", "status": "pending", "id": "1"}]}),
        ("write_file", {"path": "big_module.py", "content": "value = 1\n" * 20_000}),
    ]
    out = [user(text(TASK))]
    for i, (name, value) in enumerate(inputs):
        out += [
            assistant(use(f"c{i}", name, value)),
            user(result(f"c{i}", f"answer_of_{name} lib/out/file_{i}.txt")),
        ]
    out.append(assistant(text("answer_of_TodoWrite and lib/out/file_5.txt are what I needed.")))
    return out


def thinking() -> list[Message]:
    """Assistant messages with thinking and redacted thinking blocks, one with nothing else."""
    return [
        user(text(TASK)),
        assistant(
            {"type": "thinking", "thinking": "list files", "signature": "c2ln"},
            use("t1", "bash", {"command": "ls"}),
        ),
        user(result("t1", "setup.py\nmypkg/core_module.py")),
        assistant({"type": "redacted_thinking", "data": "abc"}),
        user(text("continue")),
        assistant(
            {"type": "thinking", "thinking": "core", "signature": "c2ln"}, text("See mypkg/core_module.py")
        ),
    ]


def unicode() -> list[Message]:
    """Emoji, CJK, NUL, U+2028 and U+0085 inside strings; lone surrogates (escaped in the JSON)."""
    return [
        user(text(TASK + " 🚀 修复")),
        assistant(text("好的 🙂"), use("u1", "bash", {"command": "cat 文件.txt"})),
        user(result("u1", "内容 🎉 variable_ünïcode_name\u0000nul\u2028line\u0085next \ud800 lone")),
        assistant(text("variable_ünïcode_name \ud800"), use("u2", "bash", {"command": "echo \u2028"})),
        user(result("u2", "\udc00")),
        assistant(text("end")),
    ]


def repeated_ids() -> list[Message]:
    """Every call has the id ``call_0`` (some converters number calls per message), one id is not an
    API id, and a tool name is not an API tool name."""
    out = [user(text(TASK))]
    for i in range(4):
        out += [
            assistant(use("call_0", "bash", {"command": f"cat f{i}"})),
            user(result("call_0", f"thing_number_{i}")),
        ]
    out += [
        assistant(use("functions.bash:0", "functions.bash", {"command": "ls"})),
        user(result("functions.bash:0", "listing_entry")),
        assistant(use("call_0", "recall", {"path": "x"}), use("call_0", "bash", {"command": "pwd"})),
        user(result("call_0", "recalled_thing"), result("call_0", "printed_directory")),
        assistant(text("thing_number_2 listing_entry recalled_thing printed_directory")),
    ]
    return out


def odd_blocks() -> list[Message]:
    """Empty and whitespace texts, a null result, a result without content, a result list holding an
    image, a text-only turn in the middle, a final text-only turn."""
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    return [
        user(text(TASK), text("")),
        assistant(
            text(""), use("o1", "bash", {"command": "true"}), use("o2", "Read", {"file_path": "a.png"})
        ),
        user(result("o1", None), result("o2", [text("caption_of_image"), image]), text("  ")),
        assistant(text("Plan: caption_of_image first.")),
        user(text("go on")),
        assistant(use("o3", "bash", {"command": "true"})),
        user({"type": "tool_result", "tool_use_id": "o3"}),
        assistant(text("done")),
    ]


def no_calls() -> list[Message]:
    return [
        user(text(TASK)),
        assistant(text("I cannot run tools.")),
        user(text("Try.")),
        assistant(text("No.")),
    ]


# name -> (messages, header (None: no header line), raw unicode, turns, needed facts, skipped)
KINDS: dict[
    str, tuple[Callable[[], list[Message]], Callable[[list[Message]], Any], bool, int, int, dict[str, int]]
] = {
    "parallel": (parallel, header, False, 3, 4, {}),
    "parallel_split": (
        lambda: parallel(split=True),
        header,
        False,
        3,
        4,
        {"consecutive user messages merged": 2},
    ),
    "tools": (tools, header, False, 9, 2, {}),
    "thinking": (
        thinking,
        header,
        False,
        2,
        1,
        {
            "assistant block thinking": 2,
            "assistant block redacted_thinking": 1,
            "empty assistant message": 1,
            "consecutive user messages merged": 1,
        },
    ),
    "unicode_escaped": (unicode, header, False, 3, 2, {}),
    "repeated_ids": (
        repeated_ids,
        header,
        False,
        7,
        4,
        {
            "tool call id renamed (not an API id, or repeated)": 6,
            "tool name renamed (not an API tool name)": 1,
        },
    ),
    "odd_blocks": (
        odd_blocks,
        header,
        False,
        4,
        1,
        {"text block without a word": 3, "tool_result block image": 1},
    ),
    "no_calls": (no_calls, header, False, 2, 0, {}),
    "no_header": (parallel, lambda m: None, False, 3, 4, {}),
    "header_without_system": (parallel, lambda m: {"source": "x"}, False, 3, 4, {}),
    "header_system_null": (parallel, lambda m: header(m, system=None), False, 3, 4, {}),
    "header_system_blocks": (
        parallel,
        lambda m: header(m, system=[text("You are a coding agent."), text("Use the tools.")]),
        False,
        3,
        4,
        {},
    ),
    "header_counts_wrong": (
        parallel,
        lambda m: header(m, assistant_turns=99, tool_calls=-1, tool_results="many", extra={"x": [1]}),
        False,
        3,
        4,
        {},
    ),
}


def kind_file(tmp_path: Path, name: str) -> Path:
    build, head, raw, *_ = KINDS[name]
    messages = build()
    return write(tmp_path / f"{name}.jsonl", messages, head(messages), raw=raw)


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["replay", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- every kind, every strategy ------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(KINDS))
def test_every_kind_replays_with_every_strategy(name, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = kind_file(tmp_path, name)
    *_, turns, needed, skipped = KINDS[name]
    for strategy in REPLAY_STRATEGIES:
        for window in ([], ["--context-tokens", "1000"]):
            dump = tmp_path / f"dump-{strategy}-{bool(window)}"
            code, out, err = _cli(
                capsys, str(path), "--json", "--compaction", strategy, *window, "--dump", str(dump)
            )
            assert code == 0, err
            (row,) = json.loads(out)["files"]
            assert (row["turns"], row["requests"], row["needed"]) == (turns, turns, needed), (
                strategy,
                window,
            )
            assert row["in_context"] + row["recoverable"] + row["lost"] == needed
            assert row["skipped"] == skipped
            bodies = sorted((dump / path.stem).glob("*.json"), key=lambda p: int(p.stem))
            assert [int(p.stem) for p in bodies] == list(range(1, turns + 1))
            for body in bodies:
                problems = validate(
                    json.loads(body.read_text()), betas=BETAS, count_tokens=False, min_trigger=50_000
                )
                assert problems == [], (strategy, window, body.name)


def test_each_result_of_parallel_calls_is_judged(tmp_path):
    """The needed facts of the turn after three parallel calls come from all three results, whether
    they came in one user message or in three; the results go first, the text after them."""
    for split in (False, True):
        messages = parallel(split=split)
        history = load_history(write(tmp_path / f"p{split}.jsonl", messages, header(messages)))
        by_turn = [facts for _, facts in sorted(needed_facts(history.system, history.messages).items())]
        assert by_turn == [set(), PARALLEL_NEEDED, set()]
        answers = history.messages[2]["content"]
        assert [b.get("tool_use_id") for b in answers] == ["toolu_a1", "toolu_a2", "toolu_a3"] + (
            [] if split else [None]
        )
        assert answers[1]["content"] == "first line beta_setting_one\nsecond line beta_setting_two"
        assert answers[2]["is_error"] is True
        assert "call without a recorded result" not in history.skipped


async def test_each_parallel_result_is_in_context_or_lost(tmp_path):
    history = load_history(kind_file(tmp_path, "parallel_split"))
    whole = compactor_contestant(
        "off", Limits(compaction="off"), tmp_path / "job", summary_model="claude-haiku-5-5"
    )
    report = await replay(history, whole, OPTIONS)
    assert (report.turns, report.needed, report.in_context, report.lost) == (3, 4, 4, 0)


def test_renamed_ids_keep_each_result_with_its_call(tmp_path):
    history = load_history(kind_file(tmp_path, "repeated_ids"))
    calls = [
        b
        for m in history.messages
        if m["role"] == "assistant"
        for b in m["content"]
        if b["type"] == "tool_use"
    ]
    ids = [c["id"] for c in calls]
    assert ids == ["call_0", "call_0_2", "call_0_3", "call_0_4", "functions_bash_0", "call_0_5", "call_0_6"]
    assert [c["name"] for c in calls][4:] == ["functions_bash", "recall", "bash"]
    pairs = {
        b["tool_use_id"]: b["content"]
        for m in history.messages
        if m["role"] == "user"
        for b in m["content"]
        if b["type"] == "tool_result"
    }
    assert pairs == {
        "call_0": "thing_number_0",
        "call_0_2": "thing_number_1",
        "call_0_3": "thing_number_2",
        "call_0_4": "thing_number_3",
        "functions_bash_0": "listing_entry",
        "call_0_5": "recalled_thing",
        "call_0_6": "printed_directory",
    }


def test_a_turn_split_over_lines_keeps_each_result_with_its_call(tmp_path):
    """An agent that writes one block a line, with ids that repeat (within a turn, or a counter that
    starts again each turn): each result goes to its own call, in order, none is dropped."""
    ls = ("bash", {"command": "ls"})
    within = [
        user(text(TASK)),
        assistant(use("a", *ls)),
        assistant(use("a", *ls)),
        user(result("a", "first"), result("a", "second")),
        assistant(text("Done.")),
    ]
    counter = [
        user(text(TASK)),
        assistant(use("call_0", *ls)),
        user(result("call_0", "r1")),
        assistant(use("call_0", *ls)),
        assistant(use("call_0", *ls)),
        user(result("call_0", "r2")),
        user(result("call_0", "r3")),
        assistant(text("Done.")),
    ]
    for name, messages, expected in (
        ("within", within, [("a", "first"), ("a_2", "second")]),
        ("counter", counter, [("call_0", "r1"), ("call_0_2", "r2"), ("call_0_3", "r3")]),
    ):
        history = load_history(write(tmp_path / f"{name}.jsonl", messages, header(messages)))
        pairs = [
            (b["tool_use_id"], b["content"])
            for m in history.messages
            if m["role"] == "user"
            for b in m["content"]
            if b["type"] == "tool_result"
        ]
        assert pairs == expected, name
        assert "tool result answering no call" not in history.skipped, name


def test_a_recorded_tool_named_recall_leaves_the_tool_names_unique(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = kind_file(tmp_path, "repeated_ids")
    code, _, err = _cli(capsys, str(path), "--json", "--dump", str(tmp_path / "d"))
    assert code == 0, err
    body = json.loads((tmp_path / "d" / path.stem / "7.json").read_text())
    assert [t["name"] for t in body["tools"]] == ["bash", "functions_bash", "recall"]


def test_unicode_survives_the_replay_and_the_dump(tmp_path, capsys, monkeypatch):
    """Lone surrogates (escaped in the JSON) go into the dumped body escaped and read back the same;
    U+2028 and U+0085 written raw inside a string do not end a line."""
    monkeypatch.chdir(tmp_path)
    escaped = kind_file(tmp_path, "unicode_escaped")
    messages = [
        user(text(TASK + " 🚀 修复")),
        assistant(text("好的 🙂"), use("u1", "bash", {"command": "cat 文件.txt"})),
        user(result("u1", "内容 🎉 variable_ünïcode_name\u0000nul\u2028line\u0085next")),
        assistant(text("variable_ünïcode_name")),
    ]
    raw = write(tmp_path / "raw.jsonl", messages, {"system": ""}, raw=True)
    assert "\u2028" in raw.read_text(encoding="utf-8")
    assert load_history(raw).turns == 2
    code, out, err = _cli(capsys, str(escaped), str(raw), "--json", "--dump", str(tmp_path / "d"))
    assert code == 0, err
    assert [f["needed"] for f in json.loads(out)["files"]] == [2, 2]  # variable_ and code_name
    body = json.loads((tmp_path / "d" / escaped.stem / "3.json").read_text())
    assert body["messages"][2]["content"][0]["content"].endswith("\ud800 lone")
    assert body["messages"][4]["content"][0]["content"] == "\udc00"


def test_a_byte_order_mark_and_crlf_lines_are_read(tmp_path):
    path = kind_file(tmp_path, "parallel")
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes().replace(b"\n", b"\r\n"))
    history = load_history(path)
    assert (history.turns, history.system) == (3, SYSTEM)


def test_header_system_forms(tmp_path):
    expected = {
        "no_header": "",
        "header_without_system": "",
        "header_system_null": "",
        "header_system_blocks": "You are a coding agent.\nUse the tools.",
        "header_counts_wrong": SYSTEM,
    }
    assert {name: load_history(kind_file(tmp_path, name)).system for name in expected} == expected


# -- size ------------------------------------------------------------------------------------------------


def test_a_long_history_is_judged_turn_by_turn(tmp_path, capsys, monkeypatch):
    """1,000 turns of one call each; every 100th turn names a fact of a result 50 turns back."""
    monkeypatch.chdir(tmp_path)
    messages = [user(text(TASK))]
    for i in range(1_000):
        said = f"Recall marker_{i - 50:04d}." if i % 100 == 99 else f"step {i}"
        messages += [
            assistant(text(said), use(f"l{i}", "bash", {"command": f"cat file_{i}.txt"})),
            user(result(f"l{i}", f"marker_{i:04d} " + "filler words here " * 40)),
        ]
    messages.append(assistant(text("Finished.")))
    path = write(tmp_path / "long.jsonl", messages, header(messages))
    code, out, err = _cli(capsys, str(path), "--json", "--context-tokens", "16000")
    assert code == 0, err
    totals = json.loads(out)["totals"]
    assert (totals["turns"], totals["requests"], totals["needed"]) == (1_001, 1_001, 10)
    assert totals["in_context"] + totals["recoverable"] + totals["lost"] == 10
    assert totals["over_window"] == 0


def test_a_huge_result_is_replayed_whole(tmp_path, capsys, monkeypatch):
    """One result of 1.2 MB, no head/tail cut: its facts are needed where named; a window of 16k
    tokens keeps every request inside it."""
    monkeypatch.chdir(tmp_path)
    big = "\n".join(f"row {i} value_token_{i:06d} path/to/file_{i % 31}.py" for i in range(30_000))
    assert len(big) > 1_000_000
    messages = [
        user(text(TASK)),
        assistant(use("h1", "bash", {"command": "cat big.log"})),
        user(result("h1", big)),
        assistant(text("value_token_029999 and path/to/file_7.py matter.")),
    ]
    path = write(tmp_path / "huge.jsonl", messages, header(messages))
    code, out, err = _cli(capsys, str(path), "--json", "--context-tokens", "16000")
    assert code == 0, err
    totals = json.loads(out)["totals"]
    assert (totals["turns"], totals["needed"], totals["over_window"]) == (2, 2, 0)
    assert totals["in_context"] + totals["recoverable"] + totals["lost"] == 2


def test_fact_matching_is_the_rule_on_long_runs():
    """:func:`facts_in` is ``set(FACT.findall(text))``: on random texts of the characters that matter,
    with long runs matched by parts (the threshold lowered so they are common), and on long runs."""
    rng = random.Random(7)
    alphabet = ["a", "Z", "_", "1", "9", ".", "-", "/", "/", "é", "中", " ", "x", "\n"]
    saved = facts_module.LONG_RUN, facts_module._LONG
    facts_module.LONG_RUN, facts_module._LONG = 3, re.compile(r"[\w./-]{3,}")
    try:
        for _ in range(20_000):
            sample = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
            assert facts_in(sample) == set(FACT.findall(sample)), repr(sample)
    finally:
        facts_module.LONG_RUN, facts_module._LONG = saved
    run = "-" * 300 + "/" + "9" * 300 + "/abc_def_ghi.py/"
    assert facts_in(f"x {run} y") == set(FACT.findall(f"x {run} y")) == {run[:-1]}


# -- what is not a history -------------------------------------------------------------------------------

NOT_HISTORIES = [
    ("csv", "a,b,c\n1,2,3\n", ":1: not a JSON line"),
    ("objects without roles", '{"a": 1}\n{"b": 2}\n', ':2: role: expected "user" or "assistant"'),
    (
        "tool input a string",
        '{"role": "user", "content": "go"}\n'
        '{"role": "assistant", "content": [{"type": "tool_use", "id": "x", "name": "bash", '
        '"input": "ls"}]}\n',
        ":2: content.0.input: expected an object",
    ),
    (
        "result content a number",
        '{"role": "user", "content": "go"}\n'
        '{"role": "assistant", "content": [{"type": "tool_use", "id": "x", "name": "bash", "input": {}}]}\n'
        '{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": 7}]}\n',
        ":3: content.0.content: expected a string or a list of text blocks",
    ),
    ("system a number", '{"system": 3}\n\n{"role": "user", "content": "go"}\n', ":1: header field system"),
    ("only empty messages", '{"system": "s"}\n{"role": "user", "content": []}\n', ": no messages"),
    (
        "too deep",
        '{"role": "user", "content": "go"}\n{"role": "assistant", "content": [{"type": "tool_use", '
        '"id": "x", "name": "bash", "input": ' + '{"a":' * MAX_DEPTH + "{}" + "}" * MAX_DEPTH + "}]}\n",
        f":2: nested more than {MAX_DEPTH} arrays and objects deep",
    ),
]


@pytest.mark.parametrize(
    ("content", "expected"), [c[1:] for c in NOT_HISTORIES], ids=[c[0] for c in NOT_HISTORIES]
)
def test_what_is_not_a_history_exits_2_naming_file_and_line(tmp_path, capsys, monkeypatch, content, expected):
    monkeypatch.chdir(tmp_path)
    good = kind_file(tmp_path, "parallel")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    code, out, err = _cli(capsys, str(good), str(bad), "--json")
    assert code == 2 and out == ""
    assert f"{bad}{expected}" in err
    assert "Traceback" not in err


def test_a_line_just_under_the_depth_limit_replays(tmp_path):
    depth = MAX_DEPTH - 4  # the message, its content and the block are three levels, the innermost {} one
    line = '{"role": "assistant", "content": [{"type": "tool_use", "id": "x", "name": "bash", "input": '
    path = tmp_path / "deep.jsonl"
    path.write_text(
        '{"role": "user", "content": "go"}\n' + line + '{"a":' * depth + "{}" + "}" * depth + "}]}\n"
    )
    assert load_history(path).turns == 1
    path.write_text(path.read_text().replace('{"a":', '{"a":{"a":', 1).replace("}]}", "}}]}", 1))
    with pytest.raises(HistoryError, match="nested more than"):
        load_history(path)


# -- bench/replay.py --------------------------------------------------------------------------------------


def test_bench_replays_given_files_and_writes_nothing(tmp_path, capsys, monkeypatch):
    saved = bench_replay.RESULTS / "replay.json"
    before = saved.read_bytes() if saved.exists() else None
    files = [str(kind_file(tmp_path, name)) for name in ("parallel_split", "repeated_ids", "no_calls")]
    argv = ["replay.py", "--files", *files, "--only", "ours", "--only", "seed 000", "--windows", "16000"]
    monkeypatch.setattr(sys, "argv", argv)
    bench_replay.main()
    out = capsys.readouterr().out
    assert (
        "3 recorded histories (parallel_split.jsonl, repeated_ids.jsonl, no_calls.jsonl), 12 turns, 8 needed"
        in out
    )
    assert out.count("| **ours** |") == 1 and out.count("| seed 000 |") == 1
    assert (saved.read_bytes() if saved.exists() else None) == before


def test_bench_stops_at_a_file_that_is_not_a_history(tmp_path, capsys, monkeypatch):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"system": "s"}\n{"role": "user", "content": "go"}\n{oops\n')
    monkeypatch.setattr(sys, "argv", ["replay.py", "--files", str(bad), "--only", "ours"])
    with pytest.raises(SystemExit) as stopped:
        bench_replay.main()
    assert stopped.value.code == 2
    assert f"error: {bad}:3: not a JSON line" in capsys.readouterr().err


def test_bench_verdicts_with_a_peer_that_costs_nothing():
    """A history without turns costs nothing: the verdicts still render (no division by zero)."""
    totals = {"effective_cost_usd": 0.0, "lost": 0, "needed": 0}
    rows = [{"contestant": name, "window": 16_000, "totals": totals} for name in ("ours", "some peer")]
    assert bench_replay.verdicts(rows, 16_000) == [
        "no strategy has both a lower effective cost and a smaller lost share: met",
        "ours loses at most 1% of needed facts: met (0.00%)",
        "ours at least 1.5x cheaper (effective) than the cheapest peer losing no more (some peer, $0.00): "
        "**missed** (1.00x)",
        "the cheapest peer at any loss: some peer, $0.00 (ours costs - that), losing 0.0% of the needed "
        "facts to ours' 0.00%",
    ]


def test_a_fifo_or_an_oversized_file_is_refused_in_one_line(tmp_path, monkeypatch):
    """A history is read whole: a FIFO (whose read would wait for a writer) and a file over the cap
    are each one error naming the file, never a hang or a read of everything."""
    import os

    from runner.replay import history as history_module

    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(HistoryError, match=f"^{re.escape(str(fifo))}: not a regular file$"):
        load_history(fifo)
    big = write(tmp_path / "big.jsonl", [user(text(TASK)), assistant(text("x" * 2000))], None)
    monkeypatch.setattr(history_module, "MAX_HISTORY_BYTES", 1000)
    refused = f"^{re.escape(str(big))}: over 1,000 bytes; a history is read whole$"
    with pytest.raises(HistoryError, match=refused):
        load_history(big)
