"""The HTML report in a real headless browser (Debian's chromium): it loads, with no script
error, and draws one chart per selected metric. CI installs chromium (`apt-get install -y chromium`).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from testharness.history import load_history
from testharness.report import RuleBook, compute_trends, find_flaky, render_html

CHROMIUM = Path("/usr/bin/chromium")

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium (apt-get install -y chromium)"
)


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ]
    return subprocess.run([str(CHROMIUM), *flags, *args], check=False, capture_output=True, text=True, timeout=120)


def write_history(directory: Path) -> None:
    directory.mkdir(parents=True)
    for i, elapsed in enumerate([12.0, 12.4, 11.9, 18.0]):
        data = {
            "exit_status": 0,
            "git_commit": f"{i}abc{i}" * 8,
            "start_time": f"2026-03-0{i + 1} 09:30:00",
            "metrics": {
                "test_policy::test_generation": {"_elapsed": elapsed, "gen_mem": 900 + 10 * i, "note": "text"},
                "test_loss::test_nll": {"loss": 2.0 - 0.1 * i},
            },
            "tests": {},
        }
        (directory / f"2026030{i + 1}_093000.json").write_text(json.dumps(data))


def render(tmp_path: Path, extra_script: str = "") -> tuple[Path, int]:
    write_history(tmp_path / "h")
    history = load_history(tmp_path / "h")
    trends = compute_trends(history.runs, RuleBook())
    page = render_html(history, trends, find_flaky(history.runs), "Test history report")
    if extra_script:
        page = page.replace("</head>", f"<script>{extra_script}</script></head>")
    out = tmp_path / "report.html"
    out.write_text(page)
    return out, len(trends)


def status_of(dom: str) -> dict[str, str]:
    match = re.search(r'<p id="report-status"([^>]*)>(.*?)</p>', dom, re.DOTALL)
    assert match, "status element missing from the dumped DOM"
    attrs = dict(re.findall(r'data-([a-z]+)="([^"]*)"', match.group(1)))
    attrs["text"] = match.group(2)
    return attrs


def test_page_loads_without_error_and_draws_every_chart(tmp_path: Path) -> None:
    page, expected = render(tmp_path)
    assert expected == 3  # _elapsed and gen_mem of one test, loss of the other ("note" is text)
    result = chromium(tmp_path, "--dump-dom", page.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    status = status_of(result.stdout)
    assert status["state"] == "ok", status["text"]
    assert status["errors"] == "0"
    assert status["charts"] == str(expected)
    assert status["text"] == f"rendered {expected} chart(s), no script errors"
    assert result.stdout.count('class="series"') == expected


def test_a_script_error_on_the_page_is_reported(tmp_path: Path) -> None:
    # Proves the check above can fail: a broken page does not pass as "ok".
    page, _ = render(tmp_path, extra_script="undefinedFunction();")
    result = chromium(tmp_path, "--dump-dom", page.as_uri())
    status = status_of(result.stdout)
    assert status["state"] == "error"
    assert "undefinedFunction" in status["text"]


def test_screenshot_renders(tmp_path: Path) -> None:
    page, _ = render(tmp_path)
    shot = tmp_path / "shot.png"
    result = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1400,1000", "--hide-scrollbars", page.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a blank page compresses far below this
