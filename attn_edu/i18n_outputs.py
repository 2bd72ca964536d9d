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
placeholders. A number is a run of digits (with ``,`` thousands, a fraction and an exponent)
not glued to a letter, ``_`` or a digit before it: ``float32``, ``H100`` and ``sm_90a`` are
names, not numbers. Leading and trailing spaces of the whole string are kept.

**The catalogs**: domain ``outputs`` (words many chapters share) and one domain per chapter,
``outputs_NN``, beside the package's own ``attn_edu`` domain in
``attn_edu/locale/<catalog>/LC_MESSAGES/``; all are read and merged (a chapter's entries first),
so a lookup does not need to know which chapter it is in. Keep them with
``python scripts/zh_outputs.py`` (``extract`` lists what the English build shows that has no
entry yet; ``compile`` writes the ``.mo`` files).
"""

from __future__ import annotations

import gettext as _gettext
import re

from .i18n import LANGUAGES, LOCALE_DIR, _check_lang, current_language

__all__ = ["skeleton", "translate_text", "translate_lines", "catalog", "NUMBER", "TEXT_KEYS",
           "plotly_strings", "translate_plotly", "ALLOWED_WORDS", "english_words"]

#: a number as the skeleton sees it: not glued to a letter, ``_``, ``#``, a digit or a ``.``
#: before it (an ``x`` or ``×`` alone before it is a factor: ``x0.62``), and a ``.`` after it
#: only with digits (a sentence's full stop, NumPy's ``2.`` and ``0..3`` stay text)
NUMBER = re.compile(r"\s*(?:(?<![A-Za-z_\d.#])|(?<=(?<![A-Za-z])[x×]))[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")

_merged: dict[str, dict[str, str]] = {}


def skeleton(text: str) -> tuple[str, list[str]]:
    """``text`` with each number (and the spaces before it) replaced by ``{0}``, ``{1}``, ...,
    and the numbers so replaced; braces already in ``text`` are doubled (``str.format``)."""
    numbers: list[str] = []
    out, last = [], 0
    for m in NUMBER.finditer(text):
        if not m.group().strip():
            continue
        out.append(text[last:m.start()].replace("{", "{{").replace("}", "}}"))
        out.append("{%d}" % len(numbers))
        numbers.append(m.group())
        last = m.end()
    out.append(text[last:].replace("{", "{{").replace("}", "}}"))
    return "".join(out), numbers


def catalog(lang: str) -> dict[str, str]:
    """Every output entry of ``lang``'s catalogs, msgid -> msgstr (empty for English)."""
    lang = _check_lang(lang)
    if lang not in _merged:
        merged: dict[str, str] = {}
        folder = LANGUAGES[lang]
        if folder is not None:
            found = sorted((LOCALE_DIR / folder / "LC_MESSAGES").glob("outputs*.mo"), reverse=True)
            for mo in found + [LOCALE_DIR / folder / "LC_MESSAGES" / "attn_edu.mo"]:
                with open(mo, "rb") as f:
                    for key, value in _gettext.GNUTranslations(f)._catalog.items():
                        if isinstance(key, str) and key and value:
                            merged.setdefault(key, value)
        _merged[lang] = merged
    return _merged[lang]


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
    key, numbers = skeleton(body)
    if numbers and key in entries:
        try:
            return lead + entries[key].format(*numbers) + tail
        except (IndexError, KeyError, ValueError):  # a broken entry shows the English
            return text
    return text


def translate_lines(text: str, lang: str | None = None) -> str:
    """Each line of ``text`` translated by :func:`translate_text`; line ends kept."""
    return "".join(translate_text(line[:-1] if line.endswith("\n") else line, lang)
                   + ("\n" if line.endswith("\n") else "")
                   for line in text.splitlines(keepends=True))


# --------------------------------------------------------------------------- plotly figures
#: the keys of a plotly figure (its JSON) whose strings a reader sees: titles, names, labels,
#: tick and hover texts, slider prefixes, and category names on an axis (``x``, ``y``); a
#: ``"a.b.text"`` key (a slider step's update) counts by its last part
TEXT_KEYS = frozenset({"text", "name", "ticktext", "hovertemplate", "hovertext", "texttemplate",
                       "label", "prefix", "suffix", "title", "x", "y"})


def _text_key(key: str | None) -> bool:
    return key is not None and key.rsplit(".", 1)[-1] in TEXT_KEYS


def plotly_strings(fig, key: str | None = None):
    """Every (key, string) of a plotly figure's JSON (a dict) that a reader sees, outside the
    figure's ``template``."""
    if isinstance(fig, dict):
        for k, v in fig.items():
            if k != "template":
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
        return {k: (v if k == "template" else translate_plotly(v, lang, k)) for k, v in fig.items()}
    if isinstance(fig, list):
        return [translate_plotly(v, lang, key) for v in fig]
    if isinstance(fig, str) and _text_key(key):
        return "<br>".join(translate_text(part, lang) for part in fig.split("<br>"))
    return fig


# --------------------------------------------------------------------------- English left over
#: words an output may show in any edition: units, names of libraries, devices and formats,
#: and the short math names the formulas use (a word with a digit or ``_`` is a name already)
ALLOWED_WORDS = frozenset("""
    MiB GiB KiB MB GB KB TB GB/s TB/s TFLOP TFLOPs FLOP FLOPs flop flops ms us µs ns Hz GHz MHz
    NumPy numpy PyTorch torch Triton triton CUDA cuDNN cuBLAS CPU GPU GPUs CPUs SM SMs HBM SRAM
    NVIDIA Hopper Ampere Turing Colab Jupyter JupyterLab plotly matplotlib ipywidgets BLAS
    SDPA FlashAttention FA FA2 FA3 TMA wgmma mma ncu nvidia smi PCIe SXM NVLink RTX
    float half bfloat bf fp int uint dtype dtypes cpu cuda cuda:0 gloo nccl torchrun
    max min std var mean sqrt exp log lse argmax softmax diff abs sum tol rtol atol
    attn_edu sdpa KV QK PV RoPE ALiBi GQA MQA MHA LSE RMS
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
