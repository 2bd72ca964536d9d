#!/usr/bin/env python3
"""The Chinese edition's chapters: twins of the English ones that cannot drift.

``notebooks/zh/NN_name.ipynb`` is chapter ``notebooks/NN_name.ipynb`` in Simplified Chinese:
the same cells in the same order, each code cell byte for byte the English one (so the book
build renders it from the English execution, jupyter-cache keying on code) except for one
difference, a tested rule (:func:`zh_code`): the first code cell's ``attn_edu.setup_notebook()``
is ``attn_edu.setup_notebook(lang="zh")``, which makes what the package shows (figures' words,
checkers' messages, alt text) Chinese in Jupyter and Colab; each markdown cell translated. Every zh cell records the English cell it translates in its metadata::

    "attn_edu": {"en": "<English cell id>", "en_sha": "<first 12 hex of sha256(English source)>"}

so an English cell edited after its translation is found (stale), as is a cell added or
removed on one side only.

    python scripts/zh.py new NN          # start a twin: code copied, markdown copied (to translate), stamped
    python scripts/zh.py sync NN         # after editing an English chapter: code cells copied again,
                                         # new English cells inserted (English text, to translate)
    python scripts/zh.py stamp NN CELL   # after translating the change of English cell CELL: record its sha
    python scripts/zh.py check [NN ...]  # exit 1 and name every drifted cell (what tests/test_zh.py runs)
    python scripts/zh.py site            # after the English build: _build/zh-src, the Chinese book's
                                         # sources, every chapter carrying the outputs of the English
                                         # build's one execution (from its cache, _build/.jupyter_cache),
                                         # translated (attn_edu.i18n_outputs)

``check`` compares, cell by cell: ids, types and order; code (identical but for the rule of
:func:`zh_code`); the English sha
(stale translations); and in markdown the things a translation must keep: fenced code blocks
(byte for byte: a solution's code is code), math
(``$...$``, ``$$...$$``, ``\\begin{...}``; the words inside ``\\text{}`` are translated, the
rest byte for byte), link targets, cross-references (``{ref}``,
``{doc}``, ``{numref}``, ``{eq}``), citations (``{cite}``), labels (``(name)=``), directives
and dropdowns (``:::{admonition}``, ``:class: dropdown``, ``:::``, code fences), and headings'
levels.
"""
from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EN = ROOT / "notebooks"
ZH = ROOT / "notebooks" / "zh"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def source(cell: dict) -> str:
    s = cell["source"]
    return "".join(s) if isinstance(s, list) else s


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def save(path: Path, nb: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def english(chapter: str) -> Path:
    (path,) = EN.glob(f"{chapter}_*.ipynb") if len(chapter) == 2 else [EN / f"{chapter}.ipynb"]
    return path


def twin(en_path: Path) -> Path:
    return ZH / en_path.name


#: the one difference between twins' code: the first code cell chooses the reader's language
EN_SETUP_CALL = "attn_edu.setup_notebook()"
ZH_SETUP_CALL = 'attn_edu.setup_notebook(lang="zh")'


def first_code_id(nb: dict) -> str | None:
    """The id of a notebook's first code cell (the setup cell), None without one."""
    return next((c.get("id") for c in nb["cells"] if c["cell_type"] == "code"), None)


def zh_code(en_source: str, first: bool) -> str:
    """The Chinese twin's code for an English code cell: the same, byte for byte, except in the
    first code cell, whose one ``attn_edu.setup_notebook()`` becomes
    ``attn_edu.setup_notebook(lang="zh")``. A ValueError when that first cell does not call it
    exactly once (then the rule cannot be applied)."""
    if not first:
        return en_source
    if en_source.count(EN_SETUP_CALL) != 1:
        raise ValueError(f"the first code cell must call {EN_SETUP_CALL} exactly once; "
                         f"it does {en_source.count(EN_SETUP_CALL)} times")
    return en_source.replace(EN_SETUP_CALL, ZH_SETUP_CALL)


def _set_source(cell: dict, text: str) -> None:
    cell["source"] = text.splitlines(keepends=True) if isinstance(cell["source"], list) else text


def _zh_code_cell(en_cell: dict, first_id: str | None) -> dict:
    """A copy of an English code cell as its Chinese twin has it (:func:`zh_code`)."""
    z = json.loads(json.dumps(en_cell))
    _set_source(z, zh_code(source(en_cell), en_cell.get("id") == first_id))
    return z


def _stamp(zh_cell: dict, en_cell: dict) -> None:
    zh_cell.setdefault("metadata", {})["attn_edu"] = {"en": en_cell["id"], "en_sha": sha(source(en_cell))}


def new(chapter: str) -> Path:
    en_path = english(chapter)
    out = twin(en_path)
    if out.exists():
        raise SystemExit(f"{out} exists: use sync")
    nb = load(en_path)
    first = first_code_id(nb)
    nb["cells"] = [_zh_code_cell(c, first) if c["cell_type"] == "code" else c for c in nb["cells"]]
    for cell, en_cell in zip(nb["cells"], load(en_path)["cells"]):
        _stamp(cell, en_cell)
    save(out, nb)
    return out


def sync(chapter: str) -> list:
    """Copy the English code cells into the twin again and insert English cells the twin
    lacks (English text, to translate); drop twin cells whose English cell is gone. Returns
    what changed. Markdown already translated is kept (check says which ones are stale)."""
    en_path = english(chapter)
    en, zh = load(en_path), load(twin(en_path))
    by_id = {c["metadata"].get("attn_edu", {}).get("en"): c for c in zh["cells"]}
    first = first_code_id(en)
    cells, notes = [], []
    for e in en["cells"]:
        z = by_id.get(e["id"])
        if z is None:
            z = _zh_code_cell(e, first) if e["cell_type"] == "code" else json.loads(json.dumps(e))
            _stamp(z, e)
            notes.append(f"inserted {e['id']} (to translate)")
        elif e["cell_type"] == "code":
            want = _zh_code_cell(e, first)
            if source(z) != source(want) or z.get("metadata", {}).get("tags") != e.get("metadata", {}).get("tags"):
                notes.append(f"code {e['id']} copied")
            z = want
            _stamp(z, e)
        cells.append(z)
    gone = set(by_id) - {e["id"] for e in en["cells"]}
    notes += [f"removed {g}" for g in sorted(filter(None, gone))]
    zh["cells"] = cells
    save(twin(en_path), zh)
    return notes


def stamp(chapter: str, cell_id: str) -> None:
    en_path = english(chapter)
    en, zh = load(en_path), load(twin(en_path))
    (e,) = [c for c in en["cells"] if c["id"] == cell_id]
    (z,) = [c for c in zh["cells"] if c["metadata"].get("attn_edu", {}).get("en") == cell_id]
    _stamp(z, e)
    save(twin(en_path), zh)


# --------------------------------------------------------------------------- what must match
_MATH = re.compile(r"\$\$.*?\$\$|(?<![\\$])\$(?!\$)(?:[^$\\]|\\.)+?\$|\\begin\{(\w+\*?)\}.*?\\end\{\1\}", re.S)
_LINK = re.compile(r"\]\(([^)\s]+)\)|<(https?://[^>\s]+)>")
_ROLE = re.compile(r"(?<!`)\{(ref|doc|numref|eq|cite|cite:p|cite:t)\}`([^`]*)`")  # not `{cite}` written as inline code
_LABEL = re.compile(r"^\(([\w-]+)\)=\s*$", re.M)


def _structure(text: str) -> list:
    """Directive and dropdown lines, fences, headings' levels: the skeleton a translation keeps."""
    out = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith((":::", "```")) or s.startswith(":class:") or s.startswith(":label:"):
            out.append(s if not s.startswith(":::{") else s.split("}", 1)[0] + "}")
        elif re.match(r"#{1,6} ", s):
            out.append(s.split(" ", 1)[0])
    return out


def _roles(text: str) -> list:
    """The targets of {ref}, {doc}, {numref}, {eq} and {cite} roles: a translation may change a
    role's shown text (``{doc}`为什么 </notebooks/02_why_sqrt_dk>```), never what it points to.
    ({term} roles may name the English or the Chinese glossary entry.)"""
    out = []
    for kind, body in _ROLE.findall(text):
        m = re.search(r"<([^<>]+)>\s*$", body)
        out.append((kind, (m.group(1) if m else body).strip()))
    return sorted(out)


def _code_blocks(text: str) -> list:
    """The contents of fenced code blocks (a solution's code), in order: kept byte for byte.
    A MyST directive's fence (```{glossary}, ```{eval-rst}) is not code: its content is
    translated, and code fences inside it are still found."""
    blocks, stack = [], []          # stack: [fence, is_directive, first content line]
    lines = text.splitlines(keepends=True)
    for n, line in enumerate(lines):
        m = re.match(r"\s*(`{3,}|~{3,})(.*)$", line)
        if not m:
            continue
        fence, info = m.group(1), m.group(2).strip()
        if stack and fence == stack[-1][0] and not info:          # closes the innermost fence
            top = stack.pop()
            if not top[1]:
                blocks.append("".join(lines[top[2]:n]))
        elif not (stack and not stack[-1][1]):                     # (inside code, a fence is text)
            stack.append([fence, info.startswith("{"), n + 1])
    return blocks


def _text_blanked(formula: str) -> str:
    """A formula with the words inside each ``\\text{...}`` taken out (braces balanced): a
    translation writes them in its own language (``\\text{若 }`` for ``\\text{if }``), and
    everything else of the formula stays byte for byte."""
    out, i = [], 0
    for m in re.finditer(r"\\text\{", formula):
        if m.start() < i:
            continue
        depth, j = 1, m.end()
        while j < len(formula) and depth:
            depth += {"{": 1, "}": -1}.get(formula[j], 0) if formula[j - 1] != "\\" else 0
            j += 1
        out.append(formula[i:m.end()] + "}")
        i = j
    return "".join(out) + formula[i:]


def markdown_keeps(en_text: str, zh_text: str) -> list:
    """What a translated markdown cell lost or changed (empty: nothing)."""
    problems = []
    if _code_blocks(en_text) != _code_blocks(zh_text):
        en_b, zh_b = _code_blocks(en_text), _code_blocks(zh_text)
        first = next((i for i, (a, b) in enumerate(zip(en_b, zh_b)) if a != b), min(len(en_b), len(zh_b)))
        problems.append(f"code blocks differ (block {first + 1} of {len(en_b)} in English, "
                        f"{len(zh_b)} in Chinese): a translation keeps the code as it is")
    for what, get in (("math", lambda t: sorted(_text_blanked(m.group(0)) for m in _MATH.finditer(t))),
                      ("links", lambda t: sorted(a or b for a, b in _LINK.findall(t))),
                      ("cross-references and citations", _roles),
                      ("labels", lambda t: sorted(_LABEL.findall(t))),
                      ("structure (directives, dropdowns, fences, headings)", _structure)):
        a, b = get(en_text), get(zh_text)
        if a != b:
            only_en = [x for x in a if x not in b][:3]
            only_zh = [x for x in b if x not in a][:3]
            problems.append(f"{what} differ: English has {only_en or a[:3]}, Chinese {only_zh or b[:3]}")
    return problems


def check_chapter(en_path: Path) -> list:
    """Every drift between an English chapter and its Chinese twin, as messages naming cells."""
    zh_path = twin(en_path)
    if not zh_path.exists():
        return [f"{en_path.name}: no Chinese twin {zh_path.relative_to(ROOT)}"]
    en, zh = load(en_path), load(zh_path)
    problems = []
    en_ids = [c["id"] for c in en["cells"]]
    zh_ids = [c.get("metadata", {}).get("attn_edu", {}).get("en") for c in zh["cells"]]
    if en_ids != zh_ids:
        missing = [i for i in en_ids if i not in zh_ids]
        extra = [i for i in zh_ids if i not in en_ids]
        problems.append(f"{zh_path.name}: cells differ from the English chapter's "
                        f"(only in English: {missing}; only in Chinese: {extra}; or the order): "
                        "python scripts/zh.py sync " + en_path.name[:2])
        return problems
    first = first_code_id(en)
    for e, z in zip(en["cells"], zh["cells"]):
        where = f"{zh_path.name} cell {e['id']}"
        if e["cell_type"] != z["cell_type"]:
            problems.append(f"{where}: {z['cell_type']} where English has {e['cell_type']}")
            continue
        if e["cell_type"] == "code":
            try:
                want = zh_code(source(e), e["id"] == first)
            except ValueError as err:
                problems.append(f"{en_path.name} cell {e['id']}: {err}")
                continue
            if want != source(z):
                rule = (f" but for {EN_SETUP_CALL} -> {ZH_SETUP_CALL}, the first cell's one difference"
                        if e["id"] == first else "")
                problems.append(f"{where}: code differs from the English cell{rule} (python scripts/zh.py sync)")
            if e.get("metadata", {}).get("tags") != z.get("metadata", {}).get("tags"):
                problems.append(f"{where}: tags differ from the English cell's")
            continue
        if z["metadata"]["attn_edu"].get("en_sha") != sha(source(e)):
            problems.append(f"{where}: stale: the English cell changed after it was translated "
                            f"(translate the change, then python scripts/zh.py stamp {en_path.name[:2]} {e['id']})")
        problems += [f"{where}: {p}" for p in markdown_keeps(source(e), source(z))]
    return problems


def check(chapters: list) -> list:
    paths = [english(c) for c in chapters] if chapters else sorted(EN.glob("[0-9][0-9]_*.ipynb"))
    orphans = [] if chapters else [f"{p.name}: no English chapter" for p in sorted(ZH.glob("*.ipynb"))
                                   if not (EN / p.name).exists()]
    return [p for path in paths for p in check_chapter(path)] + orphans


# --------------------------------------------------------------------------- the Chinese site
ZH_BOOK = ROOT / "book" / "zh"
SRC = ROOT / "_build" / "zh-src"
#: the English build's executions (scripts/execute_chapters.py), which the Chinese book reuses
CACHE = ROOT / "_build" / ".jupyter_cache"
#: the table of contents' captions and the titles _toc.yml sets, in Chinese
#: (the part names are the front page's, book/zh/intro.md, and a chapter's title its heading's:
#: tests/test_zh.py holds them to that)
TOC_WORDS = {"Front matter": "前言", "Foundations": "基础", "Building blocks": "基本组件",
             "Efficient attention": "高效注意力", "Attention at scale": "大规模注意力",
             "Back matter": "附录", "Why divide by √d_k": "为什么要除以 √d_k"}


def page_sha(path: Path) -> str:
    return sha(Path(path).read_text(encoding="utf-8"))


def zh_outputs(en_cell: dict) -> list:
    """What the Chinese page shows for an executed English code cell: its outputs translated
    (:func:`attn_edu.i18n_outputs.translate_cell_outputs`: printed lines, text, Markdown, HTML,
    plotly figures and explorers' stand-ins through the output catalogs, matplotlib figures
    swapped for the Chinese renderings the English execution made; a cell tagged
    ``output-is-code`` as it is)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from attn_edu.i18n_outputs import translate_cell_outputs

    return translate_cell_outputs(en_cell, "zh")


def with_outputs(zh_nb: dict, executed: dict, name: str) -> dict:
    """The Chinese chapter with the English build's outputs, translated (:func:`zh_outputs`),
    in its code cells (matched by the English cell id; the code must be the same: the Chinese
    book executes nothing)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from attn_edu.i18n_outputs import chapter_scope

    out = {c["id"]: c for c in executed["cells"]}
    first = first_code_id(executed)
    nb = json.loads(json.dumps(zh_nb))
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        en = out.get(cell["metadata"]["attn_edu"]["en"])
        # the first cell's setup_notebook(lang="zh") is the one difference (zh_code); its
        # outputs (a version and device line) are the same in both languages
        if en is None or zh_code(source(en), en["id"] == first) != source(cell):
            raise SystemExit(f"{name}: code cell {cell['metadata']['attn_edu']['en']} differs from the English "
                             "build's: python scripts/zh.py sync, then build again")
        with chapter_scope(name[:2]):  # the chapter's own entries first (outputs_NN)
            cell["outputs"], cell["execution_count"] = zh_outputs(en), en.get("execution_count")
    nb["metadata"] = executed.get("metadata", nb["metadata"])
    return nb


def site() -> Path:
    """``_build/zh-src``: the Chinese book's sources for jupyter-book, made from the English
    build. Chapters and pages without a Chinese twin yet are the English ones (listed)."""
    import shutil

    import yaml

    import nbformat
    from jupyter_cache import get_cache

    if not CACHE.is_dir():
        raise SystemExit(f"{CACHE} is missing: build the English book first (scripts/build-book.sh)")
    cache = get_cache(str(CACHE))
    shutil.rmtree(SRC, ignore_errors=True)
    (SRC / "notebooks").mkdir(parents=True)
    (SRC / "book").mkdir()
    for name in ("_ext", "_static", "references.bib"):
        (SRC / "book" / name).symlink_to(ROOT / "book" / name)
    (SRC / "attn_edu").symlink_to(ROOT / "attn_edu")  # a chapter includes the package's source
    english_only = []
    for en_path in sorted(EN.glob("[0-9][0-9]_*.ipynb")):
        try:  # the English chapter with the outputs of its one execution
            # from_dict, not nbformat.read: scripts/execute_chapters.py read and validated this
            # file already (the English Sphinx build now runs beside this one), and validating
            # imports jsonschema's format checkers (2.6 s)
            _, merged = cache.merge_match_into_notebook(nbformat.from_dict(load(en_path)))
        except KeyError:
            raise SystemExit(f"{en_path.name} is not in {CACHE}: build the English book first") from None
        executed = json.loads(json.dumps(merged))
        if twin(en_path).exists():
            nb = with_outputs(load(twin(en_path)), executed, en_path.name)
        else:
            nb, _ = executed, english_only.append(en_path.name)
        save(SRC / "notebooks" / en_path.name, nb)
    for page in sorted((ROOT / "book").glob("*.md")):
        zh_page = ZH_BOOK / page.name
        if zh_page.exists():
            shutil.copy(zh_page, SRC / "book" / page.name)
        else:
            shutil.copy(page, SRC / "book" / page.name)
            english_only.append(f"book/{page.name}")
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    config["title"] = "注意力机制：从第一性原理到 GPU 内核"
    config["author"] = "attn-edu 作者"
    config["execute"]["execute_notebooks"] = "off"  # the outputs are the English build's
    sphinx = config.setdefault("sphinx", {})
    sphinx.setdefault("config", {}).update(language="zh_CN", attn_edu_edition="zh",
                                           # a dropdown's hint: sphinx-togglebutton's own zh-cn catalog's words,
                                           # which it reads at import (in English) and under "zh-cn", not "zh_CN"
                                           togglebutton_hint="点击显示", togglebutton_hint_hide="点击隐藏")
    sphinx.setdefault("local_extensions", {})
    (SRC / "_config.yml").write_text(yaml.safe_dump(config, allow_unicode=True, sort_keys=False), encoding="utf-8")
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))

    def translate(node):
        if isinstance(node, dict):
            return {k: (TOC_WORDS.get(v, v) if k in ("caption", "title") else translate(v)) for k, v in node.items()}
        if isinstance(node, list):
            return [translate(x) for x in node]
        return node
    (SRC / "_toc.yml").write_text(yaml.safe_dump(translate(toc), allow_unicode=True, sort_keys=False),
                                  encoding="utf-8")
    if english_only:
        print(f"[zh] not translated yet, shown in English: {', '.join(english_only)}")
    return SRC


def main(argv: list) -> int:
    if not argv:
        print(__doc__)
        return 2
    cmd, args = argv[0], argv[1:]
    if cmd == "new":
        print(new(args[0]))
    elif cmd == "sync":
        print("\n".join(sync(args[0])) or "nothing to sync")
    elif cmd == "stamp":
        stamp(args[0], args[1])
    elif cmd == "site":
        print(site())
    elif cmd == "check":
        problems = check(args)
        print("\n".join(problems) or "the Chinese chapters match the English ones")
        return 1 if problems else 0
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
