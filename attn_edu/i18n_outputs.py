"""What a chapter shows, in the reader's language: printed lines and figures' words.

A chapter's code is the same in both editions, and most of what it shows is made by that code
(an f-string it prints, a figure title it sets), not by the package's ``_()``. So the Chinese
edition translates the *outputs*: every string a reader sees (a printed line, a plotly
figure's title, axis titles, legend names, slider labels and tick labels, an HTML table's cell)
is looked up in gettext catalogs whose entries are the English outputs themselves.

The same lookup serves the built book (``scripts/zh.py site`` translates the English build's
outputs; nothing is executed twice) and a live kernel (``setup_notebook(lang="zh")`` installs
it on what the kernel prints and displays), so a Chinese reader in Jupyter or Colab sees what
the Chinese pages show.

**The lookup rule** (:func:`translate_text`): the string itself, then its *skeleton*, in which
every number (with the spaces before it) is a numbered placeholder ``{0}``, ``{1}``, ...::

    "n = 2048: naive  16.00 MiB (16 workers)"  ->  "n ={0}: naive{1} MiB ({2} workers)"

A catalog entry for the skeleton serves every run's numbers, and its translation may move the
placeholders. Last, for a line that names a GPU or a version with its build (what a GPU runtime
prints: ``Tesla T4``, ``torch 2.11.0+cu130``), the skeleton in which those are placeholders too
(:data:`NAME`, ``skeleton(text, names=True)``), so one entry serves every GPU. A number is a
run of digits (with ``,`` thousands, a fraction and an exponent) not glued to a letter, ``_``
or a digit before it: ``float32``, ``H100`` and ``sm_90a`` are names, not numbers. Leading and trailing spaces of the whole string are kept.

(It has more than 600 lines: the one home of the output lookup, kept whole because the book's
build, the catalogs' script and a live kernel must walk outputs, HTML, plotly JSON and
matplotlib figures by the same rules; split, the rules would drift apart.)

**The catalogs**: domain ``outputs`` (words many chapters share) and one domain per chapter,
``outputs_NN``, beside the package's own ``attn_edu`` domain in
``attn_edu/locale/<catalog>/LC_MESSAGES/``; all are read and merged, so a lookup does not need
to know which chapter it is in. Where it knows (:func:`chapter_scope`, :data:`CHAPTER_ENV`), that
chapter's entries come first: a word one chapter means otherwise (chapter 10's "masked" tiles,
partly masked, which chapter 14's wholly masked squares are not) has its own entry in
``outputs_NN``; then the figures' words, the shared ones, the other chapters' and the package's.
Keep them with
``python scripts/zh_outputs.py`` (``extract`` lists what the English build shows that has no
entry yet; ``compile`` writes the ``.mo`` files).
"""

from __future__ import annotations

import contextlib as _contextlib
import gettext as _gettext
import html as _html
import json
import os as _os
import re

from ._optional import ipython_shell
from .i18n import LANGUAGES, LOCALE_DIR, current_language

__all__ = ["skeleton", "translate_text", "translate_lines", "catalog", "NUMBER", "NAME", "TEXT_KEYS",
           "plotly_strings", "translate_plotly", "ALLOWED_WORDS", "english_words", "neutral",
           "placeholder_problem", "CODE_OUTPUT_TAG", "META_KEY", "translate_html", "html_strings", "output_strings",
           "translate_output", "translate_cell_outputs", "figure_texts", "translated_figure",
           "translate_figure", "cjk_font", "ZH_RENDER_ENV", "install_output_translation", "CHAPTER_ENV",
           "chapter_scope"]

#: what the skeleton counts as a number, with the spaces before it; never glued to a letter,
#: ``_``, ``#``, a digit or a ``.`` before it (an ``x`` or ``×`` alone before it is a factor,
#: as in ``x0.62``), and taking a ``.`` after it only with digits (a sentence's full stop,
#: NumPy's ``2.`` and ``0..3`` stay text)
NUMBER = re.compile(r"\s*(?:(?<![A-Za-z_\d.#])|(?<=(?<![A-Za-z])[x×]))[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")

#: a list of numbers (NumPy's or Python's, nested or not) counts as one number, because its
#: length and NumPy's padding inside it change with what was measured and its words do not
NUMBER_LIST = re.compile(r"\s*(?<![A-Za-z_\d])\[(?=[^\]]*\d)(?:[\s\d.,:+\-−eE\[\]]|nan|inf)*\]")
_TOKEN = re.compile(f"{NUMBER_LIST.pattern}|{NUMBER.pattern}")
#: what the last lookup also counts as one placeholder (with the spaces before it), namely a
#: GPU's name as ``torch.cuda.get_device_name`` gives it (a vendor's word, then up to a comma,
#: colon, semicolon, parenthesis, `` x `` or the end, as in ``NVIDIA H100 80GB HBM3``) and a
#: version with its build (``2.11.0+cu130``)
NAME = re.compile(r"\s*(?:(?<![\w.])(?:NVIDIA|Tesla|Quadro|GeForce|AMD|Radeon)\b[^,;:()\n]*?"
                  r"(?=\s*(?:[,;:()]|\s[x×]\s|$))|(?<![\w.])\d+\.\d+\.\d+(?:[+.\w-]*\w)?)")
_NAMED = re.compile(f"{NAME.pattern}|{_TOKEN.pattern}")

_merged: dict[str, dict[str, str]] = {}


def _check_lang(lang: object) -> str:
    if not isinstance(lang, str) or lang not in LANGUAGES:
        raise ValueError(f"lang must be one of {sorted(LANGUAGES)}; got {lang!r}")
    return lang


def skeleton(text: str, names: bool = False) -> tuple[str, list[str]]:
    """``text`` with each number or list of numbers (``NUMBER_LIST``), and the spaces
    before it, replaced by ``{0}``, ``{1}``, ..., and the numbers so replaced; braces already
    in ``text`` are doubled (``str.format``). ``names=True``: each GPU name and version
    (:data:`NAME`) is a placeholder too."""
    numbers: list[str] = []
    out, last = [], 0
    for m in (_NAMED if names else _TOKEN).finditer(text):
        if not m.group().strip():
            continue
        out.append(text[last:m.start()].replace("{", "{{").replace("}", "}}"))
        out.append("{%d}" % len(numbers))
        numbers.append(m.group())
        last = m.end()
    out.append(text[last:].replace("{", "{{").replace("}", "}}"))
    return "".join(out), numbers


#: the environment variable naming the chapter (``"10"``) a kernel executes, whose catalog
#: ``outputs_NN`` then comes first (set by scripts/execute_chapters.py for each chapter); a
#: reader's kernel does not know its chapter and reads the shared words first
CHAPTER_ENV = "ATTN_EDU_CHAPTER"
_scope: dict = {"chapter": None}
_CHAPTER_DOMAIN = re.compile(r"outputs_\d\d")


@_contextlib.contextmanager
def chapter_scope(chapter: str | None):
    """``with chapter_scope("10"):`` look-ups inside the block read chapter 10's catalog
    (``outputs_10``) first (scripts/zh.py site, for each chapter it translates); ``None``: the
    chapter :data:`CHAPTER_ENV` names, if any. The chapter before it after."""
    if chapter is not None and not (isinstance(chapter, str) and re.fullmatch(r"\d\d", chapter)):
        raise ValueError(f"chapter must be two digits such as '05' (or None); got {chapter!r}")
    before = _scope["chapter"]
    _scope["chapter"] = chapter
    try:
        yield chapter
    finally:
        _scope["chapter"] = before


def _current_chapter() -> str | None:
    if _scope["chapter"] is not None:
        return _scope["chapter"]
    env = _os.environ.get(CHAPTER_ENV, "")
    return env if re.fullmatch(r"\d\d", env) else None


def catalog(lang: str) -> dict[str, str]:
    """Every output entry of ``lang``'s catalogs, msgid -> msgstr (empty for English); where
    two catalogs translate one msgid, the current chapter's (:func:`chapter_scope`) wins, then
    the figures' (``outputs_fig``), the shared ``outputs``, the other chapters', the package's."""
    lang = _check_lang(lang)
    chapter = _current_chapter()
    key = lang if chapter is None else f"{lang}:{chapter}"
    if key not in _merged:
        merged: dict[str, str] = {}
        folder = LANGUAGES[lang]
        if folder is not None:
            found = sorted((LOCALE_DIR / folder / "LC_MESSAGES").glob("outputs*.mo"), reverse=True)
            chapters = [mo for mo in found if _CHAPTER_DOMAIN.fullmatch(mo.stem)]
            own = [mo for mo in chapters if mo.stem == f"outputs_{chapter}"]
            order = own + [mo for mo in found if mo not in chapters] + [mo for mo in chapters if mo not in own]
            for mo in order + [LOCALE_DIR / folder / "LC_MESSAGES" / "attn_edu.mo"]:
                with open(mo, "rb") as f:
                    for k, value in _gettext.GNUTranslations(f)._catalog.items():
                        if isinstance(k, str) and k and value:
                            merged.setdefault(k, value)
        _merged[key] = merged
    return _merged[key]


def translate_text(text: str, lang: str | None = None) -> str:
    """``text`` (one line an output shows) in ``lang`` (default: the package's current
    language), by the lookup rule above; ``text`` itself when no entry matches."""
    entries = catalog(lang if lang is not None else current_language())
    if not entries or not text or not text.strip():
        return text
    body = text.strip()
    lead, tail = text[: len(text) - len(text.lstrip())], text[len(text.rstrip()):]
    if body in entries:
        return lead + entries[body] + tail
    for names in (False, True) if NAME.search(body) else (False,):
        key, numbers = skeleton(body, names)
        if numbers and key in entries:
            try:
                # (a number keeps the spaces before it: a translation that moves it first
                # would start with them)
                return lead + entries[key].format(*numbers).strip() + tail
            except (IndexError, KeyError, ValueError):  # a broken entry shows the English
                return text
    return text


def translate_lines(text: str, lang: str | None = None) -> str:
    """Each line of ``text`` translated by :func:`translate_text`; line ends kept."""
    return "".join(translate_text(line[:-1] if line.endswith("\n") else line, lang)
                   + ("\n" if line.endswith("\n") else "")
                   for line in text.splitlines(keepends=True))


# --------------------------------------------------------------------------- plotly figures
#: the keys of a plotly figure (its JSON) whose strings a reader sees, i.e. titles, names,
#: labels, tick and hover texts, slider prefixes, and category names on an axis (``x``,
#: ``y``); a ``"a.b.text"`` key (a slider step's update) counts by its last part
TEXT_KEYS = frozenset({"text", "name", "ticktext", "hovertemplate", "hovertext", "texttemplate",
                       "label", "prefix", "suffix", "title", "x", "y"})


def _text_key(key: str | None) -> bool:
    return key is not None and key.rsplit(".", 1)[-1] in TEXT_KEYS


def plotly_strings(fig, key: str | None = None):
    """Every (key, string) of a plotly figure's JSON (a dict) that a reader sees, outside the
    figure's ``template``."""
    if isinstance(fig, dict):
        for k, v in fig.items():
            if k == "frames" and isinstance(v, list):  # a frame's name is what a slider calls it
                for frame in v:
                    yield from plotly_strings({f: x for f, x in frame.items() if f != "name"}
                                              if isinstance(frame, dict) else frame, k)
            elif k != "template":
                yield from plotly_strings(v, k)
    elif isinstance(fig, list):
        for v in fig:
            yield from plotly_strings(v, key)
    elif isinstance(fig, str) and _text_key(key):
        yield key, fig


def translate_plotly(fig, lang: str | None = None, key: str | None = None):
    """A copy of a plotly figure's JSON (a dict) with every string :func:`plotly_strings`
    names translated by :func:`translate_text` (a plotly ``<br>`` breaks lines)."""
    if isinstance(fig, dict):
        return {k: (v if k == "template" else _frames(v, lang) if k == "frames" else translate_plotly(v, lang, k))
                for k, v in fig.items()}
    if isinstance(fig, list):
        return [translate_plotly(v, lang, key) for v in fig]
    if isinstance(fig, str) and _text_key(key):
        return "<br>".join(translate_text(part, lang) for part in fig.split("<br>"))
    return fig


def _frames(frames, lang):
    """An animation's frames translated, but for their names: a slider's steps and the play
    button name the frames they show (``args``), and a renamed frame is one no step finds."""
    if not isinstance(frames, list):
        return translate_plotly(frames, lang, "frames")
    return [{k: (v if k == "name" else translate_plotly(v, lang, k)) for k, v in f.items()}
            if isinstance(f, dict) else f for f in frames]


# --------------------------------------------------------------------------- English left over
#: words an output may show in any edition, i.e. units, names of libraries, devices and
#: formats, and the short math names the formulas use (a word with a digit or ``_`` is a
#: name already)
ALLOWED_WORDS = frozenset("""
    MiB GiB KiB MB GB KB TB GB/s TB/s TFLOP TFLOPs FLOP FLOPs flop flops ms us µs ns Hz GHz MHz
    NumPy numpy PyTorch torch Triton triton CUDA cuDNN cuBLAS CPU GPU GPUs CPUs SM SMs HBM SRAM
    NVIDIA Hopper Ampere Turing Colab Jupyter JupyterLab plotly matplotlib ipywidgets BLAS
    SDPA FlashAttention FA FA2 FA3 TMA wgmma mma ncu nvidia smi PCIe SXM NVLink RTX
    float half bfloat bf fp int uint dtype dtypes cpu cuda cuda:0 gloo nccl torchrun
    max min std var mean sqrt exp log lse argmax softmax diff abs sum tol rtol atol
    attn_edu sdpa KV QK PV RoPE ALiBi GQA MQA MHA LSE RMS PE FAVOR Lq Lk
    Q K V O P S A B H L N W T M X Y Z q k v o p s x y z d n b h e i j t l m r c
    True False None NaN nan inf Inf OK ok vs
""".split())

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_'’/:.-]*[A-Za-z0-9]|[A-Za-z]")


def english_words(text: str) -> list[str]:
    """The words of ``text`` a reader reads as English: runs of letters that are not a name
    (no digit, ``_`` or dotted part), not in :data:`ALLOWED_WORDS`, and not inside backticks."""
    text = re.sub(r"`[^`]*`", " ", text)
    words = []
    for w in _WORD.findall(text):
        w = w.strip(".:'’/-")
        if len(w) < 2 or w in ALLOWED_WORDS or re.search(r"[\d_]", w) or "." in w:
            continue
        words.append(w)
    return words


def neutral(text: str, lang: str = "zh") -> bool:
    """Whether a catalog declares ``text`` language-neutral: its entry (the text itself or its
    skeleton) is translated as itself (code, data, identifiers an output shows)."""
    entries = catalog(lang)
    body = text.strip()
    if entries.get(body) == body:
        return True
    key, numbers = skeleton(body)
    return bool(numbers) and entries.get(key) == key


def placeholder_problem(msgid: str, msgstr: str) -> str | None:
    """What is wrong with a catalog entry's placeholders (None: nothing): a translation of a
    skeleton uses each of its ``{0}``, ``{1}``, ... and no other, and formats."""
    if not msgstr:
        return None
    want = sorted({int(n) for n in re.findall(r"(?<!\{)\{(\d+)\}", msgid)})
    got = sorted({int(n) for n in re.findall(r"(?<!\{)\{(\d+)\}", msgstr)})
    if want != got:
        return f"placeholders {['{%s}' % n for n in want]} in the English, {['{%s}' % n for n in got]} in the translation"
    if want:
        try:
            msgstr.format(*["0"] * (want[-1] + 1))
        except (IndexError, KeyError, ValueError) as err:
            return f"the translation does not format ({err}): write a literal brace as {{{{ or }}}}"
    return None


# --------------------------------------------------------------------------- outputs
#: a code cell whose outputs are code (chapter 10 prints its kernels' source) carries this
#: tag: its outputs are shown as they are in every edition, and not extracted
CODE_OUTPUT_TAG = "output-is-code"
#: where the book's plotly renderer (attn_edu.notebook) embeds a figure's JSON in its HTML
FIG_IN_HTML = re.compile(r"(var fig = )(\{.*?\})(;\n)", re.S)
_HTML_PART = re.compile(r"(<script\b.*?</script>|<style\b.*?</style>|<!--.*?-->|<[^>]+>)|([^<]+)", re.S | re.I)
_ATTR = re.compile(r'(\s(?:alt|aria-label|title|data-title)=")([^"]*)(")')
#: the metadata key under which an output carries what another language shows instead (a
#: matplotlib figure's Chinese PNG, an explorer's Chinese stand-in) and the texts it drew
META_KEY = "attn_edu"
PLOTLY_MIME = "application/vnd.plotly.v1+json"


def _fig_json_dumps(fig: dict) -> str:
    return json.dumps(fig, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")


def translate_html(text: str, lang: str | None = None) -> str:
    """An HTML output in ``lang``: its text nodes line by line (outside ``<script>`` and
    ``<style>``), its ``alt``, ``aria-label`` and ``title`` attributes, and the plotly figure
    the book's renderer embeds (``var fig = {...};``). Unchanged bytes where nothing is
    translated."""
    def fig(m: re.Match) -> str:
        try:
            obj = json.loads(m.group(2))
        except ValueError:
            return m.group(0)
        new = translate_plotly(obj, lang)
        return m.group(0) if new == obj else m.group(1) + _fig_json_dumps(new) + m.group(3)

    def attr(m: re.Match) -> str:
        value = _html.unescape(m.group(2))
        new = translate_text(value, lang)
        return m.group(0) if new == value else m.group(1) + _html.escape(new) + m.group(3)

    def part(m: re.Match) -> str:
        tag, node = m.group(1), m.group(2)
        if tag is not None:
            if tag[:7].lower() == "<script":
                return FIG_IN_HTML.sub(fig, tag)
            return _ATTR.sub(attr, tag) if tag.startswith("<") and not tag.startswith(("</", "<!")) else tag
        plain = _html.unescape(node)
        new = translate_lines(plain, lang)
        return node if new == plain else _html.escape(new, quote=False)

    return _HTML_PART.sub(part, text)


def html_strings(text: str):
    """Every string an HTML output shows that :func:`translate_html` translates: text nodes'
    lines, the attributes it reads, and the embedded plotly figures' words."""
    for m in _HTML_PART.finditer(text):
        tag, node = m.group(1), m.group(2)
        if tag is not None:
            if tag[:7].lower() == "<script":
                for f in FIG_IN_HTML.finditer(tag):
                    try:
                        yield from (s for _, s in plotly_strings(json.loads(f.group(2))))
                    except ValueError:
                        pass
            elif not tag.startswith(("</", "<!")):
                yield from (_html.unescape(a.group(2)) for a in _ATTR.finditer(tag))
        else:
            yield from _html.unescape(node).splitlines()


def _join(value) -> str:
    return "".join(value) if isinstance(value, list) else value


#: the mime types a page shows in place of ``text/plain`` (which it shows only without them)
_RICH = ("text/html", "text/markdown", "image/png", "image/jpeg", "image/svg+xml", PLOTLY_MIME)


def output_strings(output: dict, lang: str = "zh"):
    """Every string one notebook output shows a reader of the ``lang`` edition before the
    lookup: a printed line, a text node, a figure's word, ``text/plain`` where nothing richer
    is shown, what the output carries for ``lang`` under :data:`META_KEY` in place of its
    English (an explorer's stand-in), and a matplotlib figure's texts recorded there."""
    if output.get("output_type") == "stream":
        yield from _join(output.get("text", "")).splitlines()
        return
    data = output.get("data", {})
    meta = (output.get("metadata") or {}).get(META_KEY) or {}
    swap = meta.get(lang) or {}
    for mime, value in data.items():
        value = swap.get(mime, value) if mime != "image/png" else value
        if mime == PLOTLY_MIME:
            yield from (s for _, s in plotly_strings(value))
        elif mime == "text/html":
            yield from html_strings(_join(value))
        elif mime == "text/markdown" or (mime == "text/plain" and not any(m in data for m in _RICH)):
            yield from _join(value).splitlines()
    yield from meta.get("texts", [])


def _as_source(text: str, like) -> str | list:
    return text.splitlines(keepends=True) if isinstance(like, list) else text


def translate_output(output: dict, lang: str = "zh") -> dict:
    """A copy of one notebook output as the ``lang`` edition shows it: stream text,
    ``text/plain`` and ``text/markdown`` line by line, ``text/html`` by :func:`translate_html`,
    plotly JSON by :func:`translate_plotly`; where the output carries its ``lang`` rendering
    under :data:`META_KEY` (a matplotlib figure drawn with Chinese words, an explorer's Chinese
    stand-in) that replaces the English one. An error output is kept as it is."""
    out = json.loads(json.dumps(output))
    kind = out.get("output_type")
    if kind == "stream":
        text = _join(out.get("text", ""))
        out["text"] = _as_source(translate_lines(text, lang), out.get("text"))
        return out
    if kind not in ("display_data", "execute_result"):
        return out
    data, metadata = out.setdefault("data", {}), out.setdefault("metadata", {})
    swap = (metadata.get(META_KEY) or {}).get(lang) or {}
    for mime in list(data):
        value = data[mime]
        if mime in swap and mime != "image/png":
            value = swap[mime]
        if mime == PLOTLY_MIME:
            data[mime] = translate_plotly(value, lang)
        elif mime == "text/html":
            data[mime] = _as_source(translate_html(_join(value), lang), value)
        elif mime in ("text/plain", "text/markdown"):
            data[mime] = _as_source(translate_lines(_join(value), lang), value)
        elif mime == "image/png" and "image/png" in swap:
            data[mime] = swap["image/png"]
            img = metadata.setdefault("image/png", {})
            for key in ("alt", "attn_edu_text_px"):
                if key in swap:
                    img[key] = swap[key]
    return out


def translate_cell_outputs(cell: dict, lang: str = "zh") -> list:
    """The outputs of one executed code cell as the ``lang`` edition shows them
    (:func:`translate_output`); a cell tagged :data:`CODE_OUTPUT_TAG` keeps its own."""
    outputs = cell.get("outputs", [])
    if CODE_OUTPUT_TAG in (cell.get("metadata") or {}).get("tags", []):
        return json.loads(json.dumps(outputs))
    return [translate_output(o, lang) for o in outputs]


# --------------------------------------------------------------------------- matplotlib
#: set (to ``"1"``) by scripts/execute_chapters.py, so that the English execution also draws every
#: matplotlib figure with its words in Chinese and keeps that PNG in the output's metadata
#: (``{"attn_edu": {"zh": {"image/png": ..., "alt": ...}, "texts": [...]}}``), which the
#: Chinese book shows instead (scripts/zh.py site); the English page is drawn as before
ZH_RENDER_ENV = "ATTN_EDU_RENDER_ZH"
#: CJK fonts matplotlib may draw Chinese with, the first one installed wins (Debian's
#: fonts-wqy-microhei, which scripts/site.sh fonts installs, and the usual system ones)
CJK_FONTS = ("WenQuanYi Micro Hei", "Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC",
             "PingFang SC", "Hiragino Sans GB", "Microsoft YaHei", "SimHei")


def cjk_font() -> str | None:
    """The name of a CJK font matplotlib can draw with (None: none is installed). A font
    installed after matplotlib built its font cache is found through fontconfig and added."""
    from matplotlib import font_manager  # noqa: PLC0415

    names = {f.name for f in font_manager.fontManager.ttflist}
    for name in CJK_FONTS:
        if name in names:
            return name
    import shutil  # noqa: PLC0415
    import subprocess  # noqa: PLC0415

    if shutil.which("fc-list"):
        try:
            files = subprocess.run(["fc-list", ":lang=zh", "file"], capture_output=True, text=True,
                                   timeout=20).stdout.split()
        except (OSError, subprocess.SubprocessError):
            files = []
        for path in sorted({f.rstrip(":") for f in files}):
            try:
                font_manager.fontManager.addfont(path)
            except (OSError, RuntimeError, ValueError):
                continue
        names = {f.name for f in font_manager.fontManager.ttflist}
        for name in CJK_FONTS:
            if name in names:
                return name
    return None


def _figure_text_objects(fig, draw: bool = True) -> list:
    from matplotlib.text import Text  # noqa: PLC0415

    if draw and hasattr(fig, "draw_without_rendering"):  # tick labels get their text when drawn
        fig.draw_without_rendering()
    # hidden ones too: the alt text reads an axis label a shared axis hides
    return [t for t in fig.findobj(Text) if t.get_text().strip()]


def figure_texts(fig) -> list:
    """Every text of a matplotlib figure, in order, once each: suptitle, titles, axis labels,
    tick labels, legend entries and title, annotations, colorbar labels (hidden ones too,
    which its alt text may read)."""
    return list(dict.fromkeys(t.get_text() for t in _figure_text_objects(fig)))


def _translating_formatter(inner, lang: str):
    from matplotlib.ticker import Formatter  # noqa: PLC0415

    class Translating(Formatter):
        """An axis's tick formatter whose labels come out translated (tick labels are
        written at every draw, so their Text objects cannot be set once)."""
        def __init__(self):
            self.inner = inner

        def __call__(self, x, pos=None):
            return translate_lines(self.inner(x, pos), lang)

        def format_ticks(self, values):
            return [translate_lines(s, lang) for s in self.inner.format_ticks(values)]

        def set_locs(self, locs):
            self.inner.set_locs(locs)

        def get_offset(self):
            return translate_text(self.inner.get_offset(), lang)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    Translating._attn_edu_translating = True
    return Translating()


def _tickers(fig) -> list:
    out = []
    for ax in fig.axes:
        for axis in ax._axis_map.values() if hasattr(ax, "_axis_map") else (ax.xaxis, ax.yaxis):
            out += [axis.major, axis.minor]
    return out


def translate_figure(fig, lang: str | None = None, texts: list | None = None) -> list:
    """Put ``fig``'s words in ``lang`` (default: the current language), for good: every
    text (hidden ones too), its artists' labels, and its tick labels as they are drawn; every text
    gets a CJK font after its own (Chinese). ``texts``: its Text objects, when the caller
    has them (each look-up of them draws the figure). Returns what to undo
    (:func:`translated_figure`)."""
    lang = lang if lang is not None else current_language()
    if not catalog(lang):
        return []
    undo = []
    cjk = cjk_font() if lang == "zh" else None
    for t in texts if texts is not None else _figure_text_objects(fig):
        old = t.get_text()
        new = translate_lines(old, lang)  # a text of several lines, line by line
        if new != old:
            undo.append((t, old))
            t.set_text(new)
        family = list(t.get_fontfamily())
        if cjk is not None and cjk not in family:
            # the text's own fonts first (Latin letters and symbols as in English), then the
            # CJK font, which matplotlib's per-glyph fallback takes the Chinese characters from;
            # a text with math ($...$) draws its words in its first font alone (mathtext has
            # no fallback there): the CJK font first, where it has Chinese words
            math = new.count("$") >= 2 and re.search(r"[\u3000-\u9fff\uff00-\uffef]", new)
            undo.append((t, ("family", family)))
            t.set_fontfamily([cjk] + family if math else family + [cjk])
    for ax in fig.axes:  # the artists' labels (a bar chart's on its container), which the
        for artist in [*ax.get_children(), *getattr(ax, "containers", [])]:  # legend and alt text read
            label = artist.get_label() if hasattr(artist, "get_label") else None
            if isinstance(label, str) and label and not label.startswith("_"):
                new = translate_lines(label, lang)
                if new != label:
                    undo.append((artist, ("label", label)))
                    artist.set_label(new)
    for ticker in _tickers(fig):
        if not getattr(ticker.formatter, "_attn_edu_translating", False):
            undo.append((ticker, ticker.formatter))
            ticker.formatter = _translating_formatter(ticker.formatter, lang)
    return undo


def _undo(undo: list) -> None:
    for obj, old in reversed(undo):
        if isinstance(old, tuple) and old[0] == "label":
            obj.set_label(old[1])
        elif isinstance(old, tuple) and old[0] == "family":
            obj.set_fontfamily(old[1])
        elif hasattr(obj, "set_text"):
            obj.set_text(old)
        else:
            obj.formatter = old


@_contextlib.contextmanager
def translated_figure(fig, lang: str = "zh", texts: list | None = None):
    """``with translated_figure(fig):`` the figure's words in ``lang``, each text with a
    CJK font after its own (:func:`cjk_font`, for matplotlib's per-glyph fallback), inside
    the block; as it was after."""
    import matplotlib as mpl  # noqa: PLC0415

    undo = translate_figure(fig, lang, texts)
    try:
        with mpl.rc_context({}):
            yield fig
    finally:
        _undo(undo)  # (the tick labels get their English text again at the next draw)


def _png_of(fig) -> tuple:
    """The figure as the inline backend draws it (base64 PNG, its metadata)."""
    try:
        from IPython import get_ipython  # noqa: PLC0415
        shell = get_ipython()
    except ImportError:
        shell = None
    formatter = shell.display_formatter.formatters.get("image/png") if shell is not None else None
    data = formatter(fig) if formatter is not None else None
    if data is None:  # outside IPython: what the inline backend does
        import base64  # noqa: PLC0415
        import io as _io  # noqa: PLC0415

        buf = _io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight", dpi=fig.dpi,
                    facecolor=fig.get_facecolor(), edgecolor=fig.get_edgecolor())
        data = base64.b64encode(buf.getvalue()).decode("ascii")
    return data if isinstance(data, tuple) else (data, {})


@_contextlib.contextmanager
def _quiet_matplotlib():
    """matplotlib's log (a CJK font without a bold face, a glyph no font has) silenced: the
    Chinese drawing's messages must not become the English page's stderr output."""
    import logging  # noqa: PLC0415

    log = logging.getLogger("matplotlib")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


def figure_renders(fig, png=None, alt=None, drawn: bool = False) -> dict:
    """What an output of ``fig`` carries under :data:`META_KEY` in the English execution
    when :data:`ZH_RENDER_ENV` is set: the figure's English texts (for the catalogs) and its
    Chinese PNG with its Chinese alt text. ``png(fig)``: how the PNG is drawn (default: the
    inline backend's formatter); ``alt(fig)``: the figure's alt text (``attn_edu.alt_text``,
    which passes it: it imports this module). The figure is drawn once to find its texts and
    once for the PNG (its smallest text size is the English one's: the same figure);
    ``drawn``: the caller has just drawn it, unchanged since (``attn_edu.alt_text``'s text
    size), so its tick labels have their text and it is not drawn again to find them.
    Empty when the variable is not set or the language is not English (a Chinese kernel
    draws the figure in Chinese itself)."""
    import os  # noqa: PLC0415

    if os.environ.get(ZH_RENDER_ENV) != "1" or current_language() != "en":
        return {}
    from .i18n import language  # noqa: PLC0415

    import warnings  # noqa: PLC0415

    objects = _figure_text_objects(fig, draw=not drawn)
    texts = list(dict.fromkeys(t.get_text() for t in objects))
    meta = {"texts": texts}
    if not catalog("zh"):
        return meta
    # (a warning of the Chinese drawing, e.g. a glyph no font has, must not become an output
    # of the English page)
    with warnings.catch_warnings(), _quiet_matplotlib(), translated_figure(fig, "zh", objects), language("zh"):
        warnings.simplefilter("ignore")
        data, md = (png or _png_of)(fig)
        zh = {"image/png": data}
        try:
            if alt is not None:
                zh["alt"] = alt(fig)
        except Exception:  # noqa: BLE001
            pass
    meta["zh"] = zh
    return meta


# --------------------------------------------------------------------------- a live kernel
class _TranslatingStream:
    """``sys.stdout`` whose complete lines are translated (:func:`translate_text`) before
    they reach the stream under it; a line without its end waits for it or for ``flush``."""

    def __init__(self, stream, lang: str):
        self._stream, self._lang, self._pending = stream, lang, ""

    def write(self, s):
        text = self._pending + str(s)
        lines = text.split("\n")
        self._pending = lines.pop()
        if lines:
            self._stream.write("".join(translate_text(line, self._lang) + "\n" for line in lines))
        return len(s)

    def flush(self):
        if self._pending:
            self._stream.write(translate_text(self._pending, self._lang))
            self._pending = ""
        return self._stream.flush()

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _translating_format(format_, lang: str):
    def format(obj, include=None, exclude=None):
        data, metadata = format_(obj, include=include, exclude=exclude)
        out = translate_output({"output_type": "display_data", "data": data, "metadata": metadata}, lang)
        return out["data"], out["metadata"]
    format._attn_edu_lang = lang
    format._attn_edu_inner = getattr(format_, "_attn_edu_inner", format_)
    return format


def install_output_translation(lang: str, shell=None) -> bool:
    """Make a live kernel show what the ``lang`` edition's pages show: printed lines (a
    line-translating ``sys.stdout``), what IPython displays (its display formatter's bundles:
    text, Markdown, HTML, plotly JSON) and matplotlib figures (their words, before they are
    drawn, with a CJK font). Plotly figures are translated by the book's renderer
    (:mod:`attn_edu.notebook`). ``"en"`` removes the translation again. Returns whether an
    IPython shell was found (outside one only ``sys.stdout`` and matplotlib's font are set)."""
    import sys  # noqa: PLC0415

    lang = _check_lang(lang)
    while isinstance(sys.stdout, _TranslatingStream):
        sys.stdout.flush()
        sys.stdout = sys.stdout._stream
    if lang != "en":
        sys.stdout = _TranslatingStream(sys.stdout, lang)
        import logging  # noqa: PLC0415  (the CJK font has no bold face: say nothing of it)

        logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)
    shell = ipython_shell(shell)
    if shell is None:
        return False
    formatter = shell.display_formatter
    inner = getattr(formatter.format, "_attn_edu_inner", None)
    if inner is not None:
        formatter.format = inner
    if lang != "en":
        formatter.format = _translating_format(formatter.format, lang)
    return True
