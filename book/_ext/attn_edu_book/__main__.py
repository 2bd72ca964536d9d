"""Finish built pages again after an edit of book.css, figures.js or zoom.js, without a build:
they are copied into the site, then the finish step runs over its HTML files as a build ends.

    python book/_ext/attn_edu_book _build/html
"""
import sys
from pathlib import Path

if not __package__:  # run as a folder: its parent, not the folder itself, goes on sys.path
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import shutil  # noqa: E402

from attn_edu_book._common import STATIC_SRC  # noqa: E402
from attn_edu_book.pages import finish_html  # noqa: E402

for _name in ("book.css", "figures.js", "zoom.js"):  # the build copies them; so does this
    shutil.copyfile(STATIC_SRC / "attn-edu" / _name, Path(sys.argv[1]) / "_static" / "attn-edu" / _name)
finish_html(Path(sys.argv[1]))
