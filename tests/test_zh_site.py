"""The built site's two editions (``pages``: run on a built book by ``bash scripts/site.sh
check``, as the publishing workflow does): every English page has its Chinese twin under
``zh/`` and a switch to it and back, the Chinese chapters show the English build's outputs (the
one execution) translated, with no English words left in them, their Colab links open the
Chinese notebooks, and Chinese search finds the chapters for 注意力 and for 缩放."""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from site_pages import toc_files

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
HTML = REPO / "_build" / "html"
pytestmark = [pytest.mark.pages]
yaml = pytest.importorskip("yaml")  # the toc; collection needs NumPy only
PAGES = toc_files(REPO)


@pytest.fixture(scope="module")
def built() -> Path:
    if os.environ.get("ATTN_EDU_BOOK_BUILT") != "1":
        pytest.skip("checks a built book: bash scripts/build-book.sh && bash scripts/site.sh check")
    assert (HTML / "zh" / "index.html").is_file(), "the Chinese edition was not built (_build/html/zh/)"
    return HTML


def _switch(text: str) -> str:
    m = re.search(r'<p class="attn-edu-edition"[^>]*><a href="([^"]+)" lang="([^"]+)"', text)
    assert m, "no edition switch"
    return m.group(1), m.group(2)


@pytest.mark.parametrize("page", PAGES)
def test_every_page_has_its_twin_and_the_switch_goes_both_ways(page, built):
    en, zh = built / f"{page}.html", built / "zh" / f"{page}.html"
    assert zh.is_file(), f"no Chinese twin of {page}"
    en_text, zh_text = en.read_text(encoding="utf-8"), zh.read_text(encoding="utf-8")
    assert '<html lang="en"' in en_text and '<html lang="zh-CN"' in zh_text
    href, lang = _switch(en_text)
    assert lang == "zh-CN" and (en.parent / href).resolve() == zh.resolve(), href
    href, lang = _switch(zh_text)
    assert lang == "en" and (zh.parent / href).resolve() == en.resolve(), href
    assert len(re.findall(r"[\u4e00-\u9fff]", zh_text)) > 200, "the Chinese page is not in Chinese"
    for text in (en_text, zh_text):  # no "Live code", no tab set (attn_edu_book/assets.py)
        assert not re.search(r"sphinx-thebe|THEBE_JS_URL|design-tabs\.js", text), page
    # a dropdown's hint (sphinx-togglebutton's, written into the page's script) in its edition's language
    assert "let toggleHintShow = 'Click to show';" in en_text, page
    assert "let toggleHintShow = '点击显示';" in zh_text and "let toggleHintHide = '点击隐藏';" in zh_text, page


CHAPTERS = [p for p in PAGES if p.startswith("notebooks/")]


def _figure_json(path: Path) -> dict:
    import zh_outputs

    return json.loads(zh_outputs._FIGURE_DATA.search(path.read_text(encoding="utf-8")).group(1))


@pytest.mark.parametrize("page", CHAPTERS)
def test_chinese_chapters_show_the_english_outputs_translated_and_open_the_chinese_notebook(page, built):
    en = (built / f"{page}.html").read_text(encoding="utf-8")
    zh = (built / "zh" / f"{page}.html").read_text(encoding="utf-8")
    outputs = [t.count('class="cell_output') for t in (en, zh)]
    assert outputs[0] > 0 and outputs[0] == outputs[1], f"outputs: English {outputs[0]}, Chinese {outputs[1]}"
    name = page.split("/")[-1]
    assert f"/blob/main/notebooks/zh/{name}.ipynb" in zh and f"/blob/main/notebooks/{name}.ipynb" in en
    # the figures are the English page's, translated: plotly's data file for file, each the
    # English figure through the output catalogs; as many matplotlib images (the Chinese ones
    # drawn with Chinese words by the same execution)
    from attn_edu.i18n_outputs import chapter_scope, translate_plotly

    pattern = r'data-src="\.\./(_static/attn-edu-figures/[^"]+)"'
    files = [re.findall(pattern, t) for t in (en, zh)]
    assert files[0] == files[1], f"{page}: the Chinese page's plotly figures are not the English page's"
    with chapter_scope(name[:2]):  # the chapter's own entries first, as scripts/zh.py site reads them
        for f in files[0]:
            assert _figure_json(built / "zh" / f) == translate_plotly(_figure_json(built / f), "zh"), \
                f"{page}: zh/{f} is not the English figure translated"
    images = [len(re.findall(r'<img [^>]*src="\.\./_images/', t)) for t in (en, zh)]
    assert images[0] == images[1], f"{page}: images: English {images[0]}, Chinese {images[1]}"


@pytest.mark.parametrize("page", CHAPTERS)
def test_chinese_chapters_outputs_are_the_english_execution_translated(page, built):
    """The Chinese book's sources (_build/zh-src, scripts/zh.py site) carry, cell for cell, the
    English execution's outputs through :func:`attn_edu.i18n_outputs.translate_cell_outputs`:
    nothing executed twice, nothing else changed."""
    import nbformat
    from jupyter_cache import get_cache

    import zh
    from attn_edu.i18n_outputs import chapter_scope, translate_cell_outputs

    name = page.split("/")[-1] + ".ipynb"
    if not (zh.ZH / name).exists():
        pytest.skip(f"{name} has no Chinese twin")
    _, merged = get_cache(str(zh.CACHE)).merge_match_into_notebook(nbformat.from_dict(zh.load(zh.EN / name)))
    english = {c["id"]: c for c in json.loads(json.dumps(merged))["cells"] if c["cell_type"] == "code"}
    built_zh = zh.load(zh.SRC / "notebooks" / name)
    for cell in built_zh["cells"]:
        if cell["cell_type"] != "code":
            continue
        en_cell = english[cell["metadata"]["attn_edu"]["en"]]
        with chapter_scope(name[:2]):
            expected = translate_cell_outputs(en_cell, "zh")
        assert cell["outputs"] == expected, \
            f"{name} cell {en_cell['id']}: the Chinese outputs are not the English ones translated"


@pytest.mark.parametrize("page", CHAPTERS)
def test_chinese_chapters_outputs_show_no_english(page, built):
    """No string of a Chinese chapter's output areas (printed lines, tables, explorer notes,
    alt text, plotly figures' words) shows English words outside the allow-list
    (attn_edu.i18n_outputs.ALLOWED_WORDS), the entries the catalogs declare language-neutral
    (msgstr = msgid) and cells tagged output-is-code. While the catalogs are incomplete this
    fails, listing the chapter's count and first 30 strings (all of them:
    python scripts/zh_outputs.py pages NN)."""
    import zh_outputs

    path = built / "zh" / f"{page}.html"
    found = zh_outputs.page_offenders(path.read_text(encoding="utf-8"), path.parent)
    listing = "\n".join(f"  [{what}] {text[:120]!r}  ({', '.join(words[:6])})" for what, text, words in found[:30])
    assert not found, f"{page}: {len(found)} output strings with English words; the first 30:\n{listing}"


@pytest.fixture(scope="module")
def site(built):
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(built)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.browser
@pytest.mark.parametrize("query", ["注意力", "缩放"])
def test_chinese_search_finds_the_chapters(query, site, browser):
    page = browser.new_page()
    try:
        page.goto(f"{site}/zh/search.html?q={query}")
        # until Sphinx says the search finished: it shows the results one by one, each page's
        # after fetching its summary, so the glossary's terms come first and, on a busy
        # machine, the chapters seconds later
        page.wait_for_function("() => { const s = document.querySelector('#search-results p.search-summary');"
                               " return !!s && s.innerText.trim().length > 0; }", timeout=60_000)
        links = page.eval_on_selector_all("#search-results li a", "els => els.map(e => e.getAttribute('href'))")
    finally:
        page.close()
    chapters = {h.split("#")[0] for h in links if h.startswith("notebooks/")}
    assert len(chapters) >= 3, f"{query}: {links[:10]}"


#: the CJK system fonts the Chinese pages name (book/_static/attn-edu/book.css)
CJK_FONTS = ("PingFang SC", "Hiragino Sans GB", "Microsoft YaHei", "Noto Sans CJK SC", "Noto Sans SC",
             "Source Han Sans SC", "WenQuanYi Micro Hei")


@pytest.mark.browser
def test_chinese_text_is_drawn_in_a_named_cjk_system_font(site, browser):
    """The Chinese pages' text names the CJK system fonts, so the browser finds the font of
    Chinese text in the page's own list rather than by searching the system for each run of
    it (which doubled a Chinese chapter's first layout on a phone profile); headings too. On
    this machine the characters are drawn by one of the named fonts."""
    page = browser.new_page()
    try:
        page.goto(f"{site}/zh/notebooks/02_why_sqrt_dk.html")
        families = page.evaluate("() => ['article p', 'article h1', 'article h2'].map("
                                 "s => getComputedStyle(document.querySelector(s)).fontFamily)")
        for family in families:
            names = [f.strip().strip('"') for f in family.split(",")]
            assert names[0] == "system-ui" and all(f in names for f in CJK_FONTS), family
            assert names.index("WenQuanYi Micro Hei") < names.index("sans-serif"), family
        cdp = page.context.new_cdp_session(page)
        cdp.send("DOM.enable")
        cdp.send("CSS.enable")
        root = cdp.send("DOM.getDocument")["root"]["nodeId"]
        node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": "article section > p"})["nodeId"]
        used = cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]
        page_text = page.evaluate("() => document.querySelector('article section > p').textContent")
    finally:
        page.close()
    assert re.search(r"[\u4e00-\u9fff]", page_text), page_text[:80]
    # scripts/site.sh installs fonts-wqy-microhei where no CJK font is
    assert any(f["familyName"] in CJK_FONTS and f["glyphCount"] > 0 for f in used), \
        f"no named CJK font draws the paragraph: {used} (Debian: apt-get install fonts-wqy-microhei)"
