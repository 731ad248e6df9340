"""Free text on its way to a terminal: every character a terminal could act on, shown as text.

Error texts from a server, job and file names, tool output: any of them may carry escape sequences
(``ESC]0;`` sets the window title, ``ESC]8;;`` makes a link, ``ESC[A`` moves the cursor up) or
characters that reorder the line (bidi overrides). :func:`printable` turns each into a visible
``\\x1b``-style escape, so what reaches the operator's terminal is only what the runner itself styles.
It does not protect against rich markup: pass its result to rich as a ``Text`` or through
``rich.markup.escape``.
"""

from __future__ import annotations

# C0 controls, DEL, C1 controls; the bidi embeddings, overrides and isolates; the line and paragraph
# separators; and lone surrogates (a file name that was not UTF-8), which a UTF-8 stream cannot encode
_UNSAFE = [
    *range(0x00, 0x20),
    0x7F,
    *range(0x80, 0xA0),
    0x061C,
    0x200E,
    0x200F,
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
    0x2028,
    0x2029,
    *range(0xD800, 0xE000),
]


def _shown(code: int) -> str:
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


_ONE_LINE = {code: _shown(code) for code in _UNSAFE}
_LINES = {**_ONE_LINE, ord("\n"): "\n"}
_TAB_AND_LINES = {**_LINES, ord("\t"): "\t"}


def printable(text: object, one_line: bool = True, tabs: bool = False) -> str:
    """``text`` (``str()`` of it) with every control character escaped as ``\\xNN`` (``\\uNNNN`` above
    0xff): C0 (a newline too, unless ``one_line`` is false; a tab only when ``tabs``), DEL, C1, bidi
    controls, U+2028/2029 and lone surrogates. Everything else is left as it is."""
    return str(text).translate(_ONE_LINE if one_line else _TAB_AND_LINES if tabs else _LINES)


_JSON_UNSAFE = {code: f"\\u{code:04x}" for code in _UNSAFE if code >= 0x7F}


def json_printable(document: str) -> str:
    """A JSON text from ``json.dumps(..., ensure_ascii=False)`` with what such a dump leaves raw but a
    terminal could act on (DEL, C1, bidi controls, U+2028/2029, lone surrogates) as ``\\uNNNN``
    escapes: the same JSON value, safe to print. (``json.dumps`` escapes C0 itself, and these
    characters can only occur inside strings.)"""
    return document.translate(_JSON_UNSAFE)
