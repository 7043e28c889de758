"""Is `ray` the real Ray (testharness.real_ray): recognised by what `import ray` leaves behind,
never imported just to find it unused."""

from __future__ import annotations

import importlib
import os
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TYPE_CHECKING, TypeGuard

if TYPE_CHECKING:
    pass


_USED = ("is_initialized", "init", "get", "remote", "nodes", "shutdown", "get_runtime_context")


def is_ray(module: object) -> TypeGuard[ModuleType]:
    """Whether `module` is Ray's own package (never imports anything)."""
    if not isinstance(module, ModuleType):  # None, a MagicMock (even one with spec=ModuleType: below)
        return False
    try:
        spec = getattr(module, "__spec__", None)
        if not isinstance(spec, ModuleSpec) or spec.name != "ray" or not spec.origin:
            return False
        if os.path.basename(spec.origin) != "__init__.py":
            return False  # a single-file ray.py
        core = sys.modules.get("ray._raylet")
        core_file = getattr(core, "__file__", None) if isinstance(core, ModuleType) else None
        if not core_file or os.path.dirname(core_file) != os.path.dirname(spec.origin):
            return False
        return all(callable(getattr(module, name, None)) for name in _USED)
    except Exception:  # noqa: BLE001  an object whose attributes raise is no Ray either
        return False


def imported() -> ModuleType | None:
    """Ray's package when this process has imported it, else None (never imports it)."""
    module = sys.modules.get("ray")
    return module if is_ray(module) else None


def connected() -> ModuleType | None:
    """Ray's package when this process is connected to a cluster, else None (never imports it)."""
    ray = imported()
    if ray is None:
        return None
    try:
        return ray if ray.is_initialized() else None
    except Exception:  # noqa: BLE001  a Ray half torn down (any error): not connected
        return None


def load() -> tuple[ModuleType | None, str]:
    """(Ray's package, "") importing it if need be, else (None, why not: one line)."""
    if "ray" in sys.modules:
        module = sys.modules["ray"]
        if is_ray(module):
            return module, ""
        if module is None:
            return None, "Ray is blocked in this process (sys.modules['ray'] is None)"
        return None, f"sys.modules['ray'] is not Ray but a stand-in ({type(module).__name__})"
    try:
        module = importlib.import_module("ray")
    except Exception as exc:  # noqa: BLE001  not installed, or an install that fails to import
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return None, f"Ray cannot be imported: {first}"
    if not is_ray(module):
        where = getattr(module, "__file__", None) or type(module).__name__
        return None, f"the `ray` this process imports is not Ray ({where})"
    return module, ""
