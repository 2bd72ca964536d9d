"""Lighthouse audit of the built book, next to a page of a fresh `jupyter-book create` book.

A benchmark, not a test (the numbers depend on the machine): run it through
``bash scripts/web-audit.sh``, which installs the pinned Lighthouse from npm first.

It serves ``_build/html`` (and the baseline book) from 127.0.0.1 with gzip, as a static
host serves it, and runs Lighthouse with the system Chromium on every page of the
book's table of contents, with Lighthouse's mobile profile (its default: simulated slow
4G, 4x slower CPU) and its desktop profile, one run at a time. It prints one row per page
and profile: the four Lighthouse scores (performance, accessibility, best practices,
SEO), first and largest contentful paint, total blocking time, cumulative layout shift and
the total byte weight
(what a first visit downloads before the reader scrolls), Lighthouse's CPU benchmark of the
machine at that moment (``environment.benchmarkIndex``: higher is faster; a busier or slower
machine gives every page more blocking time), and the same for the
baseline page (``notebooks.html`` of ``jupyter-book create``: MathJax and a matplotlib
figure) in the same run.

    python scripts/web_audit.py [--html _build/html] [--pages 05 intro] [--profiles mobile desktop]
                                [--runs 3] [--no-baseline] [--json out.json]

``--runs N`` audits each page N times in turn and reports its median run (the run closest
to the medians of LCP and TBT, as Lighthouse's own ``computeMedianRun`` picks one), with
the range of the performance score over the runs: one run of a page near a threshold
swings by a few points (the Chinese chapter 08: LCP 2.9 s, then 2.3 s, on a quiet machine).
"""
from __future__ import annotations

import argparse
import functools
import gzip
import http.server
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / ".web-tools"
LIGHTHOUSE = TOOLS / "lighthouse" / "node_modules" / "lighthouse" / "cli" / "index.js"
BASELINE_DIR = ROOT / "_build" / "web-audit" / "baseline"
BASELINE_PAGE = "notebooks.html"
GZIP_TYPES = ("text/", "application/javascript", "application/json", "image/svg+xml",
              "application/xml")


class GzipHandler(http.server.SimpleHTTPRequestHandler):
    """Static files, gzip-compressed when the client accepts it (text, JS, JSON, SVG)."""

    def log_message(self, *args):
        pass

    def send_head(self):  # noqa: D401  (http.server's hook)
        path = self.translate_path(self.path)
        ctype = self.guess_type(path)
        if (os.path.isdir(path) or "gzip" not in self.headers.get("Accept-Encoding", "")
                or not ctype.startswith(GZIP_TYPES) or not os.path.isfile(path)):
            return super().send_head()
        with open(path, "rb") as f:
            body = gzip.compress(f.read(), compresslevel=6)
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        return io.BytesIO(body)


def serve(directory: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(GzipHandler, directory=str(directory))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


def toc_pages() -> list[str]:
    """Every page of both editions: the English at the root, the Chinese under zh/ (the
    same thresholds apply to both)."""
    from site_pages import toc_files  # scripts/site_pages.py: the one toc walker

    pages = [f + ".html" for f in toc_files(ROOT)]
    return pages + ["zh/" + p for p in pages]


def build_baseline() -> Path:
    """A fresh ``jupyter-book create`` book, built once (kept in _build/web-audit/)."""
    html = BASELINE_DIR / "_build" / "html"
    if (html / BASELINE_PAGE).is_file():
        return html
    jb = Path(sys.executable).with_name("jupyter-book")
    jb_cmd = str(jb) if jb.exists() else shutil.which("jupyter-book")
    if BASELINE_DIR.exists():
        shutil.rmtree(BASELINE_DIR)
    BASELINE_DIR.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([jb_cmd, "create", str(BASELINE_DIR)], check=True, capture_output=True)
    subprocess.run([jb_cmd, "build", str(BASELINE_DIR)], check=True, capture_output=True)
    return html


def lighthouse(url: str, profile: str, chromium: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        cmd = ["node", str(LIGHTHOUSE), url, "--output=json", f"--output-path={out}", "--quiet",
               "--only-categories=performance,accessibility,best-practices,seo",
               "--chrome-flags=--headless=new --no-sandbox --disable-gpu"]
        if profile == "desktop":
            cmd.append("--preset=desktop")
        env = dict(os.environ, CHROME_PATH=chromium)
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        if not out.is_file():
            raise RuntimeError(f"lighthouse failed on {url}: {proc.stderr[-2000:]}")
        report = json.loads(out.read_text())
    audits, cats = report["audits"], report["categories"]

    def num(key):
        return audits.get(key, {}).get("numericValue")

    return {
        "performance": round(100 * (cats["performance"]["score"] or 0)),
        "accessibility": round(100 * (cats["accessibility"]["score"] or 0)),
        "best-practices": round(100 * (cats["best-practices"]["score"] or 0)),
        "seo": round(100 * (cats["seo"]["score"] or 0)),
        "fcp_s": num("first-contentful-paint") / 1000,
        "lcp_s": num("largest-contentful-paint") / 1000,
        "tbt_ms": num("total-blocking-time"),
        "cls": round(num("cumulative-layout-shift") or 0, 3),
        "bytes": num("total-byte-weight"),
        "failed_a11y": sorted(k for k, a in audits.items()
                              if a.get("score") == 0 and k in _a11y_ids(report)),
        "cpu_index": round((report.get("environment") or {}).get("benchmarkIndex") or 0),
    }


def median_run(runs: list[dict]) -> dict:
    """The run closest to the medians of LCP and of TBT (relative distances summed), with
    ``perf_range``: the lowest and highest performance score of all runs."""
    def median(key):
        values = sorted(r[key] for r in runs)
        return values[len(values) // 2] if len(values) % 2 else sum(values[len(values) // 2 - 1:][:2]) / 2

    lcp, tbt = median("lcp_s"), median("tbt_ms")
    best = min(runs, key=lambda r: abs(r["lcp_s"] - lcp) / max(lcp, 1e-9) + abs(r["tbt_ms"] - tbt) / max(tbt, 50.0))
    perfs = [r["performance"] for r in runs]
    return {**best, "perf_range": [min(perfs), max(perfs)], "runs": len(runs)}


def machine_line(rows: list[dict]) -> str:
    """How fast the machine was while it audited (Lighthouse's CPU benchmark of each reported
    run): compare it across runs before comparing their scores."""
    index = [r["cpu_index"] for r in rows if r.get("cpu_index")]
    if not index:
        return "Lighthouse reported no CPU benchmark for this machine"
    index.sort()
    return (f"Lighthouse's CPU benchmark of this machine during the run (higher is faster): "
            f"{index[0]}-{index[-1]}, median {index[len(index) // 2]}")


def _a11y_ids(report: dict) -> set:
    return {ref["id"] for ref in report["categories"]["accessibility"]["auditRefs"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--html", type=Path, default=ROOT / "_build" / "html")
    ap.add_argument("--pages", nargs="*", help="only pages whose path contains one of these")
    ap.add_argument("--profiles", nargs="*", default=["mobile", "desktop"],
                    choices=["mobile", "desktop"])
    ap.add_argument("--runs", type=int, default=1, help="audit each page this many times; report the median run")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--json", type=Path, help="also write every row as JSON here")
    ap.add_argument("--chromium", default=os.environ.get("ATTN_EDU_CHROMIUM", "/usr/bin/chromium"))
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error(f"--runs must be at least 1; got {args.runs}")
    if not LIGHTHOUSE.is_file():
        print(f"{LIGHTHOUSE} is missing: run scripts/web-audit.sh (it installs Lighthouse)",
              file=sys.stderr)
        return 2
    pages = toc_pages()
    if args.pages:
        pages = [p for p in pages if any(s in p for s in args.pages)]
    targets = [("book", p) for p in pages]
    servers = {"book": serve(args.html.resolve())}
    if not args.no_baseline:
        servers["baseline"] = serve(build_baseline())
        targets.append(("baseline", BASELINE_PAGE))
    rows = []
    head = ("| page | profile | perf | a11y | best pr. | SEO | FCP s | LCP s | TBT ms | CLS | KB |"
            " CPU index | failed a11y audits |" + (f" perf over {args.runs} runs |" if args.runs > 1 else ""))
    print(head)
    print("|" + " --- |" * (head.count("|") - 1))
    for profile in args.profiles:
        for book, page in targets:
            url = f"{servers[book][1]}/{page}"
            r = median_run([lighthouse(url, profile, args.chromium) for _ in range(args.runs)])
            name = page if book == "book" else f"baseline: jupyter-book create / {page}"
            rows.append({"page": name, "profile": profile, **r})
            spread = f" {r['perf_range'][0]}-{r['perf_range'][1]} |" if args.runs > 1 else ""
            print(f"| {name} | {profile} | {r['performance']} | {r['accessibility']} | "
                  f"{r['best-practices']} | {r['seo']} | {r['fcp_s']:.1f} | {r['lcp_s']:.1f} | "
                  f"{r['tbt_ms']:.0f} | {r['cls']:.3f} | {r['bytes'] / 1024:.0f} | {r['cpu_index']} | "
                  f"{', '.join(r['failed_a11y'])} |"
                  + spread, flush=True)
    for httpd, _ in servers.values():
        httpd.shutdown()
    print(machine_line(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
