"""The package's reader-facing strings: gettext catalogs (attn_edu/i18n.py says how they are kept).

Every string wrapped in ``_()`` or marked ``N_()`` has a Chinese translation, with the same
``{placeholders}``; the committed ``.mo`` is the compiled ``.po`` (pip installs the ``.mo``;
nothing compiles at run time); the language is chosen per process, English by default, and
bad names are refused.
"""
from __future__ import annotations

import io
import re

import pytest

from venvs import REPO

babel = pytest.importorskip("babel")
from babel.messages.extract import extract_from_dir  # noqa: E402
from babel.messages.mofile import write_mo  # noqa: E402
from babel.messages.pofile import read_po  # noqa: E402

from attn_edu import i18n  # noqa: E402

PO = REPO / "attn_edu" / "locale" / "zh_CN" / "LC_MESSAGES" / "attn_edu.po"
MO = PO.with_suffix(".mo")


@pytest.fixture
def chinese():
    before = i18n.current_language()
    i18n.set_language("zh")
    yield
    i18n.set_language(before)


def _wrapped() -> dict:
    """msgid -> the files that wrap it, extracted from the source the way babel.cfg says."""
    found: dict = {}
    for filename, _lineno, message, _comments, _context in extract_from_dir(
            str(REPO / "attn_edu"), method_map=[("**.py", "python")]):
        ids = message if isinstance(message, tuple) else (message,)
        for msgid in ids:
            if msgid:
                found.setdefault(msgid, set()).add(filename)
    return found


def _catalog():
    with open(PO, "rb") as f:
        return read_po(f, locale="zh_CN")


def test_babel_cfg_scans_the_package():
    assert "[python: attn_edu/**.py]" in (REPO / "babel.cfg").read_text()


def test_every_wrapped_string_has_a_chinese_translation_with_the_same_placeholders():
    wrapped = _wrapped()
    assert len(wrapped) >= 80, f"only {len(wrapped)} strings wrapped: did extraction find the markers?"
    for must in ("computing…", "✓ {name}: all {total} hidden cases passed.", "Interactive figure: {title}.",
                 "attention weight", "key position j"):
        assert must in wrapped, must
    catalog = _catalog()
    missing = [m for m in wrapped if not (catalog.get(m) and catalog.get(m).string)]
    assert not missing, (f"no Chinese for {missing} (pybabel update, translate in {PO.relative_to(REPO)}, "
                         "pybabel compile: attn_edu/i18n.py)")
    fuzzy = [m.id for m in catalog if m.id and m.fuzzy]
    assert not fuzzy, f"fuzzy (unchecked) translations: {fuzzy}"
    slot = re.compile(r"\{(\w*)[^}]*\}")
    for msgid in wrapped:
        assert sorted(slot.findall(msgid)) == sorted(slot.findall(catalog.get(msgid).string)), msgid
    stale = [m.id for m in catalog if m.id and m.id not in wrapped]
    assert not stale, f"translations of strings no longer in the source: {stale} (pybabel update)"


def _mo_messages(data: bytes) -> dict:
    """msgid -> msgstr of a compiled catalog, as Python's gettext reads it (the header aside:
    Babel stamps it with the time it compiles)."""
    import gettext

    return {k: v for k, v in gettext.GNUTranslations(io.BytesIO(data))._catalog.items() if k != ""}


def test_the_committed_mo_is_the_compiled_po():
    out = io.BytesIO()
    write_mo(out, _catalog())
    assert _mo_messages(MO.read_bytes()) == _mo_messages(out.getvalue()), \
        "attn_edu.mo is stale: pybabel compile -d attn_edu/locale -D attn_edu"
    assert len(_mo_messages(MO.read_bytes())) == len([m for m in _catalog() if m.id])


def test_the_mo_is_package_data():
    text = (REPO / "pyproject.toml").read_text()
    assert '"locale/*/LC_MESSAGES/*.mo"' in text


def test_english_is_the_default_and_unchanged():
    assert i18n.current_language() == "en"
    for msgid in _wrapped():
        assert i18n.gettext(msgid) == msgid
    assert i18n.gettext("") == "" and i18n.translate("", "zh") == ""  # never the catalog's header


def test_chinese_is_shown_once_chosen_and_english_again_after(chinese):
    from attn_edu.exercises import run_cases, Case

    assert i18n.gettext("computing…") == "计算中……"
    assert i18n.translate("computing…", "en") == "computing…"
    result = run_cases("double", lambda x: 2 * x, [Case("one", (1.0,), 2.0)])
    assert str(result) == "✓ double：全部 1 个隐藏用例通过。"
    assert i18n.ngettext("one tile", "{n} tiles", 2) == "{n} tiles"  # none in the catalog: English
    i18n.set_language("en")
    assert str(run_cases("double", lambda x: 2 * x, [Case("one", (1.0,), 2.0)])) == \
        "✓ double: all 1 hidden cases passed."


@pytest.mark.parametrize("bad", ["fr", "zh_CN", "", None, 1])
def test_a_language_that_is_none_is_refused_by_name(bad):
    with pytest.raises(ValueError, match=r"lang must be one of \['en', 'zh'\]; got " + re.escape(repr(bad))):
        i18n.set_language(bad)
    with pytest.raises(ValueError, match="lang must be one of"):
        i18n.translate("key", bad) if bad is not None else i18n.set_language(bad)
    assert i18n.current_language() == "en"
