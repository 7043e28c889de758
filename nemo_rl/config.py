"""YAML configs with dotted command-line overrides (`policy.optimizer.lr=1e-5`), via OmegaConf.

The YAML file is the schema: an override may only set a key the file defines (a leading
`+` adds a new one, as in Hydra) and must keep the kind of value it replaces (a default of
`auto` may also become a number, e.g. `cluster.gpus_per_worker=1`).

The values are then checked against a table of rules (`validate`): per key a `Rule` (type,
range, non-empty, path exists) and across keys a `Relation` (a batch divisible by the
workers). Each problem is one line naming the key, the expectation and the value, so an
entry point can refuse a config before it starts anything. The tables live with their
users (`nemo_rl/algorithms/config_checks.py`); the checks here know no key names.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException


class ConfigError(ValueError):
    """A config problem, with a one-line message naming the key."""


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (dict, DictConfig)):
        return "mapping"
    if isinstance(value, (list, tuple, ListConfig)):
        return "list"
    return "null" if value is None else type(value).__name__


def _parse_value(key: str, raw: str) -> Any:
    try:
        parsed = OmegaConf.to_container(OmegaConf.from_dotlist([f"v={raw}"]), resolve=False)
    except Exception as e:  # noqa: BLE001  YAML and OmegaConf errors come in many types
        raise ConfigError(f"bad value for '{key}': {raw!r} ({e.__class__.__name__})") from None
    assert isinstance(parsed, dict)
    return parsed["v"]


def apply_overrides(cfg: DictConfig, overrides: Sequence[str]) -> DictConfig:
    """Apply `key=value` overrides in order; values are parsed as YAML."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"override {item!r} is not of the form key=value")
        add = key.startswith("+")
        key = key.lstrip("+")
        value = _parse_value(key, raw)
        missing = object()
        old = OmegaConf.select(cfg, key, default=missing, throw_on_resolution_failure=False)
        if old is missing and not add:
            raise ConfigError(f"unknown config key '{key}' (use +{key}=... to add a new key)")
        is_interpolation = isinstance(value, str) and "${" in value
        if old is not missing and old is not None and value is not None and not is_interpolation:
            if _kind(old) != _kind(value) and not (old == "auto" and _kind(value) == "number"):
                raise ConfigError(f"bad value for '{key}': expected a {_kind(old)}, got {raw!r}")
        OmegaConf.update(cfg, key, value, merge=False, force_add=add)
    return cfg


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Load `path`, apply overrides, resolve `${...}` interpolations; return plain data."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        cfg = OmegaConf.load(path)
    except Exception as e:  # noqa: BLE001  YAML errors come in several types
        raise ConfigError(f"cannot parse {path}: {e}") from None
    if not isinstance(cfg, DictConfig):
        raise ConfigError(f"{path} must hold a mapping at the top level")
    apply_overrides(cfg, overrides)
    try:
        data = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or "?"
        raise ConfigError(f"cannot resolve config key '{key}': {str(e).splitlines()[0]}") from None
    assert isinstance(data, dict)
    return data  # type: ignore[return-value]


# ---------------------------------------------------------------- validation (pure)

Check = Callable[[Any], "str | None"]
"""A check returns what is wrong with a value ("must be ..., got ...") or None when it is fine."""

MISSING: Any = object()


@dataclass(frozen=True)
class Rule:
    """The value at dotted `key` must pass `check`; a missing key is a problem."""

    key: str
    check: Check


@dataclass(frozen=True)
class Relation:
    """`holds(*values)` across `keys`, tested only once every key passed its own rule.

    `message` is formatted with the values in `keys` order: "{0} ... {1}".
    """

    keys: tuple[str, ...]
    holds: Callable[..., bool]
    message: str


def lookup(cfg: Mapping[str, Any], key: str) -> Any:
    """The value at a dotted key, or MISSING."""
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return MISSING
        node = node[part]
    return node


def show(value: Any) -> str:
    """A value as the user wrote it in YAML, short."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def validate(cfg: Mapping[str, Any], rules: Sequence[Rule | Relation]) -> list[str]:
    """Every problem of `cfg` under `rules`, one line each, in table order."""
    problems: list[str] = []
    bad: set[str] = set()
    for rule in rules:
        if isinstance(rule, Rule):
            value = lookup(cfg, rule.key)
            problem = "is missing" if value is MISSING else rule.check(value)
            if problem:
                problems.append(f"{rule.key} {problem}")
                bad.add(rule.key)
        else:
            values = [lookup(cfg, k) for k in rule.keys]
            if bad.intersection(rule.keys) or any(v is MISSING for v in values):
                continue
            if not rule.holds(*values):
                problems.append(rule.message.format(*(show(v) for v in values)))
    return problems


def summarize(problems: Sequence[str]) -> str:
    """One line: the first problem, and how many more (with their keys) if any."""
    if not problems:
        return ""
    if len(problems) == 1:
        return problems[0]
    rest = ", ".join(p.split(" ", 1)[0] for p in problems[1:])
    return f"{problems[0]} (and {len(problems) - 1} more: {rest})"


# Checks: small factories, so that a table reads like a schema.


@dataclass(frozen=True)
class Expect:
    """A check made of what is wanted and a predicate: "must be <want>, got <value>"."""

    want: str
    ok: Callable[[Any], bool]

    def __call__(self, value: Any) -> str | None:
        return None if self.ok(value) else f"must be {self.want}, got {show(value)}"

    def __or__(self, other: Expect) -> Expect:
        return Expect(f"{self.want} or {other.want}", lambda v: self.ok(v) or other.ok(v))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def integer(ge: int | None = None) -> Expect:
    """An int (not a bool, not 1.5), at least `ge`."""
    return Expect(
        "an integer" + (f" >= {ge}" if ge is not None else ""),
        lambda v: isinstance(v, int) and not isinstance(v, bool) and (ge is None or v >= ge),
    )


def number(
    gt: float | None = None, ge: float | None = None, le: float | None = None, lt: float | None = None
) -> Expect:
    """A finite int or float within the given bounds."""
    bounds = [f"{op} {b:g}" for op, b in ((">", gt), (">=", ge), ("<=", le), ("<", lt)) if b is not None]

    def ok(v: Any) -> bool:
        return (
            _is_number(v)
            and math.isfinite(v)
            and (gt is None or v > gt)
            and (ge is None or v >= ge)
            and (le is None or v <= le)
            and (lt is None or v < lt)
        )

    return Expect("a finite number" + (" " + " and ".join(bounds) if bounds else ""), ok)


def boolean() -> Expect:
    return Expect("true or false", lambda v: isinstance(v, bool))


def text() -> Expect:
    """A non-empty string."""
    return Expect("a non-empty string", lambda v: isinstance(v, str) and bool(v.strip()))


def choice(*options: str) -> Expect:
    return Expect("one of " + ", ".join(show(o) for o in options), lambda v: isinstance(v, str) and v in options)


def null() -> Expect:
    return Expect("null", lambda v: v is None)


def pair(item: Expect) -> Expect:
    """A list of two items, each passing `item` (e.g. Adam's betas)."""
    return Expect(
        f"a list of two items, each {item.want}",
        lambda v: isinstance(v, (list, tuple)) and len(v) == 2 and all(item.ok(x) for x in v),
    )


def existing_file() -> Check:
    """A path (relative to the working directory) to an existing file."""

    def check(value: Any) -> str | None:
        if not text().ok(value):
            return f"must be a file path, got {show(value)}"
        p = Path(value).expanduser()
        if p.is_file():
            return None
        what = "is a directory, not a file" if p.is_dir() else "does not exist"
        return f"{what}: {value}"

    return check


def directory_path() -> Check:
    """A path that is a directory or does not exist yet (it will be created)."""

    def check(value: Any) -> str | None:
        if not text().ok(value):
            return f"must be a directory path, got {show(value)}"
        if Path(value).expanduser().exists() and not Path(value).expanduser().is_dir():
            return f"must be a directory, but {value} is a file"
        return None

    return check
