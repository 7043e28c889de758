"""`[tool.testharness]` from the project's pyproject.toml: the ONE loader (pure: no pytest, no Ray).

The harness knows nothing of the project it tests; package names, paths, marker groups and
state file names come from here. Every key has a default, so `[tool.testharness]` with no key
is a whole configuration. A project without the table has not asked for the harness (it is
merely installed in the environment): `Settings.configured` is False, and the plugins then
add nothing but their options, markers and the `tracker` fixture (no Ray cluster for -n, no
results file, no leak check, watchdog or signal handling). A bad value is a `SettingsError`
whose message is one line naming the file and the key. The defaults are pytest's own
(testpaths) or none at all; nothing of any one project. Example (this repository's values):

    [tool.testharness]
    source_packages = ["nemo_rl"]          # files that form the remote-selection import graph
    source_roots = ["."]                   # directories holding those packages
    test_roots = ["tests/unit"]            # default: [tool.pytest.ini_options] testpaths, else ["tests"]
    results_dir = "tests/unit"             # unit_results.json and unit_results/; default: the first test root
    assets_script = "tests/unit/prepare_unit_test_assets.py"   # run_unit builds assets with it; default: none
    assets_dir = "tests/unit/test_assets"  # ... when this is missing or empty (no assets_dir: every run)
    remote_map_file = ".nrl_remote_map.json"
    remote_state_file = ".nrl_remote_state.json"

    [tool.testharness.marker_groups.hf_gated]   # the table's name is the marker
    option = "--hf-gated"                  # the pytest option that selects the group
    mode = "opt-in"                        # "opt-in": skipped unless the option adds them
    args = "model_id"                      # shown in `pytest --markers`
    description = "needs a gated Hugging Face model (run with --hf-gated)"
    hf_models = true                       # positional args are HF repo ids: skip when unloadable

    [tool.testharness.marker_groups.mcore]
    option = "--mcore-only"
    mode = "only"                          # "only": the option runs these tests and no others
    description = "needs megatron-core (run with --mcore-only, install with --extra mcore)"
    requires = ["megatron.core"]           # modules that must import when the option is given
    requires_name = "megatron-core"        # what the error calls them
    hint = "uv run --extra mcore --group test bash tests/run_unit.sh --mcore-only"
    exclusive = true                       # cannot be combined with another exclusive group's option

    [tool.testharness.marker_groups.vllm]  # a group whose requirement no extra installs
    option = "--vllm-only"
    mode = "only"
    exclusive = true
    requires = ["vllm"]
    remedy = "this project has no vllm extra: ..."   # replaces "run it as: HINT" in the error

    [tool.testharness.hygiene]             # leaks and hangs (docs/unit-tests.md, "Leaks and hangs")
    leak_check = true                      # after every test: actors, placement groups, processes, GPU memory
    fail_on_leak = false                   # leaks as errors (also --fail-on-leak)
    gpu_threshold_mib = 1024               # GPU memory growth per GPU that counts as a leak
    settle_s = 3                           # how long a leak may take to go away after teardown
    timeout = 900                          # seconds per test (0: off); @pytest.mark.timeout(N) per test

    [tool.testharness.functional]          # run_all.sh --affected (docs/functional-tests.md)
    reach_file = ".nrl_functional_reach.json"  # what each script's last passing run reached
    source = ["nemo_rl"]                   # measured per function (default: source_packages)
    environment = ["uv.lock", "pyproject.toml", "docker/*"]   # a change runs every script
    harness = ["tests/functional/common.sh"]                   # ... and so does one here
    unrelated = ["docs/*", "*.md"]         # never read by a script: a change runs none
    # Globs are fnmatch's, on paths relative to the root (`*` crosses `/`). A changed file
    # matching none of them and read by no recorded run runs every script.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

DEFAULT_TEST_ROOTS = ("tests",)  # used when neither test_roots nor pytest's testpaths is set
DEFAULT_REMOTE_MAP_FILE = ".testharness_remote_map.json"
DEFAULT_REMOTE_STATE_FILE = ".testharness_remote_state.json"
DEFAULT_FUNCTIONAL_REACH_FILE = ".testharness_functional_reach.json"
# What a project's environment is made of, wherever it comes from (a change runs every script).
DEFAULT_ENVIRONMENT = ("uv.lock", "pyproject.toml", "poetry.lock", "requirements*.txt", "setup.py", "setup.cfg",
                       "Dockerfile*", "docker/*", ".python-version")  # fmt: skip
MODES = ("opt-in", "only")
TABLE = "[tool.testharness]"

_MARKER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPTION = re.compile(r"--[A-Za-z0-9][A-Za-z0-9-]*")


@dataclass(frozen=True)
class MarkerGroup:
    """Tests carrying one marker, selected by one pytest option.

    mode "opt-in": the tests are left out unless the option is given (e.g. gated models).
    mode "only":   the tests are left out unless the option is given, and then they are the
                   only ones that run (e.g. an optional heavy dependency).
    exclusive:     the option cannot be combined with the option of another exclusive group
                   (`--vllm-only --mcore-only` is a usage error, as in upstream NeMo RL).
    hint / remedy: what the one-line error says when `requires` cannot be imported:
                   "run it as: HINT" (a command), or REMEDY as written (free text).
    """

    name: str
    option: str
    mode: str = "opt-in"
    description: str = ""
    args: str = ""
    requires: tuple[str, ...] = ()
    requires_name: str = ""
    hint: str = ""
    hf_models: bool = False
    exclusive: bool = False
    remedy: str = ""

    @property
    def only(self) -> bool:
        return self.mode == "only"

    @property
    def dest(self) -> str:
        """The option's attribute name on pytest's config (`--mcore-only` -> `mcore_only`)."""
        return self.option.lstrip("-").replace("-", "_")

    @property
    def marker_line(self) -> str:
        """The line pytest's `markers` ini value takes (`name(args): description`)."""
        head = f"{self.name}({self.args})" if self.args else self.name
        return f"{head}: {self.description or f'selected by {self.option}'}"


@dataclass(frozen=True)
class Hygiene:
    """[tool.testharness.hygiene]: the leak check and the per-test timeout (testharness.hygiene)."""

    leak_check: bool = True
    fail_on_leak: bool = False
    gpu_threshold_mib: float = 1024.0
    settle_s: float = 3.0
    timeout: float = 900.0  # 0: no timeout


@dataclass(frozen=True)
class Functional:
    """[tool.testharness.functional]: what the functional scripts' selection reads (testharness.functional)."""

    reach_file: Path
    source: tuple[str, ...] = ()  # directories, relative to the root, measured per function
    environment: tuple[str, ...] = DEFAULT_ENVIRONMENT
    harness: tuple[str, ...] = ()
    unrelated: tuple[str, ...] = ()


@dataclass(frozen=True)
class Settings:
    """The harness settings, with paths resolved against the project root."""

    root: Path
    source_packages: tuple[str, ...] = ()
    source_roots: tuple[Path, ...] = ()
    results_dir: Path = field(default=Path(DEFAULT_TEST_ROOTS[0]))  # load_settings: the first test root
    test_roots: tuple[Path, ...] = ()
    assets_script: Path | None = None  # run_unit's asset step (none by default)
    assets_dir: Path | None = None  # the script runs when this is missing or empty (every run when None)
    # remote-aware selection's two files (key: a path relative to the root; resolved here)
    remote_map_file: Path = field(default=Path(DEFAULT_REMOTE_MAP_FILE))
    remote_state_file: Path = field(default=Path(DEFAULT_REMOTE_STATE_FILE))
    marker_groups: tuple[MarkerGroup, ...] = ()
    # [tool.testharness.report], raw: the report's rules parser validates it and names the file
    report: Mapping[str, Any] = field(default_factory=dict)
    hygiene: Hygiene = field(default_factory=Hygiene)
    functional: Functional = field(default_factory=lambda: Functional(Path(DEFAULT_FUNCTIONAL_REACH_FILE)))
    configured: bool = False  # the project's pyproject.toml has [tool.testharness]


class SettingsError(ValueError):
    """A malformed [tool.testharness] table (the message is one line for the user)."""


class _Table:
    """One TOML table and where it came from, so every error names the file and the key."""

    def __init__(self, data: dict[str, object], file: Path, prefix: str) -> None:
        self.data, self.file, self.prefix = data, file, prefix

    def error(self, key: str, problem: str) -> SettingsError:
        return SettingsError(f"{self.file}: {self.prefix} {key} {problem}")

    def str_list(self, key: str, default: tuple[str, ...]) -> tuple[str, ...]:
        value = self.data.get(key, list(default))
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, f"must be a list of strings, got {value!r}")
        return tuple(value)

    def text(self, key: str, default: str, *, empty: bool = False) -> str:
        value = self.data.get(key, default)
        if not isinstance(value, str) or (not value and not empty):
            raise self.error(key, f"must be a non-empty string, got {value!r}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false, got {value!r}")
        return value

    def number(self, key: str, default: float) -> float:
        value = self.data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise self.error(key, f"must be a number >= 0, got {value!r}")
        return float(value)

    def inside(self, root: Path, key: str, value: str) -> Path:
        """`root / value`, refusing absolute paths and `..` (the path must stay in the project)."""
        rel = PurePosixPath(value.replace("\\", "/").strip())
        if rel.is_absolute() or ".." in rel.parts:
            raise self.error(key, f"{value!r} must be a path inside the repository")
        return root / rel


def _read_pyproject(pyproject: Path) -> dict[str, object]:
    if not pyproject.is_file():
        return {}
    try:
        return tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{pyproject}: cannot parse: {exc}") from None


def _sub_table(parent: dict[str, object], key: str, file: Path, name: str) -> dict[str, object]:
    value = parent.get(key, {})
    if not isinstance(value, dict):
        raise SettingsError(f"{file}: {name} must be a table")
    return value


def _marker_groups(table: _Table) -> tuple[MarkerGroup, ...]:
    raw = _sub_table(table.data, "marker_groups", table.file, f"{TABLE[:-1]}.marker_groups]")
    groups: list[MarkerGroup] = []
    for name, spec in raw.items():
        if not _MARKER_NAME.fullmatch(name):
            raise table.error(f"marker_groups.{name}", "is not a marker name (letters, digits, _)")
        if not isinstance(spec, dict):
            raise table.error(f"marker_groups.{name}", "must be a table")
        t = _Table(spec, table.file, f"{TABLE[:-1]}.marker_groups.{name}]")
        option = t.text("option", "")
        if not _OPTION.fullmatch(option):
            raise t.error("option", f"must look like --some-flag, got {option!r}")
        mode = t.text("mode", "opt-in")
        if mode not in MODES:
            raise t.error("mode", f"must be one of {', '.join(MODES)}, got {mode!r}")
        unknown = sorted(set(spec) - {"option", "mode", "description", "args", "requires",
                                      "requires_name", "hint", "hf_models", "exclusive",
                                      "remedy"})  # fmt: skip
        if unknown:
            raise t.error(unknown[0], "is not a known key")
        requires = t.str_list("requires", ())
        groups.append(MarkerGroup(
            name=name,
            option=option,
            mode=mode,
            description=t.text("description", "", empty=True),
            args=t.text("args", "", empty=True),
            requires=requires,
            requires_name=t.text("requires_name", ", ".join(requires), empty=True),
            hint=t.text("hint", "", empty=True),
            hf_models=t.flag("hf_models", False),
            exclusive=t.flag("exclusive", False),
            remedy=t.text("remedy", "", empty=True),
        ))  # fmt: skip
    options = [g.option for g in groups]
    for g in groups:
        if options.count(g.option) > 1:
            raise table.error(f"marker_groups.{g.name}.option", f"{g.option} is used by two groups")
    return tuple(groups)


def _hygiene(table: _Table) -> Hygiene:
    raw = _sub_table(table.data, "hygiene", table.file, f"{TABLE[:-1]}.hygiene]")
    t = _Table(raw, table.file, f"{TABLE[:-1]}.hygiene]")
    unknown = sorted(set(raw) - {"leak_check", "fail_on_leak", "gpu_threshold_mib", "settle_s", "timeout"})
    if unknown:
        raise t.error(unknown[0], "is not a known key")
    d = Hygiene()
    return Hygiene(
        leak_check=t.flag("leak_check", d.leak_check),
        fail_on_leak=t.flag("fail_on_leak", d.fail_on_leak),
        gpu_threshold_mib=t.number("gpu_threshold_mib", d.gpu_threshold_mib),
        settle_s=t.number("settle_s", d.settle_s),
        timeout=t.number("timeout", d.timeout),
    )


def _functional(table: _Table, root: Path, packages: tuple[str, ...]) -> Functional:
    raw = _sub_table(table.data, "functional", table.file, f"{TABLE[:-1]}.functional]")
    t = _Table(raw, table.file, f"{TABLE[:-1]}.functional]")
    unknown = sorted(set(raw) - {"reach_file", "source", "environment", "harness", "unrelated"})
    if unknown:
        raise t.error(unknown[0], "is not a known key")
    source = t.str_list("source", packages)
    for value in source:
        t.inside(root, "source", value)
    return Functional(
        reach_file=t.inside(root, "reach_file", t.text("reach_file", DEFAULT_FUNCTIONAL_REACH_FILE)),
        source=tuple(PurePosixPath(v).as_posix() for v in source),
        environment=t.str_list("environment", DEFAULT_ENVIRONMENT),
        harness=t.str_list("harness", ()),
        unrelated=t.str_list("unrelated", ()),
    )


def load_settings(root: Path) -> Settings:
    """Read `root/pyproject.toml`'s [tool.testharness]; defaults when the file or table is absent."""
    pyproject = root / "pyproject.toml"
    data = _read_pyproject(pyproject)
    tool = _sub_table(data, "tool", pyproject, "[tool]")
    table = _Table(_sub_table(tool, "testharness", pyproject, TABLE), pyproject, TABLE)
    pytest_table = _sub_table(tool, "pytest", pyproject, "[tool.pytest]")
    ini_name = "[tool.pytest.ini_options]"
    ini = _Table(_sub_table(pytest_table, "ini_options", pyproject, ini_name), pyproject, ini_name)
    packages = table.str_list("source_packages", ())
    for name in packages:
        if not name.isidentifier():
            raise table.error("source_packages", f"{name!r} is not a top-level package name")
    # One default for the test roots: pytest's testpaths, else DEFAULT_TEST_ROOTS.
    test_roots = table.str_list("test_roots", ini.str_list("testpaths", DEFAULT_TEST_ROOTS))

    def paths(key: str, values: tuple[str, ...]) -> tuple[Path, ...]:
        return tuple(dict.fromkeys(table.inside(root, key, v) for v in values))

    def file(key: str, default: str) -> Path:
        return table.inside(root, key, table.text(key, default))

    def optional(key: str) -> Path | None:
        return root / table.text(key, "") if key in table.data else None

    return Settings(
        root=root,
        source_packages=tuple(dict.fromkeys(packages)),
        source_roots=paths("source_roots", table.str_list("source_roots", (".",))),
        # The results beside the tests they are of: the first test root, else the project's root.
        results_dir=root / table.text("results_dir", test_roots[0] if test_roots else "."),
        test_roots=paths("test_roots", test_roots),
        assets_script=optional("assets_script"),
        assets_dir=optional("assets_dir"),
        remote_map_file=file("remote_map_file", DEFAULT_REMOTE_MAP_FILE),
        remote_state_file=file("remote_state_file", DEFAULT_REMOTE_STATE_FILE),
        marker_groups=_marker_groups(table),
        report=_sub_table(table.data, "report", pyproject, f"{TABLE[:-1]}.report]"),
        hygiene=_hygiene(table),
        functional=_functional(table, root, packages),
        configured="testharness" in tool,
    )


def is_within(path: Path, parent: Path) -> bool:
    """True when `path` is `parent` or below it (both made absolute, symlinks resolved)."""
    try:
        path.resolve().relative_to(parent.resolve())
    except ValueError:
        return False
    return True


def session_in_scope(args: list[str], invocation_dir: Path, test_roots: tuple[Path, ...]) -> bool:
    """Whether a pytest run on `args` concerns a configured test root.

    True when one of the requested paths is inside a test root (`pytest tests/unit/x.py`) or
    contains one (`pytest tests`, or `pytest` alone with testpaths). A pytest run on some
    unrelated directory (e.g. a pytester project in /tmp) is out of scope.
    """
    for arg in args:
        if arg.startswith("-"):
            continue
        path = Path(arg.split("::", 1)[0])
        if not path.is_absolute():
            path = invocation_dir / path
        if any(is_within(path, r) or is_within(r, path) for r in test_roots):
            return True
    return False
