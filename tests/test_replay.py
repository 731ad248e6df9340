"""``runner replay``: recorded histories through the Compactor, judged by the needed-fact rule.

The rule is recomputed here by a plain loop (no helper of :mod:`runner.replay.facts`) on a real
recorded history; hand-made histories show a dropped fact ``lost`` and a saved one ``recoverable``;
bad histories are errors naming file and line, or counted skips; ``--dump`` bodies pass the
emulator's validation of a Messages API request.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import RECORDED_TRAJECTORY

from runner.cli import main
from runner.config import Limits
from runner.emulator.validation import validate
from runner.messages import Message
from runner.pricing import PriceTable, Usage
from runner.replay import HistoryError, ReplayOptions, compactor_contestant, load_history, window_limits
from runner.replay.engine import replay
from runner.replay.facts import needed_facts

pytestmark = pytest.mark.anyio

TRAJECTORY = RECORDED_TRAJECTORY
RULE = r"[A-Za-z_][A-Za-z0-9_]{5,}(?:\.[A-Za-z_][A-Za-z0-9_]+)*|(?:[\w.-]+/)+[\w.-]+"
OPTIONS = ReplayOptions(model="claude-sonnet-5-5", summary_model="claude-haiku-5-5", prices=PriceTable())


def rule_by_hand(path: Path) -> dict[int, set[str]]:
    """The issue's rule, spelled out: assistant turn (1-based) -> its needed facts."""
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    pattern = re.compile(RULE)
    results: set[str] = set()
    other: set[str] = set(pattern.findall(header["system"]))
    out: dict[int, set[str]] = {}
    turn = 0
    for line in lines[1:]:
        message = json.loads(line)
        said: set[str] = set()
        for block in message["content"]:
            if block["type"] == "text":
                said |= set(pattern.findall(block["text"]))
            elif block["type"] == "tool_use":
                said |= set(pattern.findall(json.dumps(block["input"], separators=(",", ":"))))
            elif block["type"] == "tool_result":
                results |= set(pattern.findall(block["content"]))
        if message["role"] == "assistant":
            turn += 1
            out[turn] = {f for f in said if f in results and f not in other}
        other |= said
    return out


def test_needed_facts_follow_the_rule_on_a_recorded_history():
    history = load_history(TRAJECTORY)
    by_index = needed_facts(history.system, history.messages)
    ours = {turn: by_index[i] for turn, i in enumerate(sorted(by_index), 1)}
    expected = rule_by_hand(TRAJECTORY)
    assert ours == expected
    assert sum(len(v) for v in expected.values()) == 69  # the count the issue gives for this history


def _cli_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["replay", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_replay_cli_counts_every_needed_fact_once(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no config.toml: the built-in defaults
    document = _cli_json(capsys, str(TRAJECTORY), "--context-tokens", "16000")
    totals = document["totals"]
    assert totals["needed"] == 69
    assert totals["in_context"] + totals["recoverable"] + totals["lost"] == 69
    assert totals["turns"] == 95 and totals["requests"] == 95
    assert totals["over_window"] == 0  # the default strategy kept every request inside 16k tokens
    assert totals["effective_cost_usd"] >= totals["cost_usd"] > 0
    assert totals["compactions"]  # a 16k window over 95 turns needs compaction
    (row,) = document["files"]
    assert row["usage"]["cache_read_input_tokens"] > 0  # the runner's breakpoints are billed as cached


def _history(tmp_path: Path, messages: list[Message], system: str = "You are an agent.") -> Path:
    path = tmp_path / "history.jsonl"
    lines = [json.dumps({"system": system, "task": "t"})] + [json.dumps(m) for m in messages]
    path.write_text("\n".join(lines) + "\n")
    return path


def _call(n: int, command: str, text: str = "") -> Message:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    return {
        "role": "assistant",
        "content": [
            *blocks,
            {"type": "tool_use", "id": f"toolu_{n}", "name": "bash", "input": {"command": command}},
        ],
    }


def _result(n: int, output: str) -> Message:
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": output}],
    }


def fact_history(tmp_path: Path, padding_turns: int = 12) -> Path:
    """The first result holds ``secret_value_alpha``; many large results later, the agent names it."""
    messages: list[Message] = [{"role": "user", "content": "Find the setting."}, _call(0, "grep -r setting")]
    messages.append(_result(0, "config.py: secret_value_alpha = 3\n" + "# other settings\n" * 20))
    for n in range(1, padding_turns + 1):
        messages += [_call(n, f"cat part{n}.txt"), _result(n, f"part {n}\n" + ("lorem ipsum " * 800))]
    messages.append({"role": "assistant", "content": [{"type": "text", "text": "It is secret_value_alpha."}]})
    return _history(tmp_path, messages)


class Dropper:
    """A contestant that keeps only the first message and the newest two: older results vanish."""

    name = "dropper"
    tools: list[dict[str, Any]] = []
    summary_usage = Usage()
    summaries = 0
    compactions: Counter[str] = Counter()

    async def start(self, system: str, tools: list[dict[str, Any]]) -> None:
        pass

    async def prepare(self, history: list[Message]) -> list[Message]:
        return history if len(history) <= 3 else [history[0], *history[-2:]]

    def cache_points(self) -> tuple[int, ...]:
        return ()

    async def record(self, usage: Usage) -> None:
        pass

    async def reactive(self) -> bool:
        return False

    def targets(self, view: list[Message]) -> dict[str, str]:
        return {}


async def test_a_dropped_fact_is_lost(tmp_path):
    history = load_history(fact_history(tmp_path))
    report = await replay(history, Dropper(), OPTIONS)
    assert report.needed == 1 and report.lost == 1 and report.in_context == 0
    assert report.lost_facts == [(history.turns, "secret_value_alpha")]
    assert report.recalls == 0 and report.effective_cost_usd == report.cost_usd


async def test_a_saved_fact_is_recoverable_and_its_recall_is_paid(tmp_path):
    history = load_history(fact_history(tmp_path))
    limits = window_limits(Limits(keep_recent_results=1), 4_000, "mask")
    contestant = compactor_contestant("mask", limits, tmp_path / "job", summary_model="claude-haiku-5-5")
    report = await replay(history, contestant, OPTIONS)
    assert report.needed == 1 and report.recoverable == 1 and report.lost == 0
    assert report.recalls == 1
    saved = [
        p for p in (tmp_path / "job" / "tool-results").iterdir() if "secret_value_alpha" in p.read_text()
    ]
    assert saved, "the masked result is on disk"
    assert report.recall_tokens >= len(saved[0].read_text()) // 4
    assert report.effective_cost_usd > report.cost_usd


async def test_a_fact_kept_whole_is_in_context(tmp_path):
    history = load_history(fact_history(tmp_path, padding_turns=2))
    contestant = compactor_contestant(
        "off", Limits(compaction="off"), tmp_path / "job", summary_model="claude-haiku-5-5"
    )
    report = await replay(history, contestant, OPTIONS)
    assert (report.needed, report.in_context, report.lost) == (1, 1, 0)


def test_dump_writes_valid_api_requests(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dump = tmp_path / "dump"
    _cli_json(capsys, str(TRAJECTORY), "--context-tokens", "16000", "--dump", str(dump))
    bodies = sorted((dump / TRAJECTORY.stem).glob("*.json"), key=lambda p: int(p.stem))
    assert [int(p.stem) for p in bodies] == list(range(1, 96))
    for path in bodies[::7] + bodies[-1:]:
        body = json.loads(path.read_text())
        assert validate(body, betas=(), count_tokens=False, min_trigger=50_000) == [], path.name
        assert body["messages"][-1]["role"] == "user"


BAD = [
    ("not json", ["{}", "not json"], ":2: not a JSON line"),
    ("not an object", ["{}", "[1, 2]"], ":2: expected a JSON object"),
    ("bad role", ["{}", json.dumps({"role": "system", "content": "x"})], ":2: role: expected"),
    ("bad content", ["{}", json.dumps({"role": "user", "content": 3})], ":2: content: expected"),
    (
        "call without id",
        [
            "{}",
            json.dumps({"role": "user", "content": "go"}),
            json.dumps({"role": "assistant", "content": [{"type": "tool_use", "name": "bash", "input": {}}]}),
        ],
        ":3: content.0.id: expected a string",
    ),
    ("assistant first", ["{}", json.dumps({"role": "assistant", "content": "hi"})], ":2: the first message"),
    ("empty", [], "no messages"),
    ("header only", [json.dumps({"system": "s"})], "no messages"),
    ("system not text", [json.dumps({"system": 3}), json.dumps({"role": "user", "content": "x"})], "system"),
]


@pytest.mark.parametrize(("lines", "expected"), [(b[1], b[2]) for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_history_is_an_error_naming_file_and_line(tmp_path, lines, expected):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines))
    with pytest.raises(HistoryError) as caught:
        load_history(path)
    assert str(caught.value).startswith(str(path))
    assert expected in str(caught.value)


def test_the_cli_names_a_bad_file_and_exits_2(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "bad.jsonl"
    path.write_text('{"system": "s"}\n{"role": "user", "content": "go"}\n{oops\n')
    assert main(["replay", str(TRAJECTORY), str(path)]) == 2
    assert f"{path}:3: not a JSON line" in capsys.readouterr().err


def test_what_can_be_replayed_is_a_counted_skip(tmp_path):
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "go"}, {"type": "image", "source": {}}]},
        {
            "role": "assistant",
            "content": [{"type": "thinking", "thinking": "hm"}, _call(1, "ls")["content"][0]],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "stray"}]},
        {"role": "user", "content": "and then?"},
        _call(2, "pwd"),
        _result(2, "/work"),
        {"role": "assistant", "content": "done"},
    ]
    history = load_history(_history(tmp_path, messages))
    assert dict(history.skipped) == {
        "user block image": 1,
        "assistant block thinking": 1,
        "tool result answering no call": 1,
        "empty user message": 1,  # the stray result was all it held
        "call without a recorded result": 1,
    }
    roles = [m["role"] for m in history.messages]
    assert roles == ["user", "assistant", "user", "assistant", "user", "assistant"]
    answered = history.messages[2]["content"][0]
    assert answered["tool_use_id"] == "toolu_1" and answered["is_error"] is True


def test_a_runner_transcript_replays_with_its_job_system(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    job = tmp_path / "run" / "job"
    job.mkdir(parents=True)
    (job / "job.json").write_text(json.dumps({"system": "You survey code."}))
    messages = [
        {"role": "user", "content": "Survey."},
        _call(1, "ls"),
        _result(1, "alpha_module.py"),
        {"role": "assistant", "content": [{"type": "text", "text": "Found alpha_module.py"}]},
    ]
    (job / "transcript.jsonl").write_text("".join(json.dumps(m) + "\n" for m in messages))
    history = load_history(job / "transcript.jsonl")
    assert history.system == "You survey code." and history.turns == 2
    document = _cli_json(capsys, str(job / "transcript.jsonl"))
    assert document["totals"]["needed"] == 1 and document["totals"]["in_context"] == 1


def test_a_directory_stands_for_its_histories(tmp_path, capsys, monkeypatch):
    """A directory of histories is its ``*.jsonl`` files in name order (the same document as naming
    them); a job's directory is its transcript.jsonl alone (not events.jsonl, context.jsonl...); a
    directory with no history is exit 2 naming it."""
    monkeypatch.chdir(tmp_path)
    histories = tmp_path / "histories"
    histories.mkdir()
    (histories / "README.md").write_text("not a history")
    for name, padding in (("b.jsonl", 2), ("a.jsonl", 3)):
        fact_history(tmp_path, padding_turns=padding).rename(histories / name)
    by_dir = _cli_json(capsys, str(histories))
    by_files = _cli_json(capsys, str(histories / "a.jsonl"), str(histories / "b.jsonl"))
    assert [f["file"] for f in by_dir["files"]] == ["a.jsonl", "b.jsonl"]
    assert by_dir == by_files
    job = tmp_path / "run" / "job"
    job.mkdir(parents=True)
    messages = [{"role": "user", "content": "Survey."}, _call(1, "ls"), _result(1, "alpha_module.py")]
    (job / "transcript.jsonl").write_text("".join(json.dumps(m) + "\n" for m in messages))
    (job / "events.jsonl").write_text('{"event": "not a message"}\n')
    other = tmp_path / "run" / "other"
    shutil.copytree(job, other)
    dump = tmp_path / "dump"
    document = _cli_json(capsys, str(job), str(other), "--dump", str(dump))
    assert [f["file"] for f in document["files"]] == ["job/transcript.jsonl", "other/transcript.jsonl"]
    dumped = sorted(p.relative_to(dump).parts[0] for p in dump.rglob("*.json"))
    assert dumped == [
        "job",
        "other",
    ]  # a directory each (both were dump/transcript/, the second over the first)
    for name in ("empty", "logs-only"):  # a job's own logs are no history
        (tmp_path / name).mkdir()
    (tmp_path / "logs-only" / "events.jsonl").write_text('{"event": "not a message"}\n')
    for name in ("empty", "logs-only"):
        assert main(["replay", str(tmp_path / name)]) == 2
        assert f"{tmp_path / name}: a directory without a history" in capsys.readouterr().err


def test_the_table_on_an_80_column_pipe_shows_every_number_whole(tmp_path, capsys, monkeypatch):
    """Long history names on a pipe (80 columns): each name is cut at its start, its numbers whole
    (rich cut them to '$1…' before)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    names = [f"a_long_agent_and_model_and_benchmark_name_of_instance_{n}" for n in ("1111", "2222")]
    for name, padding in zip(names, (2, 3), strict=True):
        fact_history(tmp_path, padding_turns=padding).rename(tmp_path / f"{name}.jsonl")
    paths = [str(tmp_path / f"{name}.jsonl") for name in names]
    document = _cli_json(capsys, *paths)
    assert main(["replay", *paths]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines[:-1]) <= 80  # the table's lines (not the compactions line)
    for name, row in zip(names, document["files"], strict=True):
        (line,) = [line for line in lines if line.startswith("…") and name[-4:] + " " in line]
        cells = line.split()[1:]
        assert cells[2:5] == [
            f"${row['cost_usd']:.3f}",
            f"${row['effective_cost_usd']:.3f}",
            str(row["needed"]),
        ]
    wide = tmp_path / "履歴ファイル_一二三四五六七八九十.jsonl"  # two cells a character
    shutil.copy(paths[0], wide)
    for columns in ("80", "40"):  # at 40 the numbers do not fit: the table is wider, never cut
        monkeypatch.setenv("COLUMNS", columns)
        assert main(["replay", str(wide)]) == 0
        table = capsys.readouterr().out.splitlines()
        header = next(line for line in table if line.startswith("file"))
        assert header.split()[1:] == [
            "turns",
            "sent",
            "cost",
            "effective",
            "needed",
            "in",
            "ctx",
            "recov.",
            "lost",
        ]
        (row,) = [line for line in table if "十" in line]
        assert row.split()[-4:] == [
            str(document["files"][0][k]) for k in ("needed", "in_context", "recoverable", "lost")
        ]
        assert f"${document['files'][0]['effective_cost_usd']:.3f}" in row.split()
