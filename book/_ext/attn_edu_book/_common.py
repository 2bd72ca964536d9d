"""What the extension's modules share: its logger, where the book's sources lie, and how wide
a text is on a phone. It imports none of them, so each can lean on it (one floor down, as
``attn_edu/_checks.py`` is for the package).
"""
from __future__ import annotations

import re
from pathlib import Path

from sphinx.util import logging

#: the extension's one logger (its messages say ``[attn_edu_book]``)
logger = logging.getLogger("attn_edu_book")

#: ``book/_ext``, where the vendored KaTeX renderer lives (``katex/``)
EXT_DIR = Path(__file__).resolve().parents[1]
#: ``book/_static``, the sources of what the build copies into ``_build/html/_static``
STATIC_SRC = EXT_DIR.parent / "_static"
#: the repository's ``_build``, where caches live between builds
BUILD_DIR = EXT_DIR.parents[1] / "_build"

#: a tag's ``class`` or ``id`` attribute, its words the group
CLASS_ID_RE = re.compile(r'\b(?:class|id)="([^"]*)"')

#: characters a line gives two widths: CJK ideographs, kana, hangul, fullwidth forms and CJK
#: punctuation (Unicode's East Asian Wide and Fullwidth blocks)
_WIDE_RE = re.compile("[\u1100-\u115f\u2e80-\u303e\u3041-\u33ff\u3400-\u4dbf\u4e00-\u9fff"
                      "\ua000-\ua4cf\uac00-\ud7a3\uf900-\ufaff\ufe30-\ufe4f\uff00-\uff60\uffe0-\uffe6]")


def text_width(text: str) -> int:
    """The width of a text in characters of Latin text: a CJK character (wide, in Unicode's
    East Asian Width) takes about two; 40 widths are a line on a phone."""
    return len(text) + len(_WIDE_RE.findall(text))

