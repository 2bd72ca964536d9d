"""A clear ImportError, with the pip command, when attn_edu needs a package that is missing.

``import attn_edu`` needs NumPy only; the modules and functions that need PyTorch, Triton,
plotly, matplotlib, ipywidgets or IPython import them where they are used. Without this
module a reader with a plain ``pip install attn_edu`` would meet a bare ``No module named
'torch'``. :func:`install` (called once by ``attn_edu/__init__.py``) appends a finder to
the end of ``sys.meta_path``: it is consulted only after every real finder has failed to
find one of :data:`PIP_NAMES`, and only for an import written in attn_edu's own code; it
then raises ``ModuleNotFoundError`` (an ``ImportError``) that names the package, what
needs it and the pip command. Everywhere else it stays silent: imports from other code,
``importlib.util.find_spec`` (which keeps returning ``None``, so ``attn_edu.HAS_TORCH``
and friends are unchanged) and packages that are installed.

Why a finder on ``sys.meta_path`` rather than the plain form, a ``try: import torch
except ImportError: raise ...`` at each import: attn_edu imports its optional packages in
about 140 places in 44 files, most of them inside functions (so ``import attn_edu`` stays
NumPy-only). Wrapping each would repeat the message 140 times, and one forgotten wrapper
gives the reader the bare error again. The finder is the one place that sees every such
import; it costs nothing while the packages are installed (it is asked only after every
real finder has failed), and it stays out of any import that is not attn_edu's own.
"""
from __future__ import annotations

import sys
from typing import Optional

__all__ = ["PIP_NAMES", "install", "missing_message"]

#: optional top-level modules attn_edu uses, and the pip package that provides each
PIP_NAMES = {
    "torch": "torch",
    "triton": "triton",
    "plotly": "plotly",
    "matplotlib": "matplotlib",
    "ipywidgets": "ipywidgets",
    "IPython": "ipython",
}
#: what pip installs a whole optional group (``pyproject.toml``'s extras)
EXTRAS = {"torch": "torch", "plotly": "viz", "matplotlib": "viz", "ipywidgets": "viz"}


def missing_message(module: str, needed_by: str) -> str:
    """The text of the error: which package is missing, what needs it, how to install it."""
    pip = PIP_NAMES[module]
    text = (f"{needed_by} needs {pip}, which is not installed in this Python environment "
            f"({sys.executable}). Install it with: pip install {pip}")
    if module in EXTRAS:
        text += f'  (or: pip install "attn_edu[{EXTRAS[module]}]")'
    if module == "triton":
        text += "  (Triton runs on Linux x86-64 with a CUDA GPU, or on the CPU with TRITON_INTERPRET=1)"
    return text


def _importer() -> Optional[str]:
    """Name of the module whose code runs the current import, skipping importlib's frames.

    None when the import goes through ``importlib.util.find_spec`` (a question, not an
    import: it must keep answering None).
    """
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        name = frame.f_globals.get("__name__", "")
        if name == "importlib.util" and code.co_name == "find_spec":
            return None
        if code.co_filename.startswith("<frozen importlib") or name.startswith("importlib"):
            frame = frame.f_back
            continue
        return name
    return None


class _MissingOptional:
    """Last finder on ``sys.meta_path``: turns a failed optional import in attn_edu into
    an ImportError that says what to install."""

    @classmethod
    def find_spec(cls, fullname: str, path=None, target=None):
        if fullname not in PIP_NAMES:
            return None
        importer = _importer()
        if importer is None or not (importer == "attn_edu" or importer.startswith("attn_edu.")):
            return None
        raise ModuleNotFoundError(missing_message(fullname, importer), name=fullname)


def install() -> None:
    """Append the finder to ``sys.meta_path`` (once)."""
    if not any(f is _MissingOptional for f in sys.meta_path):
        sys.meta_path.append(_MissingOptional)


def ipython_shell(shell=None):
    """``shell``, else the running IPython shell; None outside IPython (or without it)."""
    if shell is not None:
        return shell
    try:
        from IPython import get_ipython  # noqa: PLC0415
    except ImportError:
        return None
    return get_ipython()
