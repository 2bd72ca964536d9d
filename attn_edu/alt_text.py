"""Text alternatives for figures: what a screen reader says in place of a plot.

Every figure on the book's pages needs an alternative text that says what it shows.
Nobody writes it by hand: it is read off the figure itself, from its titles, axis
labels, legend entries and the kind of marks it draws.

* :func:`figure_alt_text` describes a matplotlib figure;
* :func:`plotly_alt_text` describes a plotly figure (a ``go.Figure`` or its JSON dict);
* :func:`register_alt_text` makes IPython attach :func:`figure_alt_text` to every
  matplotlib figure a notebook displays, as the output's metadata
  ``{"image/png": {"alt": ...}}``. The book build puts it in the ``alt`` attribute of
  the figure's ``<img>`` (``book/_ext/attn_edu_book.py``); front ends ignore it.

Needs nothing beyond the figure's own library; ``import attn_edu`` needs NumPy only.
"""
from __future__ import annotations

from typing import Any, Iterable, List

from ._optional import ipython_shell
from .i18n import gettext as _

__all__ = ["figure_alt_text", "figure_text_px", "plotly_alt_text", "register_alt_text", "plain_text",
           "ALT_KEY", "TEXT_PX_KEY"]

#: key, under the output's ``image/png`` metadata, of the alternative text
ALT_KEY = "alt"
#: key, under the same metadata, of the height of the figure's smallest text in the PNG's
#: pixels (:func:`figure_text_px`; the book's browser test checks it is legible on a phone)
TEXT_PX_KEY = "attn_edu_text_px"
#: an alternative text longer than this is cut (screen readers read all of it)
MAX_CHARS = 600


#: TeX commands read as the symbol they print; other commands lose their backslash, and
#: font commands (\\mathrm{x} ...) leave their argument
_TEX_WORDS = {"sqrt": "√", "top": "ᵀ", "cdot": "·", "times": "×", "le": "≤", "leq": "≤",
              "ge": "≥", "geq": "≥", "ne": "≠", "neq": "≠", "approx": "≈", "infty": "∞",
              "to": "→", "rightarrow": "→", "sum": "Σ", "ell": "ℓ", "alpha": "α", "beta": "β",
              "gamma": "γ", "lambda": "λ", "mu": "μ", "sigma": "σ", "tau": "τ", "theta": "θ",
              "epsilon": "ε", "varepsilon": "ε", "phi": "φ", "pi": "π", "Delta": "Δ", "log": "log",
              "exp": "exp", "max": "max", "min": "min", "ldots": "…", "dots": "…", "quad": " ",
              "mathrm": "", "mathbf": "", "mathit": "", "text": "", "operatorname": "",
              "boldsymbol": "", "left": "", "right": "", ",": " ", ";": " ", "!": ""}


def plain_text(text: Any) -> str:
    """One line of plain text: TeX read as symbols (``\\sqrt{d_k}`` is ``√d_k``), HTML tags
    and braces removed. What a figure's labels say, for a text alternative."""
    import re  # noqa: PLC0415

    s = str(text or "").replace("$", "").replace("<br>", " ")
    s = re.sub(r"</?[a-z]+>", "", s)
    s = re.sub(r"\\([A-Za-z]+|[,;!])", lambda m: _TEX_WORDS.get(m.group(1), m.group(1)), s)
    s = s.replace("{", "").replace("}", "").replace("\\", "")
    return " ".join(s.split())


def _join(parts: Iterable[str]) -> str:
    text = ""
    for part in filter(None, parts):  # sentences one after the other: with a space in English, none in Chinese
        text = _("{text} {sentence}").format(text=text, sentence=part) if text else part
    if len(text) <= MAX_CHARS:
        return text
    import re  # noqa: PLC0415

    cut = text[: MAX_CHARS - 1]
    if cut[-1].isascii() and cut[-1].isalnum() and text[MAX_CHARS - 1].isascii() and text[MAX_CHARS - 1].isalnum():
        cut = re.sub(r"[A-Za-z0-9_]+$", "", cut)  # never half a word ("fl…" for float16)
    return cut.rstrip(" ,，、") + "…"


def _axis_phrase(x: str, y: str) -> str:
    bits = [_("x: {label}").format(label=x) if x else "", _("y: {label}").format(label=y) if y else ""]
    bits = [b for b in bits if b]
    return _(" ({axes})").format(axes=_("; ").join(bits)) if bits else ""


# --------------------------------------------------------------------------- matplotlib
def _marks(ax: Any) -> List[str]:
    """The kinds of marks a matplotlib Axes draws, and its legend entries."""
    marks = []
    if ax.images:
        marks.append(_("heatmap") if len(ax.images) == 1 else _("{n} images").format(n=len(ax.images)))
    if getattr(ax, "containers", None):
        marks.append(_("bars"))
    lines = [ln for ln in ax.get_lines() if ln.get_visible()]
    if lines:
        marks.append(_("line") if len(lines) == 1 else _("{n} lines").format(n=len(lines)))
    if ax.collections and not ax.images:
        marks.append(_("points or areas"))
    names = [plain_text(h.get_label()) for h in (ax.get_legend_handles_labels()[0] or [])]
    names = [n for n in names if n and not n.startswith("_")]
    if names:
        marks.append(_("legend: {names}").format(names=_(", ").join(names[:8])))
    return marks


def figure_alt_text(fig: Any) -> str:
    """A one-paragraph description of a matplotlib figure, for its ``alt`` text.

    Says how many panels it has, its title, and per panel the title, what it draws
    (heatmap, lines, bars, legend entries) and the axis labels. Never empty.
    Raises TypeError when ``fig`` is not a matplotlib figure.
    """
    if not (type(fig).__module__.startswith("matplotlib") and hasattr(fig, "axes")):
        raise TypeError(f"fig must be a matplotlib Figure; got {type(fig).__name__}")
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"
            and (ax.axison or ax.images or ax.has_data())]
    n_colorbars = sum(1 for ax in fig.axes if ax.get_label() == "<colorbar>")
    suptitle = plain_text(fig._suptitle.get_text()) if getattr(fig, "_suptitle", None) else ""
    head = _("Figure: {title}.").format(title=suptitle) if suptitle else _("Figure.")
    if len(axes) > 1:
        head += _(" {n} panels.").format(n=len(axes))
    parts = [head]
    for i, ax in enumerate(axes, 1):
        title = plain_text(" ".join(t for t in (ax.get_title("left"), ax.get_title(),
                                            ax.get_title("right")) if t))
        marks = _marks(ax)
        label = _("Panel {i}").format(i=i) if len(axes) > 1 else _("It shows")
        desc = _("{title}, ").format(title=title) if title else ""
        desc += _(", ").join(marks) if marks else _("a plot")
        axes_text = _axis_phrase(plain_text(ax.get_xlabel()), plain_text(ax.get_ylabel()))
        parts.append(_("{label}: {what}{axes}.").format(label=label, what=desc, axes=axes_text))
    if n_colorbars:
        parts.append(_("With a colour scale.") if n_colorbars == 1
                     else _("With {n} colour scales.").format(n=n_colorbars))
    return _join(parts)


def figure_text_px(fig: Any) -> float:
    """The size of the smallest visible text of a matplotlib figure, in pixels of the PNG
    that IPython's inline backend draws (font size in points × the figure's dpi / 72).

    The book shows the PNG scaled to the column: on a phone (358 CSS px of column) its text
    is ``figure_text_px(fig) × 358 / PNG width`` CSS px, and at full size (the page's tap to
    enlarge) ``figure_text_px(fig)``. 0.0 for a figure without text. Raises TypeError when
    ``fig`` is not a matplotlib figure."""
    if not (type(fig).__module__.startswith("matplotlib") and hasattr(fig, "axes")):
        raise TypeError(f"fig must be a matplotlib Figure; got {type(fig).__name__}")
    from matplotlib.text import Text  # noqa: PLC0415

    if hasattr(fig, "draw_without_rendering"):  # tick labels get their text when drawn
        fig.draw_without_rendering()
    sizes = []
    for t in fig.findobj(Text):
        if not (t.get_visible() and t.get_text().strip()):
            continue
        ax = getattr(t, "axes", None)
        if ax is not None and not ax.get_visible():
            continue
        sizes.append(t.get_fontsize())
    return round(min(sizes) * fig.dpi / 72, 1) if sizes else 0.0


# --------------------------------------------------------------------------- plotly
def _title(obj: Any) -> str:
    if isinstance(obj, dict):
        return plain_text(obj.get("text", ""))
    return plain_text(obj)


def plotly_alt_text(fig: Any) -> str:
    """A one-paragraph description of a plotly figure (``go.Figure`` or its dict).

    Says its title, its traces (kind and name), its axis titles and what its
    sliders step through. Never empty. Raises TypeError for anything else.
    """
    if hasattr(fig, "to_plotly_json"):
        fig = fig.to_plotly_json()
    if not isinstance(fig, dict):
        raise TypeError(f"fig must be a plotly figure or its dict; got {type(fig).__name__}")
    layout = fig.get("layout") or {}
    data = fig.get("data") or []
    title = _title(layout.get("title"))
    parts = [_("Interactive figure: {title}.").format(title=title) if title else _("Interactive figure.")]
    kinds: dict = {}
    names = []
    for trace in data:
        kind = {"scatter": _("line or point series"), "heatmap": _("heatmap"), "bar": _("bar"),
                "histogram": _("histogram")}.get(trace.get("type", "scatter"), trace.get("type", "scatter"))
        kinds[kind] = kinds.get(kind, 0) + 1
        name = plain_text(trace.get("name", ""))
        if name and name not in names:
            names.append(name)
    if kinds:
        shows = _(", ").join(_("{n} {kind}").format(n=n, kind=k) if n > 1 else k for k, n in kinds.items())
        named = _(" ({names})").format(names=_(", ").join(names[:8])) if names else ""
        parts.append(_("It shows {what}{names}.").format(what=shows, names=named))
    axes = sorted(k for k in layout if k.startswith(("xaxis", "yaxis")))
    x_titles = [_title(layout[k].get("title")) for k in axes if k.startswith("x")
                and isinstance(layout[k], dict)]
    y_titles = [_title(layout[k].get("title")) for k in axes if k.startswith("y")
                and isinstance(layout[k], dict)]
    sep = _("{before}, {after}").format(before="", after="")  # Chinese: ，
    x = sep.join(dict.fromkeys(t for t in x_titles if t))
    y = sep.join(dict.fromkeys(t for t in y_titles if t))
    if x or y:
        parts.append(_("Axes{axes}.").format(axes=_axis_phrase(x, y)))
    for slider in layout.get("sliders") or []:
        steps = slider.get("steps") or []
        prefix = plain_text((slider.get("currentvalue") or {}).get("prefix", "")).rstrip(" :=")
        labels = [plain_text(s.get("label", "")) for s in steps]
        what = _(" over {what}").format(what=prefix) if prefix else ""
        span = _(" from {first} to {last}").format(first=labels[0], last=labels[-1]) if labels and labels[0] else ""
        parts.append(_("A slider steps{over} through {n} settings{span}.").format(over=what, n=len(steps), span=span))
    return _join(parts)


# --------------------------------------------------------------------------- IPython
def _alt_metadata(fig: Any) -> tuple:
    """IPython mime-bundle formatter: no data, only the PNG's alternative text. In a kernel
    whose language is not English the figure's words are translated first, for good
    (``attn_edu.i18n_outputs.translate_figure``: the PNG drawn after this is in that
    language); in the book's English execution the output also carries the figure's Chinese
    rendering (``attn_edu.i18n_outputs.figure_renders``)."""
    from . import i18n_outputs  # noqa: PLC0415
    from .i18n import current_language  # noqa: PLC0415

    try:
        if current_language() != "en":
            i18n_outputs.translate_figure(fig)
        alt = figure_alt_text(fig)
    except Exception:  # noqa: BLE001  (a description must never break a figure)
        return {}, {}
    meta = {ALT_KEY: alt}
    drawn = False
    try:
        meta[TEXT_PX_KEY] = figure_text_px(fig)
        drawn = True  # (figure_text_px drew it: its tick labels have their text)
    except Exception:  # noqa: BLE001
        pass
    out = {"image/png": meta}
    try:
        renders = i18n_outputs.figure_renders(fig, alt=figure_alt_text, drawn=drawn)
    except Exception:  # noqa: BLE001  (the Chinese copy must never break the English figure)
        renders = {}
    if renders:
        out[i18n_outputs.META_KEY] = renders
    return {}, out


def register_alt_text(shell: Any = None) -> bool:
    """Attach :func:`figure_alt_text` to every matplotlib figure IPython displays.

    Registers a mime-bundle formatter for ``matplotlib.figure.Figure`` that returns no
    data, only metadata; the inline backend's PNG formatter still draws the figure. Does
    nothing outside IPython. Returns whether it registered.
    """
    shell = ipython_shell(shell)
    if shell is None:
        return False
    formatter = shell.display_formatter.mimebundle_formatter
    formatter.for_type_by_name("matplotlib.figure", "Figure", _alt_metadata)
    return True
