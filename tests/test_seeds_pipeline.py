"""The seed lessons' pipelines as the benchmarks run them (``bench/seeds_pipeline.py``), and the offline
policy reading their placeholders as removed results through ``runner/protocol.py``.

Checked against the lessons' own rules, computed independently of the pipelines: which results each
revision replaces, with what text, what it saves on disk, and what the policy does next."""

from __future__ import annotations

import fnmatch
import sys
from pathlib import Path

import pytest

from runner.messages import tool_uses
from runner.offline.policy import decide
from runner.offline.readback import (
    SEED_001_MICRO_PLACEHOLDER,
    SEED_002_MICRO_PLACEHOLDER,
    is_seed_placeholder,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from seed_texts import seed_000_placeholder  # noqa: E402
from seeds_pipeline import Seed000, Seed001  # noqa: E402

ROOT = "/ws"
REQUEST = "Survey the workspace."


def session(sizes: list[int]) -> list[dict]:
    """The request, then one read per turn of a result of each size, each answered."""
    messages: list[dict] = [{"role": "user", "content": REQUEST}]
    for n, size in enumerate(sizes):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": f"toolu_{n}",
                        "name": "read",
                        "input": {"file_path": f"{ROOT}/f{n}.py"},
                    }
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"toolu_{n}",
                        "content": f"# file {n}\n" + "x" * size,
                    }
                ],
            }
        )
    return messages


def contents(messages: list[dict]) -> list[str]:
    return [
        b["content"]
        for m in messages
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]


def test_001_micro_compacts_every_turn_all_but_the_newest_three_over_120_chars(tmp_path: Path) -> None:
    sizes = [500, 50, 900, 700, 300, 200]
    out = Seed001(tmp_path, threshold=10**9).prepare(session(sizes), REQUEST)
    expected = [
        SEED_001_MICRO_PLACEHOLDER
        if i < len(sizes) - 3 and len(f"# file {i}\n") + s > 120
        else f"# file {i}\n" + "x" * s
        for i, s in enumerate(sizes)
    ]
    assert contents(out) == expected
    assert not any((tmp_path / ".task_outputs" / "tool-results").iterdir())  # 001 keeps nothing


def test_000_micro_compacts_only_over_the_limit_and_saves_what_it_replaces(tmp_path: Path) -> None:
    seed = Seed000(tmp_path)
    small = session([1_000] * 6)
    assert contents(seed.prepare(small, REQUEST)) == contents(session([1_000] * 6))  # under 50,000: untouched
    big = session([12_000] * 6)  # ~72,000 chars: over the limit
    originals = contents(big)
    out = contents(seed.prepare(big, REQUEST))
    replaced = [i for i, c in enumerate(out) if c != originals[i]]
    assert replaced and max(replaced) < 6 - 3  # never the newest three, nor a result the model has not seen
    for i in replaced:
        path = out[i][len("[Earlier tool result saved at ") : -1]
        assert out[i] == seed_000_placeholder(path) and (tmp_path / path).read_text() == originals[i]
    assert seed.estimate_chars(seed.prepare(big, REQUEST)) <= 50_000


def test_the_protocol_recognizes_each_revisions_placeholder_and_nothing_else() -> None:
    for text in (
        seed_000_placeholder(".task_outputs/tool-results/toolu_1.txt"),
        SEED_001_MICRO_PLACEHOLDER,
        SEED_002_MICRO_PLACEHOLDER,
    ):
        assert is_seed_placeholder(text)
    for text in (
        "",
        "def f(): pass",
        SEED_001_MICRO_PLACEHOLDER + " and more",
        "[Earlier tool result saved at x",
    ):
        assert not is_seed_placeholder(text)


@pytest.mark.parametrize(
    "placeholder",
    [
        SEED_001_MICRO_PLACEHOLDER,
        SEED_002_MICRO_PLACEHOLDER,
        seed_000_placeholder(".task_outputs/tool-results/toolu_r0.txt"),
    ],
)
def test_the_policy_reads_a_file_again_when_its_result_became_a_seed_placeholder(placeholder: str) -> None:
    tree = {f"{ROOT}/a.py": '"""A."""\ny = 2\n', f"{ROOT}/b.py": '"""B."""\nx = 1\n'}

    def answer(use: dict) -> str:
        if use["name"] == "glob":
            return "\n".join(p for p in tree if fnmatch.fnmatch(p[len(ROOT) + 1 :], use["input"]["pattern"]))
        if use["name"] == "read":
            return tree[use["input"]["file_path"]]
        return "no matches"

    def step(history: list[dict]) -> list[dict]:
        content, stop = decide(history, {"glob", "read", "grep"})
        assert stop == "tool_use"
        uses = [b for b in content if b.get("type") == "tool_use"]
        history += [
            {"role": "assistant", "content": content},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": b["id"], "content": answer(b)} for b in uses
                ],
            },
        ]
        return uses

    history: list[dict] = [{"role": "user", "content": REQUEST}]
    read_a = None
    for _ in range(10):  # survey until both files were read
        for use in step(history):
            if use["name"] == "read" and use["input"]["file_path"].endswith("a.py"):
                read_a = (len(history) - 1, use["id"])
        if read_a and any(
            b["input"].get("file_path", "").endswith("b.py")
            for m in history
            for b in tool_uses(m)
            if b["name"] == "read"
        ):
            break
    assert read_a, "the policy never read a.py"
    at, use_id = read_a  # a.py's result leaves context, replaced by the seed's placeholder
    history[at] = {
        "role": "user",
        "content": [
            {**b, "content": placeholder} if b["tool_use_id"] == use_id else b for b in history[at]["content"]
        ],
    }
    uses = step(history)
    reads = [b["input"]["file_path"] for b in uses if b["name"] == "read"]
    assert reads == [f"{ROOT}/a.py"]  # b.py is known; a.py's content is gone
