"""Every live explorer, moved by a reader in JupyterLab in Chromium: each control changes
what the reader sees, nothing raises, and the figures draw offline.

For each chapter that builds a live explorer (found by its code: ``live_explorer(``,
``interact(``...; chapters added later are picked up), the test

* starts JupyterLab (the pinned one of requirements.txt) on 127.0.0.1, a free port and a
  token, with all its files in a temporary folder, and the project's Python as the
  kernel (a kernelspec in a temporary ``JUPYTER_PATH``: nothing global changes);
* opens a copy of the chapter that ends with its last explorer, runs all its cells, and
  fails on any error output;
* finds every explorer by its widgets (a widget with sliders / dropdowns / checkboxes:
  each must be an ``attn_edu.widgets.live_explorer``), then moves each control as a
  reader does -- drags a slider's handle with the mouse, picks another dropdown option,
  clicks a checkbox -- and waits for the recompute (the explorer counts its renders);
  the figure must change, show no traceback, and be drawn. A control that is disabled
  (it cannot matter for the current setting) is moved later, after the dropdowns and
  checkboxes have found a setting that enables it; one that is never enabled fails;
* blocks every request that leaves 127.0.0.1 and fails on any JavaScript exception.

Two setups (``SETUPS``):

* ``with-plotly``: the server runs in the project's venv, which has plotly and so
  plotly's JupyterLab extension;
* ``without-plotly``: the server runs in a small venv of its own with only JupyterLab and
  ipywidgets' front end (``jupyterlab_widgets``), as when JupyterLab lives in a base
  environment and the kernel elsewhere: plotly figures are then drawn from their
  ``text/html`` part with the plotly.js that the chapter's first cell loaded (no CDN).
  The venv is made once and cached (tests/venvs.py).

Which chapters: a representative set by default (:data:`CI_CHAPTERS`, what
``scripts/test.sh`` runs); every chapter in both setups with
``ATTN_EDU_LIVE_CHAPTERS=all`` (or a comma-separated list of chapter numbers), e.g.::

    ATTN_EDU_LIVE_CHAPTERS=all python -m pytest tests/test_live_explorers.py

Screenshots of every explorer and the timings land in ``_build/live-explorers/``.
The server is always stopped by its own process id (``/api/shutdown``, then its process
group is killed). Set ``ATTN_EDU_SKIP_BROWSER=1`` to skip when Chromium is missing.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import chapter_cells
from conftest import offline_context
from venvs import REPO, cached_venv, jupyter_dirs, write_kernelspec

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # drives Chromium

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
OUT = REPO / "_build" / "live-explorers"
SETUPS = ("with-plotly", "without-plotly")
#: what scripts/test.sh runs: a matplotlib explorer with dropdown + disabled controls (05),
#: a plotly explorer (09, in both setups) and one with a checkbox and a selection slider (12)
CI_CHAPTERS = {"with-plotly": ("05", "09", "12"), "without-plotly": ("09",)}
CHAPTERS_ENV = "ATTN_EDU_LIVE_CHAPTERS"
EXPLORER_CALL = re.compile(r"\b(live_explorer|interact|interactive|interactive_output)\(")
RUN_TIMEOUT_S = 600      # running a chapter's cells (a loaded 2-core machine is slow)
RENDER_TIMEOUT_S = 120   # one recompute after a control moved


# --------------------------------------------------------------------------- what to run
def _code(path: Path) -> list:
    return [("".join(c["source"]), c) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
            if c["cell_type"] == "code"]


def chapters_with_explorers() -> list:
    return [p for p in NOTEBOOKS if any(EXPLORER_CALL.search(src) for src, _ in _code(p))]


def _selected() -> list:
    wanted = os.environ.get(CHAPTERS_ENV, "").strip()
    chapters = chapters_with_explorers()
    params = []
    for setup in SETUPS:
        for path in chapters:
            number = path.name[:2]
            if wanted == "all" or (wanted and number in wanted.split(",")) or (
                    not wanted and number in CI_CHAPTERS[setup]):
                params.append(pytest.param(setup, path, id=f"{setup}-{path.stem}"))
    return params


def trimmed_copy(path: Path, dest: Path) -> Path:
    """The chapter's cells its explorers need: the first cell, every explorer cell and the
    cells that define what they read (tests/chapter_cells.py: the chapter itself ran once in
    the book build and once in the Colab stand-in)."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    sources = ["".join(c["source"]) for c in code]
    explorers = [i for i, src in enumerate(sources) if EXPLORER_CALL.search(src)]
    nb["cells"] = [code[i] for i in chapter_cells.needed(sources, explorers)]
    out = dest / path.name
    out.write_text(json.dumps(nb, indent=1), encoding="utf-8")
    return out


def server_requirements() -> list:
    """JupyterLab as pinned in requirements.txt, and the widgets front end matching ipywidgets."""
    pins = [line.split("#")[0].strip() for line in (REPO / "requirements.txt").read_text().splitlines()]
    lab = [p for p in pins if re.match(r"jupyterlab\s*[=<>~]", p)]
    assert lab, "requirements.txt must pin jupyterlab"
    return [*lab, f"jupyterlab_widgets=={importlib.metadata.version('jupyterlab_widgets')}"]


# --------------------------------------------------------------------------- the server
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LabServer:
    """A JupyterLab server in its own process group, its files under ``tmp``."""

    def __init__(self, setup: str, python: Path, tmp: Path) -> None:
        self.setup, self.python, self.tmp = setup, python, tmp
        self.root = tmp / "notebooks"
        self.root.mkdir(parents=True)
        self.token = secrets.token_hex(16)
        # a reader's Jupyter: none of the book build's or the test run's switches
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("PYTHONPATH", "PYTHONHOME", "ATTN_EDU_BOOK_BUILD")}
        self.env.update(jupyter_dirs(tmp / "jupyter"))
        # the kernel: the project's Python, importing this working tree's attn_edu
        write_kernelspec(Path(self.env["JUPYTER_PATH"]), Path(sys.executable),
                         env={"PYTHONPATH": str(REPO)})
        settings = Path(self.env["JUPYTERLAB_SETTINGS_DIR"])
        for ext, value in {
            "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
            "@jupyterlab/apputils-extension/notification": {"fetchNews": "false",
                                                            "checkForUpdates": False},
        }.items():
            (settings / ext).parent.mkdir(parents=True, exist_ok=True)
            (settings / f"{ext}.jupyterlab-settings").write_text(json.dumps(value))
        self.proc = None
        self.url = ""
        self.log = tmp / "server.log"

    def start(self) -> None:
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        cmd = [str(self.python), "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root}",
               "--LabApp.expose_app_in_browser=True", "--LabApp.extension_manager=readonly"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")  # CI and containers run as root
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(cmd, env=self.env, cwd=self.root, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/status?token={self.token}", timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"JupyterLab did not answer within 120 s:\n{self.log_tail()}")

    def log_tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""

    def stop(self) -> None:
        """Shut the server (and its kernels) down, then kill its process group: by its pid."""
        if self.proc is None:
            return
        try:
            req = urllib.request.Request(f"{self.url}/api/shutdown", method="POST",
                                         headers={"Authorization": f"token {self.token}"})
            urllib.request.urlopen(req, timeout=10).close()
            self.proc.wait(timeout=30)
        except Exception:  # noqa: BLE001  (killed below)
            pass
        finally:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if self.proc.poll() is not None:
                    break
                try:
                    os.killpg(self.proc.pid, sig)  # start_new_session: its group id is its pid
                    self.proc.wait(timeout=10)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    pass
            try:  # anything left in its group (it is gone, so this only sweeps)
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    """``lab(setup)``: a running server for that setup, started once, always stopped."""
    servers: dict = {}

    def get(setup: str) -> LabServer:
        if setup not in servers:
            if setup == "with-plotly":
                python = Path(sys.executable)
                has_plotly = True
            else:
                python = cached_venv("jupyter-server", server_requirements())
                has_plotly = False
            check = subprocess.run(
                [str(python), "-c", "import importlib.util, sys, jupyterlab; "
                 "print(importlib.util.find_spec('plotly') is not None)"],
                capture_output=True, text=True, env={"PATH": os.environ.get("PATH", "")})
            assert check.stdout.strip() == str(has_plotly), (
                f"the {setup} server environment should {'' if has_plotly else 'not '}have plotly: "
                f"{check.stdout}{check.stderr}")
            server = LabServer(setup, python, tmp_path_factory.mktemp(setup))
            servers[setup] = server
            server.start()
        return servers[setup]

    try:
        yield get
    finally:
        for server in servers.values():
            server.stop()


# --------------------------------------------------------------------------- page helpers
CONTROLS = ".widget-hslider, .widget-dropdown, .widget-checkbox"
ANY_CONTROL = CONTROLS + ", .widget-vslider, .widget-toggle-button, .widget-radio, .widget-text, .widget-select"

_PANEL_JS = """
(path) => { for (const w of window.jupyterapp.shell.widgets('main'))
              if (w.context && w.context.path === path) return w;
            return null; }
"""

_RUN_ALL_JS = """
async ([path, timeoutMs]) => {
  const app = window.jupyterapp;
  const panel = (""" + _PANEL_JS + """)(path);
  app.shell.activateById(panel.id);
  await panel.sessionContext.ready;
  const run = app.commands.execute('notebook:run-all-cells');
  const timer = new Promise((_, reject) => setTimeout(() => reject(new Error('timeout')), timeoutMs));
  await Promise.race([run, timer]);
  const cells = panel.content.model.cells;
  const errors = [], unrun = [];
  for (let i = 0; i < cells.length; i++) {
    const c = cells.get(i);
    if (c.type !== 'code') continue;
    if (c.executionCount === null) unrun.push(i);
    for (const o of c.outputs.toJSON())
      if (o.output_type === 'error') errors.push(`cell ${i}: ${o.ename}: ${o.evalue}`);
  }
  return {errors, unrun, kernel: panel.sessionContext.session.kernel.status};
}
"""

_EXPLORERS_JS = """
(sel) => {
  const nb = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook') || document;
  const all = Array.from(nb.querySelectorAll('.jupyter-widgets'))
    .filter(w => w.querySelector(sel.any));
  // outermost widget views that hold controls, and whether each is a live_explorer
  const tops = all.filter(w => !all.some(o => o !== w && o.contains(w)));
  return tops.map(w => w.classList.contains('attn-edu-explorer'));
}
"""

_CONTROLS_JS = """
(el, sel) => Array.from(el.querySelectorAll(sel)).map(c => {
  const kind = c.classList.contains('widget-dropdown') ? 'dropdown'
             : c.classList.contains('widget-checkbox') ? 'checkbox' : 'slider';
  const label = (c.querySelector('.widget-label') || {}).innerText || '';
  const input = c.querySelector('select, input, .noUi-target');
  const disabled = !!(input && (input.disabled || input.hasAttribute('disabled')));
  let value = '';
  if (kind === 'dropdown') value = c.querySelector('select').value;
  else if (kind === 'checkbox') value = String(c.querySelector('input').checked);
  else value = (c.querySelector('.widget-readout') || {}).innerText || '';
  const options = kind === 'dropdown' ? c.querySelector('select').options.length : 0;
  return {kind, label, disabled, value, options};
})
"""

_FINGERPRINT_JS = """
(el) => {
  const out = el.querySelector('.widget-output');
  if (!out) return {print: '', drawn: false, text: ''};
  let h = 2166136261;
  const mix = s => { for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); } };
  let drawn = true, n = 0;
  // visible images only (plotly's JupyterLab renderer keeps a hidden static copy)
  for (const img of Array.from(out.querySelectorAll('img')).filter(i => i.getClientRects().length)) {
    n++; mix(img.src);
    if (!(img.complete && img.naturalWidth > 0)) drawn = false;
  }
  for (const gd of out.querySelectorAll('.js-plotly-plot, .plotly-graph-div')) {
    n++;
    if (!gd.querySelector('.main-svg')) drawn = false;
    try {
      mix(JSON.stringify({data: gd.data, layout: gd.layout},
          (k, v) => (k === 'uid' || k === 'template' || k.startsWith('_')) ? undefined : v));
    } catch (e) { mix(gd.innerHTML.replace(/id="[^"]*"/g, '')); }
  }
  const text = out.innerText;
  if (!n) mix(text);
  return {print: (h >>> 0).toString(16) + ':' + n, drawn: drawn && (n > 0 || text.trim().length > 0), text};
}
"""

_RENDERS_JS = """
(el) => { const s = el.querySelector('[data-renders]');
          return s ? Number(s.dataset.renders) : -1; }
"""


def _explorer(page, e: int):
    return page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .attn-edu-explorer").nth(e)


def _move(page, control, kind: str, state: dict) -> None:
    """Move one control as a reader does."""
    control.scroll_into_view_if_needed()
    if kind == "dropdown":
        select = control.locator("select")
        current = select.evaluate("s => s.selectedIndex")
        select.select_option(index=(current + 1) % state["options"])
    elif kind == "checkbox":
        control.locator("input[type=checkbox]").click()
    else:  # drag the slider's handle across its track and release
        handle = control.locator(".noUi-handle").first
        track = control.locator(".noUi-target").first
        hb, tb = handle.bounding_box(), track.bounding_box()
        x0, y0 = hb["x"] + hb["width"] / 2, hb["y"] + hb["height"] / 2
        frac = (x0 - tb["x"]) / max(tb["width"], 1)
        target = tb["x"] + tb["width"] * (0.85 if frac < 0.5 else 0.15)
        page.mouse.move(x0, y0)
        page.mouse.down()
        page.mouse.move(target, y0, steps=8)
        page.mouse.up()


def _drive_explorer(page, e: int, problems: list, where: str) -> None:
    el = _explorer(page, e)
    el.scroll_into_view_if_needed()
    handle = el.element_handle()
    sel = CONTROLS
    start = page.evaluate(_FINGERPRINT_JS, handle)
    if not start["drawn"]:
        problems.append(f"{where}: the explorer's first output is not drawn ({start['text'][:200]!r})")

    def controls():
        return el.evaluate(_CONTROLS_JS, sel)

    def moved(i: int) -> bool:
        """Move control i; check it recomputed and changed the output. False if disabled."""
        state = controls()[i]
        if state["disabled"]:
            return False
        before_print = page.evaluate(_FINGERPRINT_JS, handle)["print"]
        renders = page.evaluate(_RENDERS_JS, handle)
        _move(page, el.locator(sel).nth(i), state["kind"], state)
        after_state = controls()[i]
        name = f"{where}: control {state['label'] or i!r} ({state['kind']})"
        if after_state["value"] == state["value"]:
            problems.append(f"{name}: moving it did not change its value ({state['value']!r})")
            return True
        try:
            page.wait_for_function(f"([el, n]) => ({_RENDERS_JS})(el) > n", arg=[handle, renders],
                                   timeout=RENDER_TIMEOUT_S * 1000, polling=100)
        except Exception:  # noqa: BLE001
            problems.append(f"{name}: no recompute within {RENDER_TIMEOUT_S} s of moving it to "
                            f"{after_state['value']!r}")
            return True
        try:  # images decode and plotly draws asynchronously
            page.wait_for_function(f"el => ({_FINGERPRINT_JS})(el).drawn", arg=handle, timeout=20_000)
        except Exception:  # noqa: BLE001
            pass
        after = page.evaluate(_FINGERPRINT_JS, handle)
        if "Traceback" in after["text"] or "Error" in after["text"].split("\n")[0]:
            problems.append(f"{name}: the output shows an error: {after['text'][:600]}")
        elif not after["drawn"]:
            problems.append(f"{name}: the new output is not drawn ({after['text'][:300]!r})")
        elif after["print"] == before_print:
            problems.append(f"{name}: moving it from {state['value']!r} to {after_state['value']!r} "
                            "changed nothing the reader sees")
        return True

    n = len(controls())
    if n == 0:
        problems.append(f"{where}: an explorer without controls")
        return
    waiting = [i for i in range(n) if not moved(i)]
    for i in waiting:  # disabled so far: find a setting of the dropdowns/checkboxes that enables it
        done = False
        for j, other in enumerate(controls()):
            if j == i or other["kind"] == "slider" or other["disabled"]:
                continue
            for _ in range(max(other["options"], 2)):
                if not controls()[i]["disabled"]:
                    break
                moved(j)
            if not controls()[i]["disabled"]:
                done = moved(i)
                break
        if not done:
            problems.append(f"{where}: control {controls()[i]['label'] or i!r} was never enabled")


# --------------------------------------------------------------------------- the test
@pytest.mark.parametrize("setup, path", _selected())
def test_live_explorers_respond_in_jupyterlab(setup, path, lab, browser, tmp_path):
    start = time.perf_counter()
    server = lab(setup)
    nb = trimmed_copy(path, server.root)
    problems: list = []
    context = offline_context(browser, problems, viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.on("pageerror", lambda exc: problems.append(f"JS exception: {exc}"))
    where = f"{setup} {path.stem}"
    try:
        # a workspace of its own, reset: only this chapter is open
        page.goto(f"{server.url}/lab/workspaces/{path.stem}/tree/{nb.name}?reset&token={server.token}",
                  wait_until="domcontentloaded")
        page.wait_for_function(f"() => window.jupyterapp && ({_PANEL_JS})({json.dumps(nb.name)})",
                               timeout=120_000)
        run_start = time.perf_counter()
        result = page.evaluate(_RUN_ALL_JS, [nb.name, RUN_TIMEOUT_S * 1000])
        run_s = time.perf_counter() - run_start
        if result["errors"] or result["unrun"]:
            problems.append(f"{where}: running the chapter: errors {result['errors']}, "
                            f"cells not run {result['unrun']}")
        page.wait_for_timeout(500)  # widget views attach after the outputs
        kinds = page.evaluate(_EXPLORERS_JS, {"any": ANY_CONTROL})
        if not kinds:
            problems.append(f"{where}: no live explorer appeared")
        if not all(kinds):
            problems.append(f"{where}: {kinds.count(False)} widget(s) with controls are not "
                            "attn_edu.widgets.live_explorer explorers (no 'attn-edu-explorer' class)")
        drive_start = time.perf_counter()
        for e in range(sum(kinds)):
            _drive_explorer(page, e, problems, f"{where} explorer {e}")
            OUT.mkdir(parents=True, exist_ok=True)
            _explorer(page, e).screenshot(path=str(OUT / f"{setup}-{path.stem}-{e}.png"))
        drive_s = time.perf_counter() - drive_start
        # every plotly figure on the page is drawn (in the server without plotly: by the
        # chapter's own plotly.js), and none says plotly.js is missing
        undrawn = page.evaluate(
            "() => Array.from(document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) "
            ".plotly-graph-div, .jp-NotebookPanel:not(.lm-mod-hidden) .js-plotly-plot'))"
            ".filter(d => !d.querySelector('.main-svg')).length")
        if undrawn:
            problems.append(f"{where}: {undrawn} plotly figure(s) not drawn")
        if page.locator("text=needs plotly.js").count():
            problems.append(f"{where}: a figure says plotly.js is missing")
        total = time.perf_counter() - start
        OUT.mkdir(parents=True, exist_ok=True)
        with open(OUT / "timings.txt", "a") as f:
            f.write(f"{setup} {path.stem}: {total:.1f} s (cells {run_s:.1f} s, "
                    f"{sum(kinds)} explorer(s) driven {drive_s:.1f} s)\n")
        print(f"{where}: {total:.1f} s (cells {run_s:.1f} s, explorers {drive_s:.1f} s)")
    finally:
        try:  # stop this chapter's kernel: the next chapter gets the cores
            page.evaluate(f"() => ({_PANEL_JS})({json.dumps(nb.name)}).sessionContext.shutdown()"
                          ".catch(() => null)")
        except Exception:  # noqa: BLE001
            pass
        context.close()
    assert not problems, "\n".join(problems)


def test_explorer_chapters_are_found():
    """The chapters with explorers are discovered from their code, not listed by hand."""
    found = {p.name[:2] for p in chapters_with_explorers()}
    assert found >= {n for setup in CI_CHAPTERS.values() for n in setup}
    assert len(found) >= 12
