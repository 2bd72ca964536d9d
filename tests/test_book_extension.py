"""book/_ext/attn_edu_book/ (a module per job), the parts that need no book build: figures
deferred with a text alternative, icons inlined, math typeset by KaTeX (the browser test
checks the pages)."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from conftest import book_extension

pytest.importorskip("sphinx")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ext():
    return book_extension("attn_edu_book_ext")


def _figure_html(fig) -> str:
    from attn_edu import notebook

    renderer = notebook._make_renderer_class()()
    return renderer.to_mimebundle(fig.to_plotly_json())["text/html"]


def test_a_figure_script_waits_for_figures_js_and_the_figure_gets_a_text_alternative(ext):
    go = pytest.importorskip("plotly.graph_objects")
    fig = go.Figure(go.Heatmap(z=[[1, 2], [3, 4]]), layout={"title": {"text": "Weights"}})
    body, n = ext.figures.defer_figures("<p>text</p>" + _figure_html(fig), "page")
    assert n == 1
    assert '<script type="text/javascript">' not in body  # the browser does not run it...
    script = re.search(r'<script type="text/x-attn-edu-plotly" data-div="(attn-edu-plotly-\w+)">', body)
    assert script and f'<div id="{script.group(1)}" class="plotly-graph-div"' in body  # ...figures.js does
    assert 'role="figure" aria-label="Interactive figure: Weights. It shows heatmap."' in body


def test_a_trace_type_outside_the_bundle_is_a_build_warning(ext, monkeypatch):
    go = pytest.importorskip("plotly.graph_objects")
    warnings = []
    monkeypatch.setattr(ext.figures.logger, "warning", lambda msg, *args: warnings.append(msg % args))
    ext.figures.defer_figures(_figure_html(go.Figure(go.Scatter3d(x=[1], y=[1], z=[1]))), "ch")
    assert warnings and "['scatter3d']" in warnings[0]
    warnings.clear()
    ext.figures.defer_figures(_figure_html(go.Figure([go.Bar(y=[1]), go.Scatter(y=[1])])), "ch")
    assert warnings == []


def test_the_vendored_plotly_bundle_is_the_plotly_js_of_the_installed_plotly(ext):
    pytest.importorskip("plotly")
    vendored = ext.figures._js_version(ROOT / "book" / "_static" / ext.figures.PLOTLY_STATIC)
    assert vendored and vendored == ext.figures._js_version(ext.figures.plotly_js_source())
    assert ext.figures.plotly_bundle() == ext.figures.PLOTLY_STATIC


def test_font_awesome_icons_become_inline_svg(ext):
    # as in fontawesome.js: each pack's icons, then its registration call (brands, regular, solid)
    js = ('var b={github:[496,512,[],"f09b","M165 1z"]};d("fab",b);var r={};d("far",r);'
          'var s={bars:[448,512,[],"f0c9","M0 96z"],"magnifying-glass":[512,512,[128269],"f002","M416 208z"]};'
          'd("fas",s);d("fas",s);')
    icons = ext.icons.fontawesome_icons(js)
    assert set(icons) == {("brands", "github"), ("solid", "bars"), ("solid", "magnifying-glass"),
                          ("brands", 0xf09b), ("solid", 0xf0c9), ("solid", 0xf002)}  # by name and code
    page = ('<head><script defer src="../_static/scripts/fontawesome.js?digest=1"></script></head>'
            '<i class="theme-switch fa-solid fa-bars fa-lg" data-mode="light"></i>'
            '<span class="fab fa-github"></span>')
    new, done = ext.icons.inline_icons(page, icons)
    assert done and "<i " not in new and "<span" not in new
    assert ('<svg class="theme-switch fa-solid fa-bars fa-lg svg-inline--fa" data-mode="light" '
            'aria-hidden="true"') in new and 'viewBox="0 0 448 512"' in new
    assert 'd="M165 1z"' in new
    assert ext.icons.FA_SCRIPT_RE.sub("", new).startswith("<head></head>")
    _, done = ext.icons.inline_icons('<i class="fa-solid fa-unknown-icon"></i>', icons)
    assert not done  # then the page keeps fontawesome.js


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_katex_typesets_at_build_time_and_reports_what_it_cannot(ext, tmp_path, monkeypatch):
    monkeypatch.setattr(ext.katex, "KATEX_CACHE", tmp_path / ".katex_cache.json")
    monkeypatch.setattr(ext.katex, "_katex_cache", None)
    items = [(r"\sqrt{d_k}", False), (r"\begin{align}a &= b\\ c &= d\end{align}", True), (r"\frac{1}{", False)]
    out = ext.katex.katex_render(items)
    assert 'class="katex"' in out[0]["html"] and "<math" in out[0]["html"]  # MathML for readers
    assert 'class="katex-display"' in out[1]["html"]
    assert "error" in out[2]
    # kept for the next build (the Chinese edition's formulas are the English ones): read back
    # without Node, in a new process's empty memory; a formula not seen before needs Node
    ext.katex.save_katex_cache()
    monkeypatch.setattr(ext.katex, "_katex_cache", None)
    monkeypatch.setattr(ext.katex.shutil, "which", lambda name: None)
    assert ext.katex.katex_render(items) == out
    assert ext.katex.katex_render([(r"\sqrt{d_v}", False)]) is None
    assert ext.katex.katex_render([(r"\sqrt{d_k}", True)]) is None  # display and inline differ


def test_the_themes_tab_stop_pass_is_made_lazy_and_code_starts_focusable(ext, tmp_path):
    theme = pytest.importorskip("pydata_sphinx_theme")
    # the theme's own built script, as Sphinx copies it to _static/scripts/
    src = Path(theme.__file__).parent / "theme" / "pydata_sphinx_theme" / "static" / ext.layout.THEME_JS
    js = tmp_path / "theme.js"
    shutil.copy(src, js)
    assert ext.layout.patch_theme_tab_stops(js), "the installed theme's tab-stop code changed: update _THEME_TAB_STOP"
    text = js.read_text(encoding="utf-8")
    assert ext.layout._THEME_TAB_STOP not in text and text.count("window.attnEduTabStop") == 2
    assert ext.layout.patch_theme_tab_stops(js) and js.read_text(encoding="utf-8") == text  # idempotent
    other = tmp_path / "other.js"
    other.write_text("function f(){}", encoding="utf-8")
    assert not ext.layout.patch_theme_tab_stops(other) and not ext.layout.patch_theme_tab_stops(tmp_path / "absent.js")
    body = ('<pre><span>x</span></pre><pre id="c" tabindex="-1">y</pre><prefix>'
            '<div class="pst-scrollable-table-container"><table></table></div>')
    assert ext.layout.focusable_code(body) == (
        '<pre tabindex="0"><span>x</span></pre><pre id="c" tabindex="-1">y</pre><prefix>'
        '<div class="pst-scrollable-table-container" tabindex="0"><table></table></div>')


def test_second_level_sections_get_a_placeholder_no_smaller_than_their_content(ext):
    tall = "<p>" + "word " * 800 + "</p>" + '<img src="a.png" alt="a">' * 2
    body = ('<section id="top"><h1>T</h1><p>intro</p>'
            f'<section id="a"><h2>A</h2>{tall}<section id="a1"><h3>A1</h3><pre>x\ny\n</pre></section></section>'
            '<section id="b"><h2>B</h2><p>short</p></section></section>')
    new = ext.layout.section_placeholders(body)
    heights = [int(h) for h in re.findall(r'<section id="(?:a|b)" style="contain-intrinsic-size: auto (\d+)px">', new)]
    assert len(heights) == 2, new[:300]
    # 4,000 characters of text (100 lines of 40 on a phone, 28 px each) and two images
    assert heights[0] >= 100 * 28 + 2 * 500 and heights[1] < heights[0]
    assert '<section id="top">' in new  # the first level is laid out at once
    # each block of a second-level section has its own (not its heading, not a bare image):
    # the paragraph's 100 lines, the third-level section with its two lines of code
    blocks = re.findall(r'<(p|section id="a1") style="contain-intrinsic-size: auto (\d+)px', new)
    assert [b for b, _ in blocks] == ["p", 'section id="a1"', "p"], blocks
    assert int(blocks[0][1]) >= 100 * 28 and int(blocks[1][1]) >= 2 * 21 + 40, blocks
    assert "<h2>A</h2>" in new and "<h1>T</h1><p>intro</p>" in new
    assert re.sub(r' style="[^"]*"', "", new) == body
    # Chinese: a character is about two of a Latin line's widths (20 a line on a phone)
    zh = ('<section id="top"><h1>T</h1><section id="c"><h2>C</h2><p>' + "注意力，" * 500 + "</p></section>"
          '<section id="d"><h2>D</h2><p>' + "word " * 400 + "</p></section></section>")
    c, d = (int(h) for h in re.findall(r'<section id="[cd]" style="contain-intrinsic-size: auto (\d+)px',
                                        ext.layout.section_placeholders(zh)))
    assert c >= 2000 // 20 * 28 and c > d  # 2,000 characters: 100 lines, as tall as 4,000 Latin ones


def test_a_figure_s_data_leaves_the_page_for_its_own_script(ext, tmp_path):
    go = pytest.importorskip("plotly.graph_objects")
    fig = go.Figure(go.Bar(y=[1, 2]), layout={"title": {"text": "Bars. Two of them"}})
    body, n = ext.figures.defer_figures(_figure_html(fig), "notebooks/ch", tmp_path)
    m = re.search(r'<script type="text/x-attn-edu-plotly" data-div="(attn-edu-plotly-\w+)" '
                  r'data-src="\.\./_static/attn-edu-figures/(attn-edu-plotly-\w+)\.js"></script>', body)
    assert n == 1 and m and m.group(1) == m.group(2)
    assert 'data-title="Bars"' in body  # the title ends at a sentence's end, not at any dot
    data = (tmp_path / ext.figures.FIGURE_DATA_DIR / f"{m.group(1)}.js").read_text()
    assert data.startswith("(window.attnEduFigureData=window.attnEduFigureData||{})[")
    import json as _json
    payload = _json.loads(data.split("]=", 1)[1].rstrip().rstrip(";"))
    assert payload["fig"]["data"][0]["type"] == "bar" and payload["config"]["responsive"] is True


def test_an_image_written_into_the_page_leaves_it_for_a_file(ext, tmp_path):
    import base64
    import hashlib

    png = b"\x89PNG\r\n\x1a\n" + b"\0\0\0\rIHDR" + (911).to_bytes(4, "big") + (620).to_bytes(4, "big") + bytes(range(256))
    b64 = base64.b64encode(png).decode()
    body = (f'<div class="attn-edu-explorer-static"><img src="data:image/png;base64,{b64}" alt="Now." '
            f'style="max-width:100%"></div><p>data:image/png;base64,{b64[:40]}</p>')
    name = hashlib.sha256(png).hexdigest() + ".png"
    new = ext.images.external_images(body, "notebooks/ch", tmp_path)
    assert f'<img src="../_images/{name}" width="911" height="620" alt="Now." style="max-width:100%">' in new
    assert (tmp_path / "_images" / name).read_bytes() == png
    assert new.endswith(f"<p>data:image/png;base64,{b64[:40]}</p>")  # text is left alone
    # the Chinese twin (one level deeper in its own output folder) names the same file
    assert f'src="../../_images/{name}"' in ext.images.external_images(body, "zh/notebooks/ch", tmp_path)
    # and, with its src now in _images/, it loads lazily below the introduction and opens full size
    page = "<section><h1>T</h1><p>intro</p><section><h2>S</h2>" + new + "</section></section>"
    zoomed, n = ext.images.zoomable_images(ext.images.lazy_images(page))
    assert n == 1 and f'<a class="attn-edu-zoom" href="../_images/{name}"' in zoomed
    assert '<img loading="lazy" decoding="async" src="../_images/' in zoomed
    assert ext.images.external_images(body, "notebooks/ch", None) == body


def test_a_figure_keeps_its_box_while_it_loads(ext, tmp_path):
    png = b"\x89PNG\r\n\x1a\n" + b"\0\0\0\rIHDR" + (911).to_bytes(4, "big") + (530).to_bytes(4, "big") + b"rest"
    (tmp_path / "_images").mkdir()
    (tmp_path / "_images" / "a.png").write_bytes(png)
    (tmp_path / "_images" / "b.png").write_bytes(b"GIF89a not a png at all..")
    page = tmp_path / "notebooks" / "ch.html"
    text = ('<img loading="lazy" alt="A." src="../_images/a.png">'
            '<img alt="B." src="../_images/b.png" />'
            '<img alt="C." src="../_images/missing.png">'
            '<img src="../_images/a.png" width="10" height="5" alt="D.">'
            '<img alt="E." src="https://example.org/_images/a.png">')
    new = ext.images.sized_images(text, page)
    assert new.startswith('<img loading="lazy" alt="A." src="../_images/a.png" width="911" height="530" />')
    # what is not a PNG, not there, already sized or not ours is left as it was
    assert new.removeprefix(new.split("/>", 1)[0] + "/>") == text.split(">", 1)[1]
    assert ext.images._png_size(png[:24]) == (911, 530) and ext.images._png_size(b"GIF89a" + bytes(18)) is None
    # book.css keeps a sized figure fluid: narrower than its width, it keeps its shape
    assert re.search(r"img\[width\]\[height\]\s*\{[^}]*height:\s*auto", (ext._common.STATIC_SRC / "attn-edu" / "book.css").read_text())


def test_a_page_loads_no_script_that_can_do_nothing_there(ext):
    from types import SimpleNamespace as NS

    def app(thebe):
        return NS(config=NS(html_theme_options={"launch_buttons": {"thebe": thebe, "colab_url": "x"}}))

    thebe_js, tabs_js = NS(filename="_static/sphinx-thebe.js?v=1", attributes={}), NS(filename="_static/design-tabs.js")
    config = NS(filename=None, attributes={"body": 'const THEBE_JS_URL = "x"'})
    other = NS(filename="", attributes={"body": "var togglebuttonSelector = '.toggle'"})
    idle = ext.assets.idle_assets(app(False), "<p>no tabs</p>")
    assert [ext.assets.asset_is(a, idle) for a in (thebe_js, tabs_js, config, other)] == [True, True, True, False]
    assert ext.assets.asset_is(NS(filename="_static/sphinx-thebe.css", attributes={}), idle)
    idle = ext.assets.idle_assets(app(True), '<div class="sd-tab-set docutils">')
    assert not any(ext.assets.asset_is(a, idle) for a in (thebe_js, tabs_js, config, other))


def test_inline_code_may_break_after_dots_and_images_open_full_size(ext):
    body = ('<p><code class="docutils literal notranslate"><span class="pre">attn_edu.reference_torch.f</span>'
            '</code></p><img alt="A plot." class="attn-edu-textpx-139" src="../_images/a.png" />'
            '<a class="reference internal image-reference" href="x.png"><img alt="b" src="../_images/b.png" /></a>')
    broken = ext.layout.breakable_code(body)
    assert '<span class="pre">attn_edu.<wbr>reference_torch.<wbr>f</span>' in broken
    # the written page keeps the text and its break points, not the span around each word
    sig = '<span class="sig-name descname"><span class="pre">softmax</span></span>'
    assert ext.layout.unwrap_pre(broken + sig) == broken.replace('<span class="pre">', "").replace(
        "f</span>", "f") + '<span class="sig-name descname">softmax</span>'
    new, n = ext.images.zoomable_images(body)
    assert n == 1  # the image that is already a link stays as it is
    assert ('<a class="attn-edu-zoom" href="../_images/a.png" aria-describedby="attn-edu-zoom-hint">'
            '<img alt="A plot." src="../_images/a.png" data-text-px="13.9" /></a>') in new
    assert '<span id="attn-edu-zoom-hint" hidden>' in new


def test_code_tokens_drawn_as_the_code_around_them_lose_their_element(ext):
    css = ('html[data-theme="light"] .highlight { background: #fefefe; color: #080808 }\n'
           'html[data-theme="light"] .highlight .n { color: #080808 } /* Name */\n'
           'html[data-theme="light"] .highlight .k { color: #6730C5 } /* Keyword */\n'
           'html[data-theme="light"] .highlight .p { color: #080808 } /* Punctuation */\n'
           'html[data-theme="light"] .highlight .nb { color: #080808; font-weight: bold }\n'
           'html[data-theme="dark"] .highlight { background: #2b2b2b; color: #F8F8F2 }\n'
           'html[data-theme="dark"] .highlight .n { color: #F8F8F2 } /* Name */\n'
           'html[data-theme="dark"] .highlight .p { color: #ABE338 } /* not the text colour here */\n')
    plain = ext.layout.plain_token_classes(css)
    assert plain == {"n"}  # p: another colour in the dark theme; nb: bold; k: a colour
    code = ('<div class="highlight"><pre tabindex="0"><span></span><span class="k">def</span><span class="w"> '
            '</span><span class="n">f</span><span class="p">(</span><span class="n">x&amp;</span></pre></div>')
    sig = '<em class="sig-param"><span class="n">q</span></em>'  # an API signature: not code
    out = ext.layout.unwrap_plain_tokens(code + sig, ext.layout.plain_token_re(plain | {"w"}))
    assert out == ('<div class="highlight"><pre tabindex="0"><span></span><span class="k">def</span> f'
                   '<span class="p">(</span>x&amp;</pre></div>' + sig)
    assert ext.layout.unwrap_plain_tokens(code, ext.layout.plain_token_re(set())) == code


def test_each_page_gets_only_the_css_rules_that_can_match_it(ext, tmp_path):
    pytest.importorskip("tinycss2")
    static = tmp_path / "_static"
    (static / "scripts").mkdir(parents=True)
    (static / "katex" / "fonts").mkdir(parents=True)
    (static / "katex" / "fonts" / "KaTeX_Main-Regular.woff2").write_bytes(b"")
    (static / "theme.css").write_text(
        ':root{--pst-icon-bell:"\\f0f3";--pst-icon-admonition-default:var(--pst-icon-bell)}'
        ".used{color:red}.unused{color:blue}.used:not(.absent){margin:0}.shown-by-js{top:0}"
        "@media (min-width:9px){.unused{x:1}.used{y:2}}"
        ".admonition>.admonition-title:after{content:var(--pst-icon-admonition-default);font:var(--fa-font-solid)}"
        ".fa-solid{font-family:Font Awesome\\ 6 Free}"
        '@font-face{font-family:"Font Awesome 6 Free";src:url(fa.woff2)}')
    (static / "katex" / "katex.min.css").write_text(
        "@font-face{font-family:KaTeX_Main;src:url(fonts/KaTeX_Main-Regular.woff2) format(\"woff2\")}.katex{font:1em KaTeX_Main}")
    (static / "app.js").write_text('el.classList.add("shown-by-js")')
    page = tmp_path / "notebooks" / "p.html"
    page.parent.mkdir()
    page.write_text('<html><head><link rel="stylesheet" href="../_static/theme.css?v=1" />\n'
                    '<link rel="stylesheet" type="text/css" href="../_static/katex/katex.min.css" />\n'
                    '<script defer src="../_static/app.js"></script></head><body><article class="bd-article">'
                    '<div class="used admonition"><p class="admonition-title">T</p><svg class="fa-solid"></svg></div>'
                    '<span class="katex">x</span></article></body></html>')
    icons = {("solid", 0xf0f3): ("448", "512", "M224 0z")}
    top = tmp_path / "top.html"  # a page one folder up: its URLs differ
    top.write_text(page.read_text().replace("../_static", "_static"))
    both = ext.stylesheets.inline_stylesheets(tmp_path, [(page, page.read_text()), (top, top.read_text())], icons)
    assert 'url("_static/katex/fonts/KaTeX_Main-Regular.woff2")' in both[top]
    new = both[page]
    style = re.search(r'<style id="attn-edu-css" data-sheets="[^"]*">(.*?)</style>', new).group(1)
    assert "<link rel=\"stylesheet\"" not in new
    assert ".used{color:red}" in style and ".unused" not in style and ".used:not(.absent)" in style
    assert ".shown-by-js{top:0}" in style and "@media (min-width:9px){.used{y:2}}" in style
    assert "Font Awesome" not in style.split(".fa-solid")[0] and "fa.woff2" not in style
    assert 'content:"";--attn-edu-icon:url("data:image/svg+xml,' in style and "M224 0z" in style
    assert "mask:var(--attn-edu-icon)" in style.split(".admonition>")[1].split("}")[0]
    assert "mask" not in style.split(".fa-solid{")[1].split("}")[0]  # the inline <svg> icons are untouched
    assert 'font-display:swap;font-family:KaTeX_Main;src:url("../_static/katex/fonts/KaTeX_Main-Regular.woff2")' in style
    assert '<link rel="preload" href="../_static/katex/fonts/KaTeX_Main-Regular.woff2" as="font"' in new
    # run again (after a CSS edit): the page's own sheets are inlined again, the same way
    assert ext.stylesheets.inline_stylesheets(tmp_path, [(page, new)], icons)[page] == new


def test_the_search_index_stays_on_the_search_page(ext, tmp_path):
    (tmp_path / "_static").mkdir()
    (tmp_path / "_static" / "documentation_options.js").write_text("const DOCUMENTATION_OPTIONS = {};")
    head = ('<head><script src="_static/documentation_options.js?v=1"></script>\n'
            '<link rel="preload" as="script" href="_static/scripts/bootstrap.js?digest=1" />\n'
            '<script src="_static/searchtools.js"></script>\n<script src="searchindex.js"></script></head>'
            '<body><img alt="Colab logo" src="x.png"><article class="bd-article"><img alt="a" src="y.png"></article></body>')
    for name in ("page.html", "search.html"):
        (tmp_path / name).write_text(head)
    ext.pages.finish_html(tmp_path)
    page, search = (tmp_path / "page.html").read_text(), (tmp_path / "search.html").read_text()
    assert "searchindex.js" not in page and "searchtools.js" not in page
    assert '<script defer src="searchindex.js">' in search
    assert "<script>const DOCUMENTATION_OPTIONS = {};</script>" in page and 'rel="preload" as="script"' not in page
    assert '<img loading="lazy" alt="Colab logo"' in page and '<img alt="a"' in page


def test_the_search_button_is_named_by_what_it_shows(ext, tmp_path):
    """The theme names its search button "Search" while it shows "Search Ctrl + K" (axe's
    label-content-name-mismatch): the build drops the aria-label, so its text is its name."""
    button = ('<button class="btn search-button-field search-button__button pst-js-only" title="搜索" '
              'aria-label="搜索" data-bs-toggle="tooltip"><span>搜索</span><kbd>Ctrl</kbd>+<kbd>K</kbd></button>'
              '<button class="other" aria-label="kept">x</button>')
    (tmp_path / "page.html").write_text(f"<head></head><body>{button}</body>")
    ext.pages.finish_html(tmp_path)
    page = (tmp_path / "page.html").read_text()
    assert '<button class="btn search-button-field search-button__button pst-js-only" title="搜索" data-bs' in page
    assert 'aria-label="搜索"' not in page and 'aria-label="kept"' in page


def test_katex_fonts_are_cut_to_the_characters_of_the_formulas(ext, tmp_path):
    pytest.importorskip("brotli")
    ttlib = pytest.importorskip("fontTools.ttLib")
    page = ('<p>prose Ωmega</p><span class="katex"><span class="katex-mathml">ignored Z</span>'
            '<span class="katex-html" aria-hidden="true"><span class="mord mathbb">R</span>'
            '<span class="mrel">&#8804;</span><span class="mord">x<span class="msupsub">2</span></span>'
            '</span></span><p>after: Q</p>')
    chars = ext.katex.math_characters([page])
    assert {"R", "≤", "x", "2", "(", ")"} <= chars and not {"Ω", "Z", "Q", "p"} & chars
    (tmp_path / "_static" / "katex" / "fonts").mkdir(parents=True)
    assert ext.katex.subset_katex_fonts(tmp_path, chars) > 0
    for src in sorted(ext.katex.KATEX_FONTS_SRC.glob("*.woff2")):
        cut = tmp_path / "_static" / "katex" / "fonts" / src.name
        whole = set(ttlib.TTFont(src).getBestCmap())
        # every glyph the formulas need from this font (and what its layout tables tie to them)
        kept = set(ttlib.TTFont(cut).getBestCmap())
        assert whole & {ord(c) for c in chars} <= kept <= whole and len(kept) < len(whole) / 3, src.name
    main = tmp_path / "_static" / "katex" / "fonts" / "KaTeX_Main-Regular.woff2"
    assert main.stat().st_size < (ext.katex.KATEX_FONTS_SRC / main.name).stat().st_size / 2


def test_the_chinese_edition_shows_the_explorer_note_colab_link_and_alt_text_in_chinese(ext):
    """The Chinese pages carry the English execution's outputs (scripts/zh.py site): the build
    of the edition attn_edu_edition = "zh" puts the explorers' notes, their Colab sentence and
    the figures' text alternatives in Chinese; the English edition's are as they were."""
    from types import SimpleNamespace as NS

    go = pytest.importorskip("plotly.graph_objects")
    from attn_edu.widgets import live_note

    fig = go.Figure(go.Heatmap(z=[[1, 2], [3, 4]]), layout={"title": {"text": "Weights"}})
    note = f'<p class="attn-edu-live-note">{live_note("T = 1")} {ext.figures.COLAB_SLOT}</p>'
    body = note + _figure_html(fig)
    opts = {"launch_buttons": {"colab_url": "https://colab.research.google.com"},
            "repository_url": "https://github.com/o/r", "path_to_docs": "notebooks/zh"}
    pages = {}
    for edition in ("en", "zh"):
        app = NS(builder=NS(format="html"), outdir=None, add_js_file=lambda *a, **k: None,
                 config=NS(attn_edu_edition=edition, html_theme_options=opts, _attn_edu_plotly="x.js"))
        context = {"body": body}
        ext.pages.page_context(app, "01_x", "page.html", context, None)
        pages[edition] = context["body"]
    en, zh = pages["en"], pages["zh"]
    assert ("<strong>Live explorer.</strong> In Jupyter or Colab this figure recomputes as you move its "
            "controls; here it is shown for T = 1. <a href=\"https://colab.research.google.com/github/o/r/"
            "blob/main/notebooks/zh/01_x.ipynb\">Open this chapter in Colab</a> to move them.</p>") in en
    assert 'aria-label="Interactive figure: Weights. It shows heatmap."' in en and 'data-title="Weights"' in en
    assert "<strong>交互式探索器。</strong>" in zh and "这里显示的是 T = 1 时的结果。" in zh
    assert ">在 Colab 中打开本章</a>即可拖动它们。</p>" in zh and "Live explorer" not in zh
    assert 'aria-label="交互式图：Weights。图中有热力图。"' in zh and 'data-title="Weights"' in zh
    from attn_edu import i18n

    assert i18n.current_language() == "en"  # the build's Chinese did not leak into the process
