"""pytest adapter: marker groups from `[tool.testharness.marker_groups]`, run_first order,
num_gpus skips, and the skip of tests whose Hugging Face model cannot be loaded.

Each marker group is one marker and one option (settings.MarkerGroup). With this
repository's two groups, `hf_gated` (opt-in, `--hf-gated`) and `mcore` (only,
`--mcore-only`), the four configurations are:

    (default)                 neither marker
    --hf-gated                everything except mcore
    --mcore-only              mcore and not hf_gated
    --mcore-only --hf-gated   all mcore

Upstream NeMo RL's other "only" groups (`vllm`, `automodel`, `sglang`, `trtllm`,
`nemo_gym`) work like `mcore`: left out by default, alone with their option. Groups marked
`exclusive` cannot be combined (`--vllm-only --mcore-only` is one `ERROR:` line, as upstream
refuses it), and an option whose group `requires` a module that cannot be imported stops
with one line before collection.

An explicit `-m EXPR` replaces these rules; `-k` combines with them as usual. The plugin
registers the groups' markers and its own (`run_first`, `num_gpus`), so a project run with
`--strict-markers` declares none of them.

Under `--testmon`, a test file whose every test a group leaves out is not even collected
(imported), as testmon does not collect the files it skips: "nothing changed" then costs no
import of, say, megatron-core.
"""

from __future__ import annotations

import ast
import fnmatch
from collections.abc import Collection, Generator, Sequence
from pathlib import Path
from typing import Any

import pytest

from testharness import gpu
from testharness.contract import register_for, settings_of
from testharness.hf_cache import model_unavailable_reason
from testharness.requirements import exclusive_conflict, missing_requirement
from testharness.settings import MarkerGroup

BUILTIN_MARKERS = (
    "run_first: run before every other test",
    "num_gpus(n): needs at least n GPUs; skipped with the count otherwise",
)

_GROUPS = pytest.StashKey[tuple[MarkerGroup, ...]]()
_SKIPPED_HERE = pytest.StashKey[bool]()  # this plugin skipped the test (num_gpus, an hf model)


def selected(markers: Collection[str], groups: Sequence[MarkerGroup], active: Collection[str]) -> bool:
    """Whether a test with these marker names runs when the groups named in `active` are on (pure).

    An opt-in group's tests need their option. An "only" group's tests need their option,
    and once any "only" option is on, a test needs one of the active "only" markers (and
    none of an inactive one).
    """
    only_marks = {g.name for g in groups if g.only and g.name in markers}
    only_active = {g.name for g in groups if g.only and g.name in active}
    if only_active and not only_marks:
        return False
    if not only_marks <= only_active:
        return False
    return all(g.name in active for g in groups if not g.only and g.name in markers)


def _mark_names(nodes: Sequence[ast.expr]) -> set[str]:
    """Names of `pytest.mark.x` / `pytest.mark.x(...)` expressions among `nodes`."""
    names = set()
    for node in nodes:
        mark = node.func if isinstance(node, ast.Call) else node
        if isinstance(mark, ast.Attribute) and isinstance(mark.value, ast.Attribute) and mark.value.attr == "mark":
            names.add(mark.attr)
    return names


def _pytestmark(body: Sequence[ast.stmt]) -> set[str]:
    names: set[str] = set()
    for node in body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            names |= _mark_names(node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value])
    return names


def module_marks(source: str) -> set[str]:
    """The marker names every test of a test module carries (`pytestmark`, or a decorator all
    its test functions and methods share), read without importing it (pure)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    per_test: list[set[str]] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            per_test.append(_mark_names(node.decorator_list))
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            marks = _mark_names(node.decorator_list) | _pytestmark(node.body)
            per_test += [
                marks | _mark_names(m.decorator_list)
                for m in node.body
                if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name.startswith("test")
            ]
    return _pytestmark(tree.body) | (set.intersection(*per_test) if per_test else set())


def file_left_out(config: pytest.Config, path: Path) -> bool:
    """Whether this run's marker groups leave out every test of the test file at `path`: its
    module marks name a group whose option is off (each of its tests carries that mark)."""
    groups = _groups(config)
    if not groups or config.getoption("markexpr", ""):
        return False
    try:
        marks = module_marks(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return False
    active = _active(config)
    return any(g.name in marks and g.name not in active for g in groups)


def pytest_testharness_file_left_out(config: pytest.Config, path: Path) -> bool:
    return file_left_out(config, path)  # the -n planner's count of files


def run_first_order(items: list[pytest.Item]) -> list[pytest.Item]:
    """run_first tests first; otherwise the order is kept (a stable sort)."""
    return sorted(items, key=lambda it: it.get_closest_marker("run_first") is None)


def required_gpus(item: pytest.Item) -> int | None:
    """n from @pytest.mark.num_gpus(n), or None."""
    mark = item.get_closest_marker("num_gpus")
    if mark is None:
        return None
    n = mark.args[0] if mark.args else mark.kwargs.get("n")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise pytest.UsageError(f"{item.nodeid}: num_gpus needs a non-negative int, got {n!r}")
    return n


def require_hf_model(repo_id: str) -> None:
    """Skip the calling test (naming the model) unless `repo_id` can be loaded here. The skip
    is reported at the caller's line (a test body's call), not here."""
    __tracebackhide__ = True
    reason = model_unavailable_reason(repo_id)
    if reason is not None:
        pytest.skip(reason)


def _groups(config: pytest.Config) -> tuple[MarkerGroup, ...]:
    return config.stash.get(_GROUPS, ())


def _active(config: pytest.Config) -> set[str]:
    return {g.name for g in _groups(config) if config.getoption(g.dest, False)}


# --- hooks -------------------------------------------------------------------------------


def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser) -> None:
    # The groups' options depend on the project's pyproject.toml, known (rootpath) only now;
    # options added here are still parsed with the command line.
    groups = settings_of(early_config).marker_groups
    early_config.stash[_GROUPS] = groups
    section = parser.getgroup("testharness-selection", "test harness (selection)")
    exclusive = [g.option for g in groups if g.exclusive]
    for g in groups:
        if g.only:
            help_ = f"run only tests marked {g.name}" + (f" (needs: {g.hint})" if g.hint else "")
        else:
            help_ = f"also run tests marked {g.name}" + (f" ({g.description})" if g.description else "")
        if g.exclusive and len(exclusive) > 1:
            help_ += "; not with " + ", ".join(o for o in exclusive if o != g.option)
        section.addoption(g.option, action="store_true", default=False, dest=g.dest, help=help_)


def pytest_configure(config: pytest.Config) -> None:
    for line in (*BUILTIN_MARKERS, *(g.marker_line for g in _groups(config))):
        config.addinivalue_line("markers", line)
    register_for(config, _RunFirst(), "testharness-run-first")
    given = [g.option for g in _groups(config) if config.getoption(g.dest, False)]
    conflict = exclusive_conflict(given, _groups(config))
    if conflict is not None:
        raise pytest.UsageError(conflict)  # one `ERROR: ...` line, before collection
    for g in _groups(config):
        if config.getoption(g.dest, False):
            problem = missing_requirement(g)
            if problem is not None:
                # A UsageError prints one `ERROR: ...` line (no traceback) and exits before collection.
                raise pytest.UsageError(problem)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under --testmon, skip a test file this run's marker groups leave out whole (its tests
    would be deselected; collecting it would only import it)."""
    if not getattr(config.option, "testmon", False) or config.option.collectonly:
        return None
    if collection_path.suffix != ".py" or not any(
        fnmatch.fnmatch(collection_path.name, glob) for glob in config.getini("python_files")
    ):
        return None
    return True if file_left_out(config, collection_path) else None


@pytest.hookimpl(tryfirst=True)  # filter before sharding splits the list
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups = _groups(config)
    if config.getoption("markexpr", "") or not groups:
        return  # an explicit -m replaces the configuration rules
    active = _active(config)
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        names = {m.name for m in item.iter_markers()}
        (keep if selected(names, groups, active) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


class _RunFirst:
    """Puts run_first tests first, after every other plugin (sharding, testmon) has filtered."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        items[:] = run_first_order(items)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_SKIPPED_HERE] = True  # until the checks pass: a skip below is this plugin's
    need = required_gpus(item)
    if need:
        have = gpu.cluster_gpu_count()
        if have < need:
            pytest.skip(f"needs {need} GPU{'s' if need > 1 else ''}, {have} available")
    for g in _groups(item.config):
        mark = item.get_closest_marker(g.name) if g.hf_models else None
        if mark is not None:
            for repo_id in mark.args:
                if isinstance(repo_id, str):
                    require_hf_model(repo_id)
    item.stash[_SKIPPED_HERE] = False


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    """A skip of this plugin's points at the test (its file and line, as a skip marker's does),
    not at this module: `SKIPPED [1] tests/unit/test_x.py:12: needs 2 GPUs, 0 available`."""
    report = yield
    if call.when == "setup" and report.skipped and item.stash.get(_SKIPPED_HERE, False):
        if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
            path, line = item.reportinfo()[:2]
            report.longrepr = (str(path), (line or 0) + 1, report.longrepr[2])
    return report
