"""The Chinese edition cannot drift from the English one (scripts/zh.py).

* every chapter has a twin ``notebooks/zh/NN_name.ipynb``: the same cells in the same order,
  code byte for byte, every markdown cell stamped with the sha of the English cell it
  translates (stale when the English changed after), keeping its math, links,
  cross-references, citations, labels, dropdowns and headings;
* every page of ``book/`` has a twin in ``book/zh/``, stamped the same way in its first line;
* the terms of ``book/zh/terms.yml`` are the ones used: no variant it rules out appears in
  the Chinese prose;
* a Chinese chapter's main flow stays within its budget (in CJK characters).
And the check can fail: an English paragraph edited alone, a cell added on one side, a
formula changed in a translation are each named.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

import zh
from venvs import REPO

CHAPTERS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
PAGES = sorted((REPO / "book").glob("*.md"))


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name[:2])
def test_every_chapter_has_a_current_chinese_twin(chapter):
    problems = zh.check_chapter(chapter)
    assert not problems, "\n".join(problems)


def _page_stamp(text: str):
    m = re.match(r"<!-- en: (\S+) en_sha: ([0-9a-f]{12}) -->", text)
    return m.groups() if m else (None, None)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_every_page_has_a_current_chinese_twin(page):
    twin = zh.ZH_BOOK / page.name
    assert twin.is_file(), f"book/{page.name} has no Chinese twin book/zh/{page.name}"
    text = twin.read_text(encoding="utf-8")
    en_name, en_sha = _page_stamp(text)
    assert en_name == f"book/{page.name}", f"book/zh/{page.name} must start with <!-- en: book/{page.name} en_sha: ... -->"
    assert en_sha == zh.page_sha(page), (f"book/zh/{page.name} is stale: book/{page.name} changed after it was "
                                         "translated (translate the change, then update the sha in its first line)")
    problems = zh.markdown_keeps(page.read_text(encoding="utf-8"), text.split("\n", 1)[1])
    assert not problems, f"book/zh/{page.name}: " + "; ".join(problems)


def _zh_prose(text: str) -> str:
    """Chinese prose: without code fences, inline code, math and HTML comments."""
    text = re.sub(r"```.*?```|~~~.*?~~~", " ", text, flags=re.S)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    text = zh._MATH.sub(" ", text)
    return re.sub(r"`[^`]*`", " ", text)


def _zh_texts():
    for path in sorted(zh.ZH.glob("*.ipynb")):
        for cell in zh.load(path)["cells"]:
            if cell["cell_type"] == "markdown":
                yield f"{path.name} cell {cell['metadata']['attn_edu']['en']}", _zh_prose(zh.source(cell))
    for path in sorted(zh.ZH_BOOK.glob("*.md")):
        yield f"book/zh/{path.name}", _zh_prose(path.read_text(encoding="utf-8"))
    yield "README.zh-CN.md", _zh_prose((REPO / "README.zh-CN.md").read_text(encoding="utf-8"))


def _uses(text: str, variant: str) -> bool:
    """A variant of terms.yml's `avoid` lists: a literal, or "re:PATTERN" a regular expression."""
    return bool(re.search(variant[3:], text)) if variant.startswith("re:") else variant in text


def test_an_avoided_pattern_is_found_and_the_term_it_protects_is_not():
    assert _uses("它做的算术更少", "re:算术(?!强度)") and not _uses("算术强度很低", "re:算术(?!强度)")
    assert _uses("每组一个尺度", "re:(?<!量化)尺度") and not _uses("每组一个量化尺度", "re:(?<!量化)尺度")
    assert _uses("检查程序会试验", "检查程序") and not _uses("检查器会试验", "检查程序")


def test_the_sidebar_names_the_parts_and_titles_as_the_pages_do():
    """The Chinese sidebar (zh.TOC_WORDS, over _toc.yml's captions and titles) says what the
    front page and the chapters' headings say."""
    yaml = pytest.importorskip("yaml")
    toc = yaml.safe_load((REPO / "_toc.yml").read_text(encoding="utf-8"))
    intro = (zh.ZH_BOOK / "intro.md").read_text(encoding="utf-8")
    for part in toc["parts"]:
        assert part["caption"] in zh.TOC_WORDS, f"_toc.yml caption {part['caption']!r} has no Chinese name"
        if part.get("numbered"):   # the chapters' parts are the front page's bold lines
            assert f"**{zh.TOC_WORDS[part['caption']]}**" in intro, (
                f"book/zh/intro.md names the part {part['caption']!r} otherwise than the sidebar's "
                f"{zh.TOC_WORDS[part['caption']]!r}")
        for chapter in part["chapters"]:
            if "title" in chapter:
                heading = zh.source(zh.load(REPO / "notebooks" / "zh" / (Path(chapter["file"]).name + ".ipynb"))["cells"][0])
                words = zh.TOC_WORDS[chapter["title"]].split(" ")[0]
                assert heading.startswith(f"# {words} "), f"the sidebar's {zh.TOC_WORDS[chapter['title']]!r} is not the heading {heading.splitlines()[0]!r}"


def test_the_terms_table_is_followed():
    yaml = pytest.importorskip("yaml")
    terms = yaml.safe_load((zh.ZH_BOOK / "terms.yml").read_text(encoding="utf-8"))
    assert len(terms) >= 20 and all(t.get("en") and t.get("zh") for t in terms)
    avoid = [(v, t["zh"], t["en"]) for t in terms for v in t.get("avoid") or []]
    found = [f"{where}: {v!r} (the book says {z!r} for {en!r})"
             for where, text in _zh_texts() for v, z, en in avoid if _uses(text, v)]
    assert not found, "\n".join(found)
    glossary = (zh.ZH_BOOK / "glossary.md").read_text(encoding="utf-8")
    for t in terms:  # the glossary's Chinese column is the table's
        if re.search(rf"(?m)^{re.escape(t['en'])}$", glossary):
            assert re.search(rf"(?m)^{re.escape(t['zh'])}$", glossary), f"glossary: {t['en']} is not {t['zh']}"


def _glossary(path):
    """The entries of a page's {glossary} directive: [(term lines, definition)], in order."""
    body = path.read_text(encoding="utf-8").split("```{glossary}\n", 1)[1].rsplit("\n```", 1)[0]
    entries = []
    for block in re.split(r"\n\s*\n", body.strip("\n")):
        lines = block.split("\n")
        entries.append(([x for x in lines if x and not x.startswith(" ")],
                        "\n".join(x for x in lines if x.startswith(" "))))
    return entries


def _labels():
    """Every label (``(name)=``) of the chapters, both editions, and the book's pages."""
    out = set()
    for path in sorted((REPO / "notebooks").glob("*.ipynb")) + sorted(zh.ZH.glob("*.ipynb")):
        out |= {lab for c in zh.load(path)["cells"] if c["cell_type"] == "markdown"
                for lab in zh._LABEL.findall(zh.source(c))}
    for path in sorted((REPO / "book").glob("*.md")) + sorted(zh.ZH_BOOK.glob("*.md")):
        out |= set(zh._LABEL.findall(path.read_text(encoding="utf-8")))
    return out


@pytest.mark.parametrize("page", ["glossary.md", "zh/glossary.md"])
def test_every_term_has_a_glossary_entry_that_links_to_where_it_is_defined(page):
    """Both glossaries hold every term of terms.yml (by its Chinese term, a term line of the
    entry), and every entry says where the book defines it: a {ref} to a label that a chapter
    or page sets (so the -W -n build resolves it), or a {doc} of a page."""
    yaml = pytest.importorskip("yaml")
    terms = yaml.safe_load((zh.ZH_BOOK / "terms.yml").read_text(encoding="utf-8"))
    entries = _glossary(REPO / "book" / page)
    heads = {t for lines, _ in entries for t in lines}
    missing = [t["zh"] for t in terms if t["zh"] not in heads]
    assert not missing, f"book/{page} has no entry for {missing}"
    labels, pages = _labels(), {p.stem for p in (REPO / "book").glob("*.md")}
    for lines, definition in entries:
        refs = re.findall(r"\{ref\}`[^`]*?<([^<>`]+)>`|\{ref\}`([^`<>]+)`", definition)
        docs = re.findall(r"\{doc\}`(?:[^`]*<)?/?(?:book/)?([^`<>]+?)>?`", definition)
        assert refs or docs, f"book/{page}: the entry {lines[0]!r} links to no definition"
        for a, b in refs:
            assert (a or b) in labels, f"book/{page}: {lines[0]!r} links to {a or b!r}, a label no chapter sets"
        for d in docs:
            assert d in pages, f"book/{page}: {lines[0]!r} links to the page {d!r}, which does not exist"


def _sort_key_en(head):
    return re.sub(r"^[^A-Za-z0-9]+", "", head).casefold()


def _sort_key_zh(head):
    from pypinyin import lazy_pinyin   # requirements.txt

    return "".join(lazy_pinyin(re.sub(r"^（[^）]*）", "", head))).casefold()


def test_the_glossaries_are_in_alphabetical_and_pinyin_order():
    pytest.importorskip("pypinyin")  # the Chinese order (requirements.txt)
    en = [lines[0] for lines, _ in _glossary(REPO / "book" / "glossary.md")]
    cn = [lines[0] for lines, _ in _glossary(zh.ZH_BOOK / "glossary.md")]
    assert en == sorted(en, key=_sort_key_en), "book/glossary.md is not in alphabetical order"
    assert cn == sorted(cn, key=_sort_key_zh), "book/zh/glossary.md is not in pinyin order"
    # the keys can tell: 被 bèi before 本 běn before 编 biān; a leading （归一化的） is not read
    assert sorted(["编码器", "本地内存", "被屏蔽"], key=_sort_key_zh) == ["被屏蔽", "本地内存", "编码器"]
    assert _sort_key_zh("（归一化的）核平滑器") == _sort_key_zh("核平滑器")
    assert sorted(["tiling", "Bayes-optimal", "attention"], key=_sort_key_en) == ["attention", "Bayes-optimal", "tiling"]


@pytest.mark.parametrize("chapter", sorted(zh.ZH.glob("*.ipynb")), ids=lambda p: p.name[:2])
def test_chinese_chapter_main_flow_within_budget(chapter):
    import chapter_stats  # scripts/chapter_stats.py: the measure of both editions

    n = chapter_stats.chapter_stats(chapter)["cjk"]
    assert n <= chapter_stats.MAX_CJK, f"zh/{chapter.name}: {n} CJK characters of main flow, budget {chapter_stats.MAX_CJK}"


# --- the check can fail ------------------------------------------------------------------------
@pytest.fixture
def pair(tmp_path, monkeypatch):
    """A copy of chapter 01 and a fresh twin of it, in a temporary notebooks/ folder."""
    en_dir = tmp_path / "notebooks"
    en_dir.mkdir()
    shutil.copy(CHAPTERS[0], en_dir / CHAPTERS[0].name)
    monkeypatch.setattr(zh, "EN", en_dir)
    monkeypatch.setattr(zh, "ZH", en_dir / "zh")
    zh.new(CHAPTERS[0].name[:2])
    return en_dir / CHAPTERS[0].name, en_dir / "zh" / CHAPTERS[0].name


def _edit(path, fn):
    nb = json.loads(path.read_text(encoding="utf-8"))
    fn(nb["cells"])
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def test_a_fresh_twin_matches_and_an_english_edit_alone_is_named(pair):
    en, twin = pair
    assert zh.check_chapter(en) == []
    md = next(c for c in json.loads(en.read_text())["cells"] if c["cell_type"] == "markdown")

    def edit(cells):
        cell = next(c for c in cells if c["id"] == md["id"])
        cell["source"] = zh.source(cell) + "\nA sentence added in English only.\n"
    _edit(en, edit)
    (problem,) = zh.check_chapter(en)
    assert f"cell {md['id']}: stale" in problem
    zh.stamp(en.name[:2], md["id"])   # the translator caught up
    assert zh.check_chapter(en) == []


def test_a_cell_on_one_side_only_and_a_changed_formula_are_named(pair):
    en, twin = pair
    _edit(en, lambda cells: cells.insert(3, {"cell_type": "markdown", "id": "new-cell", "metadata": {},
                                             "source": ["New English text.\n"]}))
    assert "only in English: ['new-cell']" in zh.check_chapter(en)[0]
    assert "inserted new-cell (to translate)" in zh.sync(en.name[:2])
    assert zh.check_chapter(en) == []
    code = next(c for c in json.loads(twin.read_text())["cells"] if c["cell_type"] == "code")
    _edit(twin, lambda cells: next(c for c in cells if c["id"] == code["id"])["source"].append("\nx = 1\n"))
    assert any("code differs" in p for p in zh.check_chapter(en))
    zh.sync(en.name[:2])
    math_cell = next(c for c in json.loads(twin.read_text())["cells"]
                     if c["cell_type"] == "markdown" and "$" in zh.source(c))

    def change_formula(cells):
        cell = next(c for c in cells if c["id"] == math_cell["id"])
        cell["source"] = zh.source(cell).replace("$", "$x + ", 1)
    _edit(twin, change_formula)
    assert any("math differ" in p and math_cell["id"] in p for p in zh.check_chapter(en))


def test_words_in_text_may_be_translated_and_the_rest_of_a_formula_may_not():
    en = "Then $$\\text{numbers moved} = n d + \\text{a {nested} note}\\, x$$ and $c_j = m_j \\text{ if } m_j > 0$.\n"
    zh_ok = "于是 $$\\text{搬运的数} = n d + \\text{一个{嵌套}注释}\\, x$$，且 $c_j = m_j \\text{ 若 } m_j > 0$。\n"
    assert zh.markdown_keeps(en, zh_ok) == []
    for broken in (zh_ok.replace("n d +", "n d -"),                 # outside \text: an operator
                   zh_ok.replace("\\text{ 若 } m_j", "\\text{ 若 } m_i"),  # a symbol right after it
                   zh_ok.replace("\\text{搬运的数}", "\\mathrm{搬运的数}"),  # \text itself is kept
                   zh_ok.replace("\\text{ 若 }", "若")):                # taken out of the formula
        assert any("math differ" in p for p in zh.markdown_keeps(en, broken)), broken


def test_the_first_cells_setup_call_is_the_twins_one_code_difference(pair):
    """The Chinese twin's first cell is the English one with setup_notebook(lang="zh"): a twin
    that kept the English call, or that differs anywhere else in that cell, is named; and the
    Chinese build takes the English outputs for it (with_outputs) under the same rule."""
    en, twin = pair
    first = zh.first_code_id(json.loads(en.read_text()))
    nb = json.loads(twin.read_text())
    cell = next(c for c in nb["cells"] if c["id"] == first)
    assert zh.source(cell).count(zh.ZH_SETUP_CALL) == 1 and zh.EN_SETUP_CALL not in zh.source(cell)
    executed = json.loads(en.read_text())
    for c in executed["cells"]:
        if c["cell_type"] == "code":
            c["outputs"] = [{"output_type": "stream", "name": "stdout", "text": [f"ran {c['id']}\n"]}]
    shown = zh.with_outputs(nb, executed, en.name)
    assert next(c for c in shown["cells"] if c["id"] == first)["outputs"][0]["text"] == [f"ran {first}\n"]

    def english_call(cells):
        c = next(c for c in cells if c["id"] == first)
        c["source"] = zh.source(c).replace(zh.ZH_SETUP_CALL, zh.EN_SETUP_CALL)
    _edit(twin, english_call)
    (problem,) = zh.check_chapter(en)
    assert f"cell {first}: code differs" in problem and zh.ZH_SETUP_CALL in problem
    with pytest.raises(SystemExit, match="differs from the English"):
        zh.with_outputs(json.loads(twin.read_text()), executed, en.name)
    assert zh.sync(en.name[:2]) == [f"code {first} copied"] and zh.check_chapter(en) == []

    def other_change(cells):  # the rule allows the one call, nothing else in that cell
        c = next(c for c in cells if c["id"] == first)
        c["source"] = zh.source(c).replace("import attn_edu\n", "import attn_edu as attn_edu\n")
    _edit(twin, other_change)
    assert any(f"cell {first}: code differs" in p for p in zh.check_chapter(en))
    with pytest.raises(ValueError, match="exactly once"):
        zh.zh_code("import attn_edu\n", first=True)
    assert zh.zh_code("x = attn_edu.setup_notebook()\n", first=False) == "x = attn_edu.setup_notebook()\n"


def test_a_solutions_code_changed_in_the_translation_is_named():
    """Fenced code in a markdown cell (a worked solution) is code: kept byte for byte (three
    chapters' first translations repeated one solution's code in place of the others)."""
    en = "**Exercise.** Do it.\n\n```python\nprint(1)\n```\n\nThen:\n\n```python\nprint(2)\n```\n"
    zh_same = "**练习。** 做吧。\n\n```python\nprint(1)\n```\n\n然后：\n\n```python\nprint(2)\n```\n"
    assert zh.markdown_keeps(en, zh_same) == []
    (problem,) = zh.markdown_keeps(en, zh_same.replace("print(2)", "print(1)"))
    assert "code blocks differ (block 2 of 2" in problem


def test_the_chinese_search_index_is_built_in_linear_time():
    """Sphinx 7's Chinese splitter looked every Latin word up in a growing list (48 of the
    Chinese build's 108 s); the extension gives it a set, with the same answers."""
    import importlib.util

    pytest.importorskip("sphinx")
    from sphinx.search.zh import SearchChinese

    spec = importlib.util.spec_from_file_location("attn_edu_i18n_under_test", REPO / "book" / "_ext" / "attn_edu_i18n.py")
    ext = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ext)
    ext._fast_chinese_search()
    terms = SearchChinese.latin_terms
    assert isinstance(terms, set)
    terms.extend(["softmax", "flash"])          # what SearchChinese.split calls
    assert "softmax" in terms and "tiling" not in terms
