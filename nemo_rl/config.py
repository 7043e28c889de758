"""YAML configs with dotted command-line overrides (`policy.optimizer.lr=1e-5`), via OmegaConf.

The YAML file is the schema: an override may only set a key the file defines (a leading
`+` adds a new one, as in Hydra) and must keep the kind of value it replaces.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

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
    except Exception as e:  # YAML and OmegaConf errors come in many types
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
            if _kind(old) != _kind(value):
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
    except Exception as e:  # yaml errors come in several types
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
