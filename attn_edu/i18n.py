"""The language of what the package shows a reader: one home for translation.

English is the source language: every string the package shows (a checker's message, the
live explorer's note, alt text, a figure's title and labels) is written in English and
wrapped in ``_()``, which is :func:`gettext` (or :func:`ngettext` where it counts something), or
marked with :func:`N_` where it is a constant. A translation is a gettext catalog, ``attn_edu/locale/<catalog>/LC_MESSAGES/attn_edu.po``, compiled to the
``.mo`` beside it, which Python's standard ``gettext`` reads: no third-party package at
run time (Colab installs ``attn_edu`` with pip from git, and the ``.mo`` is package data).
A third language is a catalog and a line in :data:`LANGUAGES`, not a code change.

How the catalog is kept (Babel, which Sphinx already brings; ``babel.cfg`` says what to
scan)::

    pybabel extract -F babel.cfg -o attn_edu/locale/attn_edu.pot --no-location --omit-header --sort-output .
    pybabel update -i attn_edu/locale/attn_edu.pot -d attn_edu/locale -D attn_edu --no-fuzzy-matching --ignore-obsolete
    (translate the new, empty entries of attn_edu/locale/zh_CN/LC_MESSAGES/attn_edu.po)
    pybabel compile -d attn_edu/locale -D attn_edu

run from the repository's root (the ``.pot`` is a by-product, not committed). Write
``_("got {x}").format(x=...)``, never an f-string inside ``_()``: the catalog holds the
sentence with its placeholders, which a translation may move.

``tests/test_i18n.py`` fails when a wrapped string has no Chinese translation and when the
committed ``.mo`` is not the compiled ``.po``.

A chapter chooses its language in its first cell, ``setup_notebook(lang="zh")`` (the Chinese
twins) or ``setup_notebook()`` (English); :func:`set_language` does it directly. Messages
are translated when they are made, so a figure drawn before the switch stays as it was.
Error messages for bad input stay English, as Python's do.
"""

from __future__ import annotations

import contextlib
import gettext as _gettext
from pathlib import Path

__all__ = ["LANGUAGES", "set_language", "current_language", "language", "gettext", "ngettext", "N_",
           "translate"]

#: the gettext domain, and where its catalogs are
DOMAIN = "attn_edu"
LOCALE_DIR = Path(__file__).resolve().parent / "locale"
#: the languages a reader can choose, each with its catalog's folder (``None`` for English, the source)
LANGUAGES = {"en": None, "zh": "zh_CN"}

_state = {"lang": "en"}
_catalogs: dict[str, _gettext.NullTranslations] = {}


def _catalog(lang: str) -> _gettext.NullTranslations:
    if lang not in _catalogs:
        folder = LANGUAGES[lang]
        if folder is None:
            _catalogs[lang] = _gettext.NullTranslations()
        else:  # a missing .mo is a broken install: say so rather than show English silently
            _catalogs[lang] = _gettext.translation(DOMAIN, localedir=str(LOCALE_DIR), languages=[folder])
    return _catalogs[lang]


def _check_lang(lang: object) -> str:
    if not isinstance(lang, str) or lang not in LANGUAGES:
        raise ValueError(f"lang must be one of {sorted(LANGUAGES)}; got {lang!r}")
    return lang


def set_language(lang: str) -> str:
    """Show the package's strings in ``lang`` (``"en"`` or ``"zh"``) from now on; return it.

    A ValueError names ``lang`` and what was given when it is no language of
    :data:`LANGUAGES`."""
    _state["lang"] = _check_lang(lang)
    _catalog(_state["lang"])  # load now: a missing catalog fails here, not in a figure
    return _state["lang"]


def current_language() -> str:
    """The language the package's strings are shown in (``"en"`` unless set)."""
    return _state["lang"]


@contextlib.contextmanager
def language(lang: str):
    """``with language("zh"):`` shows the package's strings in ``lang`` inside the block and
    restores the language before it after (the book build describes the Chinese edition's
    figures so); a ValueError, as :func:`set_language`, for a language it lacks."""
    before = _state["lang"]
    set_language(lang)
    try:
        yield lang
    finally:
        _state["lang"] = before


def translate(message: str, lang: str | None = None) -> str:
    """``message`` (English) in ``lang`` (default: :func:`current_language`); itself when the
    catalog has no translation for it."""
    if not message:  # gettext("") is the catalog's header
        return message
    return _catalog(_check_lang(lang) if lang is not None else _state["lang"]).gettext(message)


def gettext(message: str) -> str:
    """``message`` in the current language. The package's modules import it as ``_`` (the
    gettext convention, and the marker Babel finds): ``from .i18n import gettext as _``."""
    return _catalog(_state["lang"]).gettext(message) if message else message


def N_(message: str) -> str:
    """``message`` itself: marks a string for the catalog where it is defined (a constant),
    to be translated where it is shown (:func:`translate`)."""
    return message


def ngettext(singular: str, plural: str, n: int) -> str:
    """The singular or plural form for ``n``, in the current language."""
    return _catalog(_state["lang"]).ngettext(singular, plural, n)
