"""Images when they are needed: every image after a page's introduction loads lazily, every PNG
keeps its box while it loads (its width and height), an explorer's inline image becomes a file,
and a figure opens full size: a first visit downloads only what is near the screen, nothing moves.

* **Lazy** (:func:`lazy_images`, :func:`lazy_header_images`): ``loading="lazy"`` on
  every image of the page from its first second-level section on, and on the theme's
  images before the article (the launch menu's logos).
* **Sized** (:func:`sized_images`, when the pages are written; :func:`external_images` for
  an image that was a ``data:`` URI of the page): ``width`` and ``height`` from the PNG.
* **Zoomable** (:func:`zoomable_images`): each figure image a link that ``zoom.js``
  (:data:`ZOOM_JS`) opens in a dialog.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

#: the small deferred script that opens a figure image at full size (a <dialog>)
ZOOM_JS = "attn-edu/zoom.js"
#: the id of the page's one description of what a figure's link does
ZOOM_HINT_ID = "attn-edu-zoom-hint"


def lazy_header_images(text: str) -> str:
    """The theme's images before the article (the launch menu's logos, hidden in a menu)
    load when they are shown."""
    cut = text.find("<article")
    if cut < 0:
        return text
    head = re.sub(r"<img (?![^>]*\bloading=)", '<img loading="lazy" ', text[:cut])
    return head + text[cut:]


_TEXT_PX_CLASS_RE = re.compile(r'\s*\battn-edu-textpx-(\d+)\b')
_CONTENT_IMG_RE = re.compile(r'<img (?P<attrs>[^>]*\bsrc="(?P<src>[^"]*_images/[^"]+)"[^>]*)>')


def zoomable_images(body: str) -> tuple[str, int]:
    """Every figure image of the page (``_images/``) becomes a link to itself, which
    ``zoom.js`` opens at full size in a dialog (with its alt text); without JavaScript the
    link opens the image. A notebook image's smallest text size (in image pixels, from
    :func:`attn_edu.alt_text.figure_text_px`, carried as a class by :class:`.figures.BookMimePlugin`)
    becomes ``data-text-px``. Also says how many images it wrapped."""
    count = 0

    def wrap(m: re.Match) -> str:
        nonlocal count
        attrs = m.group("attrs").rstrip(" /")
        px = _TEXT_PX_CLASS_RE.search(attrs)
        if px:
            attrs = _TEXT_PX_CLASS_RE.sub("", attrs).replace(' class=""', "")
            attrs += f' data-text-px="{int(px.group(1)) / 10:g}"'
        before = body[max(0, m.start() - 200):m.start()]
        if re.search(r"<a\b[^>]*>\s*$", before):  # already a link (an image with a target)
            return f"<img {attrs} />"
        count += 1
        return (f'<a class="attn-edu-zoom" href="{m.group("src")}" aria-describedby="{ZOOM_HINT_ID}">'
                f'<img {attrs} /></a>')

    body = _CONTENT_IMG_RE.sub(wrap, body)
    if count:
        body += (f'<span id="{ZOOM_HINT_ID}" hidden>Opens the figure at full size; '
                 f'Escape closes it.</span>')
    return body, count


_DATA_IMG_RE = re.compile(r'(<img\b[^>]*\bsrc=")data:image/(?P<ext>png|jpeg|gif|webp);base64,(?P<data>[A-Za-z0-9+/=\s]+)(")')


def external_images(body: str, pagename: str, outdir: Path | None) -> str:
    """An image written into the page as a ``data:`` URI (an explorer's static stand-in,
    :func:`attn_edu.widgets._static_html`, up to 100 KB of base64 on a chapter page)
    becomes a file of ``_images/``, named by its content as Sphinx names a notebook's
    images: the page a phone downloads first is smaller by it, the image loads lazily like
    every other figure (:func:`lazy_images`) and opens full size (:func:`zoomable_images`).
    A PNG gets its ``width`` and ``height``: the page keeps its box while it loads (it loads
    lazily, and what is below it would move). An English page and its Chinese twin name the
    same image alike."""
    if outdir is None:
        return body
    import base64  # noqa: PLC0415

    prefix = "../" * pagename.count("/")

    def swap(m: re.Match) -> str:
        data = base64.b64decode("".join(m.group("data").split()))
        name = hashlib.sha256(data).hexdigest() + "." + m.group("ext").replace("jpeg", "jpg")
        path = Path(outdir) / "_images" / name
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        size = _png_size(data)  # its box is reserved before it loads
        size = f' width="{size[0]}" height="{size[1]}"' if size else ""
        return f"{m.group(1)}{prefix}_images/{name}{m.group(4)}{size}"

    return _DATA_IMG_RE.sub(swap, body)


def _png_size(head: bytes) -> tuple[int, int] | None:
    """A PNG's width and height in pixels, from the first 24 bytes of the file (its IHDR
    chunk); None for anything that is not a PNG."""
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


_UNSIZED_IMG_RE = re.compile(r'<img (?![^>]*\bwidth=)(?P<attrs>[^>]*\bsrc="(?P<src>[^":]*_images/[^"]+\.png)"[^>]*)>')


def sized_images(text: str, page: Path) -> str:
    """Every PNG figure of a written page gets its ``width`` and ``height`` (book.css keeps it
    fluid: ``height: auto``): the browser reserves its box before it arrives. The figures load
    lazily (:func:`lazy_images`), and without their sizes each one that arrived moved every
    heading, paragraph and slider below it while the reader was reading or about to click."""
    def size(m: re.Match) -> str:
        path = os.path.normpath(page.parent / m.group("src"))
        try:
            with open(path, "rb") as f:
                wh = _png_size(f.read(24))
        except OSError:
            return m.group(0)
        if wh is None:
            return m.group(0)
        attrs = m.group("attrs").rstrip(" /")
        return f'<img {attrs} width="{wh[0]}" height="{wh[1]}" />'

    return _UNSIZED_IMG_RE.sub(size, text)


def lazy_images(body: str) -> str:
    """Every image of the page after its introduction (from the first second-level section
    on) loads when it comes near the viewport: a first visit downloads only what is near
    the screen, and no figure far below competes with the text for a phone's bandwidth."""
    starts = [m.start() for m in re.finditer(r"<section\b", body)]
    intro_end = starts[1] if len(starts) > 1 else len(body)

    def lazy(m: re.Match) -> str:
        return m.group(0) if m.start() < intro_end else '<img loading="lazy" decoding="async" '

    return re.sub(r"<img (?![^>]*\bloading=)", lazy, body)

