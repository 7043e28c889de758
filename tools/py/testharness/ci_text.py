"""Text made safe for what CI shows (pure: no pytest): XML 1.0 for the JUnit file, Markdown and
HTML for GitHub's step summary. A test id is anything a project makes it (pytest's id escaping
can be turned off, a `pytest_make_parametrize_id` hook or a file name can carry control
characters, lone surrogates from undecodable bytes, backticks, HTML): every one is shown as
text, never as markup, and never makes the file unreadable.
"""

from __future__ import annotations

import html
import re

# XML 1.0's Char production: #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF].
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
# Markdown's inline punctuation (emphasis, code, links, images, tables, strike-through,
# GitHub's math), escaped with a backslash; `&`, `<` and `>` become HTML entities instead.
_MARKDOWN = re.compile(r"([\\`*_\[\]|~$!])")


def visible_escape(char: str) -> str:
    """`\\x01`, `\\udcff`: how Python writes the character in a string literal."""
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def xml_safe(text: object) -> str:
    """`text` with every character XML 1.0 forbids (control characters, lone surrogates,
    U+FFFE, U+FFFF) written as its visible escape; ElementTree escapes `&`, `<`, `>` and quotes."""
    return _NOT_XML.sub(lambda m: visible_escape(m.group()), str(text))


def one_line(text: object) -> str:
    """`text` on one line, with no character a file may not hold (lone surrogates, NUL, other
    control characters: their visible escapes)."""
    flat = " ".join(str(text).splitlines())
    return _NOT_XML.sub(lambda m: visible_escape(m.group()), flat.replace("\t", " "))


def md_text(text: object) -> str:
    """`text` as Markdown that shows exactly it, on one line, inside a table cell too: `&<>` as
    entities, Markdown's punctuation (`|` included) behind a backslash."""
    return _MARKDOWN.sub(r"\\\1", html.escape(one_line(text), quote=False))


def md_code(text: object) -> str:
    """`text` as inline code (monospace), shown exactly: an HTML `<code>` element around
    `md_text` (a backtick fence would show `&lt;` as typed, and a `|` still ends a table cell)."""
    return f"<code>{md_text(text)}</code>"


def html_text(text: object) -> str:
    """`text` inside raw HTML (a `<details>` block, where Markdown is not parsed): entities only."""
    return html.escape(one_line(text), quote=True)
