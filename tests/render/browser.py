"""Headless Chromium for the report tests: the DOM after the page's own script ran, console messages,
screenshots.

Chromium is Debian's ``chromium`` package; ``.ci/run`` installs it and sets LOGSIFT_REQUIRE_BROWSER=1, so on
CI a missing browser fails the tests instead of skipping them. The flags keep it off the network (this
machine's network is closed, and a report must not need one).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--disable-extensions",
    "--mute-audio",
)


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("LOGSIFT_REQUIRE_BROWSER") == "1":
        pytest.fail("Chromium is required (LOGSIFT_REQUIRE_BROWSER=1) but not installed")
    pytest.skip("Chromium is not installed (apt-get install chromium)")


@dataclass
class Loaded:
    dom: str  # the serialised DOM after load and the page's scripts
    console: str  # what the browser logged: CSP violations show up here


def load(page: Path, budget_ms: int = 3000, fragment: str = "", width: int = 1400) -> Loaded:
    """Open ``page`` from disk (with ``#fragment``) in a window ``width`` pixels wide and return its DOM once
    scripts ran (virtual time, so it does not wait)."""
    with tempfile.TemporaryDirectory(prefix="logsift-chromium-") as profile:
        done = subprocess.run(
            [
                chromium(),
                *FLAGS,
                f"--user-data-dir={profile}",
                f"--virtual-time-budget={budget_ms}",
                f"--window-size={width},1000",
                "--enable-logging=stderr",
                "--v=0",
                "--dump-dom",
                page.resolve().as_uri() + (f"#{fragment}" if fragment else ""),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    return Loaded(dom=done.stdout, console=done.stderr)


def screenshot(page: Path, png: Path, width: int = 1400, height: int = 2000) -> Path:
    with tempfile.TemporaryDirectory(prefix="logsift-chromium-") as profile:
        done = subprocess.run(
            [
                chromium(),
                *FLAGS,
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                f"--screenshot={png}",
                page.resolve().as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0 and png.exists(), done.stderr[-2000:]
    return png
