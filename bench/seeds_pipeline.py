"""The seeds' compaction pipeline, written as the seed lesson writes it (for comparison only).

A faithful, straightforward transcription of ``/work/shared/seeds/000_*.txt`` (the Vietnamese lesson
with code) and ``001_*.txt``: every size check is ``estimate_chars(messages)``, a ``json.dumps`` of
the whole history; the stages mutate the blocks in place; ``snip_compact`` and ``compact_history``
write the whole current history to a new file under ``.transcripts/`` each time they fire; outputs
go to ``.task_outputs/tool-results/<tool_use_id>.txt``. The only departure: ``summarize_history``
uses the runner's deterministic fallback summary instead of a model call, so the comparison with our
Compactor (also run with the fallback) is like with like.

This module is not used by the runner; ``bench/compactor.py`` imports it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runner.compactor.fallback import fallback_summary

Message = dict[str, Any]


class SeedsCompactor:
    LARGE_RESULT_CHAR_LIMIT = 30_000
    BATCH_CHAR_LIMIT = 200_000
    PREVIEW_CHARS = 2_000
    FIT_PREVIEW_CHARS = 1_000
    MAX_MESSAGES = 50
    CONTEXT_CHAR_LIMIT = 50_000
    KEEP_RECENT_RESULTS = 3
    KEEP_RECENT_MESSAGES = 5

    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self.outputs_dir = self.workdir / ".task_outputs" / "tool-results"
        self.transcripts_dir = self.workdir / ".transcripts"
        self.outputs_dir.mkdir(parents=True, exist_ok=True)
        self.transcripts_dir.mkdir(parents=True, exist_ok=True)
        self._transcripts = 0

    # -- helpers ---------------------------------------------------------------------------------

    @staticmethod
    def estimate_chars(messages: list[Message]) -> int:
        return len(json.dumps(messages, default=str, ensure_ascii=False))

    @staticmethod
    def has_tool_use(message: Message) -> bool:
        content = message.get("content")
        return message.get("role") == "assistant" and isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_use" for b in content)

    @staticmethod
    def is_tool_result(message: Message) -> bool:
        content = message.get("content")
        return message.get("role") == "user" and isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in content)

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

    def unseen_tool_result_positions(self, messages: list[Message]) -> set[tuple[int, int]]:
        """Results after the last assistant message: the model has not consumed them yet."""
        last_assistant = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
        return {(mi, bi) for mi, bi, _ in self.tool_result_entries(messages) if mi > last_assistant}

    def save_output(self, tool_use_id: str, content: str) -> str:
        path = self.outputs_dir / f"{tool_use_id}.txt"
        path.write_text(content, encoding="utf-8")
        return str(path.relative_to(self.workdir))

    def persist_large_output(self, tool_use_id: str, content: str, preview_chars: int | None = None) -> str:
        saved = self.save_output(tool_use_id, content)
        preview = content[: self.PREVIEW_CHARS if preview_chars is None else preview_chars]
        return f"<persisted-output>\nFull output saved to: {saved}\nPreview:\n{preview}\n</persisted-output>"

    @staticmethod
    def persisted_output_path(content: str) -> str | None:
        if not content.startswith("<persisted-output>"):
            return None
        for line in content.splitlines():
            if line.startswith("Full output saved to: "):
                return line[len("Full output saved to: "):].strip()
        return None

    def write_transcript(self, messages: list[Message]) -> str:
        self._transcripts += 1
        path = self.transcripts_dir / f"transcript_{self._transcripts:06d}.jsonl"
        with open(path, "w", encoding="utf-8") as f:
            for message in messages:
                f.write(json.dumps(message, default=str, ensure_ascii=False) + "\n")
        return str(path.relative_to(self.workdir))

    def summarize_history(self, messages: list[Message]) -> str:
        return fallback_summary(messages, max(4_000, self.CONTEXT_CHAR_LIMIT // 4))

    @staticmethod
    def summary_message(label: str, active_request: str, summary: str, transcript: str) -> Message:
        return {"role": "user", "content": (f"[{label}]\n\nCurrent user request:\n{active_request}\n\n"
                                            f"Conversation summary:\n{summary}\n\nFull transcript: {transcript}")}

    # -- the four steps ----------------------------------------------------------------------------

    def tool_result_budget(self, messages: list[Message], max_chars: int = BATCH_CHAR_LIMIT) -> list[Message]:
        if not messages:
            return messages
        last = messages[-1]
        content = last.get("content")
        if last.get("role") != "user" or not isinstance(content, list):
            return messages
        blocks = [block for block in content if isinstance(block, dict) and block.get("type") == "tool_result"]
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

    def snip_compact(self, messages: list[Message], max_messages: int = MAX_MESSAGES) -> list[Message]:
        if len(messages) <= max_messages:
            return messages
        head_end = 3
        tail_start = len(messages) - (max_messages - head_end - 1)
        if self.has_tool_use(messages[head_end - 1]):
            while head_end < tail_start and self.is_tool_result(messages[head_end]):
                head_end += 1
        if tail_start > 0 and self.is_tool_result(messages[tail_start]) and self.has_tool_use(messages[tail_start - 1]):
            tail_start -= 1
        transcript = self.write_transcript(messages)
        marker = {"role": "user", "content": f"[{tail_start - head_end} messages archived at {transcript}]"}
        return [*messages[:head_end], marker, *messages[tail_start:]]

    def micro_compact(self, messages: list[Message], target_chars: int) -> list[Message]:
        results = self.tool_result_entries(messages)
        unseen = self.unseen_tool_result_positions(messages)
        consumed = [entry for entry in results if entry[:2] not in unseen]
        for _, _, block in consumed[:-self.KEEP_RECENT_RESULTS]:
            if self.estimate_chars(messages) <= target_chars:
                break
            content = str(block.get("content", ""))
            if len(content) <= 120:
                continue
            saved_path = self.persisted_output_path(content)
            if not saved_path:
                saved_path = self.save_output(block["tool_use_id"], content)
            block["content"] = f"[Earlier tool result saved at {saved_path}]"
        return messages

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
            block["content"] = self.persist_large_output(block.get("tool_use_id", "unknown"), content,
                                                         self.FIT_PREVIEW_CHARS)
        return messages

    def compact_history(self, messages: list[Message], active_request: str) -> list[Message]:
        transcript = self.write_transcript(messages)
        summary = self.summarize_history(messages)
        return [self.summary_message("Compacted", active_request, summary, transcript)]

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
