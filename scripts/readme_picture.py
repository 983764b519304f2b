"""Regenerate the README's picture from the demo: a screenshot of `demo_out/card-compare/index.html`
(`vlbench suite-compare` of the tiny LLaVA's and baseline:random's report cards), taken in Debian's
headless Chromium driven by playwright, written to docs/report_card.png. Never edited by hand.

    make demo && .venv/bin/python scripts/readme_picture.py [DEMO_OUT] [PNG]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")


def screenshot(page_file: Path, png: Path, width: int = 1300, height: int = 1000) -> None:
    """The top of PAGE_FILE, WIDTH x HEIGHT CSS pixels, as a PNG."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=[
            "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        page = browser.new_page(viewport={"width": width, "height": height})
        page.goto(page_file.resolve().as_uri())
        page.screenshot(path=str(png))
        browser.close()


def main(argv: list[str]) -> int:
    demo = Path(argv[0]) if argv else ROOT / "demo_out"
    png = Path(argv[1]) if len(argv) > 1 else ROOT / "docs" / "report_card.png"
    page = demo / "card-compare" / "index.html"
    if not page.is_file():
        print(f"error: {page}: no such file (run `make demo` first)", file=sys.stderr)
        return 2
    if not CHROMIUM.exists():
        print(f"error: {CHROMIUM}: not installed (apt-get install chromium)", file=sys.stderr)
        return 2
    screenshot(page, png)
    print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
