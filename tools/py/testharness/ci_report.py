"""What CI shows of a run (pure: no pytest): JUnit XML from a unit-test record, and Markdown
for GitHub's step summary ($GITHUB_STEP_SUMMARY) of unit and functional runs.

Both are made from the files a run leaves, after it ended: the JUnit file therefore holds
every selected test, those whose process died included (their crash cause and stack), which
pytest's own --junitxml, written by the process that died, cannot.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from testharness.atomic_io import write_text_atomic

SUMMARY_ENV = "GITHUB_STEP_SUMMARY"
_JUNIT_KIND = {"failed": "failure", "error": "error", "skipped": "skipped"}


def _class_and_name(nodeid: str) -> tuple[str, str]:
    """pytest's junit names: `tests.unit.test_x.TestC` and `test_m[p]`."""
    parts = nodeid.split("::")
    module = parts[0].removesuffix(".py").replace("/", ".")
    return ".".join([module, *parts[1:-1]]), parts[-1]


def junit_xml(record: Mapping[str, Any], suite: str = "unit") -> str:
    """A JUnit XML document (one testsuite) of the record's tests."""
    tests: Mapping[str, Mapping[str, Any]] = record.get("tests", {})
    counts = Counter(str(t.get("outcome")) for t in tests.values())
    total_time = sum(float(t.get("duration") or 0.0) for t in tests.values())
    root = ET.Element("testsuites")
    el = ET.SubElement(
        root,
        "testsuite",
        name=suite,
        tests=str(len(tests)),
        failures=str(counts["failed"]),
        errors=str(counts["error"]),
        skipped=str(counts["skipped"]),
        time=f"{total_time:.3f}",
        timestamp=str(record.get("start_time", "")),
    )
    for nodeid, test in tests.items():
        classname, name = _class_and_name(nodeid)
        case = ET.SubElement(
            el, "testcase", classname=classname, name=name, time=f"{float(test.get('duration') or 0):.3f}"
        )
        outcome = str(test.get("outcome"))
        kind = _JUNIT_KIND.get(outcome)
        crash = test.get("crash")
        if kind is None and outcome != "passed":
            kind = "error"  # an outcome JUnit has no word for: never shown as a pass
        if kind is not None:
            message = f"{outcome}" + (f": {crash.get('cause')}" if isinstance(crash, dict) else "")
            sub = ET.SubElement(case, kind, message=message)
            if isinstance(crash, dict) and crash.get("stack"):
                sub.text = str(crash["stack"])
            elif kind != "skipped":
                sub.text = f"{outcome} (attempts: {', '.join(map(str, test.get('attempts', [])))}); see the run's log"
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def unit_markdown(record: Mapping[str, Any] | None, last_line: str, summary: Mapping[str, Any] | None) -> str:
    """The unit run's step summary: its last line, counts, selection, what did not pass."""
    out = ["### Unit tests", "", last_line, ""]
    if record is None:
        return "\n".join([*out, "No results were recorded.", ""])
    tests: Mapping[str, Mapping[str, Any]] = record.get("tests", {})
    counts = Counter(str(t.get("outcome")) for t in tests.values())
    deselected = int((summary or {}).get("deselected") or 0)
    line = ", ".join(f"{n} {o}" for o, n in sorted(counts.items())) or "no test ran"
    out.append(f"{line}; {deselected} deselected (by selection: markers, -k, testmon, shards)")
    bad = [(nodeid, t) for nodeid, t in tests.items() if t.get("outcome") not in ("passed", "skipped")]
    if bad:
        out += ["", "| Test | Outcome | Cause |", "|---|---|---|"]
        for nodeid, t in bad:
            crash = t.get("crash")
            cause = crash.get("cause", "") if isinstance(crash, dict) else ""
            out.append(f"| `{_cell(nodeid)}` | {_cell(t.get('outcome'))} | {_cell(cause)} |")
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
    out += [f"| {_cell(n)} | {_cell(s)} | {_cell(t)} | {_cell(note)} |" for n, s, t, note in rows]
    for name, status, _time, _note in rows:
        if status not in ("PASS", "FAIL"):
            continue
        checks = _checks(functional_dir / name / "checks.json")
        if checks is None:
            continue
        passed = sum(1 for c in checks if c.get("passed"))
        out += ["", f"<details><summary>{_cell(name)}: {passed}/{len(checks)} metric checks passed</summary>", ""]
        out += ["| Status | Check | Value |", "|---|---|---|"]
        for c in checks:
            out.append(
                f"| {'PASS' if c.get('passed') else 'FAIL'} | `{_cell(c.get('check'))}` | {_cell(c.get('value'))} |"
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
    junitxml: Path | None, results: str | None, summary: Mapping[str, Any] | None, last_line: str
) -> list[str]:
    """After a unit run: the JUnit file (when asked) and the step summary (under GitHub
    Actions), both from the run's final record at `results`. Returns the problems, one line each."""
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
            except OSError as exc:
                problems.append(f"could not write {junitxml}: {exc}")
    try:
        append_step_summary(unit_markdown(record, last_line, summary))
    except OSError as exc:
        problems.append(f"could not append to ${SUMMARY_ENV}: {exc}")
    return problems


def append_step_summary(markdown: str) -> None:
    """Append to $GITHUB_STEP_SUMMARY when it is set (GitHub Actions); nothing otherwise."""
    path = os.environ.get(SUMMARY_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(markdown + "\n")
