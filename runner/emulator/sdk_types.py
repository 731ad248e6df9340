"""Does the installed ``anthropic`` SDK's parameter type (its TypedDicts) accept a JSON value?

The emulator's own schema (:mod:`.schema`) is strict and knows the fields it acts on; the SDK's beta
types know every field a stock client may send with an ``anthropic-beta`` header. This module reads
those types as they are installed (``typing.get_type_hints``), so a new SDK brings its new fields
without a change here.

Guarantees (of :func:`problems`):
- A TypedDict takes an object with its required keys and no key it does not declare, each value
  checked against its key's type; ``Literal`` takes its values only; ``str``, ``int``, ``float`` and
  ``bool`` are strict (``true`` is not 1, ``"1"`` is not 1; an integer is a float); a sequence or
  iterable takes a JSON array, a mapping an object; ``None`` only where the type is optional.
- A union of TypedDicts that each fix ``type`` is checked against the member the value's ``type``
  names; any other union takes a value one of its members takes.
- A type this module cannot read (a class of the SDK's own, ``Any``, ``object``) takes any value.
- Never raises for any JSON value; each problem is ``location: message``.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, NotRequired, Required, Union, get_args, get_origin, get_type_hints

from typing_extensions import is_typeddict

SEQUENCES = (list, Sequence, Iterable, typing.Sequence, typing.Iterable, typing.List)  # noqa: UP006
MAPPINGS = (dict, Mapping, typing.Mapping, typing.Dict)  # noqa: UP006
WRAPPERS = (Required, NotRequired, typing.Annotated)
MAX_DEPTH = 64


@functools.cache
def fields_of(typed_dict: type) -> dict[str, Any]:
    """A TypedDict's keys and their types, wrappers (``Required``, ``Annotated``) removed."""
    return {key: unwrap(hint) for key, hint in get_type_hints(typed_dict, include_extras=True).items()}


def required_of(typed_dict: type) -> frozenset[str]:
    return frozenset(getattr(typed_dict, "__required_keys__", ()))


def unwrap(hint: Any) -> Any:
    while get_origin(hint) in WRAPPERS or get_origin(hint) is getattr(typing, "Annotated", None):
        hint = get_args(hint)[0]
    return hint


def members(hint: Any) -> tuple[Any, ...]:
    """The members of a union (``Optional`` included), else the hint alone."""
    hint = unwrap(hint)
    if get_origin(hint) in (Union, types.UnionType):
        return tuple(unwrap(m) for m in get_args(hint))
    return (hint,)


def type_tag(typed_dict: type) -> tuple[Any, ...]:
    """The values a TypedDict's ``type`` key may take (empty: it has no ``Literal`` type)."""
    hint = fields_of(typed_dict).get("type")
    return get_args(hint) if get_origin(hint) is Literal else ()


def member_for(hint: Any, value: Any) -> Any | None:
    """The member of the union ``hint`` an object with this ``type`` is checked against, if one names it."""
    if not isinstance(value, dict):
        return None
    for member in members(hint):
        if is_typeddict(member) and value.get("type") in type_tag(member):
            return member
    return None


def problems(value: Any, hint: Any, where: str = "", depth: int = 0) -> list[str]:
    """Every reason the SDK's type ``hint`` would not take ``value`` (see the module's guarantees)."""
    if depth > MAX_DEPTH:
        return [f"{where}: nested too deeply"]
    hint = unwrap(hint)
    options = members(hint)
    if len(options) > 1:
        if value is None and type(None) in options:
            return []
        chosen = member_for(hint, value)
        if chosen is not None:
            return problems(value, chosen, where, depth + 1)
        found = [problems(value, option, where, depth + 1) for option in options if option is not type(None)]
        if any(not p for p in found):
            return []
        return (
            found[0] if len(found) == 1 else [f"{where}: Input does not match any of the types the SDK takes"]
        )
    return _problems(value, hint, where, depth)


def _problems(value: Any, hint: Any, where: str, depth: int) -> list[str]:
    origin = get_origin(hint)
    if hint is Any or hint is object:
        return []
    if origin is Literal:
        ok = any(value == v and type(value) is type(v) for v in get_args(hint))
        return [] if ok else [f"{where}: Input should be {' or '.join(map(repr, get_args(hint)))}"]
    if is_typeddict(hint):
        return _object(value, hint, where, depth)
    if hint is type(None):
        return [] if value is None else [f"{where}: Input should be null"]
    if hint in (str, int, float, bool):
        return [] if _scalar(value, hint) else [f"{where}: Input should be a valid {hint.__name__}"]
    if hint in SEQUENCES or origin in SEQUENCES:
        if not isinstance(value, list):
            return [f"{where}: Input should be a valid list"]
        (item,) = get_args(hint) or (Any,)
        return [p for i, v in enumerate(value) for p in problems(v, item, f"{where}.{i}", depth + 1)]
    if hint in MAPPINGS or origin in MAPPINGS:
        if not isinstance(value, dict):
            return [f"{where}: Input should be a valid dictionary"]
        args = get_args(hint)
        item = args[1] if len(args) == 2 else Any
        return [p for k, v in value.items() for p in problems(v, item, f"{where}.{k}", depth + 1)]
    return []  # a type of the SDK's own (file uploads, dates): not checked here


def _scalar(value: Any, hint: type) -> bool:
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _object(value: Any, typed_dict: type, where: str, depth: int) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: Input should be a valid dictionary"]
    fields = fields_of(typed_dict)
    prefix = f"{where}." if where else ""
    out = [f"{prefix}{key}: Field required" for key in sorted(required_of(typed_dict) - value.keys())]
    for key, item in value.items():
        if key not in fields:
            out.append(f"{prefix}{key}: Extra inputs are not permitted")
        else:
            out += problems(item, fields[key], f"{prefix}{key}", depth + 1)
    return out


def hint_at(root: Any, body: Any, path: Sequence[str | int]) -> tuple[Any, Any] | None:
    """The SDK's type for the value at ``path`` of ``body`` (walked from the type ``root``), and that
    value; None when the SDK declares nothing there."""
    hint, value = root, body
    for part in path:
        options = members(hint)
        chosen = member_for(hint, value) if len(options) > 1 else options[0]
        if chosen is None:
            typed = [m for m in options if is_typeddict(m)]
            listed = [m for m in options if m in SEQUENCES or get_origin(m) in SEQUENCES]
            chosen = (typed or listed or [None])[0] if isinstance(part, str) and typed else None
            if chosen is None and isinstance(part, int) and listed:
                chosen = listed[0]
        if chosen is None:
            return None
        if isinstance(part, int):
            if not isinstance(value, list) or not 0 <= part < len(value):
                return None
            args = get_args(chosen)
            hint, value = (unwrap(args[0]) if args else Any), value[part]
        else:
            if not is_typeddict(chosen) or not isinstance(value, dict) or part not in fields_of(chosen):
                return None
            hint, value = fields_of(chosen)[part], value.get(part)
    return hint, value
