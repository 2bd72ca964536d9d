"""The page checks' axe-core pass reports what it is there to report (tests/test_book_browser.py
:func:`_axe`): a low-contrast text is a violation on an English page, in the prose of a Chinese
page, and not at phone width, where the desktop pass has checked the colours; on a Chinese page
the code and formulas it shares with its English twin are left to the English page's check."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser

PAGE = """<!doctype html><html lang="en"><head><title>contrast</title></head><body><main>
<p style="color:#bbb">prose, too pale</p>
<div class="highlight"><pre style="color:#ccc">code, too pale</pre></div>
<span class="katex"><span class="katex-html" aria-hidden="true"><span style="color:#ddd">formula, too pale</span></span></span>
</main></body></html>"""


def _contrast(browser, name: str, phone: bool = False) -> list[str]:
    from test_book_browser import AXE_JS, _axe

    if not AXE_JS.is_file():
        pytest.fail(f"{AXE_JS} is missing: bash scripts/site.sh axe installs it")
    context = browser.new_context(viewport={"width": 390, "height": 844} if phone else {"width": 1280, "height": 900})
    try:
        page = context.new_page()
        page.set_content(PAGE)
        return [v for v in _axe(page, name, phone=phone) if " color-contrast:" in v]
    finally:
        context.close()


def test_low_contrast_is_reported_where_the_page_check_looks_for_it(browser):
    english = _contrast(browser, "notebooks/02_why_sqrt_dk")
    assert len(english) == 1 and "(3x" in english[0], english      # prose, code and formula
    chinese = _contrast(browser, "zh/notebooks/02_why_sqrt_dk")
    assert len(chinese) == 1 and "(1x" in chinese[0] and chinese[0].endswith("e.g. p)"), chinese  # the prose
    assert _contrast(browser, "notebooks/02_why_sqrt_dk", phone=True) == []  # the desktop pass's job
