"""The seeds' compaction pipelines, each written as its lesson writes it (for comparison only).

Two revisions of the same lesson ("Context Compact", s08 of learn-claude-code):

- :class:`Seed000` transcribes ``000_2c5c1e10c86de334.txt``, the Vietnamese lesson with code
  ("Context Compact": tool_result_budget, snip_compact, micro_compact + fit_tool_results,
  compact_history, reactive_compact). Every size check is ``estimate_chars(messages)``, a
  ``json.dumps`` of the whole history; micro_compact runs only over ``CONTEXT_CHAR_LIMIT`` and
  estimates again before every candidate block; snip_compact and compact_history write the whole
  current history to a new file under ``.transcripts/`` each time they fire; replaced results are
  saved under ``.task_outputs/tool-results/<tool_use_id>.txt``.
- :class:`Seed001` transcribes ``001_e18dcfa67f9eda57.txt``, the English README
  ("s08: Context Compact — Context Will Fill Up, Have a Way to Make Room"): tool_result_budget,
  snip_compact (no transcript, a ``[snipped N messages ...]`` placeholder), micro_compact on every
  turn (a fixed placeholder, nothing saved), then compact_history over ``THRESHOLD``. The lesson does
  not define three helpers it calls; they come from its sibling revisions, as said where each is
  written: ``persist_large_output`` from ``002_499f6b4171ec58cf.txt`` (the Chinese lesson, with
  000's 30,000-char threshold), ``estimate_token_count`` as 000's ``estimate_chars`` (the issue and
  the benchmarks give 001's threshold in characters), ``collect_tool_result_blocks`` as 000's
  ``(message index, block index, block)`` list.

Departures from the letter, all of them here:
- ``summarize_history`` is a parameter. The compactor benchmark passes the runner's deterministic
  fallback summary (model-free, the same one our Compactor uses there); the cost benchmark passes a
  call to the job's model. This is the only change to what either pipeline does.
- 001's ``tool_result_budget`` indexes ``last["content"]`` as a list of blocks; a history whose last
  message is a plain string (the first request) is returned unchanged instead of raising.

The texts come from ``seed_texts.py`` (those the runner reads, from ``runner/protocol.py``). This
module is not used by the runner; ``bench/compactor.py`` and ``bench/cost.py`` import it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from seed_texts import (
    COMPACTED,
    REACTIVE_COMPACT,
    SEED_001_MICRO_PLACEHOLDER,
    seed_000_archived,
    seed_000_placeholder,
    seed_000_summary,
    seed_001_snipped,
    seed_001_summary,
    seed_persisted,
    seed_persisted_path,
)

from runner.compaction.fallback import fallback_summary

Message = dict[str, Any]
Summarize = Callable[[list[Message]], str]


def model_free_summary(messages: list[Message]) -> str:
    """The deterministic fallback summary, budgeted as our Compactor budgets it."""
    return fallback_summary(messages, 25_000)


class _SeedFiles:
    """What both revisions share: where they write (``.task_outputs/`` and ``.transcripts/``)."""

    def __init__(self, workdir: Path, summarize: Summarize = model_free_summary):
        self.workdir = Path(workdir)
        self.outputs_dir = self.workdir / ".task_outputs" / "tool-results"
        self.transcripts_dir = self.workdir / ".transcripts"
        self.outputs_dir.mkdir(parents=True, exist_ok=True)
        self.transcripts_dir.mkdir(parents=True, exist_ok=True)
        self._transcripts = 0
        self.summarize_history = summarize

    @staticmethod
    def has_tool_use(message: Message) -> bool:
        content = message.get("content")
        return (
            message.get("role") == "assistant"
            and isinstance(content, list)
            and any(isinstance(b, dict) and b.get("type") == "tool_use" for b in content)
        )

    @staticmethod
    def is_tool_result(message: Message) -> bool:
        content = message.get("content")
        return (
            message.get("role") == "user"
            and isinstance(content, list)
            and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
        )

    @staticmethod
    def tool_result_entries(messages: list[Message]) -> list[tuple[int, int, dict[str, Any]]]:
        entries = []
        for mi, message in enumerate(messages):
            content = message.get("content")
            if message.get("role") != "user" or not isinstance(content, list):
                continue
            for bi, block in enumerate(content):
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    entries.append((mi, bi, block))
        return entries

    @staticmethod
    def estimate_chars(messages: list[Message]) -> int:
        return len(json.dumps(messages, default=str, ensure_ascii=False))

    def save_output(self, tool_use_id: str, content: str) -> str:
        path = self.outputs_dir / f"{tool_use_id}.txt"
        path.write_text(content, encoding="utf-8")
        return str(path.relative_to(self.workdir))

    def write_transcript(self, messages: list[Message]) -> str:
        self._transcripts += 1
        path = self.transcripts_dir / f"transcript_{self._transcripts:06d}.jsonl"
        with open(path, "w", encoding="utf-8") as f:
            for message in messages:
                f.write(json.dumps(message, default=str, ensure_ascii=False) + "\n")
        return str(path.relative_to(self.workdir))


class Seed000(_SeedFiles):
    """Revision 000 (the Vietnamese lesson with code), function by function."""

    LARGE_RESULT_CHAR_LIMIT = 30_000
    BATCH_CHAR_LIMIT = 200_000
    PREVIEW_CHARS = 2_000
    FIT_PREVIEW_CHARS = 1_000
    MAX_MESSAGES = 50
    CONTEXT_CHAR_LIMIT = 50_000
    KEEP_RECENT_RESULTS = 3
    KEEP_RECENT_MESSAGES = 5

    def unseen_tool_result_positions(self, messages: list[Message]) -> set[tuple[int, int]]:
        """Results after the last assistant message: the model has not consumed them yet."""
        last_assistant = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
        return {(mi, bi) for mi, bi, _ in self.tool_result_entries(messages) if mi > last_assistant}

    def persist_large_output(self, tool_use_id: str, content: str, preview_chars: int | None = None) -> str:
        saved = self.save_output(tool_use_id, content)
        preview = content[: self.PREVIEW_CHARS if preview_chars is None else preview_chars]
        return seed_persisted(saved, preview)

    @staticmethod
    def persisted_output_path(content: str) -> str | None:
        return seed_persisted_path(content)

    @staticmethod
    def summary_message(label: str, active_request: str, summary: str, transcript: str) -> Message:
        return {"role": "user", "content": seed_000_summary(label, active_request, summary, transcript)}

    # Bước 1
    def tool_result_budget(self, messages: list[Message], max_chars: int = BATCH_CHAR_LIMIT) -> list[Message]:
        if not messages:
            return messages
        last = messages[-1]
        content = last.get("content")
        if last.get("role") != "user" or not isinstance(content, list):
            return messages
        blocks = [
            block for block in content if isinstance(block, dict) and block.get("type") == "tool_result"
        ]
        total = sum(len(str(block.get("content", ""))) for block in blocks)
        ranked = sorted(blocks, key=lambda block: len(str(block.get("content", ""))), reverse=True)
        for block in ranked:
            if total <= max_chars:
                break
            text = str(block.get("content", ""))
            if len(text) <= self.LARGE_RESULT_CHAR_LIMIT:
                continue
            block["content"] = self.persist_large_output(block.get("tool_use_id", "unknown"), text)
            total = sum(len(str(item.get("content", ""))) for item in blocks)
        return messages

    # Bước 2
    def snip_compact(self, messages: list[Message], max_messages: int = MAX_MESSAGES) -> list[Message]:
        if len(messages) <= max_messages:
            return messages
        head_end = 3
        tail_start = len(messages) - (max_messages - head_end - 1)
        if self.has_tool_use(messages[head_end - 1]):
            while head_end < tail_start and self.is_tool_result(messages[head_end]):
                head_end += 1
        if (
            tail_start > 0
            and self.is_tool_result(messages[tail_start])
            and self.has_tool_use(messages[tail_start - 1])
        ):
            tail_start -= 1
        transcript = self.write_transcript(messages)
        marker = {"role": "user", "content": seed_000_archived(tail_start - head_end, transcript)}
        return [*messages[:head_end], marker, *messages[tail_start:]]

    # Bước 3
    def micro_compact(self, messages: list[Message], target_chars: int) -> list[Message]:
        results = self.tool_result_entries(messages)
        unseen = self.unseen_tool_result_positions(messages)
        consumed = [entry for entry in results if entry[:2] not in unseen]
        for _, _, block in consumed[: -self.KEEP_RECENT_RESULTS]:
            if self.estimate_chars(messages) <= target_chars:
                break
            content = str(block.get("content", ""))
            if len(content) <= 120:
                continue
            saved_path = self.persisted_output_path(content)
            if not saved_path:
                saved_path = self.save_output(block["tool_use_id"], content)
            block["content"] = seed_000_placeholder(saved_path)
        return messages

    # Bước 3 (the prose: persist the largest unseen results, a 1,000-char preview and the path)
    def fit_tool_results(self, messages: list[Message], target_chars: int) -> list[Message]:
        unseen = self.unseen_tool_result_positions(messages)
        candidates = [block for mi, bi, block in self.tool_result_entries(messages) if (mi, bi) in unseen]
        candidates.sort(key=lambda block: len(str(block.get("content", ""))), reverse=True)
        for block in candidates:
            if self.estimate_chars(messages) <= target_chars:
                break
            content = str(block.get("content", ""))
            if len(content) <= self.FIT_PREVIEW_CHARS or self.persisted_output_path(content):
                continue
            block["content"] = self.persist_large_output(
                block.get("tool_use_id", "unknown"), content, self.FIT_PREVIEW_CHARS
            )
        return messages

    # Bước 4
    def compact_history(self, messages: list[Message], active_request: str) -> list[Message]:
        transcript = self.write_transcript(messages)
        summary = self.summarize_history(messages)
        return [self.summary_message(COMPACTED, active_request, summary, transcript)]

    def prepare(self, messages: list[Message], active_request: str) -> list[Message]:
        messages = self.tool_result_budget(messages)
        messages = self.snip_compact(messages)
        if self.estimate_chars(messages) > self.CONTEXT_CHAR_LIMIT:
            target = int(self.CONTEXT_CHAR_LIMIT * 0.8)
            messages = self.micro_compact(messages, target)
            if self.estimate_chars(messages) > self.CONTEXT_CHAR_LIMIT:
                messages = self.fit_tool_results(messages, target)
            if self.estimate_chars(messages) > self.CONTEXT_CHAR_LIMIT:
                messages = self.compact_history(messages, active_request)
        return messages

    # Khôi phục khi API từ chối
    def reactive_compact(self, messages: list[Message], active_request: str) -> list[Message]:
        transcript = self.write_transcript(messages)
        tail_start = max(0, len(messages) - self.KEEP_RECENT_MESSAGES)
        if (
            tail_start > 0
            and self.is_tool_result(messages[tail_start])
            and self.has_tool_use(messages[tail_start - 1])
        ):
            tail_start -= 1
        old_history = messages[:tail_start] if tail_start else messages
        summary = self.summarize_history(old_history)
        message = self.summary_message(REACTIVE_COMPACT, active_request, summary, transcript)
        return [message, *messages[tail_start:]] if tail_start else [message]


class Seed001(_SeedFiles):
    """Revision 001 (the English README), function by function; ``threshold`` is its ``THRESHOLD``."""

    KEEP_RECENT_TOOL_RESULTS = 3
    PERSIST_THRESHOLD = 30_000  # 002's persist_large_output names it; 000 gives the number

    def __init__(self, workdir: Path, threshold: int, summarize: Summarize = model_free_summary):
        super().__init__(workdir, summarize)
        self.THRESHOLD = threshold

    _message_has_tool_use = staticmethod(_SeedFiles.has_tool_use)
    _is_tool_result_message = staticmethod(_SeedFiles.is_tool_result)
    collect_tool_result_blocks = staticmethod(_SeedFiles.tool_result_entries)
    estimate_token_count = staticmethod(_SeedFiles.estimate_chars)

    def persist_large_output(self, tool_use_id: str, output: str) -> str:  # as 002 writes it
        if len(output) <= self.PERSIST_THRESHOLD:
            return output
        stored_path = self.save_output(tool_use_id, output)
        preview = output[:2000]
        return seed_persisted(stored_path, preview)

    @staticmethod
    def recalculate_total(blocks: list[tuple[int, dict[str, Any]]]) -> int:
        return sum(len(str(b.get("content", ""))) for _, b in blocks)

    # L1
    def snip_compact(self, messages: list[Message], max_messages: int = 50) -> list[Message]:
        if len(messages) <= max_messages:
            return messages
        head_end, tail_start = 3, len(messages) - (max_messages - 3)
        if head_end > 0 and self._message_has_tool_use(messages[head_end - 1]):
            while head_end < len(messages) and self._is_tool_result_message(messages[head_end]):
                head_end += 1
        if (
            tail_start > 0
            and tail_start < len(messages)
            and self._is_tool_result_message(messages[tail_start])
            and self._message_has_tool_use(messages[tail_start - 1])
        ):
            tail_start -= 1
        snipped = tail_start - head_end
        placeholder = {"role": "user", "content": seed_001_snipped(snipped)}
        return messages[:head_end] + [placeholder] + messages[tail_start:]

    # L2
    def micro_compact(self, messages: list[Message]) -> list[Message]:
        tool_results = self.collect_tool_result_blocks(messages)
        if len(tool_results) <= self.KEEP_RECENT_TOOL_RESULTS:
            return messages
        for _, _, block in tool_results[: -self.KEEP_RECENT_TOOL_RESULTS]:
            if len(block.get("content", "")) > 120:
                block["content"] = SEED_001_MICRO_PLACEHOLDER
        return messages

    # L3
    def tool_result_budget(self, messages: list[Message], max_bytes: int = 200_000) -> list[Message]:
        last = messages[-1]
        if not isinstance(last.get("content"), list):  # departure: the first request is a plain string
            return messages
        blocks = [(i, b) for i, b in enumerate(last["content"]) if b.get("type") == "tool_result"]
        total = sum(len(str(b.get("content", ""))) for _, b in blocks)
        if total <= max_bytes:
            return messages
        ranked = sorted(blocks, key=lambda p: len(str(p[1].get("content", ""))), reverse=True)
        for _idx, block in ranked:
            if total <= max_bytes:
                break
            block["content"] = self.persist_large_output(block["tool_use_id"], str(block["content"]))
            total = self.recalculate_total(blocks)
        return messages

    # L4
    def compact_history(self, messages: list[Message]) -> list[Message]:
        self.write_transcript(messages)  # Save full conversation first
        summary = self.summarize_history(messages)  # LLM generates summary
        return [{"role": "user", "content": seed_001_summary(COMPACTED, summary)}]

    # Reactive
    def reactive_compact(self, messages: list[Message]) -> list[Message]:
        self.write_transcript(messages)
        tail_start = max(0, len(messages) - 5)
        if (
            tail_start > 0
            and tail_start < len(messages)
            and self._is_tool_result_message(messages[tail_start])
            and self._message_has_tool_use(messages[tail_start - 1])
        ):
            tail_start -= 1
        summary = self.summarize_history(messages[:tail_start])
        return [
            {"role": "user", "content": seed_001_summary(REACTIVE_COMPACT, summary)},
            *messages[tail_start:],
        ]

    # Putting It All Together (the three pre-processors, then the threshold check)
    def prepare(self, messages: list[Message], active_request: str = "") -> list[Message]:
        messages[:] = self.tool_result_budget(messages)  # L3: persist large results
        messages[:] = self.snip_compact(messages)  # L1: trim middle
        messages[:] = self.micro_compact(messages)  # L2: old result placeholders
        if self.estimate_token_count(messages) > self.THRESHOLD:
            messages[:] = self.compact_history(messages)
        return messages
