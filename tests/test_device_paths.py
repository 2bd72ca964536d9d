"""Chapter code that runs on ``device`` must also run when ``device`` is a GPU.

On this machine ``device`` is ``"cpu"``, so ``t.numpy()`` works on every tensor, also on a
tensor made ``on device``; on a GPU runtime the same line raises (a CUDA tensor has no NumPy
view). The notebook tests cannot see that class of error without a GPU, so this test reads
the chapters: it follows, cell by cell, which names hold a tensor made on ``device``
(``device=device``, ``.to(device)``, ``.cuda()``, or computed from such a name) and fails
on ``.numpy()`` called on an expression built from one of them without ``.cpu()`` first.
"""
from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import List, Optional, Set

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


# calls whose result is on the CPU (or not a tensor), whatever their input
CPU_CALLS = {"cpu", "to_numpy", "item", "tolist", "len", "int", "float", "bool", "str",
             "numpy"}
# attn_edu functions documented to hand back CPU tensors (the training history)
CPU_PACKAGE_CALLS = {"train", "train_induction"}
META_ATTRS = {"shape", "dtype", "ndim", "device", "is_cuda"}


def _call_name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")


def _on_device(node: ast.AST, tainted: Optional[Set[str]], cpu_funcs: Set[str]) -> bool:
    """May ``node`` evaluate to a tensor on ``device``? (``tainted=None``: any name may.)"""
    if isinstance(node, ast.Call):
        name = _call_name(node)
        if name in CPU_CALLS or name in CPU_PACKAGE_CALLS or name in cpu_funcs:
            return False
        if name == "to" and node.args and isinstance(node.args[0], ast.Constant) \
                and node.args[0].value == "cpu":
            return False
        if name == "cuda" or any(
                k.arg == "device" and not (isinstance(k.value, ast.Constant) and k.value.value == "cpu")
                for k in node.keywords):
            return True
        if name == "to" and node.args and isinstance(node.args[0], ast.Name) \
                and node.args[0].id == "device":
            return True
    if isinstance(node, ast.Attribute) and node.attr in META_ATTRS:
        return False
    if isinstance(node, ast.Name):
        return tainted is None or node.id in tainted
    if isinstance(node, (ast.Lambda, ast.FunctionDef, ast.JoinedStr, ast.Constant)):
        return False
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
        inner = None if tainted is None else set(tainted)     # the loop names shadow
        for gen in node.generators:
            names = {n.id for n in ast.walk(gen.target) if isinstance(n, ast.Name)}
            if inner is not None:
                if _on_device(gen.iter, inner, cpu_funcs):
                    inner |= names
                else:
                    inner -= names
        yields = node.value if isinstance(node, ast.DictComp) else node.elt
        return _on_device(yields, inner, cpu_funcs)
    return any(_on_device(child, tainted, cpu_funcs) for child in ast.iter_child_nodes(node))


def _targets(stmt: ast.AST) -> List[str]:
    out: List[str] = []
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    for t in targets:
        out += [n.id for n in ast.walk(t) if isinstance(n, ast.Name)]
    return out


def device_numpy_calls(sources: List[str]) -> List[str]:
    """``.numpy()`` calls on expressions that may hold a tensor on ``device``."""
    tainted: Set[str] = set()
    cpu_funcs: Set[str] = set()       # notebook functions that return CPU values only
    found: List[str] = []
    for index, src in enumerate(sources):
        lines = [ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!"))]
        try:
            tree = ast.parse("\n".join(lines))
        except SyntaxError:
            continue
        for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            returns = [r.value for r in ast.walk(fn) if isinstance(r, ast.Return) and r.value]
            if returns and not any(_on_device(r, None, cpu_funcs) for r in returns):
                cpu_funcs.add(fn.name)
        assigns = sorted((n for n in ast.walk(tree)
                          if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                          and n.value is not None), key=lambda n: (n.lineno, n.col_offset))
        for stmt in assigns:              # in the order the cell runs them
            names = _targets(stmt)
            if _on_device(stmt.value, tainted, cpu_funcs):
                tainted.update(names)
            elif not isinstance(stmt, ast.AugAssign):
                tainted.difference_update(names)      # the name now holds something else
        for sub in ast.walk(tree):
            if (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute)
                    and sub.func.attr == "numpy"
                    and _on_device(sub.func.value, tainted, cpu_funcs)):
                found.append(f"cell {index}: {ast.unparse(sub)}")
    return found


def _code_cells(path: Path) -> List[str]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return ["".join(c["source"]) if c["cell_type"] == "code" else "" for c in nb["cells"]]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_numpy_on_a_tensor_that_may_live_on_the_gpu(path):
    calls = device_numpy_calls(_code_cells(path))
    assert not calls, (f"{path.name}: .numpy() on a tensor that lives on `device` fails on a GPU "
                       f"runtime; use .cpu() first or the chapter's to_numpy: {calls}")


def test_the_check_sees_the_error_and_its_fixes():
    made = "P = torch.rand(3, 3, device=device)\nP_tilde = P / 2\n"
    assert device_numpy_calls([made, "print(P_tilde.sum(-1).numpy())"]) == [
        "cell 1: P_tilde.sum(-1).numpy()"]
    assert device_numpy_calls(["x = torch.ones(2).to(device)\ny = x.numpy()"])
    assert device_numpy_calls(["x = torch.ones(2).cuda()\nfor i in range(2):\n    z = x * i\nz.numpy()"])
    assert device_numpy_calls([made, "Q = P[0]", "print(Q.numpy())"])
    # what is fine: .cpu() first, to_numpy, tensors made on the CPU
    assert not device_numpy_calls([made, "print(P_tilde.sum(-1).cpu().numpy())"])
    assert not device_numpy_calls([made, "print(to_numpy(P_tilde.sum(-1)))"])
    assert not device_numpy_calls(["t = torch.ones(3)\nt.numpy()"])
    assert not device_numpy_calls(["t = torch.ones(3, device='cpu')\nt.numpy()"])
    assert not device_numpy_calls([made, "a = P.cpu()\na.numpy()"])
    assert not device_numpy_calls([made, "a = [p.cpu() for p in P]\na[0].numpy()"])
    assert not device_numpy_calls([made, "a = [torch.ones(1) for P in range(3)]\na[0].numpy()"])
    assert device_numpy_calls([made, "a = [p * 2 for p in P]\na[0].numpy()"])
    assert not device_numpy_calls([made, "P = np.ones(3)\nP.numpy()"])   # P rebound
    assert not device_numpy_calls([made, "n = P.shape[0]\nx = torch.ones(n)\nx.numpy()"])
    assert not device_numpy_calls([made, "def f(t):\n    return t.cpu()\nf(P).numpy()"])
    assert device_numpy_calls([made, "def f(t):\n    return 2 * t\nf(P).numpy()"])
