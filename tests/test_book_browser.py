"""The built book renders completely offline: every page opened in headless Chromium.

For every page of the book (every file in ``_toc.yml`` plus ``search.html`` and
``genindex.html``) this test serves ``_build/html`` from 127.0.0.1 and asserts that

* no JavaScript exception is thrown and nothing is logged to the console as an error;
* no request fails and no response has a status >= 400;
* **no request leaves 127.0.0.1** (all other hosts are aborted and reported);
* MathJax (served from the build) typeset every ``.math`` element, and no raw
  ``$$``, ``\\(`` or ``\\[`` is left in the visible text;
* every plotly figure is drawn (``.plotly-graph-div`` holds a ``.main-svg``) and its
  sliders respond to a click (no kernel needed);
* every embedded ipywidgets view is drawn (sliders visible where the saved widget
  state has sliders);
* dropdown solutions are hidden behind a working toggle button;
* chapter pages carry the Colab launch link for their notebook and the repository link.

A full-page screenshot of every page is written to ``_build/screenshots/``.

Environment variables:

* ``ATTN_EDU_BOOK_BUILT=1``: ``_build/html`` is fresh, do not rebuild (``scripts/test.sh``
  builds with ``scripts/build-book.sh`` first and sets it);
* ``ATTN_EDU_BOOK_ROOT``: the book's source root (default: the repository root);
* ``ATTN_EDU_CHROMIUM``: the Chromium binary (default ``/usr/bin/chromium``);
* ``ATTN_EDU_SKIP_BROWSER=1``: skip instead of failing when Chromium or Playwright is
  missing.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from conftest import offline_context  # the session's Chromium is conftest's `browser` fixture

pytestmark = pytest.mark.browser
yaml = pytest.importorskip("yaml")  # the book's build tools; collection needs NumPy only

REPO = Path(__file__).resolve().parents[1]
ROOT = Path(os.environ.get("ATTN_EDU_BOOK_ROOT", REPO)).resolve()
HTML = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"
TIMEOUT_MS = 60_000


# --------------------------------------------------------------------------- the toc
def _load_yaml(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _toc_files() -> list[str]:
    """Every document of ``_toc.yml`` (root first), without extension."""
    toc = _load_yaml(ROOT / "_toc.yml")
    files = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections"))
            walk(entry.get("chapters"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    walk(toc.get("sections"))
    return [re.sub(r"\.(md|ipynb|rst)$", "", f) for f in files]


def _repo_config() -> dict:
    cfg = _load_yaml(ROOT / "_config.yml")
    return {
        "url": cfg["repository"]["url"].rstrip("/"),
        "branch": cfg["repository"].get("branch", "main"),
        "path_to_book": (cfg["repository"].get("path_to_book") or "").strip("/"),
        "colab": cfg["launch_buttons"]["colab_url"].rstrip("/"),
    }


TOC_PAGES = _toc_files()
EXTRA_PAGES = ["search", "genindex", "py-modindex"]  # Sphinx's own pages
PAGES = TOC_PAGES + EXTRA_PAGES


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def built_book() -> Path:
    """Build the book once per session (or reuse it when ATTN_EDU_BOOK_BUILT=1)."""
    if os.environ.get("ATTN_EDU_BOOK_BUILT") == "1":
        if not (HTML / "index.html").is_file():
            pytest.fail(f"ATTN_EDU_BOOK_BUILT=1 but {HTML / 'index.html'} does not exist")
        return HTML
    jb = Path(sys.executable).with_name("jupyter-book")
    jb_cmd = str(jb) if jb.exists() else shutil.which("jupyter-book")
    if jb_cmd is None:
        pytest.fail("jupyter-book is not installed (pip install -r requirements.txt)")
    cmd = [jb_cmd, "build", str(ROOT), "-W", "-n", "--keep-going", "--all"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    start = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        out = (proc.stdout + proc.stderr)[-8000:]
        pytest.fail(f"book build failed ({' '.join(cmd)}), exit {proc.returncode}:\n{out}")
    print(f"book built in {time.time() - start:.0f} s")
    return HTML


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest's output clean
        pass


@pytest.fixture(scope="session")
def server(built_book: Path):
    handler = functools.partial(_QuietHandler, directory=str(built_book))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


# --------------------------------------------------------------------------- page checks
_WAIT_RENDERED_JS = """
() => {
  const math = document.querySelectorAll('.math');
  if (math.length) {
    if (!(window.MathJax && window.MathJax.startup && window.MathJax.startup.promise)) return false;
    for (const m of math) if (!m.querySelector('mjx-container')) return false;
  }
  for (const d of document.querySelectorAll('.plotly-graph-div'))
    if (!d.querySelector('.main-svg')) return false;
  for (const s of document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]')) {
    const area = s.previousElementSibling;
    if (!area || !area.querySelector('.jupyter-widgets, .lm-Widget')) return false;
  }
  return true;
}
"""

_RAW_TEX_JS = r"""
() => {
  const skip = 'PRE, CODE, SCRIPT, STYLE, TEXTAREA, MJX-CONTAINER, MJX-ASSISTIVE-MML, .highlight, .search, #search-results';
  const bad = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const inlineCmd = /\$[^$\s][^$]*\\[a-zA-Z]+[^$]*\$/;
  while (walker.nextNode()) {
    const n = walker.currentNode;
    const el = n.parentElement;
    if (!el || el.closest(skip)) continue;
    const t = n.textContent;
    if (t.includes('$$') || t.includes('\\(') || t.includes('\\[') || inlineCmd.test(t))
      bad.push(t.trim().slice(0, 120));
  }
  return bad;
}
"""

_WIDGETS_JS = """
() => {
  const views = document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]');
  const stateTag = document.querySelector('script[type="application/vnd.jupyter.widget-state+json"]');
  const state = stateTag ? JSON.parse(stateTag.textContent).state || {} : {};
  const models = Object.values(state).map(m => m.model_name);
  const sliders = Array.from(document.querySelectorAll('.widget-slider, .widget-hslider, .widget-vslider'))
    .filter(e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; });
  return {views: views.length, hasState: !!stateTag,
          sliderModels: models.filter(n => /SliderModel$/.test(n)).length,
          visibleSliders: sliders.length};
}
"""


def _page_file(name: str) -> str:
    return f"{name}.html"


@pytest.mark.parametrize("name", PAGES)
def test_page_renders_offline(name: str, server: str, browser, built_book: Path) -> None:
    path = built_book / _page_file(name)
    assert path.is_file(), f"{path} was not built"
    url = f"{server}/{_page_file(name)}"

    problems: list[str] = []
    context = offline_context(browser, problems, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.on("pageerror", lambda e: problems.append(f"JS exception: {e}"))
    page.on(
        "console",
        lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None,
    )
    page.on(
        "requestfailed",
        lambda r: problems.append(f"request failed: {r.url} ({r.failure})"),
    )
    page.on(
        "response",
        lambda r: problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None,
    )
    try:
        page.goto(url, wait_until="networkidle", timeout=TIMEOUT_MS)
        try:
            page.wait_for_function(_WAIT_RENDERED_JS, timeout=TIMEOUT_MS, polling=250)
        except Exception:
            problems.append(f"math / plotly figures / widgets not rendered within {TIMEOUT_MS // 1000} s")
        if page.evaluate("() => document.querySelectorAll('.math').length"):
            status = page.evaluate(
                "() => (window.MathJax && MathJax.startup && MathJax.startup.promise)"
                " ? MathJax.startup.promise.then(() => 'ok', e => 'MathJax failed: ' + e)"
                " : 'MathJax was not loaded on a page with math'"
            )
            if status != "ok":
                problems.append(status)
        # web fonts (MathJax's, Font Awesome's) are requested lazily, once text uses them
        page.evaluate("() => document.fonts.ready.then(() => true)")
        try:
            page.wait_for_load_state("networkidle", timeout=TIMEOUT_MS)
        except Exception:
            problems.append(f"the page did not reach network idle within {TIMEOUT_MS // 1000} s")

        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"{name.replace('/', '__')}.png"), full_page=True)

        # ---- MathJax
        n_math = page.evaluate("() => document.querySelectorAll('.math').length")
        n_typeset = page.evaluate("() => document.querySelectorAll('.math mjx-container').length")
        if n_math:
            untypeset = page.evaluate(
                "() => Array.from(document.querySelectorAll('.math'))"
                ".filter(m => !m.querySelector('mjx-container')).map(m => m.textContent.slice(0, 80))"
            )
            if untypeset:
                problems.append(f"{len(untypeset)}/{n_math} math elements not typeset: {untypeset[:3]}")
            assert n_typeset >= n_math - len(untypeset)
        raw = page.evaluate(_RAW_TEX_JS)
        if raw:
            problems.append(f"raw TeX left in the page text: {raw[:3]}")

        # ---- plotly
        n_plotly = page.evaluate("() => document.querySelectorAll('.plotly-graph-div').length")
        n_drawn = page.evaluate(
            "() => Array.from(document.querySelectorAll('.plotly-graph-div'))"
            ".filter(d => d.querySelector('.main-svg')).length"
        )
        if n_drawn != n_plotly:
            problems.append(f"only {n_drawn} of {n_plotly} plotly figures drawn")
        if n_plotly and not page.evaluate("() => typeof window.Plotly === 'object'"):
            problems.append("window.Plotly is not defined on a page with plotly figures")

        # ---- plotly sliders work without a kernel: click the right end of each slider's
        # rail and the slider must move to its last step (running the step's method,
        # e.g. "animate" to a saved frame) without any JS error.
        for i, div in enumerate(page.query_selector_all(".plotly-graph-div")):
            rail = div.query_selector(".slider-container .slider-rail-touch-rect")
            if rail is None:
                continue
            n_steps = page.evaluate("d => d.layout.sliders[0].steps.length", div)
            rail.scroll_into_view_if_needed()
            box = rail.bounding_box()
            page.mouse.click(box["x"] + box["width"] - 2, box["y"] + box["height"] / 2)
            page.wait_for_timeout(800)
            active = page.evaluate("d => d.layout.sliders[0].active", div)
            if active != n_steps - 1:
                problems.append(
                    f"plotly figure {i}: slider did not move to its last step "
                    f"(active={active}, steps={n_steps})"
                )

        # ---- ipywidgets
        w = page.evaluate(_WIDGETS_JS)
        if w["views"] and not w["hasState"]:
            problems.append("widget views without saved widget state")
        if w["views"]:
            undrawn = page.evaluate(
                "() => Array.from(document.querySelectorAll("
                "'script[type=\"application/vnd.jupyter.widget-view+json\"]'))"
                ".filter(s => !(s.previousElementSibling && s.previousElementSibling"
                ".querySelector('.jupyter-widgets, .lm-Widget'))).length"
            )
            if undrawn:
                problems.append(f"{undrawn} of {w['views']} widget views not drawn")
        if w["sliderModels"] and w["visibleSliders"] == 0:
            problems.append(f"{w['sliderModels']} slider models saved but no slider visible")

        # ---- dropdown solutions behind a toggle
        n_dropdown = page.evaluate("() => document.querySelectorAll('.admonition.dropdown').length")
        if n_dropdown:
            n_buttons = page.evaluate(
                "() => document.querySelectorAll('.admonition.dropdown .toggle-button').length"
            )
            if n_buttons != n_dropdown:
                problems.append(f"{n_dropdown} dropdown admonitions but {n_buttons} toggle buttons")
            else:
                hidden = page.evaluate(
                    "() => document.querySelector('.admonition.dropdown').classList.contains('toggle-hidden')"
                )
                page.locator(".admonition.dropdown .toggle-button").first.click()
                shown = page.evaluate(
                    "() => !document.querySelector('.admonition.dropdown').classList.contains('toggle-hidden')"
                )
                if not (hidden and shown):
                    problems.append("dropdown solution is not hidden, or the toggle does not open it")

        # ---- launch / repository buttons on chapter pages
        source = ROOT / f"{name}.ipynb"
        if name in TOC_PAGES and source.exists():
            cfg = _repo_config()
            owner_repo = urlsplit(cfg["url"]).path.strip("/")
            nb_path = "/".join(p for p in (cfg["path_to_book"], f"{name}.ipynb") if p)
            colab = f"{cfg['colab']}/github/{owner_repo}/blob/{cfg['branch']}/{nb_path}"
            if not page.locator(f'a[href="{colab}"]').count():
                problems.append(f"no Colab launch link {colab}")
            if not page.locator(f'a[href="{cfg["url"]}"]').count():
                problems.append(f"no repository link {cfg['url']}")
    finally:
        context.close()

    assert not problems, f"{url}:\n  " + "\n  ".join(problems)


def test_every_built_page_is_checked(built_book: Path) -> None:
    """No HTML content page escapes the browser test (and every toc entry was built)."""
    built = {
        p.relative_to(built_book).with_suffix("").as_posix()
        for p in built_book.rglob("*.html")
        if not p.relative_to(built_book).parts[0].startswith("_")
    }
    built.discard("index")  # redirect to the root page, checked below
    assert set(PAGES) <= built, f"toc pages not built: {sorted(set(PAGES) - built)}"
    assert built <= set(PAGES), f"pages not in the toc: {sorted(built - set(PAGES))}"
    index = (built_book / "index.html").read_text(encoding="utf-8")
    assert f"{TOC_PAGES[0]}.html" in index, "index.html does not redirect to the root page"


def test_no_cdn_urls_in_script_or_link_tags(built_book: Path) -> None:
    """Static check: no <script src> / <link href> points off the site."""
    pattern = re.compile(r"<(?:script[^>]*\bsrc|link[^>]*\bhref)=[\"'](https?:)?//", re.I)
    offenders = []
    for p in built_book.rglob("*.html"):
        if p.relative_to(built_book).parts[0] in ("_static", "_sources"):
            continue
        for m in pattern.finditer(p.read_text(encoding="utf-8")):
            line = p.read_text(encoding="utf-8")[m.start() : m.start() + 160]
            if "rel=\"canonical\"" in line:
                continue
            offenders.append(f"{p.relative_to(built_book)}: {line}")
    assert not offenders, "\n".join(offenders[:20])


def test_api_page_documents_every_public_name(built_book: Path) -> None:
    """Every name of every module's ``__all__`` listed on book/api.md has its entry (an
    anchor) on the built page: autodoc found it and Sphinx rendered it."""
    from conftest import api_page_members

    html = (built_book / "book" / "api.html").read_text()
    missing = [f"{module}.{name}" for module, names in api_page_members().items() for name in names
               if f'id="{module}.{name}"' not in html]
    assert not missing, missing


def test_pages_do_not_inline_plotly_js(built_book: Path) -> None:
    """The book serves plotly.js once from _static; the chapters' first cell must not
    embed its 4.8 MB loader (attn_edu.notebook.plotly_js_loader) during the build."""
    from attn_edu.notebook import LOADER_ID

    inlined = [p.relative_to(built_book).as_posix() for p in built_book.rglob("*.html")
               if LOADER_ID in p.read_text(encoding="utf-8")]
    assert not inlined, f"plotly.js inlined into {inlined}"
