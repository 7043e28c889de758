"""Typed records of every format remote-aware selection keeps or receives (pure: stdlib only).

Each record has a `parse_*` function that turns the JSON form (as stored in the map and
state files, or as a Ray worker answers) into the record, raising `RecordError` with a
one-line reason on malformed input, and a formatter back to JSON. The JSON forms are those
of state version 3 and map version 4 (version 5 only adds references that 4 did not find),
so files written before these records existed stay valid:

  import reference   "i:a.b" | "f:<level>:<module>:<n1>,<n2>" | "s:a.b.C" | "p:dir/x.py"
  function facts     [qualified name, body digest, kind, [names called]]
  parsed file        {"refs": [...], "skel": digest, "top": [names], "funcs": [facts...]}
  reach entry        "path" | "@path" | "path::Qual.name" | "path::Qual.name#digest"
  actor report       {"units": ["path::Qual.name", ...], "escaped": bool}
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple


class RecordError(ValueError):
    """A stored or received record is malformed (the message is one line)."""


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise RecordError(f"{what} must be a non-empty string, got {value!r}")
    return value


def _str_list(value: Any, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RecordError(f"{what} must be a list of strings, got {value!r}")
    return tuple(value)


# -- import references (graph.py) --------------------------------------------------------
# Frozen dataclasses, not NamedTuples: `ImportRef("a.b")` must differ from `DottedString("a.b")`.
@dataclass(frozen=True, slots=True)
class ImportRef:
    """`import a.b.c`."""

    module: str


@dataclass(frozen=True, slots=True)
class FromImportRef:
    """`from <level dots><module> import <names>` (module "" for `from . import x`)."""

    level: int
    module: str
    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DottedString:
    """A string literal naming a module or `module.Class` (`module:Class` is stored dotted)."""

    dotted: str


@dataclass(frozen=True, slots=True)
class PathString:
    """A string literal that looks like a Python file path ("dir/x.py")."""

    path: str


Ref = ImportRef | FromImportRef | DottedString | PathString


def parse_ref(text: Any) -> Ref:
    kind, sep, body = _str(text, "an import reference").partition(":")
    if sep and body:
        if kind == "i":
            return ImportRef(body)
        if kind == "s":
            return DottedString(body)
        if kind == "p":
            return PathString(body)
        if kind == "f":
            level, sep1, rest = body.partition(":")
            module, sep2, names = rest.partition(":")
            if sep1 and sep2 and level.isdigit() and (module or int(level)):
                return FromImportRef(int(level), module, tuple(n for n in names.split(",") if n))
    raise RecordError(f"malformed import reference {text!r}")


def format_ref(ref: Ref) -> str:
    if isinstance(ref, ImportRef):
        return f"i:{ref.module}"
    if isinstance(ref, FromImportRef):
        return f"f:{ref.level}:{ref.module}:{','.join(ref.names)}"
    if isinstance(ref, DottedString):
        return f"s:{ref.dotted}"
    return f"p:{ref.path}"


# -- parsed files (graph.py, import_time.py), cached by content digest --------------------
CALL_TIME, ALWAYS, OWN_BODY = 0, 1, 2  # function kinds (import_time.py says what they mean)


class FunctionFacts(NamedTuple):
    qualname: str  # "Class.method", "function"
    body_digest: str
    kind: int  # CALL_TIME | ALWAYS | OWN_BODY
    calls: tuple[str, ...]  # names called in the body


class ImportFacts(NamedTuple):
    """What import_time.py needs of one file."""

    skel: str  # digest of the file with every function body removed
    top: tuple[str, ...]  # names called (or used as decorators) at import time
    funcs: tuple[FunctionFacts, ...]


class ParsedFile(NamedTuple):
    refs: tuple[Ref, ...]
    facts: ImportFacts


def _function_facts(value: Any) -> FunctionFacts:
    if not isinstance(value, list) or len(value) != 4:
        raise RecordError(f"function facts must be [name, digest, kind, calls], got {value!r}")
    qualname, digest, kind, calls = value
    if kind not in (CALL_TIME, ALWAYS, OWN_BODY) or isinstance(kind, bool):
        raise RecordError(f"function kind must be 0, 1 or 2, got {kind!r}")
    return FunctionFacts(
        _str(qualname, "a function name"), _str(digest, "a body digest"), kind, _str_list(calls, "calls")
    )


def parse_parsed_file(value: Any) -> ParsedFile:
    if not isinstance(value, dict):
        raise RecordError(f"a parsed file must be an object, got {type(value).__name__}")
    try:
        refs, skel, top, funcs = value["refs"], value["skel"], value["top"], value["funcs"]
    except KeyError as exc:
        raise RecordError(f"a parsed file lacks {exc.args[0]!r}") from None
    if not isinstance(refs, list) or not isinstance(funcs, list):
        raise RecordError("a parsed file's refs and funcs must be lists")
    facts = ImportFacts(_str(skel, "skel"), _str_list(top, "top"), tuple(_function_facts(f) for f in funcs))
    return ParsedFile(tuple(parse_ref(r) for r in refs), facts)


def parsed_file_to_json(parsed: ParsedFile, *, tuples: bool = False) -> dict[str, Any]:
    """The JSON form; with `tuples`, names and function facts stay the tuples they are, which
    `json` writes as the same arrays (no list built per function: a large tree has 40,000)."""
    facts = parsed.facts
    refs = [format_ref(r) for r in parsed.refs]
    if tuples:
        return {"refs": refs, "skel": facts.skel, "top": facts.top, "funcs": facts.funcs}
    funcs = [[f.qualname, f.body_digest, f.kind, list(f.calls)] for f in facts.funcs]
    return {"refs": refs, "skel": facts.skel, "top": list(facts.top), "funcs": funcs}


# -- reach entries (reach.py -> engine.py -> state file) ----------------------------------
@dataclass(frozen=True, slots=True)
class SentModule:
    """A module sent to Ray whole: any change in its import closure counts."""

    path: str


@dataclass(frozen=True, slots=True)
class ActorModule:
    """A traced actor's module: only import-time changes in its closure count."""

    path: str


@dataclass(frozen=True, slots=True)
class RanFunction:
    """A function that ran in a traced actor; `digest` is its body digest once stored
    (None as the recorder reports it)."""

    path: str
    qualname: str
    digest: str | None = None


ReachEntry = SentModule | ActorModule | RanFunction


def parse_reach_entry(text: Any) -> ReachEntry:
    text = _str(text, "a reach entry")
    if text.startswith("@"):
        if len(text) > 1 and "::" not in text:
            return ActorModule(text[1:])
    elif "::" in text:
        path, _, rest = text.partition("::")
        qualname, sep, digest = rest.partition("#")
        if path and qualname and (not sep or digest):
            return RanFunction(path, qualname, digest if sep else None)
    elif "#" not in text:
        return SentModule(text)
    raise RecordError(f"malformed reach entry {text!r}")


def parse_stored_reach(entries: Any) -> tuple[ReachEntry, ...]:
    """A reach as the state file keeps it: every function carries its body digest."""
    out = tuple(parse_reach_entry(e) for e in _str_list(entries, "a reach"))
    for entry in out:
        if isinstance(entry, RanFunction) and entry.digest is None:
            raise RecordError(f"stored reach entry {format_reach_entry(entry)!r} lacks its digest")
    return out


def format_reach_entry(entry: ReachEntry) -> str:
    if isinstance(entry, SentModule):
        return entry.path
    if isinstance(entry, ActorModule):
        return "@" + entry.path
    tail = f"#{entry.digest}" if entry.digest is not None else ""
    return f"{entry.path}::{entry.qualname}{tail}"


def format_reach(entries: Iterable[ReachEntry]) -> list[str]:
    """Sorted text form (what crosses xdist and is stored)."""
    return sorted({format_reach_entry(e) for e in entries})


def sorted_reach(entries: Iterable[ReachEntry]) -> tuple[ReachEntry, ...]:
    """One order for equal reaches (that of their text form), so records compare equal."""
    return tuple(sorted(set(entries), key=format_reach_entry))


# -- actor reports (worker_trace.py's `drain` answer) ------------------------------------
class ActorReport(NamedTuple):
    units: tuple[RanFunction, ...]  # functions that started running since the last report
    escaped: bool  # project code there started a process or sent Ray work


def parse_actor_report(value: Any) -> ActorReport:
    if not isinstance(value, dict) or not isinstance(value.get("escaped", False), bool):
        raise RecordError(f"an actor report must be {{'units': [...], 'escaped': bool}}, got {value!r}")
    units = []
    for text in _str_list(value.get("units"), "an actor report's units"):
        entry = parse_reach_entry(text)
        if not isinstance(entry, RanFunction) or entry.digest is not None:
            raise RecordError(f"an actor report's unit must be 'path::Qual.name', got {text!r}")
        units.append(entry)
    return ActorReport(tuple(units), bool(value.get("escaped", False)))
