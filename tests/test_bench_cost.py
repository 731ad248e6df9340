"""bench/cost.py's breakdown: each cache write followed to the read that used it, or to its loss."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from cost import cache_breakdown, prefix_tokens  # noqa: E402

from runner.pricing import Usage  # noqa: E402

MARK = {"type": "ephemeral"}


def text(t: str, mark: bool = False) -> dict:
    return {"type": "text", "text": t, **({"cache_control": MARK} if mark else {})}


def request(*messages: dict) -> dict:
    return {"model": "m", "messages": list(messages), "tools": [{"name": "read"}]}


def tokens(r: dict) -> int:
    return prefix_tokens(r, 10**9)[1][-1]


def test_a_write_read_back_one_rewritten_and_the_last_calls_are_told_apart():
    a = {"role": "user", "content": [text("a" * 400, mark=True)]}
    a_plain = {"role": "user", "content": [text("a" * 400)]}
    b = {"role": "assistant", "content": [text("b" * 400, mark=True)]}
    first = request(a)
    second = request(a_plain, b)
    third = request({"role": "user", "content": [text("c" * 400, mark=True)]})  # a compaction rewrote all
    t1, t2, t3 = tokens(first), tokens(second), tokens(third)
    usages = [
        Usage(cache_creation_input_tokens=t1),
        Usage(cache_read_input_tokens=t1, cache_creation_input_tokens=t2 - t1),
        Usage(cache_creation_input_tokens=t3),
    ]
    out = cache_breakdown([first, second, third], usages, min_cacheable=1)
    assert out is not None
    assert out["write_read"] == t1  # the first call's write, read back by the second
    assert out["write_rewritten"] == t2 - t1  # the second's, never sent again: the third rewrote it
    assert out["write_last"] == t3 and out["write_unread"] == 0
    tool = prefix_tokens(third, t3)[1][0]  # the tool definition: the one prefix the third call resends
    assert out["resent"] == t1 + tool and out["read"] == t1
    assert out["fresh"] == t1 + (t2 - t1) + (t3 - tool)
    assert cache_breakdown([first], usages) is None  # the requests and the calls do not pair up


def test_a_prefix_sent_again_but_not_read_is_a_missed_breakpoint():
    a = {"role": "user", "content": [text("a" * 400, mark=True)]}
    first = request(a)
    second = request(a, {"role": "assistant", "content": [text("b" * 400, mark=True)]})
    t1, t2 = tokens(first), tokens(second)
    usages = [Usage(cache_creation_input_tokens=t1), Usage(cache_creation_input_tokens=t2)]  # no read
    out = cache_breakdown([first, second], usages, min_cacheable=1)
    assert out is not None
    assert out["write_unread"] == t1 and out["write_read"] == 0 and out["write_last"] == t2
    assert out["fresh_again"] == t1  # the first call's tokens were worth a write: the second resent them
