"""The catalogs of what the chapters show (attn_edu/i18n_outputs.py says how they are used).

    python scripts/zh_outputs.py extract [NN ...]  # add what the English build shows and no
                                                   # catalog translates yet, as empty entries
    python scripts/zh_outputs.py missing [NN ...]  # list the entries still untranslated
    python scripts/zh_outputs.py compile           # every outputs*.po -> .mo (Babel)
    python scripts/zh_outputs.py show NN           # compile, then every string chapter NN
                                                   # shows, English -> Chinese, cell by cell

``extract`` reads the English build's executions (``_build/.jupyter_cache``: build the book
first) and walks every output a page shows: printed lines, Markdown and HTML text, and plotly
figures' words (their JSON, also where the book's renderer embeds it in HTML), except the
outputs of a cell tagged ``output-is-code`` (code: chapter 10's kernel source). A string with
English words (:func:`attn_edu.i18n_outputs.english_words`) that no entry translates becomes
an entry, keyed by its skeleton when it has numbers: in ``outputs_NN.po`` when one chapter
shows it, in ``outputs.po`` when several do, and a matplotlib figure's text (which the English
execution records beside the figure) in ``outputs_fig.po``, whatever the chapter: those are
drawn into the Chinese PNGs when the chapters execute. (The drawings and the explorers'
Chinese stand-ins look words up in every catalog, so a compiled change to any of them
re-executes the chapters: scripts/execute_chapters.py's key holds every ``.mo``, no ``.po``.)
Existing entries and their translations are kept.

    python scripts/zh_outputs.py check             # every entry's placeholders, and every .mo
                                                   # the compiled .po (what the tests check)
    python scripts/zh_outputs.py pages [NN ...]    # the built Chinese chapters' outputs: every
                                                   # string still with English words, per chapter
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from attn_edu import i18n_outputs as io  # noqa: E402

LC = ROOT / "attn_edu" / "locale" / "zh_CN" / "LC_MESSAGES"
#: the catalog of the matplotlib figures' words (recorded by the English execution,
#: attn_edu.i18n_outputs.figure_renders): drawn into PNGs at execution time, kept apart from
#: the catalogs of what the Chinese book translates after the fact (which the drawings fall
#: back on, so those are read at execution time too)
FIGURES = "outputs_fig"


def output_strings(output: dict):
    """Every string a page shows of one notebook output (a line, a text node, a figure's
    word): :func:`attn_edu.i18n_outputs.output_strings`, less the matplotlib texts."""
    meta = (output.get("metadata") or {}).get(io.META_KEY) or {}
    recorded = set(meta.get("texts", []))
    for s in io.output_strings(output):
        if s not in recorded:
            yield s


def figure_strings(output: dict):
    """The texts of the matplotlib figures one output shows, as the English execution
    recorded them (its own figure, or an explorer's)."""
    yield from ((output.get("metadata") or {}).get(io.META_KEY) or {}).get("texts", [])


def _parts(strings):
    for s in strings:  # a plotly <br> and a figure text's line end break lines
        for part in s.replace("<br>", "\n").split("\n"):
            if part.strip():
                yield part.strip()


def chapter_strings(nb: dict, figures: bool = False):
    """(cell id, string) for every string the chapter's outputs show (``figures``: the
    matplotlib figures' texts instead); a cell tagged ``output-is-code`` shows code, none."""
    for cell in nb["cells"]:
        if io.CODE_OUTPUT_TAG in (cell.get("metadata") or {}).get("tags", []):
            continue
        for output in cell.get("outputs", []):
            for s in _parts((figure_strings if figures else output_strings)(output)):
                yield cell.get("id", "?"), s


def executed_chapters(only):
    import nbformat
    from jupyter_cache import get_cache

    import zh
    if not zh.CACHE.is_dir():
        raise SystemExit(f"{zh.CACHE} is missing: build the English book first (scripts/build-book.sh)")
    cache = get_cache(str(zh.CACHE))
    for path in sorted(zh.EN.glob("[0-9][0-9]_*.ipynb")):
        if only and path.name[:2] not in only:
            continue
        _, merged = cache.merge_match_into_notebook(nbformat.from_dict(zh.load(path)))
        yield path.name[:2], json.loads(json.dumps(merged))


def _read(po: Path):
    from babel.messages.catalog import Catalog
    from babel.messages.pofile import read_po
    if po.exists():
        with open(po, "rb") as f:
            return read_po(f, locale="zh_CN")
    return Catalog(locale="zh_CN", domain=po.stem, project="attn-edu", fuzzy=False)


def _write(po: Path, catalog) -> None:
    from babel.messages.pofile import write_po
    with open(po, "wb") as f:
        write_po(f, catalog, width=0, omit_header=False, sort_output=True)


def _known(text: str, entries: set) -> bool:
    return text in entries or io.skeleton(text)[0] in entries


_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")


def extract(only) -> int:
    catalogs = {p.stem: _read(p) for p in sorted(LC.glob("outputs*.po"))}
    known = {m.id for c in catalogs.values() for m in c if m.id} | set(io.catalog("zh"))
    wanted: dict = {}  # key -> {chapter: [cell ids]}
    figure_keys: set = set()
    for chapter, nb in executed_chapters(only):
        for figures in (False, True):
            for cell, text in chapter_strings(nb, figures):
                if not io.english_words(text) or _known(text, known) or _HAN.search(text):
                    continue  # nothing to translate, translated, or already Chinese (a stand-in's words)
                key, numbers = io.skeleton(text)
                key = key if numbers else text
                wanted.setdefault(key, {}).setdefault(chapter, []).append(cell)
                if figures:
                    figure_keys.add(key)
    added = 0
    for key, where in wanted.items():
        domain = (FIGURES if key in figure_keys else
                  "outputs" if len(where) > 1 else f"outputs_{next(iter(where))}")
        cat = catalogs.setdefault(domain, _read(LC / f"{domain}.po"))
        cells = sorted({f"{ch}:{c}" for ch, cs in where.items() for c in cs})
        cat.add(key, "", auto_comments=[" ".join(cells[:6])], flags=("python-format",) if "{0}" in key else ())
        added += 1
    for domain, cat in catalogs.items():
        _write(LC / f"{domain}.po", cat)
    print(f"{added} new entries; {sum(1 for c in catalogs.values() for m in c if m.id and not m.string)} untranslated")
    return 0


def missing(only) -> int:
    n = 0
    for po in sorted(LC.glob("outputs*.po")):
        if only and po.stem[-2:] not in only:
            continue
        for m in _read(po):
            if m.id and not m.string:
                print(f"{po.name}: {m.id!r}")
                n += 1
    print(f"{n} untranslated")
    return 1 if n else 0


def compile_all() -> int:
    from babel.messages.mofile import write_mo
    for po in sorted(LC.glob("outputs*.po")):
        with open(po.with_suffix(".mo"), "wb") as f:
            write_mo(f, _read(po), use_fuzzy=False)
    print(f"compiled {len(list(LC.glob('outputs*.po')))} catalogs")
    return 0


def problems(po_dir: Path = LC) -> list:
    """What is wrong with the output catalogs: an entry whose translation has other
    placeholders than its English (:func:`attn_edu.i18n_outputs.placeholder_problem`), and a
    ``.mo`` that is not its ``.po`` compiled (``compile`` forgotten)."""
    import gettext

    out = []
    for po in sorted(po_dir.glob("outputs*.po")):
        cat = _read(po)
        want = {}
        for m in cat:
            if not m.id or isinstance(m.id, tuple):
                continue
            problem = io.placeholder_problem(m.id, m.string or "")
            if problem:
                out.append(f"{po.name}: {m.id!r}: {problem}")
            if m.string and not m.fuzzy:
                want[m.id] = m.string
        mo = po.with_suffix(".mo")
        if not mo.exists():
            out.append(f"{mo.name} is missing: python scripts/zh_outputs.py compile")
            continue
        with open(mo, "rb") as f:
            got = {k: v for k, v in gettext.GNUTranslations(f)._catalog.items() if isinstance(k, str) and k}
        if got != want:
            out.append(f"{mo.name} is not {po.name} compiled ({len(set(got.items()) ^ set(want.items()))} "
                       "entries differ): python scripts/zh_outputs.py compile")
    return out


#: a built page's block elements: a line of what an output area shows ends at each of them
_BLOCKS = {"p", "div", "pre", "td", "th", "li", "tr", "br", "table", "h1", "h2", "h3", "h4", "dt", "dd"}
_FIGURE_DATA = re.compile(r"=\{\s*\"fig\":(\{.*\}),\"config\":", re.S)


def page_strings(page_html: str, page_dir: Path | None = None):
    """(what, string) for every string the output areas of a built chapter page show: each
    line of their text (outside ``<script>``/``<style>`` and cells tagged ``output-is-code``),
    their ``alt``, ``aria-label`` and ``title`` attributes, and the words of the plotly
    figures whose data they load (``data-src``, read under ``page_dir``)."""
    from html.parser import HTMLParser

    found: list = []

    class Walk(HTMLParser):
        def __init__(self):
            super().__init__(convert_charrefs=True)
            self.stack: list = []        # per open div: "code" / "output" / None
            self.skip = 0
            self.buf: list = []

        def inside(self) -> bool:
            return "output" in self.stack and "code" not in self.stack

        def flush(self):
            text = "".join(self.buf)
            self.buf = []
            for line in text.splitlines():
                if line.strip():
                    found.append(("text", line.strip()))

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            cls = (a.get("class") or "").split()
            if tag in _BLOCKS:
                self.flush()
            if tag == "div":
                self.stack.append("code" if f"tag_{io.CODE_OUTPUT_TAG}" in cls else
                                  "output" if "cell_output" in cls else None)
            if tag in ("script", "style"):
                self.skip += 1
            if not self.inside():
                return
            if tag == "code":  # inline code (a checker names a function) is code, not English
                self.buf.append("`")
            for key in ("alt", "aria-label", "title"):
                if a.get(key):
                    found.append((key, a[key]))
            if tag == "script" and a.get("data-src") and page_dir is not None:
                path = (page_dir / a["data-src"]).resolve()
                m = _FIGURE_DATA.search(path.read_text(encoding="utf-8")) if path.is_file() else None
                if m:
                    for _, text in io.plotly_strings(json.loads(m.group(1))):
                        found.append(("plotly " + path.name, text))

        def handle_startendtag(self, tag, attrs):
            self.handle_starttag(tag, attrs)
            if tag == "div":
                self.stack.pop()

        def handle_endtag(self, tag):
            if tag == "code" and self.inside():
                self.buf.append("`")
            if tag in _BLOCKS:
                self.flush()
            if tag in ("script", "style"):
                self.skip = max(0, self.skip - 1)
            if tag == "div" and self.stack:
                self.stack.pop()

        def handle_data(self, data):
            if self.inside() and not self.skip:
                self.buf.append(data)

    Walk().feed(page_html)
    for what, text in found:
        for part in _parts([text]):
            yield what, part


def kept_words(lang: str = "zh") -> set:
    """The Latin words the ``lang`` translations themselves keep (an example sentence's
    tokens, a formula's symbols, a name: ``“the big dog barked” 的注意力权重``): not English
    left over where a composed string (an alt text) shows them."""
    return {w for value in io.catalog(lang).values() for w in io.english_words(value)}


def page_offenders(page_html: str, page_dir: Path | None = None) -> list:
    """The strings of a built Chinese chapter's output areas (:func:`page_strings`) that
    show English words (:func:`attn_edu.i18n_outputs.english_words`, less its allow-list and
    the words a translation keeps, :func:`kept_words`) and that no catalog declares
    language-neutral, each once: (what, string, words)."""
    out, seen, kept = [], set(), kept_words()
    for what, text in page_strings(page_html, page_dir):
        words = [w for w in io.english_words(text) if w not in kept]
        if not words or text in seen or io.neutral(text, "zh"):
            continue
        seen.add(text)
        out.append((what, text, words))
    return out


def pages(only) -> int:
    """Every built Chinese chapter's English left over (what tests/test_zh_site.py checks)."""
    total = 0
    for page in sorted((ROOT / "_build" / "html" / "zh" / "notebooks").glob("[0-9][0-9]_*.html")):
        if only and page.name[:2] not in only:
            continue
        with io.chapter_scope(page.name[:2]):
            found = page_offenders(page.read_text(encoding="utf-8"), page.parent)
        total += len(found)
        print(f"{page.name}: {len(found)} strings with English words")
        for what, text, words in found[:30]:
            print(f"  [{what}] {text[:110]!r}  ({', '.join(words[:5])})")
    print(f"{total} in all")
    return 1 if total else 0


def check(_only) -> int:
    found = problems()
    print("\n".join(found) or "the output catalogs are consistent")
    return 1 if found else 0


def display_width(text: str) -> int:
    """Columns ``text`` takes in a monospaced font (a CJK character takes two)."""
    import unicodedata
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def show(only) -> int:
    """Every string of the chapters' outputs beside its translation; a line of a table (two or
    more spaces in a row) whose translation is wider or narrower is flagged ``width!``."""
    compile_all()
    io._merged.clear()
    for chapter, nb in executed_chapters(only):
        last = None
        for cell, text in [*chapter_strings(nb), *chapter_strings(nb, True)]:
            if not io.english_words(text):
                continue
            if cell != last:
                print(f"--- {chapter} {cell}")
                last = cell
            with io.chapter_scope(chapter):  # its own entries first, as on its page
                zh = io.translate_text(text, "zh")
            flag = "  width!" if zh != text and "  " in text and display_width(zh) != display_width(text) else ""
            print(f"  {text}\n    -> {zh if zh != text else '(untranslated)'}{flag}")
    return 0


def main(argv) -> int:
    if not argv or argv[0] not in ("extract", "missing", "compile", "show", "check", "pages"):
        print(__doc__)
        return 2
    only = set(argv[1:])
    return {"extract": extract, "missing": missing, "compile": lambda _: compile_all(), "show": show,
            "check": check, "pages": pages}[argv[0]](only)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
