"""book/_ext/attn_edu_book.py, the parts that need no book build: figures deferred with a
text alternative, icons inlined, math typeset by KaTeX (the browser test checks the pages)."""
from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import pytest

pytest.importorskip("sphinx")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ext():
    spec = importlib.util.spec_from_file_location("attn_edu_book_ext", ROOT / "book" / "_ext" / "attn_edu_book.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _figure_html(fig) -> str:
    from attn_edu import notebook

    renderer = notebook._make_renderer_class()()
    return renderer.to_mimebundle(fig.to_plotly_json())["text/html"]


def test_a_figure_script_waits_for_figures_js_and_the_figure_gets_a_text_alternative(ext):
    go = pytest.importorskip("plotly.graph_objects")
    fig = go.Figure(go.Heatmap(z=[[1, 2], [3, 4]]), layout={"title": {"text": "Weights"}})
    body, n = ext._defer_figures("<p>text</p>" + _figure_html(fig), "page")
    assert n == 1
    assert '<script type="text/javascript">' not in body  # the browser does not run it...
    script = re.search(r'<script type="text/x-attn-edu-plotly" data-div="(attn-edu-plotly-\w+)">', body)
    assert script and f'<div id="{script.group(1)}" class="plotly-graph-div"' in body  # ...figures.js does
    assert 'role="figure" aria-label="Interactive figure: Weights. It shows heatmap."' in body


def test_a_trace_type_outside_the_bundle_is_a_build_warning(ext, monkeypatch):
    go = pytest.importorskip("plotly.graph_objects")
    warnings = []
    monkeypatch.setattr(ext.logger, "warning", lambda msg, *args: warnings.append(msg % args))
    ext._defer_figures(_figure_html(go.Figure(go.Scatter3d(x=[1], y=[1], z=[1]))), "ch")
    assert warnings and "['scatter3d']" in warnings[0]
    warnings.clear()
    ext._defer_figures(_figure_html(go.Figure([go.Bar(y=[1]), go.Scatter(y=[1])])), "ch")
    assert warnings == []


def test_the_vendored_plotly_bundle_is_the_plotly_js_of_the_installed_plotly(ext):
    pytest.importorskip("plotly")
    vendored = ext._js_version(ROOT / "book" / "_static" / ext.PLOTLY_STATIC)
    assert vendored and vendored == ext._js_version(ext.plotly_js_source())
    assert ext.plotly_bundle() == ext.PLOTLY_STATIC


def test_font_awesome_icons_become_inline_svg(ext):
    # as in fontawesome.js: each pack's icons, then its registration call (brands, regular, solid)
    js = ('var b={github:[496,512,[],"f09b","M165 1z"]};d("fab",b);var r={};d("far",r);'
          'var s={bars:[448,512,[],"f0c9","M0 96z"],"magnifying-glass":[512,512,[128269],"f002","M416 208z"]};'
          'd("fas",s);d("fas",s);')
    icons = ext._fontawesome_icons(js)
    assert set(icons) == {("brands", "github"), ("solid", "bars"), ("solid", "magnifying-glass")}
    page = ('<head><script defer src="../_static/scripts/fontawesome.js?digest=1"></script></head>'
            '<i class="theme-switch fa-solid fa-bars fa-lg" data-mode="light"></i>'
            '<span class="fab fa-github"></span>')
    new, done = ext._inline_icons(page, icons)
    assert done and "<i " not in new and "<span" not in new
    assert ('<svg class="theme-switch fa-solid fa-bars fa-lg svg-inline--fa" data-mode="light" '
            'aria-hidden="true"') in new and 'viewBox="0 0 448 512"' in new
    assert 'd="M165 1z"' in new
    assert ext._FA_SCRIPT_RE.sub("", new).startswith("<head></head>")
    _, done = ext._inline_icons('<i class="fa-solid fa-unknown-icon"></i>', icons)
    assert not done  # then the page keeps fontawesome.js


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_katex_typesets_at_build_time_and_reports_what_it_cannot(ext):
    out = ext.katex_render([(r"\sqrt{d_k}", False), (r"\begin{align}a &= b\\ c &= d\end{align}", True),
                            (r"\frac{1}{", False)])
    assert 'class="katex"' in out[0]["html"] and "<math" in out[0]["html"]  # MathML for readers
    assert 'class="katex-display"' in out[1]["html"]
    assert "error" in out[2]


def test_the_themes_tab_stop_pass_is_made_lazy_and_code_starts_focusable(ext, tmp_path):
    theme = pytest.importorskip("pydata_sphinx_theme")
    # the theme's own built script, as Sphinx copies it to _static/scripts/
    src = Path(theme.__file__).parent / "theme" / "pydata_sphinx_theme" / "static" / ext.THEME_JS
    js = tmp_path / "theme.js"
    shutil.copy(src, js)
    assert ext._patch_theme_tab_stops(js), "the installed theme's tab-stop code changed: update _THEME_TAB_STOP"
    text = js.read_text(encoding="utf-8")
    assert ext._THEME_TAB_STOP not in text and text.count("window.attnEduTabStop") == 2
    assert ext._patch_theme_tab_stops(js) and js.read_text(encoding="utf-8") == text  # idempotent
    other = tmp_path / "other.js"
    other.write_text("function f(){}", encoding="utf-8")
    assert not ext._patch_theme_tab_stops(other) and not ext._patch_theme_tab_stops(tmp_path / "absent.js")
    body = ('<pre><span>x</span></pre><pre id="c" tabindex="-1">y</pre><prefix>'
            '<div class="pst-scrollable-table-container"><table></table></div>')
    assert ext._focusable_code(body) == (
        '<pre tabindex="0"><span>x</span></pre><pre id="c" tabindex="-1">y</pre><prefix>'
        '<div class="pst-scrollable-table-container" tabindex="0"><table></table></div>')


def test_second_level_sections_get_a_placeholder_no_smaller_than_their_content(ext):
    tall = "<p>" + "word " * 800 + "</p>" + '<img src="a.png" alt="a">' * 2
    body = ('<section id="top"><h1>T</h1><p>intro</p>'
            f'<section id="a"><h2>A</h2>{tall}<section id="a1"><h3>A1</h3><pre>x\ny\n</pre></section></section>'
            '<section id="b"><h2>B</h2><p>short</p></section></section>')
    new = ext._section_placeholders(body)
    heights = [int(h) for h in re.findall(r'<section id="(?:a|b)" style="contain-intrinsic-size: auto (\d+)px">', new)]
    assert len(heights) == 2, new[:300]
    # 4,000 characters of text (100 lines of 40 on a phone, 28 px each) and two images
    assert heights[0] >= 100 * 28 + 2 * 500 and heights[1] < heights[0]
    assert '<section id="top">' in new and '<section id="a1">' in new  # only the second level
    assert re.sub(r' style="[^"]*"', "", new) == body
