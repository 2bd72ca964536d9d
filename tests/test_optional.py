"""attn_edu._optional: a missing optional package imported by attn_edu's code gets an
ImportError with the pip command; other code and find_spec see the usual behaviour."""
import importlib.util
import sys

import pytest

from attn_edu import _optional

FAKE = "attn_edu_missing_optional_pkg"  # a module that is certainly not installed


@pytest.fixture
def fake_optional(monkeypatch):
    monkeypatch.setitem(_optional.PIP_NAMES, FAKE, "missing-pkg")
    assert any(f is _optional._MissingOptional for f in sys.meta_path)


def test_attn_edu_code_gets_the_pip_command(fake_optional):
    with pytest.raises(ModuleNotFoundError) as info:
        exec(f"import {FAKE}", {"__name__": "attn_edu.viz"})
    msg = str(info.value)
    assert "attn_edu.viz needs missing-pkg" in msg and "pip install missing-pkg" in msg
    assert info.value.name == FAKE
    with pytest.raises(ModuleNotFoundError, match="attn_edu.kernels.x needs missing-pkg"):
        exec(f"from {FAKE}.sub import thing", {"__name__": "attn_edu.kernels.x"})


def test_other_code_and_find_spec_are_left_alone(fake_optional):
    with pytest.raises(ModuleNotFoundError) as info:
        exec(f"import {FAKE}", {"__name__": "__main__"})
    assert "pip install" not in str(info.value)
    assert importlib.util.find_spec(FAKE) is None  # a question, not an import
    exec(f"import importlib.util; assert importlib.util.find_spec({FAKE!r}) is None",
         {"__name__": "attn_edu.something"})


def test_installed_packages_import_as_usual():
    exec("import json", {"__name__": "attn_edu.viz"})  # found by the real finders first
    assert _optional.missing_message("torch", "attn_edu.x").endswith('pip install "attn_edu[torch]")')
    assert "TRITON_INTERPRET" in _optional.missing_message("triton", "attn_edu.kernels")
