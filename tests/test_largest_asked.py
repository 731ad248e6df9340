"""Issue 36, item 11: the offline model honours a number of largest files named in the request ("the
20 largest files"), bounded, in a survey of its own and in one split among subagents; without a
number it lists 10, as before."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import offline_survey

from runner.offline.memory_survey import LARGEST, LARGEST_MOST, largest_asked

pytestmark = [pytest.mark.anyio, pytest.mark.stand_in]


def largest_rows(report: str) -> list[tuple[str, int]]:
    """The report's largest-files table as (path, size) rows."""
    section = report.split("## Largest text files", 1)[1].split("\n## ", 1)[0]
    return [
        (path, int(size)) for path, _, size in re.findall(r"^\| (.+?) \| (\d+) \| (\d+) \|$", section, re.M)
    ]


def test_the_number_asked_is_read_from_the_request_and_bounded() -> None:
    assert largest_asked("Survey it and list the 20 largest files.") == 20
    assert largest_asked("Which are the 3 biggest modules?") == 3
    assert largest_asked("Name the largest 25 files.") == 25
    assert largest_asked("Survey this package.") == LARGEST
    assert largest_asked("Name the largest files.") == LARGEST
    assert largest_asked("the 5000000 largest files") == LARGEST_MOST
    assert largest_asked("the 0 largest files") == 1


@pytest.mark.parametrize(
    ("prompt", "rows"), [("Survey this package.", 10), ("List the 20 largest files.", 20)]
)
async def test_a_survey_lists_as_many_largest_files_as_asked(tmp_path: Path, prompt: str, rows: int) -> None:
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    sizes = {}
    for k in range(30):
        path = f"sub/m{k:02d}.py" if k % 2 else f"m{k:02d}.py"
        body = "".join(f"x{n} = {n}\n" for n in range(5 + 3 * k))
        (root / path).write_text(body)
        sizes[path] = len(body)
    result, report = await offline_survey(root, tmp_path / "job", {"max_turns": 200}, prompt=prompt)
    assert result.status == "succeeded"
    want = sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))[:rows]
    assert largest_rows(report) == want
