"""The harness's own tests drive inner pytest runs with the `pytester` fixture.

`pytest_plugins` is only allowed in the root conftest, so the pytester plugin is loaded
here, when this conftest is registered (pytest_configure is a historic hook: it runs for
late conftests too, and pytester's options are then added with their defaults).
"""

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("pytester"):
        config.pluginmanager.import_plugin("pytester")
