"""The history report: metric trends, regressions and flaky tests (`testharness report`).

Pure cores: `rules` (which way is good, thresholds), `trends` (series and flags), `flaky`
(outcomes across runs of one commit), `chart` (the one chart renderer: a Scene of shapes).
Thin layers: `svg` and `png` (a Scene as SVG / as a PNG file), `page` (the HTML page),
`terminal` (rich tables), `cli` (arguments and the order of things).
"""

from testharness.report.cli import add_arguments, main, run
from testharness.report.flaky import FlakyTest, find_flaky
from testharness.report.page import render_html
from testharness.report.rules import ReportError, Rule, RuleBook, apply_cli_rules, rulebook_from_config
from testharness.report.trends import Trend, compute_trends

__all__ = [
    "FlakyTest",
    "ReportError",
    "Rule",
    "RuleBook",
    "Trend",
    "add_arguments",
    "apply_cli_rules",
    "compute_trends",
    "find_flaky",
    "main",
    "render_html",
    "rulebook_from_config",
    "run",
]
