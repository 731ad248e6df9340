"""The ``recall`` tool: a page of what compaction moved to disk (a saved tool output, the transcript,
a summary), read back from beneath the job directory.

Guarantees:

- ``recall`` opens nothing outside the job directory, whatever the tree holds or how a concurrent
  job changes it: the path is opened beneath the directory's descriptor (:mod:`runner.tools.beneath`,
  the file tools' rule); a path that leads out gets an error result ("outside the job directory").
- ``recall`` holds at most :data:`RECALL_CHUNK_BYTES` of a file and its page in memory, however many
  calls read the same large file at once: it decodes the file a chunk at a time to find the page and
  count its characters (offsets stay characters of the whole file, undecodable bytes replaced), and
  refuses a file over :data:`RECALL_MAX_BYTES` with an error result that says so.
- A page is at most ``page_chars`` characters (:func:`recall_page_chars`) and its footer says which
  page it is and where the next starts (texts in :mod:`runner.protocol`); the file work runs on one of
  the job's worker threads, never on the event loop.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Callable
from functools import partial
from typing import Any

from .. import protocol
from ..config import Limits
from ..rundir.docs import TOOL_RESULTS, TRANSCRIPT
from ..rundir.store import JobStore
from .base import error_result, safe_text
from .beneath import Outside, Root, open_regular, relative
from .shares import JobShare, in_thread

RECALL_PAGE_CHARS = 20_000
RECALL_MAX_BYTES = 256 << 20  # the largest file recall reads: each call decodes it from the start
RECALL_CHUNK_BYTES = 1 << 20  # recall reads and decodes this much at a time

RECALL_TOOL: dict[str, Any] = {
    "name": "recall",
    "description": (
        "Read back a tool output or transcript that context compaction moved to disk. Pass the path "
        f"shown in a placeholder (for example {TOOL_RESULTS}/toolu_01.txt or {TRANSCRIPT}). Returns "
        "one page (at most `limit` characters) starting at character `offset`, and says which page "
        "it is and where the next page starts."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Path relative to the job directory."},
            "offset": {"type": "integer", "minimum": 0, "description": "First character to return."},
            "limit": {"type": "integer", "minimum": 1, "description": "Characters to return."},
        },
        "required": ["path"],
    },
}


class RecallTooLarge(Exception):
    """A saved file larger than recall reads (:data:`RECALL_MAX_BYTES`)."""

    def __init__(self, size: int):
        super().__init__(size)
        self.size = size


def _recall_page(job_dir: str, path: str, offset: int, *, limit: int) -> tuple[str, int]:
    """Characters ``[offset, offset + limit)`` of a saved output as it was written (no newline
    translation, undecodable bytes replaced, so offsets match its stated size) and its length in
    characters, opened beneath the job directory. Read and decoded :data:`RECALL_CHUNK_BYTES` at a time:
    never more than a chunk and the page in memory, whatever the file's size. Raises Outside,
    ValueError, OSError or RecallTooLarge."""
    with Root.open(job_dir) as root:
        fd, _ = open_regular(root, relative(path, root.real, job_dir))
    with os.fdopen(fd, "rb") as f:
        left = os.fstat(f.fileno()).st_size  # what is there now: a file that grows is read as it was
        if left > RECALL_MAX_BYTES:
            raise RecallTooLarge(left)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        page: list[str] = []
        seen, end = 0, offset + limit  # characters decoded so far; the page's end
        while True:
            chunk = f.read(min(RECALL_CHUNK_BYTES, left))
            left -= len(chunk)
            text = decoder.decode(chunk, final=not chunk)
            if seen < end and seen + len(text) > offset:
                page.append(text[max(0, offset - seen) : end - seen])
            seen += len(text)
            if not chunk:
                return "".join(page), seen


def recall_page_chars(limits: Limits | None) -> int:
    """The largest recall page for a job: half of what compaction brings its context down to, so a
    page always fits beside the rest of the context and is never moved back to disk."""
    if limits is None:
        return RECALL_PAGE_CHARS
    return max(
        1_000, min(RECALL_PAGE_CHARS, int(limits.context_char_limit * limits.compact_target_ratio / 2))
    )


class Recall:
    """The ``recall`` tool of one job: pages of at most ``page_chars`` from beneath its directory."""

    name = "recall"
    definition = RECALL_TOOL

    def __init__(self, store: JobStore, page_chars: int, share: Callable[[], JobShare]):
        self.store = store
        self.page_chars = page_chars
        self.share = share  # the job's share of the loop's worker threads

    async def run(self, tool_use_id: str, args: dict[str, Any]) -> dict[str, Any]:
        path = args.get("path")
        offset = args.get("offset", 0) or 0
        limit = args.get("limit", self.page_chars) or self.page_chars
        if (
            not isinstance(path, str)
            or not isinstance(offset, int)
            or not isinstance(limit, int)
            or isinstance(offset, bool)
            or isinstance(limit, bool)
            or offset < 0
            or limit < 1
        ):
            return error_result(
                tool_use_id, "recall: expected path (string), offset >= 0, limit >= 1 (integers)"
            )
        limit = min(limit, self.page_chars)
        try:
            page, total = await in_thread(
                self.share(), partial(_recall_page, limit=limit), str(self.store.dir), path, offset
            )
        except RecallTooLarge as e:
            return error_result(
                tool_use_id,
                safe_text(
                    f"recall: {path}: {e.size} bytes, more than recall reads ({RECALL_MAX_BYTES} bytes); "
                    "not read"
                ),
            )
        except Outside:
            return error_result(tool_use_id, safe_text(f"recall: {path}: outside the job directory"))
        except ValueError as e:  # a NUL byte, a lone surrogate
            return error_result(tool_use_id, safe_text(f"recall: path {path!r} {e}"))
        except OSError:
            return error_result(tool_use_id, safe_text(f"recall: {path}: no such file in the job directory"))
        offset = min(offset, total)  # past the end: the empty last page (integers only: no overflow)
        end = offset + len(page)
        rest = protocol.RECALL_NEXT.format(end=end) if end < total else protocol.RECALL_END
        before = -(-offset // limit)  # pages before this one, at this page size
        pages = before + max(1, -(-(total - offset) // limit))
        footer = protocol.RECALL_PAGE.format(
            page=before + 1, pages=pages, start=offset, end=end, total=total, rest=rest
        )
        return {"type": "tool_result", "tool_use_id": tool_use_id, "content": safe_text(page) + "\n" + footer}
