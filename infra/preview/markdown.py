"""Values written into Markdown that a pull request's comment shows (the preview report, the
diff, the storage section). Names, levels, URNs, messages and values come from the program,
its charts and the policy pack, which a pull request (a fork's too) may change: none may
start HTML (a tag, a comment), end a table cell or row, or become a link, emphasis or code
of its own. A mention (@team) or a bare URL is left as GitHub shows it."""

from __future__ import annotations

import html
import re
from typing import Any

MARKDOWN_VALUE = 1_000  # characters of one value; the JSON report has every one whole
# What Markdown reads inline in text (`\` first: it escapes the rest). `<`, `>` and `&` are
# HTML's and are written as entities; `$` starts GitHub's math.
_MARKDOWN_PUNCTUATION = re.compile(r"[\\`*_\[\]|~$]")
# What ends a code span or a table cell, or reads as HTML to another reader of the text.
_NOT_IN_CODE_SPAN = re.compile(r"[`|<>&\\]")


def _one_line(value: Any, limit: int) -> str:
    text = " ".join(str(value).split())  # newlines (and any other whitespace run) are one space
    return text if len(text) <= limit else text[: limit - 1] + "…"


def md_text(value: Any, limit: int = MARKDOWN_VALUE) -> str:
    """A value as inline Markdown that shows as written, on one line: safe in a table cell,
    a list item, a heading or a <summary>."""
    return html.escape(_MARKDOWN_PUNCTUATION.sub(r"\\\g<0>", _one_line(value, limit)), quote=False)


def md_code(value: Any, limit: int = MARKDOWN_VALUE) -> str:
    """A value as inline code, on one line: a code span (whose text Markdown shows as it is)
    where nothing in it would end the span or the table cell, else HTML <code> around
    md_text (as GitHub reads Markdown inside it)."""
    text = _one_line(value, limit)
    if text and not _NOT_IN_CODE_SPAN.search(text):
        return f"`{text}`"
    return f"<code>{md_text(text, limit)}</code>"
