"""What the selector needs from a file, read without building an `ast` (pure: `re` only).

`ast.parse` builds a Python object per node: on a large real tree (transformers: 2,900
files, 53 MB) it is most of a cold map build. This reader finds the same facts with a few
regular expressions over the text, and is conservative wherever it is not exact:

  * strings and comments are found first (one scan); the rest works on a *masked* copy
    where comments are blanks and every string is \x01 plus blanks (offsets and line
    breaks kept; prefix letters stay), so nothing inside a string or a comment is mistaken
    for code (masked_text.py);
  * references: every `import` / `from ... import` (also inside functions and after `;`),
    every string literal naming a dotted module or a .py path (adjacent literals are also
    joined, f-strings split at their fields), relative `import_module(".x", package=...)`;
    imports and strings inside an `if TYPE_CHECKING:` block are left out, as in parsing.py;
  * functions: `def` headers at module level, in class bodies and in compound statements
    (not inside other functions), by indentation: a body ends at the first line indented no
    deeper than its `def`. A body that ends too early only moves code into the skeleton,
    which counts as import-time code: more tests selected, never fewer;
  * the names a piece of code may call: every name followed by `(` (a call) or by `,`/`)`
    (an argument, as `map(f, xs)`; in a def or class header only inside a call), and
    decorator names: a superset of import_time.py's;
  * digests: comments, trailing blanks and blank lines do not count; string contents
    count verbatim.

`read` returns None when the text is not one it can read safely (not UTF-8, tabs or form
feeds in indentation, a lone carriage return, a quote or bracket left unmatched): the
caller parses that file with `ast`.
"""

from __future__ import annotations

import ast
import re

from .masked_text import FLAT_FIELD, TOKENS, MaskedText, backwards, called_names, mask
from .records import (
    ALWAYS,
    CALL_TIME,
    OWN_BODY,
    DottedString,
    FromImportRef,
    FunctionFacts,
    ImportFacts,
    ImportRef,
    ParsedFile,
    PathString,
    Ref,
)

_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?::[A-Za-z_]\w*)?\Z")
_PYPATH = re.compile(r"[\w.\-/]+\.py\Z")
_IMPLICIT = frozenset({"__init_subclass__", "__set_name__", "__class_getitem__", "__getattr__", "__dir__"})
_PLAIN = re.compile(
    r"""(["'])[\w.:/\\-]*\1|(\"\"\"|''')[\w.:/\\-]*\2"""
)  # a string that may name a module (escapes: read later)
_FROM_IMPORT = re.compile(r"from(?=[\s.])\s*((?:\.\s*)*)([\w.]*)\s+import\b\s*(\([^)]*\)|[^\n;]*)")
_IMPORT = re.compile(r"import\s+([^\n;]+)")
_TYPE_CHECKING = re.compile(r"([ ]*)(?:el)?if[ (]*(?:[\w.]+\.)?TYPE_CHECKING[ )]*:[ ]*")  # a whole line
_DEF = re.compile(r"def[ ]+(\w+)")
_CLASS = re.compile(r"class[ ]+(\w+)")
_IMPORT_MODULE = re.compile(
    r"import_module\s*\(\s*\"([^\"]*)\"\s*(?:,\s*(?:package\s*=\s*)?(?:\"([^\"]*)\"|(__package__)))?"
)


def read(source: bytes) -> ParsedFile | None:
    """References and import-time facts of one file, or None: parse it with `ast`."""
    try:
        text = source.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if text.startswith("\ufeff"):
        text = text[1:]
    if "\r" in text:
        text = text.replace("\r\n", "\n")
        if "\r" in text:
            return None
    if "\f" in text:
        return None
    t = mask(text)
    if t is None or "\t" in t.masked:
        return None  # tabs in code (indentation is not measured here); in strings and comments harmless
    excluded = _type_checking_blocks(t)
    refs, import_spans = _refs(t, excluded)
    calls_text = _blank(t.masked, import_spans)
    return ParsedFile(refs, _facts(t, calls_text))


def _type_checking_blocks(t: MaskedText) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    if "TYPE_CHECKING" not in t.masked:
        return out
    masked = t.masked
    pos = masked.find("TYPE_CHECKING")
    while pos >= 0:
        start = masked.rfind("\n", 0, pos) + 1
        end = masked.find("\n", pos)
        end = len(masked) if end < 0 else end
        m = _TYPE_CHECKING.fullmatch(masked, start, end)
        if m is not None:
            out.append((end, t.block_end(end, len(m.group(1)))))
        pos = masked.find("TYPE_CHECKING", end)
    return out


def _inside(pos: int, spans: list[tuple[int, int]]) -> bool:
    for a, b in spans:
        if a <= pos < b:
            return True
    return False


def _blank(masked: str, spans: list[tuple[int, int]]) -> str:
    if not spans:
        return masked
    pieces = []
    pos = 0
    for a, b in spans:
        pieces.append(masked[pos:a])
        pieces.append("\n".join(" " * len(line) for line in masked[a:b].split("\n")))
        pos = b
    pieces.append(masked[pos:])
    return "".join(pieces)


def _refs(t: MaskedText, excluded: list[tuple[int, int]]) -> tuple[tuple[Ref, ...], list[tuple[int, int]]]:
    refs: dict[Ref, None] = {}
    spans: list[tuple[int, int]] = []
    masked = t.masked
    found: list[tuple[int, Ref]] = []  # in the order of the file, as `ast` finds them
    for m in _FROM_IMPORT.finditer(masked):
        if not _keyword_at(masked, m.start()):
            continue
        spans.append(m.span())
        if excluded and _inside(m.start(), excluded):
            continue
        level = m.group(1).count(".")
        names = tuple(n.split()[0] for n in m.group(3).strip().strip("()").split(",") if n.split())
        found.append((m.start(), FromImportRef(level, m.group(2), names)))
    from_spans = list(spans)
    j = 0
    for m in _IMPORT.finditer(masked):
        start = m.start()
        while j < len(from_spans) and from_spans[j][1] <= start:
            j += 1
        if (j < len(from_spans) and from_spans[j][0] <= start) or not _keyword_at(masked, start):
            continue  # the `import` of a from-import, or the end of a longer name
        spans.append(m.span())
        if excluded and _inside(start, excluded):
            continue
        for part in m.group(1).split(","):
            words = part.split()
            if words:
                found.append((start, ImportRef(words[0])))
    spans.sort()
    found.sort(key=lambda pair: pair[0])
    refs.update((ref, None) for _, ref in found)
    _string_refs(t, excluded, refs)
    if "import_module" in t.text:
        _relative_import_modules(t, refs)
    return tuple(refs), spans


def _keyword_at(masked: str, pos: int) -> bool:
    """The word at `pos` is not the end of a longer name or an attribute (`x.from_`, `reimport`)."""
    return pos == 0 or not (masked[pos - 1].isalnum() or masked[pos - 1] in "_.")


def _string_value(tok: str, prefix: str) -> list[str]:
    """The values a string token may contribute: the whole (non-f) string, or an
    f-string's literal parts (and strings inside its fields)."""
    low = prefix.lower()
    body = tok[len(prefix) :]
    q = 3 if body[:3] in ('"""', "'''") else 1
    body = body[q:-q]
    if "b" in low:
        return []
    if "f" in low:
        parts = FLAT_FIELD.split(body)
        inner = [v for m in TOKENS.finditer(body) if m.group()[0] != "#" for v in _string_value(m.group(), "")]
        return parts + inner
    if "\\" in body and "r" not in low:
        try:
            value = ast.literal_eval(tok)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return [body]
        return [value] if isinstance(value, str) else []
    return [body]


def _add_string(value: str, refs: dict[Ref, None]) -> None:
    if 2 < len(value) < 200 and "." in value:  # both patterns need a dot
        if _DOTTED.match(value):
            refs[DottedString(value.replace(":", "."))] = None
        elif _PYPATH.match(value):
            refs[PathString(value)] = None


def _string_refs(t: MaskedText, excluded: list[tuple[int, int]], refs: dict[Ref, None]) -> None:
    masked = t.masked
    run: list[str] = []  # values of adjacent literals, joined as Python joins them
    last_end = -1
    for start, end, tok in t.strings:
        if excluded and _inside(start, excluded):
            continue
        if tok[0] in "'\"":  # no prefix (most strings)
            prefix = ""
        else:
            head = tok[:3]
            prefix = head[: len(head) - len(head.lstrip("rRbBuUfF"))]
        plain = " " not in tok and _PLAIN.fullmatch(tok, len(prefix))  # (a space: no need to ask `re`)
        if len(tok) > 210 + len(prefix) or not ("f" in prefix or "F" in prefix or plain):
            run = []  # no name nor path can be in it, nor in a join with it
            last_end = end
            continue
        values = _string_value(tok, prefix)
        if "." in tok or "\\" in tok or prefix:  # else no value has a dot: only a join may name something
            for v in values:
                _add_string(v, refs)
        adjacent = last_end >= 0 and not masked[last_end:start].strip()
        if not adjacent:
            run = []
        if "b" not in prefix.lower():
            if "f" in prefix.lower() or len(values) != 1:
                run = []  # an f-string's fields break the join: its parts stand alone
            else:
                if run:
                    run = [r + values[0] for r in run]
                    for v in run:
                        _add_string(v, refs)
                run = run + [values[0]] if run else [values[0]]
        last_end = end


def _relative_import_modules(t: MaskedText, refs: dict[Ref, None]) -> None:
    """`import_module(".x", package="a.b")` / `import_module(".x", __package__)`, as
    parsing._relative_import_module (strings of either quote; code only)."""
    text = t.text.replace("'", '"')
    for m in _IMPORT_MODULE.finditer(text):
        # Not in a comment or a string, nor the end of a longer name (the pattern's `\b`, checked
        # here: a pattern starting with `\b` makes `re` try every position).
        start = m.start()
        if not t.masked.startswith("import_module", start) or (
            start and (text[start - 1].isalnum() or text[start - 1] == "_")
        ):
            continue
        name, package, own = m.group(1), m.group(2), m.group(3)
        if not name.startswith("."):
            continue
        rest = name.lstrip(".")
        level = len(name) - len(rest)
        if rest and not all(part.isidentifier() for part in rest.split(".")):
            continue
        if own:
            refs[FromImportRef(level, rest, ())] = None
        elif package:
            base = package.split(".")
            if level - 1 < len(base):
                refs[ImportRef(".".join(base[: len(base) - (level - 1)] + ([rest] if rest else [])))] = None


def _headers(masked: str) -> list[tuple[int, int, int, bool, str]]:
    """def and class statements that start a line, in order: (line start, indent, end of
    the name, is a def, name)."""
    out = []
    for pattern, is_def in ((_DEF, True), (_CLASS, False)):
        for m in pattern.finditer(masked):
            start = m.start()
            if not _keyword_at(masked, start):
                continue
            line = masked.rfind("\n", 0, start) + 1
            lead = masked[line:start]
            word = lead.strip(" ")
            if word and not (is_def and word == "async"):
                continue
            out.append((line, len(lead) - len(lead.lstrip(" ")), m.end(), is_def, m.group(1)))
    out.sort()
    return out


def _header_end(masked: str, pos: int) -> int:
    """Offset just past the `:` that ends a def/class header starting at `pos`: the first
    colon outside brackets."""
    depth = 0
    count = masked.count
    while True:
        colon = masked.find(":", pos)
        if colon < 0:
            return len(masked)
        depth += count("(", pos, colon) + count("[", pos, colon) + count("{", pos, colon)
        depth -= count(")", pos, colon) + count("]", pos, colon) + count("}", pos, colon)
        if depth == 0:
            return colon + 1
        pos = colon + 1


def _header_names(header: str) -> set[str]:
    """Names a def/class header may call. Its own parentheses hold parameters, defaults and
    base classes, which are no calls: with no other parenthesis there is nothing to add;
    with one, every name that may be called or passed (a superset)."""
    return called_names(header) if header.count("(") > 1 else set()


def _facts(t: MaskedText, calls_text: str) -> ImportFacts:
    masked = t.masked
    reversed_text = backwards(calls_text)
    funcs: list[FunctionFacts] = []
    bodies: list[tuple[int, int]] = []
    cuts: list[tuple[int, int]] = []  # bodies and headers: not scanned as top-level code
    top: set[str] = set()
    classes: list[tuple[int, int, str]] = []  # (body start, body end, qualified prefix)
    has_fixture = "fixture" in t.text
    for start, indent, name_end, is_def, name in _headers(masked):
        if bodies and start < bodies[-1][1]:
            continue  # inside a function body: part of that function
        while classes and start >= classes[-1][1]:
            classes.pop()
        prefix = classes[-1][2] if classes else ""
        colon = _header_end(masked, name_end)
        top |= _header_names(calls_text[name_end:colon])
        cuts.append((name_end, colon))
        end = max(t.block_end(colon, indent), colon)
        if not is_def:  # a class: its body holds methods
            classes.append((colon, end, f"{prefix}{name}."))
            continue
        bodies.append((colon, end))
        cuts.append((colon, end))
        if name.startswith("pytest_") or name in _IMPLICIT:
            kind = ALWAYS
        elif has_fixture and "fixture" in _decorators(t, start, indent):  # as ast.unparse: strings too
            kind = OWN_BODY
        else:
            kind = CALL_TIME
        calls = tuple(sorted(t.names(calls_text, reversed_text, [(colon, end)])))
        funcs.append(FunctionFacts(prefix + name, t.digest([(colon, end)]), kind, calls))
    top |= t.names(calls_text, reversed_text, _gaps(cuts, len(masked)))
    funcs.sort()
    return ImportFacts(t.digest(_gaps(bodies, len(masked))), tuple(sorted(top)), tuple(funcs))


def _gaps(spans: list[tuple[int, int]], size: int) -> list[tuple[int, int]]:
    """What sorted, disjoint `spans` leave of [0, size)."""
    out = []
    pos = 0
    for a, b in spans:
        out.append((pos, a))
        pos = b
    out.append((pos, size))
    return out


def _decorators(t: MaskedText, def_start: int, indent: int) -> str:
    """The text above a `def` (which starts its line at `def_start`) up to the statement
    before it: its decorators, and maybe more (reading too much only makes a function a
    fixture, whose body then counts as import-time code)."""
    masked = t.masked
    i = def_start
    while i > 0:
        prev = masked.rfind("\n", 0, i - 1) + 1
        line = masked[prev:i]
        stripped = line.lstrip(" ")
        if stripped.strip() and len(line) - len(stripped) <= indent and not stripped.startswith(("@", ")", "]", "}")):
            break
        i = prev
    return t.text[i:def_start]
