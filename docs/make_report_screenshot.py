"""Regenerate docs/report-screenshot.png: the HTML report of fixtures/rank_stall_8ranks.log in headless
Chromium.

    python docs/make_report_screenshot.py

Needs Chromium (Debian's chromium package) and Pillow (to crop and reduce the palette, so the PNG stays
small).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "report-screenshot.png"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        page, shot = Path(tmp) / "report.html", Path(tmp) / "shot.png"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "nccl_logsift",
                "report",
                "fixtures/rank_stall_8ranks.log",  # as the README's command names it, wherever the clone is
                "-o",
                str(page),
            ],
            check=True,
            cwd=ROOT,
        )
        subprocess.run(
            [
                "chromium",
                *FLAGS,
                f"--user-data-dir={tmp}/profile",
                "--window-size=1280,2300",
                f"--screenshot={shot}",
                page.as_uri(),
            ],
            check=True,
            capture_output=True,
        )
        image = Image.open(shot).convert("RGB")
        image.quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(OUT, optimize=True)
    print(f"wrote {OUT} ({OUT.stat().st_size / 1e3:.0f} KB)")


if __name__ == "__main__":
    main()
