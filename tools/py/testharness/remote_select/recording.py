"""What a remote-selection session leaves for the next (pure: no pytest, no Ray): each test's
generation and recorded reach after its run, merged onto the state file as it is now, and
the map's collected test ids. The engine (engine.py) plans; this records.
"""

from __future__ import annotations

from . import store
from .plan import OK_OUTCOMES, Plan, generation_id, test_file_of
from .records import RanFunction, ReachEntry, RecordError, SentModule, parse_reach_entry, sorted_reach

NOT_A_FUNCTION = "-"  # the digest recorded for import-time code that ran remotely
MODULE_LEVEL = "<module>"


def record_session(
    files: store.StateFiles,
    plan: Plan,
    outcomes: dict[str, str],
    collected: dict[str, list[str]],
    reaches: dict[str, list[str] | None],
) -> None:
    """Record the session in the state files: tests that ran and passed (or were skipped) get
    today's digests and the reach this run recorded for them (`reaches`; absent: unknown).

    A test that failed, errored, or did not complete keeps its old record, so it stays
    selected; a test that did not run and was not affected gets today's digests too
    (its closure is unchanged, so both records mean the same thing).
    """
    ours = _state_after(plan, outcomes, reaches)
    save_state = bool(ours.tests or plan.records)
    map_dirty = _record_collected(plan, collected)
    if not (save_state or map_dirty):
        return
    # Another session may have saved since this one loaded: merge onto what is there now.
    with store.locked(files):
        if save_state:
            theirs, _ = store.load_state(files.state_file)  # its warning was shown at plan time
            base = store.State(plan.generations, plan.records, plan.reaches, plan.imports_loaded)
            store.save_state(files.state_file, store.merge_state(base, ours, theirs, set(outcomes)))
        if map_dirty:
            _save_map(files, plan, collected)


def _state_after(plan: Plan, outcomes: dict[str, str], reaches: dict[str, list[str] | None]) -> store.State:
    """This session's state: each test's generation and reach after this run, and the
    generations (with their import digests) still referenced."""
    new_gid = generation_id(plan.digests)
    tests, kept_reach = _tests_after(plan, outcomes, reaches, new_gid)
    kept = set(tests.values())
    generations = {gid: plan.generations[gid] for gid in kept if gid != new_gid}
    imports = {gid: imp for gid, imp in plan.imports_loaded.items() if gid in kept}
    if new_gid in kept:
        generations[new_gid] = plan.digests
        # Same contents, same import digests: a no-change session reuses them.
        imports[new_gid] = imports.get(new_gid) or plan.import_digests()
    return store.State(generations, tests, kept_reach, imports)


def _tests_after(
    plan: Plan, outcomes: dict[str, str], reaches: dict[str, list[str] | None], new_gid: str
) -> tuple[dict[str, str], dict[str, tuple[ReachEntry, ...]]]:
    """Each tracked test's generation (nodeid -> generation id) and recorded reach after
    this run (see `record_session`)."""
    tests: dict[str, str] = {}
    kept_reach: dict[str, tuple[ReachEntry, ...]] = {}

    def passed_now(nodeid: str) -> None:
        tests[nodeid] = new_gid
        reach = _stored_reach(plan, reaches.get(nodeid))
        if reach is not None:
            kept_reach[nodeid] = reach

    for nodeid, gid in plan.records.items():
        if test_file_of(nodeid) not in plan.test_files:
            continue  # the test file is gone: forget its tests
        outcome = outcomes.get(nodeid)
        if outcome in OK_OUTCOMES:
            passed_now(nodeid)
            continue
        tests[nodeid] = new_gid if outcome is None and nodeid not in plan.affected_tests else gid
        if nodeid in plan.reaches:
            kept_reach[nodeid] = plan.reaches[nodeid]
    for nodeid, outcome in outcomes.items():
        if nodeid not in tests and outcome in OK_OUTCOMES and test_file_of(nodeid) in plan.test_files:
            passed_now(nodeid)
    return tests, kept_reach


def _stored_reach(plan: Plan, reach: list[str] | None) -> tuple[ReachEntry, ...] | None:
    """The reach this run recorded for a test, as stored; None: unknown (its static
    closure counts)."""
    if reach is None:
        return None
    try:
        return _with_digests(plan, [parse_reach_entry(e) for e in reach])
    except RecordError:
        return None  # not the recorder's form: unknown reach, the static closure counts


def _save_map(files: store.StateFiles, plan: Plan, collected: dict[str, list[str]]) -> None:
    """Save the map, its test ids merged onto those of the map on disk now (call with
    the state files locked)."""
    map_data = plan.map_data
    on_disk, _ = store.load_map(files.map_file)
    if on_disk is not None:
        merged = store.merge_map_tests(plan.map_tests_loaded, map_data.tests, on_disk.tests, set(collected))
        map_data.tests = {t: e for t, e in merged.items() if t in plan.test_files}
    store.save_map(files.map_file, map_data)


def _with_digests(plan: Plan, reach: list[ReachEntry]) -> tuple[ReachEntry, ...]:
    """Reach entries as stored: a function that ran remotely gets its body digest; one
    of a file outside the scanned tree counts whole."""
    out: set[ReachEntry] = set()
    for entry in reach:
        if not isinstance(entry, RanFunction):
            out.add(entry)
        elif entry.path in plan.digests:
            digest = plan.unit_digests(entry.path).get(entry.qualname)
            # Module level and class bodies: import-time code, which import digests cover.
            out.add(
                RanFunction(entry.path, entry.qualname, digest)
                if digest
                else RanFunction(entry.path, MODULE_LEVEL, NOT_A_FUNCTION)
            )
        else:
            out.add(SentModule(entry.path))
    return sorted_reach(out)


def _record_collected(plan: Plan, collected: dict[str, list[str]]) -> bool:
    """Put the test ids collected now (test file -> node ids) in the plan's map and forget
    the test files that are gone; True when the map must be saved."""
    map_data = plan.map_data
    dirty = plan.map_dirty
    for tfile, nodeids in collected.items():
        if map_data.tests.get(tfile) != tuple(sorted(nodeids)):
            map_data.tests[tfile] = tuple(sorted(nodeids))
            dirty = True
    for tfile in list(map_data.tests):
        if tfile not in plan.test_files:
            del map_data.tests[tfile]
            dirty = True
    if dirty:
        # Closures are not stored (they grow as files x tests); `python -m
        # testharness.remote_select TEST_FILE` prints one from the stored graph.
        for tfile in plan.test_files:
            map_data.tests.setdefault(tfile, ())
    return dirty
