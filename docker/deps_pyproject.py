"""Print the parts of a pyproject.toml that `uv sync` needs to install the dependencies:
[project], [dependency-groups], [build-system] and the [tool.uv] / [tool.hatch] tables.

    python3 docker/deps_pyproject.py pyproject.toml > ctx/pyproject.toml

docker/build.sh puts this in the image's build context instead of the whole file, so that
editing the test, lint or harness settings ([tool.pytest...], [tool.testharness...],
[tool.ruff...]) does not change the dependency layer's cache key (a rebuild downloads
torch, several GB). The text is filtered by table headers, keeping the kept tables' lines
verbatim, then checked with tomllib: the kept tables must parse to exactly what they are in
the original; otherwise the whole file is printed (a safe, slower build).
"""

from __future__ import annotations

import re
import sys
import tomllib
from typing import Any

KEPT = ("project", "dependency-groups", "build-system", "tool.uv", "tool.hatch")
_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")


def _kept(table: str) -> bool:
    name = table.replace('"', "").replace("'", "")
    return any(name == k or name.startswith(k + ".") for k in KEPT)


def _expected(full: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {k: v for k, v in full.items() if k != "tool" and _kept(k)}
    tool = {k: v for k, v in full.get("tool", {}).items() if _kept(f"tool.{k}")}
    if tool:
        out["tool"] = tool
    return out


def dependency_text(text: str) -> str:
    """`text` reduced to the kept tables, or `text` itself when the reduction is not exact."""
    lines, keep = [], False
    for line in text.splitlines(keepends=True):
        header = _HEADER.match(line)
        if header:
            keep = _kept(header.group(1))
        if keep:
            lines.append(line)
    reduced = "".join(lines)
    try:
        exact = tomllib.loads(reduced) == _expected(tomllib.loads(text))
    except tomllib.TOMLDecodeError:
        exact = False
    return reduced if exact else text


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        sys.stdout.write(dependency_text(f.read()))
