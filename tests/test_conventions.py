"""The package's conventions, checked: one home per rule, public names only across modules,
the API page equal to ``__all__``, modules of a readable size, one name for the tile.

The rules themselves are written in the docstring of ``attn_edu/__init__.py``.
"""
from __future__ import annotations

import ast
import functools
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import attn_edu
from conftest import api_page_members

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "attn_edu"
SOURCES = sorted(PACKAGE.rglob("*.py"))
#: Facade packages: their submodules are documented (and reached) through the package.
#: ``attn_edu.kernels.flash_triton`` is one since its file was split by job (kernels, launch,
#: api, aot): chapters and the API page reach its names through the package, as before.
FACADES = ("attn_edu.masks", "attn_edu.bench", "attn_edu.exercises", "attn_edu.decoding",
           "attn_edu.distributed", "attn_edu.kernels.flash_triton")
#: Modules that import torch (or triton) when imported; the others need NumPy only.
TORCH_MODULES = ("reference_torch", "flash_torch", "multihead_torch", "tiny_transformer", "impls",
                 "flash_triton", "block_sparse_triton", "decode_triton", "distributed")


def _module_name(path: Path, base: Path = ROOT) -> str:
    parts = path.relative_to(base).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _public_modules() -> list:
    names = ["attn_edu"] + [m.name for m in pkgutil.walk_packages(attn_edu.__path__, "attn_edu.")]
    return [n for n in names
            if not any(p.startswith("_") for p in n.split(".")[1:]) and not n.endswith("__main__")]


def _import(name: str):
    if any(part in TORCH_MODULES for part in name.split(".")):  # a module or its package
        pytest.importorskip("torch")
    if name.endswith("_triton"):
        pytest.importorskip("triton")
    return importlib.import_module(name)


@functools.lru_cache(maxsize=None)
def _code_only(path: Path) -> str:
    """The source with comments and docstrings blanked (what runs, not what explains);
    parsed once per file (every rule below searches every file)."""
    tree = ast.parse(path.read_text())
    lines = path.read_text().splitlines()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            for i in range(body[0].lineno - 1, body[0].end_lineno):
                lines[i] = ""
    return "\n".join(re.sub(r"#.*$", "", line) for line in lines)


# --------------------------------------------------------------------------- the API page
def test_api_page_documents_exactly_each_modules_all():
    documented = api_page_members()
    for name in _public_modules():
        if name == "attn_edu" or name.startswith(tuple(f + "." for f in FACADES)):
            continue
        module = _import(name)
        assert name in documented, f"{name} is not on book/api.md"
        assert documented[name] == list(module.__all__), f"book/api.md lists for {name} not its __all__"
    for facade in FACADES:  # a facade reaches every public name of its public submodules
        module = importlib.import_module(facade)
        parts = [importlib.import_module(n).__all__ for n in _public_modules()
                 if n.startswith(facade + ".") and n.count(".") == facade.count(".") + 1]
        assert {x for p in parts for x in p} <= set(module.__all__), facade
        assert len(set(module.__all__)) == len(module.__all__)


def test_api_page_lists_the_top_level_names():
    text = (ROOT / "book" / "api.md").read_text()
    for name in attn_edu.__all__:
        if not inspect.ismodule(getattr(attn_edu, name)):
            assert f"| `attn_edu.{name}` |" in text, name
        else:
            assert f"`attn_edu.{name}`" in text and f".. automodule:: attn_edu.{name}" in text, name


def test_every_public_name_exists_and_all_is_deliberate():
    for name in _public_modules():
        module = _import(name)
        assert hasattr(module, "__all__"), f"{name} has no __all__"
        for item in module.__all__:
            assert hasattr(module, item), f"{name}.__all__ lists {item}, which does not exist"
            assert not item.startswith("_"), f"{name}.__all__ lists the private {item}"


# --------------------------------------------------------------------------- private names
def test_no_module_uses_another_modules_underscore_names():
    """A leading underscore means "this file only". Underscore *modules* (``_checks``,
    ``_backend``, ``kernels._interpret``, ``kernels._shared``) are the package's internal
    helpers: their own names are public to attn_edu's other modules."""
    problems = []
    for path in SOURCES + EXTENSION_SOURCES:  # the book's extension too (book/_ext/attn_edu_book)
        tree = ast.parse(path.read_text())
        modules = set()  # local names bound to attn_edu modules
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("attn_edu")):
                # the package the names come from: `from .. import x` in a/b/c.py is a/x
                base = path.parent if node.level else ROOT
                for _ in range(max(node.level - 1, 0)):
                    base = base.parent
                base = base.joinpath(*(node.module or "").split(".")) if node.module else base
                for alias in node.names:
                    local = alias.asname or alias.name
                    target = (base / (alias.name + ".py"), base / alias.name)
                    if any(t.exists() for t in target):
                        modules.add(local)  # a module (an underscore module is allowed)
                    elif alias.name.startswith("_") and not alias.name.startswith("__"):
                        problems.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {alias.name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in modules and node.attr.startswith("_") \
                    and not node.attr.startswith("__"):
                problems.append(f"{path.relative_to(ROOT)}:{node.lineno} uses {node.value.id}.{node.attr}")
    assert not problems, "\n".join(problems)


def test_notebooks_call_public_names_only():
    import json

    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        private = re.findall(r"\b(?:attn_edu|ft|bst|bench|masks|flash|kernels)\.(_[a-z]\w*)", code)
        assert not private, f"{path.name} reaches into {private}"


# --------------------------------------------------------------------------- sizes
def test_no_module_over_600_lines_without_a_reason_at_its_top():
    for path in SOURCES:
        n = len(path.read_text().splitlines())
        if n > 600:
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            assert "more than 600 lines" in doc, f"{path.relative_to(ROOT)} has {n} lines and no reason"


# --------------------------------------------------------------------------- one home per rule
def _homes(pattern: str) -> list:
    return sorted(str(p.relative_to(PACKAGE)) for p in SOURCES if re.search(pattern, _code_only(p)))


def test_each_rule_has_one_home():
    # the causal offset L_k - L_q (any spelling of the subtraction)
    assert _homes(r"\b(?:lk|LK|Lk|l_k)\s*-\s*(?:lq|LQ|Lq|l_q)\b") == ["masks/build.py"]
    # "all NumPy or all torch", the float-mask values, the mask's kind
    assert _homes(r"all NumPy arrays or all torch tensors") == ["_checks.py"]
    assert _homes(r"must not contain NaN or \+inf") == ["_checks.py"]
    assert _homes(r"but q, k, v are (?:NumPy|torch)") == ["_checks.py"]
    # the machine epsilons, log2(e) and ln(2)
    assert _homes(r"2\.0\s*\*\*\s*-(?:10|7|23|52)\b") == ["precision.py"]
    assert _homes(r"1\.44269|0\.69314|log2\(math\.e\)") == ["kernels/_shared.py"]
    # pair counting, the positive-integer check, the tile plan, the interpreter switch
    assert _homes(r"def allowed_pairs\b|def window_pairs\b|def _causal_pairs\b") == ["masks/cost.py"]
    assert _homes(r"def check_positive_int\b|def check_block_size\b|def _pos\b|def _positive_int\b") \
        == ["_checks.py"]
    assert _homes(r"(?m)^class \w*(?:Plan|Layout)\b") == ["masks/tiles.py"]
    assert _homes(r"TRITON_INTERPRET\"?\s*[,)]|environ\.get\(\"TRITON_INTERPRET") == ["kernels/_interpret.py"]
    # the kernels' front door: their limits are data checked by one function, tl.dot's
    # precision has one rule, the causal-offset argument one spelling, a tile plan one builder
    assert _homes(r"[\"'](?:ieee|tf32)[\"']\)?\s+if\b|\belse\s+\(?[\"'](?:ieee|tf32)[\"']|"
                  r"\bprecision\s+or\s+[\"']tf32") == ["kernels/_targets.py"]
    assert _homes(r"\bTF32_MIN_CAPABILITY\b") == ["kernels/_targets.py"]
    assert _homes(r"\(\s*[\"']float16[\"'],\s*[\"']bfloat16[\"'],\s*[\"']float32[\"']\s*\)") \
        == ["kernels/_targets.py"]
    assert _homes(r"[\"']float16[\"']\s*:\s*[\"']fp16[\"']") == ["kernels/_shared.py"]
    assert _homes(r"\b(?:SUPPORTED_DTYPES|MAX_HEAD_DIM|HEAD_DIMS|DTYPES)\s*=") == []
    assert _homes(r"\bnot\s+\w+\s*<=\s*d\s*<=") == ["kernels/_targets.py"]
    assert _homes(r"\.cpu_problem\(|\bcuda_dtype_problem\([^)]*get_device_capability") == ["kernels/_targets.py"]
    assert _homes(r"causal_offset_or_none\([^)]*\)\s*or\s*0\b|is None else causal_offset\(") \
        == ["kernels/_shared.py"]
    assert _homes(r"(?<!\w)TilePlan\(") == ["masks/tiles.py"]
    # a launch decision or the front door's pass, remembered per key: one cache (its table and counts)
    assert _homes(r"typed=True|def cache_info\b|\bcache_info\s*=") == ["kernels/_plans.py"]


def test_kernel_schedule_and_block_sparse_plan_are_the_one_tile_plan():
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    from attn_edu import masks
    from attn_edu.kernels import flash_triton

    plan = flash_triton.block_schedule(100, 70, 32, 16, causal="bottom_right")
    assert isinstance(plan, masks.TilePlan)
    assert "TilePlan" in inspect.signature(flash_triton.block_schedule).return_annotation


# --------------------------------------------------------------------------- one name for the tile
#: Where ``block`` is a pattern's parameter (the granularity of the mask), not a tile size.
PATTERN_BLOCK = {"random_block_mask", "bigbird_mask", "fixed_mask"}


def test_tiles_are_block_q_and_block_k_in_every_python_signature():
    bad = []
    for name in _public_modules():
        module = _import(name)
        for item in module.__all__:
            obj = getattr(module, item)
            fns = [obj] + ([v for v in vars(obj).values() if callable(v)] if inspect.isclass(obj) else [])
            for fn in fns:
                try:
                    params = inspect.signature(fn).parameters
                except (TypeError, ValueError):
                    continue
                for p in params:
                    if p in ("block_m", "block_n") or (p == "block" and item not in PATTERN_BLOCK):
                        bad.append(f"{name}.{item}({p}=...)")
    assert not bad, bad


def test_command_line_flags_say_block_q_and_block_k():
    from attn_edu.bench import cli

    flags = {a for action in cli._parser()._actions for a in action.option_strings}
    assert {"--block-q", "--block-k"} <= flags
    assert not {"--block", "--block-m", "--block-n", "--json"} & flags
    for script in ("gpu-bench.sh", "gpu_run.py"):   # the GPU run's steps are in gpu_run.py
        text = (ROOT / "scripts" / script).read_text()
        assert not re.search(r"--block\b(?!-)|-m attn_edu.kernels", text), script
    assert '"--block-q"' in text   # the file that spells the flags is the one read


def test_doc_comments_do_not_start_with_a_field_colon():
    # napoleon reads "words: more" on the first line of a ``#:`` doc comment as "type:
    # description", and the API page then prints "Type: words" (it did for BACKWARDS and
    # decoding.GPUS); a colon outside code on that line, with text after it, is refused
    code = re.compile(r"``.+?``|:[\w:.+-]+:`.+?`|`.+?`")
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            text = line.strip()
            if not text.startswith("#:") or (i and lines[i - 1].strip().startswith("#:")):
                continue
            first = code.sub("CODE", text[2:])
            if re.search(r"(?<!:):(?!:)\s*\S", first):
                problems.append(f"{path.relative_to(ROOT)}:{i + 1}: {text}")
    assert not problems, "\n".join(problems)


# =========================================================================== import graph
# (issue 21, "shared pieces one floor down"; this block ends here)
def _import_graph(sources: list = SOURCES, base: Path = ROOT, top: str = "attn_edu") -> dict:
    """attn_edu's modules -> the attn_edu modules they import, at module level or inside a
    function, relative (``from .x import y``, ``from .. import x``) or absolute. A
    submodule's implicit import of its parent package is not an edge. (``sources``, ``base``
    and ``top``: another package's files, the folder above it and its name.)"""
    modules = {_module_name(p, base): p for p in sources}
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
                elif (node.module or "").split(".")[0] == top:
                    base = node.module
                else:
                    continue
                for alias in node.names:  # `from . import x` imports the module x
                    sub = f"{base}.{alias.name}"
                    targets.add(sub if sub in modules else base)
            elif isinstance(node, ast.Import):
                targets.update(a.name for a in node.names if a.name.split(".")[0] == top)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def _find_cycle(graph: dict):
    """One import cycle as a list ``[a, b, ..., a]``, or None (depth-first search)."""
    state: dict = {}  # 1 = on the current path, 2 = done
    path: list = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def test_the_import_graph_has_no_cycle():
    """No module imports a module that imports it back, however far round (function-level
    imports included): what two modules share lives one floor below both."""
    graph = _import_graph()
    assert graph["attn_edu.flash"] >= {"attn_edu._call", "attn_edu.flash_torch"}, "the graph misses edges"
    cycle = _find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle():
    graph = _import_graph()
    graph["attn_edu._call"] = graph["attn_edu._call"] | {"attn_edu.flash"}  # one import back up
    cycle = _find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1] and "attn_edu.flash" in cycle


# --------------------------------------------------------------------------- the book's extension
# book/_ext/attn_edu_book: a package, a module per job (CONTRIBUTING's "Where to change what")
EXTENSION = ROOT / "book" / "_ext" / "attn_edu_book"
EXTENSION_SOURCES = sorted(EXTENSION.glob("*.py"))
#: its floors, bottom up: a module imports modules of lower floors only (the jobs do not
#: import each other's floor; ``pages`` orders the jobs; ``__init__`` wires Sphinx's events)
EXTENSION_FLOORS = (
    ("_common",),
    ("figures", "katex", "icons", "images", "layout"),
    ("assets", "stylesheets"),
    ("pages",),
    ("__init__",),
    ("__main__",),
)
#: the most lines a file of the extension may have (it was one file of 1,497)
EXTENSION_MAX_LINES = 500


def _extension_graph() -> dict:
    return _import_graph(EXTENSION_SOURCES, EXTENSION.parent, "attn_edu_book")


def _floor(module: str) -> int:
    short = "__init__" if module == "attn_edu_book" else module.removeprefix("attn_edu_book.")
    return next(i for i, names in enumerate(EXTENSION_FLOORS) if short in names)


def _imports_not_downwards(graph: dict) -> list:
    return sorted(f"{a} imports {b}" for a, targets in graph.items() for b in targets
                  if _floor(b) >= _floor(a))


def test_the_book_extensions_imports_run_downwards_without_a_cycle():
    graph = _extension_graph()
    assert graph["attn_edu_book.pages"] >= {"attn_edu_book.figures", "attn_edu_book.katex",
                                            "attn_edu_book.stylesheets"}, "the graph misses edges"
    assert graph["attn_edu_book.__main__"] == {"attn_edu_book._common", "attn_edu_book.pages"}
    placed = {name for names in EXTENSION_FLOORS for name in names}
    modules = {"__init__" if m == "attn_edu_book" else m.removeprefix("attn_edu_book.") for m in graph}
    assert modules == placed, f"give each module of book/_ext/attn_edu_book a floor: {modules ^ placed}"
    cycle = _find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)
    assert _imports_not_downwards(graph) == []


def test_an_import_back_up_the_extension_is_found():
    graph = _extension_graph()
    graph["attn_edu_book._common"] = graph["attn_edu_book._common"] | {"attn_edu_book.katex"}
    assert _imports_not_downwards(graph) == ["attn_edu_book._common imports attn_edu_book.katex"]
    cycle = _find_cycle(graph)
    assert cycle is not None and "attn_edu_book._common" in cycle  # katex imports _common


def test_no_file_of_the_book_extension_is_over_500_lines():
    sizes = {p.name: len(p.read_text().splitlines()) for p in EXTENSION_SOURCES}
    assert len(sizes) >= 5, "book/_ext/attn_edu_book is a package, a module per job"
    over = {name: n for name, n in sizes.items() if n > EXTENSION_MAX_LINES}
    assert not over, f"over {EXTENSION_MAX_LINES} lines: {over} (split the job)"


def test_contributing_names_the_module_of_each_job_of_the_extension():
    guide = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    start = guide.index("- **The site.**")
    site = guide[start:guide.index("\n## ", start)]  # the bullet, to the next section
    missing = [p.name for p in EXTENSION_SOURCES if p.name != "__main__.py" and f"`{p.name}`" not in site]
    assert not missing, f"CONTRIBUTING's \"Where to change what\" (The site.) does not name {missing}"
# =========================================================================== end of import graph


# ------------------------------------------- one home for the tests' own helpers (issue 21)
# q, k, v come from conftest's builders; the float64 gold answer and naive_T that the
# tolerance rule compares with come from attn_edu.testing.reference_pair. Copies of either
# drift apart (three test files had their own ``qkv`` with other signatures and defaults).
_TESTS = Path(__file__).resolve().parent


def _test_sources():
    """{place: source} of every test module, package module and chapter code cell (a cell by
    its id, which an inserted cell does not shift)."""
    import json as _json

    out = {str(p.relative_to(ROOT)): p.read_text() for p in sorted(_TESTS.glob("*.py"))}
    out.update({str(p.relative_to(ROOT)): p.read_text() for p in sorted((ROOT / "attn_edu").rglob("*.py"))})
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = _json.loads(nb.read_text(encoding="utf-8"))["cells"]
        for cell in cells:
            if cell["cell_type"] == "code":
                out[f"{nb.relative_to(ROOT)} cell {cell['id']}"] = "".join(cell["source"])
    return out


def test_one_qkv_builder_in_the_tests():
    homes = [f"{p.name}:{i + 1}" for p in sorted(_TESTS.glob("*.py"))
             for i, line in enumerate(p.read_text().splitlines()) if re.match(r"\s*def qkv\(", line)]
    assert [h.split(":")[0] for h in homes] == ["conftest.py"], homes


#: an attention function called on float64 copies of q, k and v: the gold half of a pair
_GOLD_BY_HAND = re.compile(
    r"(?:scaled_dot_product_attention|sdpa)\(\s*"
    r"(?:\w+\.double\(\),\s*\w+(?:\[[^\]]*\])?\.double\(\),\s*\w+(?:\[[^\]]*\])?\.double\(\)"
    r"|\*\(\w+\.[\w().]*?(?:double\(\)|float64\)?)[\w().]* for \w+ in \(\w+, \w+, \w+\)\))")
#: places that compute a float64 answer on purpose without a naive twin, and why
_GOLD_ONLY = {
    "attn_edu/testing.py": "reference_pair itself",
    "attn_edu/bench/decode.py": "the decode sweep records each impl's max error, not the rule",
    "notebooks/03_softmax_precision.ipynb cell ch03-pipelines-sweep": "each pipeline's error against float64, no rule",
}


def test_gold_and_naive_pair_is_built_only_by_reference_pair():
    found = [f"{place}: {m.group(0)[:70]}" for place, src in _test_sources().items()
             for m in _GOLD_BY_HAND.finditer(src) if place not in _GOLD_ONLY]
    assert not found, ("build the float64 gold answer and naive_T with "
                       "attn_edu.testing.reference_pair:\n" + "\n".join(found))
