"""A plain ``pip install attn_edu`` (NumPy only): whatever needs torch, triton, plotly,
matplotlib, ipywidgets or IPython says so, with the pip command, for every public module.

In the NumPy-only venv of ``numpy_only_venv`` (tests/conftest.py) one script visits every
public module of attn_edu (found from the source tree, so new modules are covered):

* a module that imports an optional package at its top must fail to import with an
  ImportError that names the package, the module and ``pip install <package>``;
* any other module must import, and every import of an optional package inside its
  functions (found with ``ast``) must, when it runs, raise that same kind of error;
* a few real calls a reader makes (a figure, an explorer, the first cell) behave.
"""
from __future__ import annotations

import ast
import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from venvs import REPO

pytestmark = pytest.mark.slow

PACKAGE = REPO / "attn_edu"
OPTIONAL = {"torch": "torch", "triton": "triton", "plotly": "plotly", "matplotlib": "matplotlib",
            "ipywidgets": "ipywidgets", "IPython": "ipython"}


def public_modules() -> list:
    """Every module of attn_edu whose dotted name has no part starting with '_'."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if any(p.startswith("_") for p in parts):
            continue
        names.append(".".join(parts))
    return names


def _source(module: str) -> Path:
    path = REPO.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def optional_imports(module: str) -> tuple:
    """(top-level optional imports, optional import statements inside functions)."""
    tree = ast.parse(_source(module).read_text(encoding="utf-8"))
    top, inner = [], []

    def optional(node) -> bool:
        if isinstance(node, ast.Import):
            return any(a.name.split(".")[0] in OPTIONAL for a in node.names)
        return isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in OPTIONAL

    def visit(node, in_function: bool, guarded: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)) and optional(child):
                if in_function:
                    inner.append(ast.unparse(child))
                elif not guarded:
                    top.append(ast.unparse(child))
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            # `if TYPE_CHECKING:` / try-except ImportError at the top are not run unguarded
            visit(child, nested, guarded or isinstance(child, (ast.If, ast.Try)))

    visit(tree, False, False)
    return top, inner


PROBE = textwrap.dedent(r"""
    import importlib, json, sys
    report = {}
    for name, inner in json.loads(sys.argv[1]).items():
        entry = report[name] = {"import": None, "inner": []}
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            entry["import"] = f"{type(exc).__name__}: {exc}"
            continue
        for stmt in inner:  # run the function's import as that module's code runs it
            try:
                exec(stmt, dict(vars(module)))
                entry["inner"].append([stmt, None])
            except ImportError as exc:
                entry["inner"].append([stmt, f"{type(exc).__name__}: {exc}"])
    import numpy as np, attn_edu, importlib.util
    calls = {"HAS_TORCH": attn_edu.HAS_TORCH, "find_spec_torch": importlib.util.find_spec("torch") is None,
             "setup_notebook": attn_edu.setup_notebook()}
    for label, call in [("viz.heatmap", lambda: __import__("attn_edu.viz").viz.heatmap(np.eye(2))),
                        ("widgets.live_explorer", lambda: __import__("attn_edu.widgets").widgets.live_explorer(
                            lambda x: x, x=1)),
                        ("torch_twin", lambda: importlib.import_module("attn_edu.reference_torch"))]:
        try:
            call()
            calls[label] = None
        except ImportError as exc:
            calls[label] = str(exc)
    print(json.dumps({"modules": report, "calls": calls}))
""")


@pytest.fixture(scope="module")
def report(numpy_only_venv, tmp_path_factory):
    inner = {m: optional_imports(m)[1] for m in public_modules()}
    cwd = tmp_path_factory.mktemp("plain")  # not the repository: only the installed package
    proc = subprocess.run([str(numpy_only_venv), "-c", PROBE, json.dumps(inner)], cwd=cwd,
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _clear(message: str, module: str) -> bool:
    """The message names the module (or the package), an optional package and its pip command."""
    return any(f"needs {pip}" in message and f"pip install {pip}" in message
               for pip in OPTIONAL.values()) and module.split(".")[0] in message


def test_the_venv_has_numpy_only(numpy_only_venv):
    out = subprocess.run([str(numpy_only_venv), "-m", "pip", "list", "--format=json"],
                         capture_output=True, text=True, check=True)
    names = {p["name"].lower() for p in json.loads(out.stdout)}
    assert "numpy" in names and "attn-edu" in names or "attn_edu" in names
    assert not names & {"torch", "triton", "plotly", "matplotlib", "ipywidgets", "ipython"}


@pytest.mark.parametrize("module", public_modules())
def test_every_public_module_is_clear_about_what_it_needs(module, report):
    top, inner = optional_imports(module)
    # importing a module runs its packages' __init__ first: what they need, it needs
    parents = [".".join(module.split(".")[:i]) for i in range(2, module.count(".") + 1)]
    top = list(top) + [name for parent in parents for name in optional_imports(parent)[0]]
    entry = report["modules"][module]
    if top:
        assert entry["import"] is not None, f"{module} imports {top} at its top but imported without them"
        assert _clear(entry["import"], module), f"unclear error for {module}: {entry['import']}"
        return
    assert entry["import"] is None, f"{module} should import with NumPy only: {entry['import']}"
    for stmt, message in entry["inner"]:
        assert message is not None, f"{module}: `{stmt}` worked without the package?"
        assert _clear(message, module) and module in message, f"{module}: `{stmt}` -> {message}"


def test_what_a_reader_calls(report):
    calls = report["calls"]
    assert calls["HAS_TORCH"] is False and calls["find_spec_torch"] is True
    assert calls["setup_notebook"] == "cpu"  # the first cell works without plotly or torch
    assert "attn_edu.viz needs matplotlib" in calls["viz.heatmap"]
    assert "pip install matplotlib" in calls["viz.heatmap"]
    assert "attn_edu.widgets needs ipywidgets" in calls["widgets.live_explorer"]
    assert "attn_edu.reference_torch needs torch" in calls["torch_twin"] and "pip install torch" in calls["torch_twin"]


def test_the_probe_sees_every_optional_import():
    """The AST scan finds the imports (so a module the probe passes is really checked)."""
    top, inner = optional_imports("attn_edu.widgets")
    assert not top and any("ipywidgets" in s for s in inner)
    top, _ = optional_imports("attn_edu.reference_torch")
    assert any("torch" in s for s in top)
