"""What CI shows of a run (pure: no pytest): JUnit XML from a unit-test record, and Markdown
for GitHub's step summary ($GITHUB_STEP_SUMMARY) of unit and functional runs.

Both are made from the files a run leaves, after it ended: the JUnit file therefore holds
every selected test, those whose process died included (their crash cause and stack), which
pytest's own --junitxml, written by the process that died, cannot.
"""

from __future__ import annotations

import json
import math
import os
import stat
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from testharness.atomic_io import write_text_atomic
from testharness.ci_text import html_text, md_code, md_text, xml_safe

SUMMARY_ENV = "GITHUB_STEP_SUMMARY"
# The record's outcome -> the JUnit child element and its message (None: a pass, no child).
# An xfail is skipped, as pytest's junitxml writes it; an xpass passed (a strict xpass is
# recorded as failed: pytest fails it). An outcome JUnit has no word for is an error, never a pass.
_JUNIT_KIND: dict[str, tuple[str, str] | None] = {
    "passed": None,
    "xpassed": None,
    "failed": ("failure", "failed"),
    "error": ("error", "error"),
    "skipped": ("skipped", "skipped"),
    "xfailed": ("skipped", "xfail: expected to fail"),
}
_COUNTER = {"failure": "failures", "error": "errors", "skipped": "skipped"}


def class_and_name(nodeid: str) -> tuple[str, str]:
    """pytest's junit names: `tests.unit.test_x.TestC` and `test_m[p]`; as pytest's own
    junitxml, only the part before the parameters' `[` is split on `::` (`test_x[a::b]` is one name)."""
    path, bracket, params = nodeid.partition("[")
    parts = path.split("::")
    module = parts[0].removesuffix(".py").replace("/", ".")
    return ".".join([module, *parts[1:-1]]), parts[-1] + bracket + params


def junit_xml(record: Mapping[str, Any], suite: str = "unit") -> str:
    """A JUnit XML document (one testsuite) of the record's tests; every text XML-1.0-safe
    (ci_text.xml_safe), the suite's counters those of its testcases' children."""
    tests: Mapping[str, Mapping[str, Any]] = record.get("tests", {})
    total_time = sum(_seconds(t) for t in tests.values())
    root = ET.Element("testsuites")
    el = ET.SubElement(root, "testsuite", name=xml_safe(suite))
    counts: Counter[str] = Counter()
    for nodeid, test in tests.items():
        classname, name = class_and_name(nodeid)
        case = ET.SubElement(
            el, "testcase", classname=xml_safe(classname), name=xml_safe(name), time=f"{_seconds(test):.3f}"
        )
        outcome = str(test.get("outcome"))
        kind, message = _JUNIT_KIND.get(outcome, ("error", outcome)) or (None, "")
        if kind is None:
            continue
        counts[_COUNTER[kind]] += 1
        crash = test.get("crash")
        if isinstance(crash, dict) and crash.get("cause"):
            message += f": {crash['cause']}"
        sub = ET.SubElement(case, kind, message=xml_safe(message))
        if outcome == "xfailed":
            sub.set("type", "pytest.xfail")
        if isinstance(crash, dict) and crash.get("stack"):
            sub.text = xml_safe(crash["stack"])
        elif kind != "skipped":
            attempts = ", ".join(map(str, test.get("attempts", [])))
            sub.text = xml_safe(f"{outcome} (attempts: {attempts}); see the run's log")
    for key, value in {"tests": len(tests), **{c: counts[c] for c in ("failures", "errors", "skipped")}}.items():
        el.set(key, str(value))
    el.set("time", f"{total_time:.3f}")
    el.set("timestamp", xml_safe(record.get("start_time", "")))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _seconds(test: Mapping[str, Any]) -> float:
    try:
        value = float(test.get("duration") or 0.0)
    except (TypeError, ValueError):
        return 0.0
    return value if math.isfinite(value) else 0.0


_NOT_BAD = ("passed", "skipped", "xfailed", "xpassed")  # what the summary's table leaves out


def unit_markdown(record: Mapping[str, Any] | None, last_line: str, summary: Mapping[str, Any] | None) -> str:
    """The unit run's step summary: its last line, counts, selection, what did not pass."""
    out = ["### Unit tests", "", md_text(last_line), ""]
    if record is None:
        return "\n".join([*out, "No results were recorded.", ""])
    tests: Mapping[str, Mapping[str, Any]] = record.get("tests", {})
    counts = Counter(str(t.get("outcome")) for t in tests.values())
    deselected = int((summary or {}).get("deselected") or 0)
    line = ", ".join(f"{n} {o}" for o, n in sorted(counts.items())) or "no test ran"
    out.append(f"{md_text(line)}; {deselected} deselected (by selection: markers, -k, testmon, shards)")
    bad = [(nodeid, t) for nodeid, t in tests.items() if t.get("outcome") not in _NOT_BAD]
    if bad:
        out += ["", "| Test | Outcome | Cause |", "|---|---|---|"]
        for nodeid, t in bad:
            crash = t.get("crash")
            cause = crash.get("cause", "") if isinstance(crash, dict) else ""
            out.append(f"| {md_code(nodeid)} | {md_text(t.get('outcome'))} | {md_text(cause)} |")
    return "\n".join([*out, ""])


def functional_markdown(rows: Iterable[tuple[str, str, str, str]], functional_dir: Path, gpus: str) -> str:
    """The functional run's step summary: every script's row (what ran, what selection or the
    GPU count skipped and why), then the metric checks of each script that ran."""
    rows = list(rows)
    out = [
        f"### Functional tests ({gpus} GPU(s) visible)",
        "",
        "| Script | Status | Wall time | Note |",
        "|---|---|---|---|",
    ]
    out += [f"| {md_text(n)} | {md_text(s)} | {md_text(t)} | {md_text(note)} |" for n, s, t, note in rows]
    for name, status, _time, _note in rows:
        if status not in ("PASS", "FAIL"):
            continue
        checks = _checks(functional_dir / name / "checks.json")
        if checks is None:
            continue
        passed = sum(1 for c in checks if c.get("passed"))
        head = f"{html_text(name)}: {passed}/{len(checks)} metric checks passed"  # raw HTML: entities only
        out += ["", f"<details><summary>{head}</summary>", ""]
        out += ["| Status | Check | Value |", "|---|---|---|"]
        for c in checks:
            out.append(
                f"| {'PASS' if c.get('passed') else 'FAIL'} | {md_code(c.get('check'))} | {md_text(c.get('value'))} |"
            )
        out += ["", "</details>"]
    return "\n".join([*out, ""])


def _checks(path: Path) -> list[dict[str, Any]] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    results = data.get("results") if isinstance(data, dict) else None
    return [r for r in results if isinstance(r, dict)] if isinstance(results, list) else None


def write_unit_outputs(
    junitxml: Path | None,
    results: str | None,
    summary: Mapping[str, Any] | None,
    last_line: str,
    step_summary: bool = True,
) -> list[str]:
    """After a unit run: the JUnit file (when asked) and the step summary (under GitHub
    Actions, unless `step_summary` is off: its path was refused at the start), both from the
    run's final record at `results`. Returns the problems, one line each."""
    record = None
    if results:
        try:
            record = json.loads(Path(results).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            record = None
    problems = []
    if junitxml is not None:
        if record is None:
            problems.append(f"no record to write {junitxml} from")
        else:
            try:
                junitxml.parent.mkdir(parents=True, exist_ok=True)
                write_text_atomic(junitxml, junit_xml(record))
            except (OSError, ValueError) as exc:
                problems.append(f"could not write {junitxml}: {exc}")
    if step_summary:
        try:
            append_step_summary(unit_markdown(record, last_line, summary))
        except (OSError, ValueError) as exc:
            problems.append(f"could not append to ${SUMMARY_ENV}: {exc}")
    return problems


def append_step_summary(markdown: str) -> None:
    """Append to $GITHUB_STEP_SUMMARY when it is set (GitHub Actions); nothing otherwise. Only
    to a regular file, and never waiting: a FIFO without a reader is an OSError, not a hang."""
    path = os.environ.get(SUMMARY_ENV)
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o666)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    os.set_blocking(fd, True)
    with os.fdopen(fd, "a", encoding="utf-8", errors="backslashreplace") as fh:
        fh.write(markdown + "\n")


def output_problem(
    path: Path, protected: Iterable[Path], history: Iterable[Path], make_dirs: bool = True
) -> str | None:
    """Why a CI file (the JUnit file, the step summary) may not be written at `path`, in a few
    words, or None. Refused: the run's record (a file of `protected`), anything in a results
    history directory (`history`), an existing directory or anything but a regular file (a FIFO
    would hang the writer, a device would be replaced), and a path this user cannot write
    (`make_dirs`: its missing directories may be created, as for the JUnit file)."""
    target = path.resolve()
    if any(target == p.resolve() for p in protected):
        return "is the run's record: give another file"
    for directory in history:
        if target.is_relative_to(directory.resolve()):
            return f"is in the results history ({directory}): give another file"
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        return f"cannot be reached: {exc.strerror}"
    if mode is not None:
        if stat.S_ISDIR(mode):
            return "is a directory: give a file"
        if not stat.S_ISREG(mode):
            return "is not a regular file (a FIFO, a device or a socket): give a file"
        if not os.access(path, os.W_OK):
            return "is not writable"
    parent = target.parent
    if not make_dirs and not parent.exists():
        return f"cannot be created: its directory {parent} does not exist"
    while not parent.exists() and parent != parent.parent:  # the directory mkdir would start from
        parent = parent.parent
    if not parent.is_dir():
        return f"cannot be created: {parent} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot be written: no permission to write in {parent}"
    return None
