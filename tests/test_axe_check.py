"""The page checks' axe-core pass reports what it is there to report (tests/test_book_browser.py
:func:`_axe`): low contrast in prose, code and a formula is a violation at desktop width and
left to that pass at phone width; the colour rules judge one element of each kind, so a pale
element among a thousand alike is still found, and so is a link told from its text by colour
alone."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser

PAGE = """<!doctype html><html lang="en"><head><title>contrast</title></head><body><main>
<p style="color:#bbb">prose, too pale</p>
<div class="highlight"><pre style="color:#ccc">code, too pale</pre></div>
<span class="katex"><span class="katex-html" aria-hidden="true"><span style="color:#ddd">formula, too pale</span></span></span>
</main></body></html>"""

#: a thousand tokens of code alike, one of them pale; a formula's glyphs inside a pale box
MANY = """<!doctype html><html lang="en"><head><title>contrast</title><style>
.tok { color: #222; } .pale { color: #c8c8c8; } .box { background: #444; }
a { color: #333; text-decoration: none; }</style></head><body><main>
<pre>{tokens}</pre><p>{glyphs}</p><div class="box"><span class="g">sum</span></div>
<p>A paragraph of prose, long enough to be a block of text around its link, with
<a href="#x">a link told apart by colour alone</a> in the middle of it, and more prose after the
link so that the link is a small part of the paragraph's text.</p>
</main></body></html>"""


def _found(browser, html: str, rule: str = "color-contrast", phone: bool = False) -> list[str]:
    from test_book_browser import AXE_JS, _axe

    if not AXE_JS.is_file():
        pytest.fail(f"{AXE_JS} is missing: bash scripts/site.sh axe installs it")
    context = browser.new_context(viewport={"width": 390, "height": 844} if phone else {"width": 1280, "height": 900})
    try:
        page = context.new_page()
        page.set_content(html)
        return [v for v in _axe(page, phone=phone) if f" {rule}:" in v]
    finally:
        context.close()


def test_low_contrast_is_reported_at_desktop_width_and_left_to_it_on_a_phone(browser):
    found = _found(browser, PAGE)
    assert len(found) == 1 and "(3x" in found[0], found      # prose, code and formula
    assert _found(browser, PAGE, phone=True) == []            # the desktop pass's job


def test_one_pale_element_among_many_alike_is_found(browser):
    tokens = " ".join('<span class="tok">t</span>' for _ in range(1000))
    tokens = tokens[:20_000] + ' <span class="tok pale">pale</span> ' + tokens[20_000:]
    glyphs = " ".join('<span class="g">sum</span>' for _ in range(500))
    html = MANY.replace("{tokens}", tokens).replace("{glyphs}", glyphs)
    found = _found(browser, html)
    # the pale token, and a glyph alike the others but for the grey box it sits in
    assert len(found) == 1 and "(2x" in found[0], found
    links = _found(browser, html, rule="link-in-text-block")
    assert len(links) == 1 and "(1x" in links[0], links
