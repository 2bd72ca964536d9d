#!/usr/bin/env python3
"""Propagate the repository URL from ``_config.yml`` to every other place that holds it.

The single source of truth is ``repository.url`` (and ``repository.branch``) in
``_config.yml``. Copies of it live in

* the chapter notebooks (``notebooks/*.ipynb``): the install cell's
  ``git+https://github.com/OWNER/REPO`` (and any ``https://colab.research.google.com/github/...``
  link);
* the Chinese chapters (``notebooks/zh/*.ipynb``), whose code cells are the English ones;
* ``README.md`` and ``README.zh-CN.md``: the Colab badge links ``https://colab.research.google.com/github/OWNER/REPO/blob/BRANCH/...``
  and ``git+https://github.com/OWNER/REPO``;
* ``pyproject.toml``: the GitHub URLs under ``[project.urls]``.

Usage::

    python scripts/set_repo_url.py           # rewrite every copy from _config.yml
    python scripts/set_repo_url.py --check   # exit 1 and list the copies that differ
    python scripts/set_repo_url.py --expect https://github.com/OWNER/REPO
                                             # exit 1 unless repository.url is that repository
                                             # (the publishing workflow's guard, .github/workflows/book.yml)

Only the ``OWNER/REPO`` part (and the branch in Colab links) is rewritten; paths after it
(``/issues``, ``/blob/main/notebooks/...``) are kept.

For testing an install from a local clone, ``repository.url`` may also be a ``file://``
URL (``file:///path/to/clone``): then only the install cells (``git+file:///...``) and
the README's ``git+`` line are rewritten; Colab links and ``[project.urls]`` need a GitHub
repository and are left as they are (tests/test_colab_first_cell.py does this on a copy).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_SLUG = r"[A-Za-z0-9_.-]+"
# git+https://github.com/OWNER/REPO (optionally .git, optionally @ref after it), or git+file:///PATH
GIT_RE = re.compile(
    rf"git\+(?:https://github\.com/{_SLUG}/{_SLUG}?|file://[^\s\"'#@\\]+?)(?=\.git|@|[\"'\s#\\]|$)"
)
#: a local clone, for testing the install cell (see the module docstring)
FILE_RE = re.compile(r"file:///[^\s\"'#@\\]+")
# https://colab.research.google.com/github/OWNER/REPO/blob/BRANCH/
COLAB_RE = re.compile(
    rf"(https://colab\.research\.google\.com/github/){_SLUG}/{_SLUG}(/blob/)[^/\s\"')]+/"
)
# https://github.com/OWNER/REPO followed by a path, a quote or the end
GITHUB_RE = re.compile(rf"https://github\.com/{_SLUG}/{_SLUG}?(?=[/\"'\s#]|$)")


def read_config(root: Path = ROOT) -> tuple[str, str]:
    """Return (repository url without trailing slash or .git, branch) from _config.yml."""
    text = (root / "_config.yml").read_text(encoding="utf-8")
    try:
        import yaml  # noqa: PLC0415

        repo = (yaml.safe_load(text) or {}).get("repository") or {}
        url, branch = repo.get("url"), repo.get("branch") or "main"
    except ImportError:  # a bare python3 without PyYAML: a minimal parser for this block
        block = re.search(r"^repository:\s*\n((?:[ \t]+.*\n?)*)", text, re.M)
        fields = dict(re.findall(r"^[ \t]+(\w+)\s*:\s*(\S+)", block.group(1), re.M)) if block else {}
        url, branch = fields.get("url"), fields.get("branch", "main")
    if not url:
        raise SystemExit("set_repo_url.py: _config.yml has no repository.url")
    url = str(url).strip().strip("\"'").rstrip("/")
    url = url[:-4] if url.endswith(".git") else url
    if not (re.fullmatch(rf"https://github\.com/{_SLUG}/{_SLUG}", url) or FILE_RE.fullmatch(url)):
        raise SystemExit(
            f"set_repo_url.py: repository.url must look like https://github.com/OWNER/REPO "
            f"(Colab opens notebooks from GitHub), or file:///PATH for a local clone; got {url!r}"
        )
    return url, str(branch).strip().strip("\"'")


def _owner_repo(url: str) -> str:
    return url.split("github.com/", 1)[1]


def rewrite_notebook(text: str, url: str, branch: str) -> str:
    text = GIT_RE.sub(lambda m: f"git+{url}", text)
    if url.startswith("file://"):  # Colab cannot open a local clone: links stay
        return text
    return COLAB_RE.sub(lambda m: f"{m.group(1)}{_owner_repo(url)}{m.group(2)}{branch}/", text)


def rewrite_readme(text: str, url: str, branch: str) -> str:
    return rewrite_notebook(text, url, branch)


def rewrite_pyproject(text: str, url: str, branch: str) -> str:
    """Rewrite GitHub URLs inside the [project.urls] table only (not for a local clone)."""
    if url.startswith("file://"):
        return text
    out, in_urls = [], False
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            in_urls = stripped == "[project.urls]"
        elif in_urls:
            line = GITHUB_RE.sub(url, line)
        out.append(line)
    return "".join(out)


def targets(root: Path = ROOT):
    """Yield (path, rewrite function) for every file that holds a copy of the URL."""
    for nb in sorted((root / "notebooks").glob("*.ipynb")) + sorted((root / "notebooks" / "zh").glob("*.ipynb")):
        yield nb, rewrite_notebook
    for readme in ("README.md", "README.zh-CN.md"):
        if (root / readme).exists():
            yield root / readme, rewrite_readme
    if (root / "pyproject.toml").exists():
        yield root / "pyproject.toml", rewrite_pyproject


def _diff_lines(old: str, new: str) -> list[str]:
    """For each changed line: a window around the first difference, old and new."""
    out = []
    for i, (a, b) in enumerate(zip(old.splitlines(), new.splitlines()), 1):
        if a == b:
            continue
        k = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        lo = max(0, k - 60)
        out.append(f"    line {i}: ...{a[lo:k + 60]}...\n         -> ...{b[lo:k + 60]}...")
    return out


def expect(url: str, expected: str) -> int:
    """0 when ``url`` is the repository ``expected`` (GitHub names ignore case), else 1 and why."""
    expected = expected.strip().rstrip("/")
    expected = expected[:-4] if expected.endswith(".git") else expected
    if url.lower() == expected.lower():
        print(f"repository.url is this repository ({url})")
        return 0
    print(
        f"_config.yml's repository.url is {url}, but this is {expected}: every chapter's first "
        f"cell installs attn_edu from repository.url, so a book published from here would have "
        f"readers install another repository's code. Set repository.url to {expected} and run "
        f"python scripts/set_repo_url.py.",
        file=sys.stderr,
    )
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report mismatches (exit 1)")
    parser.add_argument("--expect", metavar="URL",
                        help="exit 1 unless repository.url is this repository (case-insensitive)")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    url, branch = read_config(args.root)
    if args.expect is not None:
        return expect(url, args.expect)
    mismatched = []
    for path, rewrite in targets(args.root):
        old = path.read_text(encoding="utf-8")
        new = rewrite(old, url, branch)
        if new == old:
            continue
        mismatched.append(path)
        rel = path.relative_to(args.root)
        if args.check:
            print(f"{rel}: repository URL differs from _config.yml ({url}, branch {branch})")
            print("\n".join(_diff_lines(old, new)))
        else:
            path.write_text(new, encoding="utf-8")
            print(f"updated {rel}")
    if args.check and mismatched:
        print(
            f"\n{len(mismatched)} file(s) out of date; run: python scripts/set_repo_url.py",
            file=sys.stderr,
        )
        return 1
    if not mismatched:
        print(f"every copy of the repository URL matches _config.yml ({url}, branch {branch})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
