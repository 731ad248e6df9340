"""The shape of a Messages API request, as pydantic models: what one message, block or tool may be.

Guarantees:
- Strict: no coercion (a string is never a number, ``true`` is never 1); unknown fields are
  refused at every level (``extra="forbid"``), except in server tools, whose schema the API defines.
- Errors carry the API's locations: a block's type is part of its path
  (``messages.1.content.0.tool_use.id``), a custom tool's too (``tools.0.custom.name``); a field that
  is a string or a list of blocks adds nothing (``messages.0.content.1.text.text``, see
  :data:`BRANCH_TAGS`).
- The request fields are the installed SDK's ``MessageCreateParams`` (and the beta ones the
  emulator serves: ``context_management``, ``mcp_servers``, ``output_config.task_budget``), each
  with its documented shape: ``metadata`` only ``user_id`` (at most 256 characters),
  ``service_tier`` ``auto`` or ``standard_only``, ``thinking`` enabled (``budget_tokens`` at least
  :data:`MIN_THINKING_BUDGET` and under ``max_tokens``) / disabled / adaptive / between_tools,
  ``tool_choice`` auto / any / tool / none, a top-level ``cache_control`` (automatic caching),
  ``container`` (an id or ``{id, skills}``), ``output_config`` (``effort``, ``format``), and
  ``temperature``, ``top_p``, ``top_k``, which older SDKs send. A null value is taken as omitted.
  Beta fields the emulator cannot act on (``compaction``, ``thread``, ``fallbacks``, ...) and the
  SDK-side ``output_format`` are unknown fields.
- Rules that need the request's context read it from the validation context: ``betas`` (the
  ``anthropic-beta`` header's values; ``mcp_servers`` needs an ``mcp-client-*`` one) and
  ``min_trigger`` (the smallest compaction trigger).
- Rules across blocks and messages (first role, alternation, tool_use/tool_result pairing, which
  block types each role may send, non-empty text) are not here: they are
  :func:`runner.emulator.validation.conversation_problems`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..models.base import COMPACTION_BETA, CONTEXT_MANAGEMENT_BETA, MEMORY_BETA, MEMORY_TOOL_TYPE
from .sdk_types import problems

ID_PATTERN = r"^[a-zA-Z0-9_-]+$"
MIN_THINKING_BUDGET = 1024
MCP_BETA_PREFIX = "mcp-client-"
TOOL_NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,128}$"

# The two sides of a "string or a list of blocks" field; the API's error paths leave them out.
AS_STRING, AS_BLOCKS, AS_OBJECT = "<string>", "<blocks>", "<object>"
AS_COMPACT, AS_CLEAR = "<compact>", "<clear>"  # the context_management edits (as the API words them)
BRANCH_TAGS = frozenset({AS_STRING, AS_BLOCKS, AS_OBJECT, AS_COMPACT, AS_CLEAR})


def _string_or_blocks(value: Any) -> str:
    return AS_STRING if isinstance(value, str) else AS_BLOCKS


def _string_or_object(value: Any) -> str:
    return AS_STRING if isinstance(value, str) else AS_OBJECT


def _betas(info: ValidationInfo) -> set[str]:
    return set((info.context or {}).get("betas", ()))


class Shape(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class CacheControl(Shape):
    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] = "5m"


class _Cacheable(Shape):
    cache_control: CacheControl | None = None


class TextBlock(_Cacheable):
    type: Literal["text"]
    text: str
    citations: list[Any] | None = None


class ImageBlock(_Cacheable):
    type: Literal["image"]
    source: dict[str, Any]


class DocumentBlock(_Cacheable):
    type: Literal["document"]
    source: dict[str, Any]
    title: str | None = None
    context: str | None = None
    citations: dict[str, Any] | None = None


ResultItem = Annotated[TextBlock | ImageBlock | DocumentBlock, Field(discriminator="type")]
ResultContent = Annotated[
    Annotated[str, Tag(AS_STRING)] | Annotated[list[ResultItem], Tag(AS_BLOCKS)],
    Discriminator(_string_or_blocks),
]


class ToolUseBlock(_Cacheable):
    type: Literal["tool_use"]
    id: str = Field(pattern=ID_PATTERN)
    name: str
    input: dict[str, Any]
    caller: dict[str, Any] = Field(default_factory=dict)  # optional, but never null
    toolset_name: str | None = None


class ToolResultBlock(_Cacheable):
    type: Literal["tool_result"]
    tool_use_id: str = Field(pattern=ID_PATTERN)
    content: ResultContent = ""
    is_error: bool = False
    toolset_name: str | None = None


class ThinkingBlock(Shape):
    type: Literal["thinking"]
    thinking: str
    signature: str


class RedactedThinkingBlock(Shape):
    type: Literal["redacted_thinking"]
    data: str


class CompactionBlock(_Cacheable):
    type: Literal["compaction"]
    content: str | None = None
    encrypted_content: str | None = None
    signature: str | None = None
    tool_changes: list[Any] | None = None

    @field_validator("content")
    @classmethod
    def _non_empty(cls, value: str | None) -> str | None:
        if value == "":
            raise ValueError("compaction content must be non-empty or null")
        return value

    @model_validator(mode="after")
    def _beta(self, info: ValidationInfo) -> CompactionBlock:
        if COMPACTION_BETA not in _betas(info):
            raise ValueError(f"compaction blocks need the anthropic-beta header {COMPACTION_BETA}")
        return self


Block = Annotated[
    TextBlock
    | ImageBlock
    | DocumentBlock
    | ToolUseBlock
    | ToolResultBlock
    | ThinkingBlock
    | RedactedThinkingBlock
    | CompactionBlock,
    Field(discriminator="type"),
]
MessageContent = Annotated[
    Annotated[str, Tag(AS_STRING)] | Annotated[list[Block], Tag(AS_BLOCKS)], Discriminator(_string_or_blocks)
]


class Message(Shape):
    role: Literal["user", "assistant"]
    content: MessageContent


SystemContent = Annotated[
    Annotated[str, Tag(AS_STRING)] | Annotated[list[TextBlock], Tag(AS_BLOCKS)],
    Discriminator(_string_or_blocks),
]


class InputSchema(BaseModel):
    """A tool's JSON schema: an object schema; the rest of JSON Schema is not checked."""

    model_config = ConfigDict(extra="allow", strict=True)
    type: Literal["object"]


class CustomTool(_Cacheable):
    type: Literal["custom"] | None = None
    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str | None = None
    input_schema: InputSchema
    strict: bool | None = None
    input_examples: list[Any] | None = None
    defer_loading: bool | None = None
    allowed_callers: list[Any] | None = None
    eager_input_streaming: bool | None = None


class MemoryTool(BaseModel):
    """Anthropic's memory tool: its type, its name and nothing else but ``cache_control``; it needs
    the anthropic-beta header that enables it."""

    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["memory_20250818"]
    name: Literal["memory"]
    cache_control: CacheControl | None = None

    @field_validator("type")
    @classmethod
    def _beta(cls, value: str, info: ValidationInfo) -> str:
        if MEMORY_BETA not in _betas(info):
            raise ValueError(f"the memory tool needs the anthropic-beta header {MEMORY_BETA}")
        return value


class ServerTool(BaseModel):
    """A server or versioned tool (``type`` other than ``custom``): the API defines its schema."""

    model_config = ConfigDict(extra="allow", strict=True)
    type: str
    name: str = Field(pattern=TOOL_NAME_PATTERN)
    cache_control: CacheControl | None = None


def _tool_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == MEMORY_TOOL_TYPE:
        return "memory"
    return "custom" if kind in (None, "custom") else "server"


Tool = Annotated[
    Annotated[CustomTool, Tag("custom")]
    | Annotated[MemoryTool, Tag("memory")]
    | Annotated[ServerTool, Tag("server")],
    Discriminator(_tool_kind),
]


class ToolChoiceAuto(Shape):
    type: Literal["auto", "any"]
    disable_parallel_tool_use: bool | None = None


class ToolChoiceNone(Shape):
    type: Literal["none"]


class ToolChoiceTool(Shape):
    type: Literal["tool"]
    name: str
    disable_parallel_tool_use: bool | None = None


def _choice_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else None
    return kind if kind in ("tool", "none") else "auto"


ToolChoice = Annotated[
    Annotated[ToolChoiceAuto, Tag("auto")]
    | Annotated[ToolChoiceNone, Tag("none")]
    | Annotated[ToolChoiceTool, Tag("tool")],
    Discriminator(_choice_kind),
]


class ThinkingEnabled(Shape):
    type: Literal["enabled"]
    budget_tokens: int = Field(ge=MIN_THINKING_BUDGET)
    display: Literal["summarized", "omitted"] | None = None


class ThinkingDisabled(Shape):
    type: Literal["disabled"]


class ThinkingAdaptive(Shape):
    type: Literal["adaptive"]
    display: Literal["summarized", "omitted"] | None = None


class ThinkingBetweenTools(Shape):
    type: Literal["between_tools"]


Thinking = Annotated[
    ThinkingEnabled | ThinkingDisabled | ThinkingAdaptive | ThinkingBetweenTools, Field(discriminator="type")
]


class JsonOutputFormat(Shape):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class TaskBudget(Shape):
    type: Literal["tokens"]
    total: int
    remaining: int | None = None


class OutputConfig(Shape):
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: JsonOutputFormat | None = None
    task_budget: TaskBudget | None = None  # a beta field


class Skill(Shape):
    type: Literal["anthropic", "custom"]
    skill_id: str
    version: str | None = None


class Container(Shape):
    id: str | None = None
    skills: list[Skill] | None = None


class McpToolConfiguration(Shape):
    allowed_tools: list[str] | None = None
    enabled: bool | None = None


class McpServer(Shape):
    type: Literal["url"]
    name: str
    url: str
    authorization_token: str | None = None
    tool_configuration: McpToolConfiguration | None = None


ContainerField = Annotated[
    Annotated[str, Tag(AS_STRING)] | Annotated[Container, Tag(AS_OBJECT)], Discriminator(_string_or_object)
]


class Metadata(Shape):
    user_id: str | None = Field(None, max_length=256)


class Diagnostics(Shape):
    previous_message_id: str | None = None


class Trigger(Shape):
    type: Literal["input_tokens"]
    value: int

    @field_validator("value")
    @classmethod
    def _at_least_the_minimum(cls, value: int, info: ValidationInfo) -> int:
        minimum = (info.context or {}).get("min_trigger", 1)
        if value < minimum:
            raise ValueError(f"must be an integer of at least {minimum}")
        return value


class CompactEdit(Shape):
    type: Literal["compact_20260112"]
    trigger: Trigger | None = None
    instructions: str | None = None
    pause_after_compaction: bool = False


class ClearToolUsesEdit(BaseModel):
    """``clear_tool_uses_20250919``: the SDK's parameter type says what it may hold."""

    model_config = ConfigDict(strict=True, extra="allow")
    type: Literal["clear_tool_uses_20250919"]

    @model_validator(mode="before")
    @classmethod
    def _as_the_sdk_takes_it(cls, value: Any) -> Any:
        # imported here: the config of ``runner emulate`` imports this module, and is checked
        # before the SDK (~1.5 s of imports) is loaded; the server has it loaded by then
        from anthropic.types.beta import BetaClearToolUses20250919EditParam

        found = problems(value, BetaClearToolUses20250919EditParam)
        if found:
            raise ValueError("; ".join(found))
        return value


def _edit_beta(edit: CompactEdit | ClearToolUsesEdit) -> str:
    return COMPACTION_BETA if isinstance(edit, CompactEdit) else CONTEXT_MANAGEMENT_BETA


def _edit_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else None
    return AS_CLEAR if kind == "clear_tool_uses_20250919" else AS_COMPACT


Edit = Annotated[
    Annotated[CompactEdit, Tag(AS_COMPACT)] | Annotated[ClearToolUsesEdit, Tag(AS_CLEAR)],
    Discriminator(_edit_kind),
]


class ContextManagement(Shape):
    edits: list[Edit]


class CountTokensRequest(Shape):
    """``POST /v1/messages/count_tokens``."""

    model: str = Field(min_length=1)
    messages: list[Message]
    system: SystemContent | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None
    cache_control: CacheControl | None = None  # automatic caching: a breakpoint on the last cacheable block
    speed: Literal["standard", "fast"] | None = None
    # beta fields
    context_management: ContextManagement | None = None
    container: ContainerField | None = None
    mcp_servers: list[McpServer] | None = None

    @field_validator("tools")
    @classmethod
    def _unique_names(
        cls, tools: list[CustomTool | MemoryTool | ServerTool] | None
    ) -> list[CustomTool | MemoryTool | ServerTool] | None:
        names = [t.name for t in tools or []]
        if len(set(names)) != len(names):
            raise ValueError("Tool names must be unique.")
        return tools

    @field_validator("context_management")
    @classmethod
    def _needs_the_beta(
        cls, value: ContextManagement | None, info: ValidationInfo
    ) -> ContextManagement | None:
        if value is None:
            return value
        betas = _betas(info)
        for edit in value.edits:
            if _edit_beta(edit) not in betas:
                raise ValueError(f"needs the anthropic-beta header {_edit_beta(edit)}")
        if not value.edits and not betas & {COMPACTION_BETA, CONTEXT_MANAGEMENT_BETA}:
            raise ValueError(
                f"needs the anthropic-beta header {COMPACTION_BETA} or {CONTEXT_MANAGEMENT_BETA}"
            )
        return value

    @field_validator("mcp_servers")
    @classmethod
    def _needs_an_mcp_beta(
        cls, value: list[McpServer] | None, info: ValidationInfo
    ) -> list[McpServer] | None:
        if value is not None and not any(b.startswith(MCP_BETA_PREFIX) for b in _betas(info)):
            raise ValueError(
                f"needs an anthropic-beta header {MCP_BETA_PREFIX}* (e.g. {MCP_BETA_PREFIX}2025-04-04)"
            )
        return value


class MessagesRequest(CountTokensRequest):
    """``POST /v1/messages``: what count_tokens takes, plus the generation settings."""

    max_tokens: int = Field(ge=1)
    stream: bool | None = None
    temperature: float | None = Field(None, ge=0, le=1)
    top_p: float | None = Field(None, ge=0, le=1)
    top_k: int | None = Field(None, ge=0)
    stop_sequences: list[str] | None = None
    metadata: Metadata | None = None
    service_tier: Literal["auto", "standard_only"] | None = None
    inference_geo: str | None = None
    diagnostics: Diagnostics | None = None

    @model_validator(mode="after")
    def _budget_under_max_tokens(self) -> MessagesRequest:
        if isinstance(self.thinking, ThinkingEnabled) and self.thinking.budget_tokens >= self.max_tokens:
            raise ValueError(
                "thinking.enabled.budget_tokens: must be less than max_tokens "
                f"({self.thinking.budget_tokens} >= {self.max_tokens})"
            )
        return self


def blocks_with_cache_control(body: dict[str, Any]) -> int:
    """How many ``cache_control`` breakpoints a request body (of a valid shape) sets: tools, system,
    message blocks and the items inside tool results; a top-level ``cache_control`` is one more, see
    :func:`runner.billing.with_automatic_breakpoint`."""

    def marked(items: Any) -> int:
        return sum(1 for b in items if isinstance(b, dict) and b.get("cache_control") is not None)

    count = int(body.get("cache_control") is not None) + marked(body.get("tools") or [])
    if isinstance(body.get("system"), list):
        count += marked(body["system"])
    for message in body["messages"]:
        content = message["content"] if isinstance(message["content"], list) else []
        count += marked(content)
        for block in content:
            if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
                count += marked(block["content"])
    return count
