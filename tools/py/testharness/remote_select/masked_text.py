"""A file's text as lexical.py reads it: strings and comments masked (pure: `re` only).

Strings and comments are found first (one scan); the rest works on a *masked* copy where
comments are blanks and every string is \x01 plus blanks (offsets and line breaks kept;
prefix letters stay), so nothing inside a string or a comment is mistaken for code. Read
off that copy: where a block ends (by indentation), the digest of a piece of code
(blank-insensitive; its strings verbatim), and the names it may call (every name followed
by `(`, `,` or `)`, decorator names, and what the fields of its f-strings call).
"""

from __future__ import annotations

import hashlib
import re
from bisect import bisect_left, bisect_right

# Every pattern starts with a literal or a small set of characters, which the regex engine
# skips to fast. Strings start at their quote; prefixes (r, b, f, u) are read in `mask`.
# No group around the comment branch: a branch starting with a group hides the set of first
# characters from `re`, which then tries every position (2.5x slower on transformers).
TOKENS = re.compile(
    r"""\#[^\n]*
    |'''[^'\\]*(?:(?:\\.|'(?!''))[^'\\]*)*'''
    |\"\"\"[^"\\]*(?:(?:\\.|"(?!""))[^"\\]*)*\"\"\"
    |'[^'\\\n]*(?:\\.[^'\\\n]*)*'
    |"[^"\\\n]*(?:\\.[^"\\\n]*)*\"""",
    re.X | re.S,
)
_PREFIX = frozenset("rRbBuUfF")
# Names followed by ( , or ): matched in the reversed text, where the pattern starts with
# that punctuation; `def f(` and `class C(` read "( f fed" and "( C ssalc" there. The text is
# read with `,` and `)` turned into `(` (`backwards`), so the pattern starts with one literal
# character, which `re` finds several times faster than one of a set.
_CALLS_REVERSED = re.compile(r"\([ \n]*+(\w++)(?<![0-9])(?! +fed\b)(?! +ssalc\b)")  # not a number
_TO_PAREN = str.maketrans(",)", "((")
# The last name of a decorator's dotted name (`@a . b` reads b). No possessive quantifier nor
# atomic group around a group: CPython 3.11.0-3.11.4 (and Debian 12's 3.11.2 before +deb12u9)
# leave the position where an iteration failed after a possessive group (gh-100061, gh-106052),
# and `(?:\w++[ \n]*+\.[ \n]*+)*+` read `@property` + a new line as nothing there. The greedy group
# matches as a possessive one would: its last name may not be followed by a dot, so no match
# gives back an iteration (possessive repeats of one character are safe everywhere).
_DECORATOR = re.compile(r"@[ \n]*+(?:\w++[ \n]*+\.[ \n]*+)*(\w++)(?![ \n]*\.)")
_OPEN = "([{"
_CLOSE = ")]}"
_BLANKS = bytes(10 if b == 10 else 32 for b in range(256))  # bytes.translate: line breaks kept, the rest blank
_NOT_BRACKETS = bytes(b for b in range(256) if chr(b) not in _OPEN + _CLOSE)  # bytes.translate deletes these


def backwards(text: str) -> str:
    """`text` as _CALLS_REVERSED reads it."""
    return text[::-1].translate(_TO_PAREN)


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


class MaskedText:
    """The masked text and the string literals of one file."""

    def __init__(self, text: str, masked: str, strings: list[tuple[int, int, str]]):
        self.text = text
        self.masked = masked
        self.strings = strings  # (start, end, token) in order
        columns = list(zip(*strings, strict=True)) or [(), (), ()]
        self.starts: tuple[int, ...] = columns[0]
        self.tokens: tuple[str, ...] = columns[2]
        # What the fields of f-strings call (masked away with the string).
        self.fields = [(s, _field_names(tok)) for s, _, tok in strings if "{" in tok and _is_f(tok)]
        self.field_starts = [s for s, _ in self.fields]

    def names(self, calls_text: str, reversed_text: str, spans: list[tuple[int, int]]) -> set[str]:
        """Names the code in `spans` of `calls_text` may call (f-string fields included).
        One span (a function body) is read in place in `reversed_text`, backwards(calls_text)
        made once per file; many (the gaps between bodies) are joined and read in one go."""
        if len(spans) == 1:
            a, b = spans[0]
            n = len(calls_text)
            out = _unreverse(set(_CALLS_REVERSED.findall(reversed_text, n - b, n - a)))
            if calls_text.find("@", a, b) >= 0:
                out.update(_DECORATOR.findall(calls_text, a, b))
        else:
            out = called_names("\n".join(calls_text[a:b] for a, b in spans))
        if self.fields:
            for a, b in spans:
                i = bisect_right(self.field_starts, a - 1)
                while i < len(self.fields) and self.fields[i][0] < b:
                    out |= self.fields[i][1]
                    i += 1
        return out

    def digest(self, spans: list[tuple[int, int]]) -> str:
        """Digest of the code in `spans` (blank-insensitive) and its strings (verbatim)."""
        masked, starts, tokens = self.masked, self.starts, self.tokens
        code = masked[spans[0][0] : spans[0][1]] if len(spans) == 1 else "\0".join(masked[a:b] for a, b in spans)
        # The string tokens starting in each span: one slice of the sorted list per span.
        inside = [tok for a, b in spans for tok in tokens[bisect_left(starts, a) : bisect_left(starts, b)]]
        code = "\n".join(filter(None, map(str.rstrip, code.split("\n"))))  # trailing blanks, blank lines
        return _digest(code + "\0" + "\0".join(inside))

    def line_end(self, pos: int) -> int:
        """Offset of the start of the line after `pos`'s line."""
        k = self.masked.find("\n", pos)
        return k + 1 if k >= 0 else len(self.masked)

    def block_end(self, header_end: int, indent: int) -> int:
        """Where a block whose header ends at `header_end` ends: the first later line that
        is indented no deeper than `indent` and is not blank."""
        pattern = _DEDENT.get(indent)
        if pattern is None:
            pattern = _DEDENT[indent] = re.compile(rf"\n[ ]{{0,{indent}}}+(?=[^ \n])")  # possessive: no retries
        pos = self.line_end(header_end)
        m = pattern.search(self.masked, pos - 1) if pos < len(self.masked) else None
        return m.start() + 1 if m else len(self.masked)


_DEDENT: dict[int, re.Pattern[str]] = {}


def _is_f(tok: str) -> bool:
    return "f" in tok[:2].lower() and tok[:1] not in "'\""


FLAT_FIELD = re.compile(r"\{[^{}]*\}")
_FIELD = re.compile(r"\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}")  # a field, with fields nested one deep


def _field_names(tok: str) -> set[str]:
    """Names called in an f-string's fields; its literal text is no code. Fields nested
    deeper than `_FIELD` reads: the whole string is scanned (a superset)."""
    if "\t" in tok:  # a tab in a field is a blank there, as a space (the file reached here)
        tok = tok.replace("\t", " ")
    fields = _FIELD.findall(tok)  # `{{x}}` (literal braces) reads as a field: a superset
    if "{" in _FIELD.sub("", tok):
        return called_names(tok)
    return called_names("\n".join(fields))


def mask(text: str) -> MaskedText | None:
    """The masked text of `text`, or None where a quote, a backslash or a bracket is left
    unmatched in code (the caller then parses the file with `ast`)."""
    strings: list[tuple[int, int, str]] = []
    append = strings.append

    def blank(m: re.Match[str]) -> str:
        # Called once per string and comment of a file: kept cheap.
        tok = m.group()
        start, end = m.span()
        if tok[0] == "#":
            return " " * (end - start)
        k = start  # a string: its prefix letters (not the end of a name) belong to it
        if k and text[k - 1] in _PREFIX:
            while start - k < 2 and k > 0 and text[k - 1] in _PREFIX:
                k -= 1
            if k > 0 and (text[k - 1].isalnum() or text[k - 1] == "_"):
                k = start
            append((k, end, text[k:end]))
        else:
            append((k, end, tok))
        if "\n" in tok:
            if tok.isascii():  # one pass in C (most docstrings)
                return "\x01" + tok.encode().translate(_BLANKS).decode()[1:]
            return "\x01" + "\n".join(" " * len(part) for part in tok.split("\n"))[1:]
        return "\x01" + " " * (end - start - 1)

    # Strings become \x01 and blanks (line breaks kept), so a quote left is one no pattern matched.
    masked = TOKENS.sub(blank, text)
    if "'" in masked or '"' in masked:
        return None
    if "\\" in masked:
        masked = masked.replace("\\\n", "  ")  # a backslash in code only continues a line
        if "\\" in masked:
            return None
    brackets = masked.encode().translate(None, _NOT_BRACKETS)  # the brackets alone (UTF-8 keeps ASCII bytes)
    if any(brackets.count(o) != brackets.count(c) for o, c in zip(_OPEN.encode(), _CLOSE.encode(), strict=True)):
        return None
    return MaskedText(text, masked, strings)


def _unreverse(found: set[str]) -> set[str]:
    """Reversed names turned back at once: joined, reversed, split (no Python step per name)."""
    return set("\n".join(found)[::-1].split("\n")) if found else set()


def called_names(text: str) -> set[str]:
    """Names `text` (masked code) may call: followed by `(`, `,` or `)`, and decorators'."""
    out = _unreverse(set(_CALLS_REVERSED.findall(backwards(text))))
    if "@" in text:
        out.update(_DECORATOR.findall(text))
    return out
