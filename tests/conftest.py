"""What every test module shares: Triton's interpreter, the input builders, the markers.

* **Triton's CPU interpreter.** Triton 3.9 reads ``TRITON_INTERPRET`` when ``@triton.jit``
  wraps a function: its own library (``tl.max``, ``tl.sum``) at the first ``import
  triton``, a kernel when its module is imported. So on a machine without a CUDA GPU it
  is set here, before any test module is collected (and so before anything imports
  triton); with a GPU the kernels run compiled. Other tests are unaffected: the variable
  only changes how triton runs.
* **Builders.** :func:`rand`, :func:`qkv` (NumPy) and :func:`torch_qkv` (torch, on
  :data:`DEVICE`) give standard-normal inputs from a seed; ``torch_qkv`` draws the same
  numbers as ``qkv``, so a NumPy and a torch test of one case see one input. They are the
  suite's only q, k, v builders (batch and heads through ``lead``, GQA through
  ``lead_k``; tests/test_conventions.py checks there is one ``def qkv``). Test modules
  import them: ``from conftest import qkv``. The gold answer and naive_T that a test
  compares with come from :func:`attn_edu.testing.reference_pair`;
  :func:`kernel_precision` says which precision a kernel launch runs in.
* **Markers** (registered in ``pyproject.toml``; they combine as their names say):
  ``slow`` (more than a few seconds; every test that builds, executes a chapter or drives a
  browser is slow, so ``-m "not slow"`` builds and executes nothing), ``notebooks``
  (executes chapters), ``browser`` (drives Chromium), ``pages`` (checks the built site),
  ``publish`` (runs the publishing workflow: the one book build), ``triton`` (runs a Triton
  kernel: compiled on a GPU, under the interpreter on the CPU; every test of
  :data:`TRITON_TEST_MODULES`, marked here), ``cuda`` (needs a CUDA GPU; skipped without
  one). ``bash scripts/gpu-bench.sh --check`` runs ``-m "triton or cuda"`` on a GPU; the
  edit loop, ``bash scripts/test.sh --fast``, runs ``-m "not slow"``.

* **The book's extension.** :func:`book_extension` imports ``book/_ext/attn_edu_book`` (a
  package, one module per job) for the tests that call its parts without a book build.
* **Fixtures.** ``numpy_only_venv``: the python of a virtual environment with NumPy only
  (the test environment's NumPy version, setuptools to build attn_edu, pytest and
  hypothesis) and this
  working tree's attn_edu installed into it (``pip install --no-deps .``, not editable) --
  a reader's plain ``pip install attn_edu``. The venv is cached between runs
  (tests/venvs.py); attn_edu is reinstalled once per test session. ``browser``: one
  headless Chromium (Debian's, ``ATTN_EDU_CHROMIUM``) for the whole session, with the
  network flags of :data:`LAUNCH_ARGS`; one instance, because Playwright's sync API cannot
  run twice at once. :func:`offline_context` opens a context in it that aborts (and
  reports) every request leaving 127.0.0.1. ``ATTN_EDU_SKIP_BROWSER=1`` skips instead of
  failing when Chromium or Playwright is missing. ``gpu_dry_run``: ``bash
  scripts/gpu-bench.sh --dry-run DIR`` once per test run, on whichever pytest-xdist worker
  asks first (a lock makes another wait for it, then read it): tests/test_gpu_pipeline.py
  checks the run, tests/test_bench_measure.py each measurement's document in it.

Collection needs NumPy, pytest and hypothesis only: modules that need torch, triton,
matplotlib or plotly skip themselves (``pytest.importorskip``) where they are missing.
"""
from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Optional, Sequence
from urllib.parse import urlsplit

import numpy as np
import pytest

import venvs

# scripts/ holds the book's tooling modules that tests use too (site_pages, visible_checks)
sys.path.insert(0, str(venvs.REPO / "scripts"))

#: Whether PyTorch sees a CUDA GPU (False without torch).
CUDA = False
if importlib.util.find_spec("torch") is not None:
    import torch

    CUDA = bool(torch.cuda.is_available())

    class OnCuda(torch.Tensor):
        """A CPU tensor that says it lives on GPU 0 (``x.as_subclass(OnCuda)``): enough for
        the launchers' input checks and choices, never for a launch."""

        @property
        def device(self):
            return torch.device("cuda", 0)

        @property
        def is_cuda(self):
            return True

    class GarbageTorch:
        """``torch`` for a launch module (``monkeypatch.setattr(module, "torch", ...)``), but
        ``torch.empty`` returns NaN (integers: -7), so a buffer the kernels were meant to fill
        and did not shows up in the result; ``empties`` counts its calls."""

        def __init__(self):
            self.empties = 0

        def __getattr__(self, name):
            return getattr(torch, name)

        def empty(self, *args, **kwargs):
            self.empties += 1
            t = torch.empty(*args, **kwargs)
            return t.fill_(float("nan")) if t.is_floating_point() else t.fill_(-7)

if not CUDA:
    os.environ["TRITON_INTERPRET"] = "1"  # before anything imports triton (see above)

#: Where torch tests run: the GPU when there is one, else the CPU (kernels interpreted).
DEVICE = "cuda" if CUDA else "cpu"



#: Test modules whose every test exercises a Triton kernel: marked ``triton`` at collection.
TRITON_TEST_MODULES = ("test_triton_flash.py", "test_triton_decode.py", "test_block_sparse_triton.py")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in TRITON_TEST_MODULES:
            item.add_marker(pytest.mark.triton)
    # the long runs first, so that on several workers (scripts/test.sh) none starts last: the
    # publishing job (the book build), then the chapters, then the other slow tests
    def rank(item):
        marks = {m.name for m in item.iter_markers()}
        return 0 if "publish" in marks else 1 if "notebooks" in marks else 2 if "slow" in marks else 3
    items.sort(key=rank)


def rand(rng: np.random.Generator, *shape: int, dtype=np.float64) -> np.ndarray:
    """Standard-normal NumPy array of ``shape`` in ``dtype``."""
    return rng.standard_normal(shape).astype(dtype)


def qkv(lq: int, lk: int, d: int = 16, dv: Optional[int] = None, lead: Sequence[int] = (),
        seed: int = 0, dtype=np.float64, lead_k: Optional[Sequence[int]] = None):
    """NumPy q (*lead, lq, d), k (*lead_k, lk, d), v (*lead_k, lk, dv); ``lead_k`` defaults
    to ``lead``, ``dv`` to ``d``."""
    rng = np.random.default_rng(seed)
    lead = tuple(lead)
    lead_k = lead if lead_k is None else tuple(lead_k)
    return (rand(rng, *lead, lq, d, dtype=dtype), rand(rng, *lead_k, lk, d, dtype=dtype),
            rand(rng, *lead_k, lk, d if dv is None else dv, dtype=dtype))


def torch_qkv(lq: int, lk: int, d: int = 16, dv: Optional[int] = None, lead: Sequence[int] = (),
              seed: int = 0, dtype="float32", device: Optional[str] = None,
              requires_grad: bool = False, lead_k: Optional[Sequence[int]] = None):
    """The tensors of :func:`qkv` (same numbers), in ``dtype`` (a torch dtype or its name)
    on ``device`` (default :data:`DEVICE`)."""
    import torch

    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    arrays = qkv(lq, lk, d, dv, lead, seed, np.float64, lead_k)
    return tuple(torch.from_numpy(x).to(device=device or DEVICE, dtype=dtype).requires_grad_(requires_grad)
                 for x in arrays)


def kernel_precision(dtype, precision: Optional[str] = None) -> str:
    """The ``input_precision`` ("ieee" or "tf32") of a Triton kernel launched on :data:`DEVICE`
    with inputs of ``dtype`` and the caller's ``precision``, by the kernels' one rule
    (``attn_edu.kernels._targets.input_precision``): what
    :func:`attn_edu.testing.reference_pair` takes to pick the naive dtype."""
    import torch

    from attn_edu.kernels import _targets

    cap = torch.cuda.get_device_capability() if CUDA else None
    return _targets.input_precision(str(dtype).replace("torch.", ""), cap, precision)


def lse_pair(q, k, allowed, scale: float, precision: str):
    """``(gold, naive)`` log-sum-exp of the scores ``scale * q @ k^T`` over the keys that
    ``allowed`` (boolean, True = may attend) keeps, for ``assert_close_to_reference(lse, ...,
    what="lse")``: gold in float64, naive in the dtype whose error sets the tolerance, the
    kernel's ``precision`` chosen as :func:`attn_edu.testing.reference_pair` chooses it (a
    TF32 product is held to float16's rule: on a GPU from sm_80, float32 inputs are TF32)."""
    import torch

    allowed = torch.as_tensor(allowed, device=q.device)
    naive_dtype = torch.float16 if precision == "tf32" and q.dtype == torch.float32 else q.dtype

    def lse(dtype):
        s = q.to(dtype) @ k.to(dtype).transpose(-1, -2) * scale
        return s.masked_fill(~allowed, float("-inf")).logsumexp(-1)

    return lse(torch.float64), lse(naive_dtype)


def raises_with(exc: type, words: Sequence[str], fn, *args, **kwargs) -> str:
    """Call ``fn`` and require it to raise ``exc`` whose message contains every one of
    ``words`` (an error names the argument and what was seen); returns the message."""
    with pytest.raises(exc) as info:
        fn(*args, **kwargs)
    for w in words:
        assert w in str(info.value), (w, str(info.value))
    return str(info.value)


def api_page_members() -> dict:
    """``{module: [names]}`` from the ``automodule`` directives of book/api.md (the API page)."""
    text = (Path(__file__).resolve().parents[1] / "book" / "api.md").read_text()
    out = {}
    for m in re.finditer(r"\.\. automodule:: ([\w.]+)\n((?:   :[\w-]+:.*\n)*)", text):
        members = re.search(r":members: (.*)", m.group(2))
        out[m.group(1)] = [] if members is None else [x.strip() for x in members.group(1).split(",")]
    return out



def book_extension(name: str):
    """The book's Sphinx extension (the package ``book/_ext/attn_edu_book``) imported under
    ``name``, from its folder, without putting ``book/_ext`` on ``sys.path``: each of its
    modules as ``name.figures``, ``name.katex``... (its modules import each other relatively,
    so the package is registered in ``sys.modules`` first)."""
    folder = Path(__file__).resolve().parents[1] / "book" / "_ext" / "attn_edu_book"
    spec = importlib.util.spec_from_file_location(name, folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

# ------------------------------------------------------------------ fixtures
def chromium_path() -> str:
    """The browser the tests drive: $ATTN_EDU_CHROMIUM (scripts/test.sh sets it), else the one
    scripts/site.sh's browser step finds (``site.sh which-browser``: the one list of where to
    look), else Debian's Chromium."""
    return os.environ.get("ATTN_EDU_CHROMIUM") or subprocess.run(
        ["bash", str(venvs.REPO / "scripts" / "site.sh"), "which-browser"], capture_output=True, text=True
    ).stdout.strip() or "/usr/bin/chromium"


SKIP_BROWSER = os.environ.get("ATTN_EDU_SKIP_BROWSER") == "1"
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ALLOWED_HOSTS = {"127.0.0.1"}


@pytest.fixture(scope="session")
def browser():
    missing = None
    chromium = chromium_path()
    if not Path(chromium).exists():
        missing = (
            f"Chromium not found at {chromium}. Install it (Debian: `apt-get install -y "
            "chromium-headless-shell`) or set ATTN_EDU_CHROMIUM; set ATTN_EDU_SKIP_BROWSER=1 to skip."
        )
    else:
        try:
            from playwright.sync_api import sync_playwright  # noqa: F401
        except ImportError:
            missing = "playwright is not installed (pip install -r requirements.txt)"
    if missing:
        if SKIP_BROWSER:
            pytest.skip(missing)
        pytest.fail(missing)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium, args=LAUNCH_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def run_shared_dir(tmp_path_factory) -> Path:
    """The folder of this test run's base temp that all its pytest-xdist workers share (each
    worker's own base temp is a folder inside it); without xdist, the base temp itself."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def offline_context(browser, problems: list, **kwargs):
    """A browser context in which every request that leaves 127.0.0.1 is aborted and
    reported in ``problems`` (the static book's test and the live-explorer test)."""
    context = browser.new_context(**kwargs)

    def route(r):
        parts = urlsplit(r.request.url)
        if parts.scheme in ("http", "https", "ws", "wss") and parts.hostname not in ALLOWED_HOSTS:
            problems.append(f"external request (blocked): {r.request.url}")
            r.abort()
        else:
            r.continue_()

    context.route("**/*", route)
    return context


@pytest.fixture(scope="session")
def numpy_only_venv():
    import numpy as np

    import hypothesis

    # setuptools >= 70.1 builds wheels itself: attn_edu installs without a download;
    # pytest and hypothesis let the fast test loop run there too
    python = venvs.cached_venv("numpy-only", [f"numpy=={np.__version__}", "setuptools>=70.1",
                                              f"pytest=={pytest.__version__}",
                                              f"hypothesis=={hypothesis.__version__}"])
    venvs.install_attn_edu(python)
    return python


@pytest.fixture(scope="session")
def gpu_dry_run(tmp_path_factory):
    """``(DIR, result)`` of ``bash scripts/gpu-bench.sh --dry-run DIR`` (every step of the GPU
    run on the CPU, about 90 s), run once for the whole test run: pytest-xdist's workers
    share one folder of the run's base temp, and a lock there makes a second worker wait for
    the first and read its result. ``result``: the command's returncode, stdout, stderr."""
    for module in ("torch", "plotly", "nbclient", "jsonschema"):  # the PyTorch and Triton sweeps,
        pytest.importorskip(module)                               # the chapters' figures, the schema
    shared = run_shared_dir(tmp_path_factory) / "gpu_bench_dry_run"
    shared.mkdir(exist_ok=True)
    out, said = shared / "out", shared / "result.json"
    with open(shared / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not said.is_file():
            env = venvs.compiled_env(PYTHON=sys.executable)
            start = time.perf_counter()
            res = subprocess.run(["bash", "scripts/gpu-bench.sh", "--dry-run", str(out)], cwd=venvs.REPO,
                                 env=env, capture_output=True, text=True, timeout=900)
            print(f"gpu-bench.sh --dry-run took {time.perf_counter() - start:.0f} s")
            said.write_text(json.dumps({"returncode": res.returncode, "stdout": res.stdout, "stderr": res.stderr}))
    return out, SimpleNamespace(**json.loads(said.read_text()))
