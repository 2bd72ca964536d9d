"""What a chapter shows, translated (attn_edu/i18n_outputs.py): the skeleton and lookup rule,
the output catalogs' consistency (placeholders, each .mo its .po compiled), the walkers of
plotly JSON, HTML and notebook outputs, matplotlib figures drawn with translated words, and
the live kernel's translation (setup_notebook(lang="zh"))."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from venvs import REPO

from attn_edu import i18n_outputs as io

sys.path.insert(0, str(REPO / "scripts"))

ENTRIES = {"attention weights": "注意力权重", "n ={0}: naive{1} MiB": "n = {0}：朴素实现 {1} MiB",
           "row sum": "行和", "temperature T": "温度 T", "keys": "键", "low": "低",
           "max|err|": "max|err|", "query{0}": "查询 {0}"}


@pytest.fixture(autouse=True)
def _close_figures():
    """The figures a test draws are closed after it (other tests count pyplot's figures)."""
    yield
    import sys as _sys
    if "matplotlib.pyplot" in _sys.modules:
        _sys.modules["matplotlib.pyplot"].close("all")


@pytest.fixture
def catalog(monkeypatch):
    """A small Chinese catalog in place of the committed ones (which translators fill)."""
    monkeypatch.setitem(io._merged, "zh", dict(ENTRIES))
    yield ENTRIES


# --------------------------------------------------------------------------- skeleton, lookup
def test_skeleton_replaces_numbers_not_names():
    assert io.skeleton("n = 2048: naive  16.00 MiB (16 workers)") == \
        ("n ={0}: naive{1} MiB ({2} workers)", [" 2048", "  16.00", "16"])
    # float32, H100, sm_90a and 1e-3's letter are names or part of a number, not numbers
    assert io.skeleton("float32 on H100 sm_90a") == ("float32 on H100 sm_90a", [])
    assert io.skeleton("tol 1e-3, 1,024 rows") == ("tol{0},{1} rows", [" 1e-3", " 1,024"])
    assert io.skeleton("{x} = 3") == ("{{x}} ={0}", [" 3"])


def test_a_gpus_name_and_a_version_are_placeholders_of_the_last_lookup_only():
    line = "torch 2.11.0+cu130, device cuda (NVIDIA H100 80GB HBM3, compute capability 9.0)"
    assert io.skeleton(line)[0] == "torch{0}.0+cu130, device cuda (NVIDIA H100{1}GB HBM3, compute capability{2})"
    assert io.skeleton(line, names=True) == ("torch{0}, device cuda ({1}, compute capability{2})",
                                             [" 2.11.0+cu130", "NVIDIA H100 80GB HBM3", " 9.0"])
    # a name ends at a comma, a bracket or " x "; a word that is no vendor's stays text
    assert io.skeleton("measured on 2 x Tesla T4, overlap=True: 9.5 ms", names=True) == \
        ("measured on{0} x{1}, overlap=True:{2} ms", [" 2", " Tesla T4", " 9.5"])
    assert io.skeleton("Teslas and NVIDIAN words, 3", names=True)[0] == "Teslas and NVIDIAN words,{0}"


def test_an_entry_for_a_gpu_line_serves_every_gpu(monkeypatch):
    monkeypatch.setitem(io._merged, "zh", {"measured on{0}, n ={1}: compute{2} ms": "在{0} 上测得，n ={1}：计算{2} ms",
                                           "NVIDIA H100{0}GB HBM3 (GPU)": "NVIDIA H100{0}GB HBM3（GPU）"})
    for gpu in ("Tesla T4", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"):
        assert io.translate_text(f"measured on {gpu}, n = 4096: compute 1.25 ms", "zh") == \
            f"在 {gpu} 上测得，n = 4096：计算 1.25 ms"
    # an entry keyed the first way still wins (the recorded runs' lines, built on the CPU)
    assert io.translate_text("NVIDIA H100 80GB HBM3 (GPU)", "zh") == "NVIDIA H100 80GB HBM3（GPU）"


#: Lines the chapters print only on a GPU (their ``if GPU:`` branches), as a T4 and an H100
#: print them; the CPU build never shows them, so ``zh_outputs.py extract`` cannot find them
GPU_LINES = [
    "skipped: none", "torch_naive  memory exponent 2.01", "torch_sdpa   memory exponent 1.00",
    "torch_flash  memory exponent 1.02", "triton       memory exponent 1.00",
    "16 heads, d = 64, float16, on Tesla T4 (GPU), 2026-12-02",
    "16 heads, d = 64, bfloat16, on NVIDIA H100 80GB HBM3 (GPU), 2026-12-02",
    "GPU, n = 4096: naive    64.0 MiB, tiled    4.1 MiB",
    "torch 2.11.0+cu130, device cuda (Tesla T4, compute capability 7.5)",
    "torch 2.9.0+cu126, device cuda (NVIDIA H100 80GB HBM3, compute capability 9.0)",
    "Tesla T4, n=4096, d=64, our kernel: non-causal 12.31 ms, causal 7.02 ms, so causal is 1.75x faster "
    "(the skipped tiles allow less than 2x)",
    "tiles the autotuner tries on this GPU at d = 64 (Triton 3.6.0 here):",
    "tiles the autotuner tries on this GPU at d = 64 (Triton not installed here):",
    "naive (matmul-softmax-matmul) at n=16384: skipped, it would not fit in this GPU's memory",
    "tiled PyTorch (ch. 09) at n=65536: skipped, it would not fit in this GPU's memory",
    "Triton (ours) at n=65536: skipped, it would not fit in this GPU's memory",
    "SDPA efficient at n=65536: skipped, it would not fit in this GPU's memory",
    "naive (matmul-softmax-matmul) at n=16384: failed, OutOfMemoryError",
    "GPU, 8 heads, n = 16384, float32: PyTorch SDPA 10.52 ms, linear attention (torch) 1.31 ms",
    "measured on NVIDIA H100 80GB HBM3, n = 4096: compute 0.21 ms, copy 0.05 ms, both 0.22 ms (hidden: 95% ± 4%)",
    "measured on 2 x NVIDIA H100 80GB HBM3, overlap=False: 12.3 ms per forward",
    "measured on 2 x Tesla T4, overlap=True: 101.0 ms per forward",
    "the tiles, in the order of ft.FORWARD_VARIANTS: [(32, 32, 4, 1), (32, 32, 4, 1), (32, 32, 4, 1), (32, 32, 4, 1), "
    "(32, 32, 4, 1)]",
]


def _gpu_print_literals():
    """The literal words of every ``print`` in a chapter's GPU-only branch (scripts/gpu_run.py
    finds the branches): (chapter, cell, the longest literal piece with English words)."""
    import ast

    import gpu_run

    found = {}
    exec(gpu_run.GPU_BRANCHES, found)
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            for _, body, _ in found["gpu_branches"](ast.parse("".join(cell["source"]))):
                for node in (n for stmt in body for n in ast.walk(stmt)):
                    if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print"):
                        continue
                    pieces = [c.value for a in node.args for c in ast.walk(a)
                              if isinstance(c, ast.Constant) and isinstance(c.value, str)]
                    pieces = [p.strip() for p in pieces if io.english_words(p)]
                    if pieces:
                        yield path.name[:2], cell.get("id"), max(pieces, key=len)


def test_every_line_a_chapter_prints_only_on_a_gpu_is_translated():
    for line in GPU_LINES:
        zh = io.translate_text(line, "zh")
        assert zh != line and not io.english_words(io.NAME.sub("", zh)), (line, zh)   # a GPU's name stays
    literals = list(_gpu_print_literals())
    assert len(literals) >= 8   # the scan sees the branches (chapters 08, 09, 10, 12, 14)
    for chapter, cell, piece in literals:
        assert any(piece in line for line in GPU_LINES), \
            f"chapter {chapter} cell {cell} prints {piece!r} only on a GPU: add the line to GPU_LINES, and its entry"


def test_lookup_exact_then_skeleton_with_the_runs_numbers(catalog):
    assert io.translate_text("  attention weights ", "zh") == "  注意力权重 "
    assert io.translate_text("n = 512: naive  2.00 MiB", "zh") == "n =  512：朴素实现   2.00 MiB"
    assert io.translate_text("something else 3", "zh") == "something else 3"
    assert io.translate_text("attention weights", "en") == "attention weights"
    assert io.translate_lines("row sum\nkeys\n\nother\n", "zh") == "行和\n键\n\nother\n"


def test_a_broken_entry_shows_the_english(monkeypatch):
    monkeypatch.setitem(io._merged, "zh", {"query{0}": "查询 {1}"})
    assert io.translate_text("query 3", "zh") == "query 3"


def test_placeholder_mismatch_is_refused():
    assert io.placeholder_problem("n ={0}: naive{1} MiB", "n = {0}：朴素实现 {1} MiB") is None
    assert io.placeholder_problem("n ={0}: naive{1} MiB", "n = {0}：朴素实现 MiB")  # {1} lost
    assert io.placeholder_problem("query{0}", "查询 {1}")                          # renumbered
    assert io.placeholder_problem("a{0} {{b}}", "甲 {0} {b}")                       # a bare brace
    assert io.placeholder_problem("query{0}", "") is None                          # untranslated


def test_the_catalog_check_finds_a_placeholder_mismatch_and_a_stale_mo(tmp_path):
    pytest.importorskip("babel")  # the catalogs are read with Babel (the NumPy-only install lacks it)
    import zh_outputs
    from babel.messages.catalog import Catalog
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import write_po

    cat = Catalog(locale="zh_CN", domain="outputs_99")
    cat.add("n ={0}: naive{1} MiB", "n = {0}：朴素实现 MiB", flags=("python-format",))
    cat.add("row sum", "行和")
    with open(tmp_path / "outputs_99.po", "wb") as f:
        write_po(f, cat)
    with open(tmp_path / "outputs_99.mo", "wb") as f:
        write_mo(f, cat)
    found = zh_outputs.problems(tmp_path)
    assert len(found) == 1 and "placeholders" in found[0], found
    cat["row sum"].string = "行之和"   # the .po changed, the .mo was not compiled again
    with open(tmp_path / "outputs_99.po", "wb") as f:
        write_po(f, cat)
    assert any("not outputs_99.po compiled" in p for p in zh_outputs.problems(tmp_path))


def test_the_committed_output_catalogs_are_consistent():
    """Every translated entry keeps its placeholders, and every .mo is its .po compiled."""
    pytest.importorskip("babel")  # the catalogs are read with Babel (the NumPy-only install lacks it)
    import zh_outputs

    assert sorted(zh_outputs.LC.glob("outputs*.po")), "no output catalogs"
    assert zh_outputs.problems() == []


def _entry(domain: str, msgid: str) -> str:
    import gettext

    with open(io.LOCALE_DIR / "zh_CN" / "LC_MESSAGES" / f"{domain}.mo", "rb") as f:
        return gettext.GNUTranslations(f)._catalog[msgid]


def test_a_chapters_own_entry_wins_in_that_chapter_only(monkeypatch):
    """Chapter 10's "masked" tiles are partly masked, chapter 14's squares wholly: chapter
    10's catalog says so for chapter 10 (zh.py site's chapter_scope, the execution's
    environment variable), and every other chapter, and a kernel that does not know its
    chapter, read the shared word."""
    own, shared = _entry("outputs_10", "masked"), _entry("outputs", "masked")
    assert own != shared
    monkeypatch.delenv(io.CHAPTER_ENV, raising=False)
    assert io.translate_text("masked", "zh") == shared
    with io.chapter_scope("10"):
        assert io.translate_text("masked", "zh") == own
        with io.chapter_scope("14"):
            assert io.translate_text("masked", "zh") == shared
        assert io.translate_text("masked", "zh") == own
    assert io.translate_text("masked", "zh") == shared
    monkeypatch.setenv(io.CHAPTER_ENV, "10")
    assert io.translate_text("masked", "zh") == own
    with io.chapter_scope(None):  # the environment's chapter still
        assert io.translate_text("masked", "zh") == own
    with pytest.raises(ValueError, match="chapter"):
        with io.chapter_scope("ch10"):
            pass


def test_neutral_entries(catalog):
    assert io.neutral("max|err|") and not io.neutral("row sum") and not io.neutral("unknown")


def test_english_words_skips_names_units_and_code():
    assert io.english_words("n = 2048: 16.00 MiB on float32, `softmax_rows` done") == ["on", "done"]
    assert io.english_words("注意力权重 (GPU)") == []


# --------------------------------------------------------------------------- plotly, HTML
FIG = {"data": [{"type": "scatter", "name": "row sum", "x": ["keys", "low"], "y": [1, 2],
                 "marker": {"color": "row sum"}, "hovertemplate": "keys<br>row sum"}],
       "layout": {"title": {"text": "attention weights"}, "template": {"layout": {"title": {"text": "keys"}}},
                  "sliders": [{"currentvalue": {"prefix": "temperature T"}, "steps": [{"label": "low"}]}]}}


def test_plotly_walker_skips_the_template_and_non_text_keys(catalog):
    strings = [s for _, s in io.plotly_strings(FIG)]
    assert "attention weights" in strings and "temperature T" in strings and "low" in strings
    assert strings.count("keys") == 1          # x's category, not the template's title
    assert strings.count("row sum") == 1       # the trace's name; a colour is no text
    assert ("color", "row sum") not in list(io.plotly_strings(FIG))
    out = io.translate_plotly(FIG, "zh")
    assert out["layout"]["title"]["text"] == "注意力权重"
    assert out["layout"]["template"] == FIG["layout"]["template"]          # untouched
    assert out["data"][0]["marker"]["color"] == "row sum"                   # not a text key
    assert out["data"][0]["hovertemplate"] == "键<br>行和"
    assert out["data"][0]["x"] == ["键", "低"] and out["data"][0]["y"] == [1, 2]
    assert out["layout"]["sliders"][0]["currentvalue"]["prefix"] == "温度 T"


def test_html_text_attributes_and_embedded_figure(catalog):
    html = ('<div><p>attention weights</p><img alt="row sum" src="x.png">'
            '<script type="text/javascript">\n  var fig = ' + json.dumps(FIG) + ';\n  var config = {};\n</script>'
            '<style>p { content: "keys" }</style><pre>keys &amp; more\nrow sum\n</pre></div>')
    out = io.translate_html(html, "zh")
    assert "<p>注意力权重</p>" in out and 'alt="行和"' in out and "<pre>keys &amp; more\n行和\n</pre>" in out
    assert 'content: "keys"' in out                                         # styles are not text
    fig = json.loads(io.FIG_IN_HTML.search(out).group(2))
    assert fig == io.translate_plotly(FIG, "zh")
    assert io.translate_html(html, "en") == html                            # bytes kept
    strings = list(io.html_strings(html))
    assert "attention weights" in strings and "temperature T" in strings and "row sum" in strings


def test_outputs_translated_and_matplotlib_swapped(catalog):
    stream = {"output_type": "stream", "name": "stdout", "text": ["row sum\n", "n = 8: naive  1.00 MiB\n"]}
    assert io.translate_output(stream)["text"] == ["行和\n", "n =  8：朴素实现   1.00 MiB\n"]
    image = {"output_type": "display_data", "data": {"image/png": "EN", "text/plain": "<Figure>"},
             "metadata": {"image/png": {"alt": "Figure."},
                          "attn_edu": {"texts": ["keys"], "zh": {"image/png": "ZH", "alt": "图。"}}}}
    out = io.translate_output(image)
    assert out["data"]["image/png"] == "ZH" and out["metadata"]["image/png"]["alt"] == "图。"
    assert image["data"]["image/png"] == "EN"                               # a copy
    widget = {"output_type": "execute_result", "data": {"text/html": "<p>Live</p>", "text/plain": "VBox()"},
              "metadata": {"attn_edu": {"zh": {"text/html": "<p>keys</p>"}}}}
    assert io.translate_output(widget)["data"]["text/html"] == "<p>键</p>"
    code = {"cell_type": "code", "metadata": {"tags": [io.CODE_OUTPUT_TAG]}, "outputs": [stream]}
    assert io.translate_cell_outputs(code) == [stream]
    assert "keys" in list(io.output_strings(image))


def test_every_cell_that_prints_kernel_source_is_tagged_as_code():
    """The rule that exempts code outputs: a cell printing a kernel's source carries the tag
    (tests/test_zh.py holds the twins' tags to the English ones)."""
    found = 0
    for path in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            src = "".join(cell["source"])
            if cell["cell_type"] == "code" and "kernel_source(" in src:
                found += 1
                assert io.CODE_OUTPUT_TAG in cell["metadata"].get("tags", []), (path.name, cell["id"])
    assert found >= 6


# --------------------------------------------------------------------------- matplotlib
def _figure():
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 2], label="row sum")
    ax.bar([0.5], [1.5], width=0.1, label="keys")          # a bar chart's label is its container's
    ax.set_title("attention weights")
    ax.set_xlabel("keys")
    ax.legend()
    ax.set_yticks([1, 2])
    ax.set_yticklabels(["low", "query 3"])
    return fig


def test_a_figure_is_drawn_translated_and_left_as_it_was(catalog, monkeypatch):
    fig = _figure()
    before = io.figure_texts(fig)
    assert {"attention weights", "keys", "row sum", "low", "query 3"} <= set(before)
    with io.translated_figure(fig, "zh"):
        texts = io.figure_texts(fig)
        assert {"注意力权重", "键", "行和", "低", "查询  3"} <= set(texts) and "keys" not in texts
    assert io.figure_texts(fig) == before
    monkeypatch.delenv(io.ZH_RENDER_ENV, raising=False)
    assert io.figure_renders(fig) == {}                                     # not asked for
    monkeypatch.setenv(io.ZH_RENDER_ENV, "1")
    calls = []
    from attn_edu.alt_text import figure_alt_text

    meta = io.figure_renders(fig, lambda f: calls.append(io.figure_texts(f)) or ("PNG", {}), figure_alt_text)
    assert meta["texts"] == before and meta["zh"]["image/png"] == "PNG"
    assert "注意力权重" in calls[0] and "注意力权重" in meta["zh"]["alt"]
    assert "图例：行和，键" in meta["zh"]["alt"], meta["zh"]["alt"]                  # both legend entries
    assert io.figure_texts(fig) == before



def test_a_figure_drawn_for_its_text_size_is_not_drawn_again_to_find_its_words(catalog, monkeypatch):
    """The book's English execution: the alt-text formatter draws a figure for its smallest
    text size, and its Chinese rendering then finds the same texts, tick labels included,
    without drawing it again (about 0.3 CPU-s a figure)."""
    from attn_edu import alt_text

    monkeypatch.setenv(io.ZH_RENDER_ENV, "1")
    monkeypatch.setattr(io, "_png_of", lambda f: ("PNG", {}))
    want = io.figure_renders(_figure())                 # drawn here to find its texts
    assert any(re.fullmatch(r"[\d.−-]+", t) for t in want["texts"]), want["texts"]  # x tick labels
    fig = _figure()
    draws, real = [], fig.draw_without_rendering
    monkeypatch.setattr(fig, "draw_without_rendering", lambda: draws.append(1) or real())
    _, out = alt_text._alt_metadata(fig)
    assert draws == [1]                                 # figure_text_px's draw, and no other
    assert out["image/png"][alt_text.TEXT_PX_KEY] > 0
    assert out[io.META_KEY]["texts"] == want["texts"] and out[io.META_KEY]["zh"]["image/png"] == "PNG"


# --------------------------------------------------------------------------- a live kernel
def test_stdout_is_translated_line_by_line(catalog):
    import io as _io

    inner = _io.StringIO()
    out = io._TranslatingStream(inner, "zh")
    out.write("row ")
    out.write("sum\nkeys")
    assert inner.getvalue() == "行和\n"
    out.flush()
    assert inner.getvalue() == "行和\n键"


def test_install_and_remove_in_a_shell(catalog):
    class Formatter:
        def format(self, obj, include=None, exclude=None):
            return {"text/plain": str(obj)}, {}

    class Shell:
        display_formatter = Formatter()

    shell, stdout = Shell(), sys.stdout
    try:
        assert io.install_output_translation("zh", shell)
        assert isinstance(sys.stdout, io._TranslatingStream)
        assert shell.display_formatter.format("row sum") == ({"text/plain": "行和"}, {})
        io.install_output_translation("zh", shell)                          # not twice
        assert not isinstance(sys.stdout._stream, io._TranslatingStream)
        io.install_output_translation("en", shell)
        assert sys.stdout is stdout
        assert shell.display_formatter.format("row sum") == ({"text/plain": "row sum"}, {})
    finally:
        io.install_output_translation("en", shell)
        sys.stdout = stdout


# --------------------------------------------------------------------------- the built pages' check
def test_the_page_walker_finds_english_in_output_areas_only(catalog, tmp_path):
    """What tests/test_zh_site.py runs on the built Chinese chapters, on a page made here:
    English in an output area is found (text lines, alt text, a plotly figure's data file);
    prose, code cells, code outputs, styles and neutral entries are not."""
    import zh_outputs

    (tmp_path / "fig.js").write_text('(window.attnEduFigureData=window.attnEduFigureData||{})["a"]='
                                     '{"fig":' + json.dumps(FIG) + ',"config":{}};\n', encoding="utf-8")
    page = ('<p>prose in English</p>'
            '<div class="cell docutils container"><div class="cell_input docutils container"><pre>print("code")</pre></div>'
            '<div class="cell_output docutils container"><div class="output stream"><pre>行和\n'
            'still <span class="ansi">English</span> here\nmax|err|\n</pre></div>'
            '<img alt="Figure of keys" src="x.png"><style>p {color: red}</style>'
            '<div class="plotly-graph-div" aria-label="交互式图"></div><script type="text/x-attn-edu-plotly" data-src="fig.js"></script>'
            '</div></div>'
            '<div class="cell tag_output-is-code docutils container"><div class="cell_output docutils container">'
            '<pre>def kernel(): return acc</pre></div></div>')
    found = zh_outputs.page_offenders(page, tmp_path)
    texts = [t for _, t, _ in found]
    assert "still English here" in texts and "Figure of keys" in texts
    assert {"attention weights", "temperature T", "row sum", "keys", "low"} <= set(texts)   # the figure's
    assert not any("prose" in t or "code" in t or "kernel" in t or "red" in t for t in texts)
    assert "max|err|" not in texts                                          # neutral
    assert "err" in zh_outputs.kept_words() and "English" not in zh_outputs.kept_words()
    # translated, the figure's words are gone from the list
    (tmp_path / "fig.js").write_text('(window.attnEduFigureData=window.attnEduFigureData||{})["a"]='
                                     '{"fig":' + json.dumps(io.translate_plotly(FIG, "zh")) + ',"config":{}};\n',
                                     encoding="utf-8")
    texts = [t for _, t, _ in zh_outputs.page_offenders(page, tmp_path)]
    assert "attention weights" not in texts and "temperature T" not in texts


@pytest.mark.parametrize("script", ["figures.js", "zoom.js"])
def test_the_page_scripts_words_in_both_languages(script):
    """The words figures.js and zoom.js write (aria-labels, fallback labels) come from a
    table per page language: the Chinese one has every key, the same {placeholders}, and
    Chinese words; the script writes no English of its own outside the table."""
    import re

    text = (REPO / "book" / "_static" / "attn-edu" / script).read_text(encoding="utf-8")
    block = re.search(r"var WORDS = \{(.*?)\};", text, re.S).group(1)
    en_part, zh_part = re.split(r'"zh-CN":', block)
    pairs = [dict(re.findall(r'(\w+): "([^"]*)"', part)) for part in (en_part, zh_part)]
    assert pairs[0] and set(pairs[0]) == set(pairs[1])
    for key, en in pairs[0].items():
        zh = pairs[1][key]
        assert sorted(re.findall(r"\{\w+\}", en)) == sorted(re.findall(r"\{\w+\}", zh)), key
        assert not re.search(r"[A-Za-z]{2,}", re.sub(r"\{\w+\}", "", zh)), (key, zh)
        assert re.search(r"[\u4e00-\u9fff]", zh) or not re.sub(r"\{\w+\}|[:：\s]", "", zh), (key, zh)
    code = text.replace(block, "")
    for en in pairs[0].values():   # each phrase (of words: "menu" is also a plotly type) only in the table
        literal = re.sub(r"\{\w+\}", "", en).strip(" :")
        if " " in literal:
            assert f'"{literal}' not in code and f"{literal}\"" not in code, literal


@pytest.mark.slow
@pytest.mark.notebooks
def test_a_chinese_kernel_shows_chinese_outputs(tmp_path):
    """setup_notebook(lang="zh") in a real kernel: a printed line, displayed Markdown, a
    plotly figure and a matplotlib figure come out through the catalogs (here the entry
    "Figure." -> "图。" of the package's own catalog, which the output lookup also reads);
    setup_notebook() (English) leaves them as they are."""
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    pytest.importorskip("plotly")
    pytest.importorskip("matplotlib")
    from nbclient import NotebookClient

    from attn_edu.i18n import translate

    zh = translate("Figure.", "zh")
    assert zh != "Figure."
    body = ("import matplotlib.pyplot as plt, plotly.graph_objects as go\n"
            "from IPython.display import Markdown, display\n"
            "print('Figure.'); print('not in any catalog')\n"
            "display(Markdown('Figure.'))\n"
            "go.Figure(layout={'title': {'text': 'Figure.'}}).show()\n"
            "fig, ax = plt.subplots(); ax.set_title('Figure.'); plt.show()\n")

    def run(setup: str) -> list:
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(f"%matplotlib inline\nimport attn_edu\n{setup}"),
                    nbformat.v4.new_code_cell(body)]
        NotebookClient(nb, timeout=120, kernel_name="python3",
                       resources={"metadata": {"path": str(tmp_path)}}).execute()
        return nb.cells[1].outputs

    env_before = dict(__import__("os").environ)
    try:
        __import__("os").environ.pop(io.ZH_RENDER_ENV, None)
        __import__("os").environ["PYTHONPATH"] = str(REPO)
        outputs = run('attn_edu.setup_notebook(lang="zh")')
        english = run("attn_edu.setup_notebook()")
    finally:
        __import__("os").environ.clear()
        __import__("os").environ.update(env_before)
    stream = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert stream == f"{zh}\nnot in any catalog\n", stream
    shown = [o for o in outputs if o.output_type == "display_data"]
    assert shown[0].data["text/markdown"] == zh
    plotly = next(o for o in shown if "application/vnd.plotly.v1+json" in o.data)
    assert plotly.data["application/vnd.plotly.v1+json"]["layout"]["title"]["text"] == zh
    embedded = json.loads(io.FIG_IN_HTML.search(plotly.data["text/html"]).group(2))
    assert embedded["layout"]["title"]["text"] == zh
    image = next(o for o in shown if "image/png" in o.data)
    assert zh in image.metadata["image/png"]["alt"], image.metadata   # drawn with its Chinese title
    stream = "".join(o.get("text", "") for o in english if o.output_type == "stream")
    assert stream == "Figure.\nnot in any catalog\n"
    assert "Figure." in next(o for o in english if "image/png" in o.get("data", {})).metadata["image/png"]["alt"]


def test_the_chinese_drawing_says_nothing_on_the_english_page(monkeypatch, capfd, caplog):
    """A figure whose Chinese words sit beside math, in bold (the CJK font has no bold face):
    drawn for the Chinese edition without a warning or a log line, which the English
    execution would otherwise show as a stderr output under the English figure."""
    import logging
    import warnings

    fig = _figure()
    if io.cjk_font() is None:
        pytest.skip("no CJK font (bash scripts/site.sh fonts)")
    monkeypatch.setitem(io._merged, "zh", {"scale ={0} / $\\sqrt{{d_k}}$": "缩放因子 ={0} / $\\sqrt{{d_k}}$"})
    monkeypatch.setenv(io.ZH_RENDER_ENV, "1")
    fig.axes[0].set_title("scale = 0.25 / $\\sqrt{d_k}$", fontweight="bold")
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.DEBUG, logger="matplotlib"):
        warnings.simplefilter("always")
        from attn_edu.alt_text import figure_alt_text

        meta = io.figure_renders(fig, alt=figure_alt_text)
    assert meta["zh"]["image/png"] and "缩放因子" in meta["zh"]["alt"]
    assert not caught and not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert capfd.readouterr().err == ""


def test_a_translation_with_ten_or_more_placeholders_is_checked_by_number_not_by_text():
    """{10} sorts before {2} as text: the check formats with as many numbers as the largest."""
    from attn_edu.i18n_outputs import placeholder_problem

    msgid = "generated: [" + ",".join("{%d}" % i for i in range(12)) + "]"
    assert placeholder_problem(msgid, msgid.replace("generated", "生成")) is None
    assert "placeholders" in placeholder_problem(msgid, msgid.replace("{11}", ""))


def test_a_list_of_numbers_is_one_placeholder_whatever_its_length_and_padding():
    """A measured list changes length and NumPy's padding from run to run: one entry must
    serve every run (a CPU build's timing line must not fall back to English on CI)."""
    from attn_edu.i18n_outputs import skeleton

    runs = ["CPU s per rank: [0.12 0.3  1.2 ]  max / mean = 1.5",
            "CPU s per rank: [0.1 0.25 0.33 1.]  max / mean = 2.25"]
    keys = {skeleton(r)[0] for r in runs}
    assert keys == {"CPU s per rank:{0}  max / mean ={1}"}, keys
    assert skeleton("n = [1024, 2048] and [[0, 1], [2, 3]]")[1] == [" [1024, 2048]", " [[0, 1], [2, 3]]"]
    assert skeleton("x[0] is a name's index, not a list")[0] == "x[{0}] is a name's index, not a list"
    assert skeleton("here it is shown for n = 1024.")[0] == "here it is shown for n ={0}."


def test_frame_names_stay_what_the_slider_steps_call_them():
    """A slider step animates to a frame by name (its args): translating the frames' names
    and not the steps' args broke the Chinese sliders of chapters 07, 09 and 14."""
    from attn_edu.i18n_outputs import plotly_strings, translate_plotly

    fig = {"data": [], "frames": [{"name": "skipped", "data": [{"name": "skipped"}]}],
           "layout": {"sliders": [{"steps": [{"args": [["skipped"]], "label": "skipped", "method": "animate"}]}]}}
    zh = translate_plotly(fig, "zh")
    step = zh["layout"]["sliders"][0]["steps"][0]
    assert zh["frames"][0]["name"] == step["args"][0][0] == "skipped"
    assert step["label"] != "skipped" and zh["frames"][0]["data"][0]["name"] == step["label"]  # 跳过
    assert [s for k, s in plotly_strings({"frames": [{"name": "skipped"}]})] == []
