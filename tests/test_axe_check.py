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


def _found(browser, html: str, rule: str = "color-contrast", phone: bool = False, kinds=None,
           marked: list | None = None) -> list[str]:
    from test_book_browser import AXE_JS, _axe

    if not AXE_JS.is_file():
        pytest.fail(f"{AXE_JS} is missing: bash scripts/site.sh axe installs it")
    context = browser.new_context(viewport={"width": 390, "height": 844} if phone else {"width": 1280, "height": 900})
    try:
        page = context.new_page()
        page.set_content(html)
        found = [v for v in _axe(page, phone=phone, kinds=kinds) if f" {rule}:" in v]
        if marked is not None:  # how many elements the colour rules judged
            marked.append(page.evaluate("() => document.querySelectorAll('[data-attn-edu-sample]').length"))
        return found
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


READABLE = """<!doctype html><html lang="en"><head><title>contrast</title></head><body><main>
<p style="color:#222">prose</p><div class="highlight"><pre style="color:#333">code</pre></div>
{extra}</main></body></html>"""


def test_a_kind_judged_on_an_earlier_page_of_the_run_is_not_judged_again(browser, tmp_path):
    from test_book_browser import ColourKinds

    kinds, marked = ColourKinds(tmp_path / "kinds.jsonl"), []
    first = READABLE.replace("{extra}", "")
    assert _found(browser, first, kinds=kinds, marked=marked) == []
    assert marked[-1] == 2 and len(kinds.judged()) == 2          # both kinds judged, and passed
    assert _found(browser, first, kinds=kinds, marked=marked) == [] and marked[-1] == 0
    # a pale element is a kind of its own: judged (alone) on the page that has it, and found
    pale = READABLE.replace("{extra}", '<p style="color:#ccc">too pale</p>')
    found = _found(browser, pale, kinds=kinds, marked=marked)
    assert marked[-1] == 1 and len(found) == 1 and "(1x" in found[0], found
    # ... and not recorded as judged: the next page that has it reports it again
    assert len(kinds.judged()) == 2 and len(_found(browser, pale, kinds=kinds)) == 1
