"""Sphinx glue for the posenc site: the book's figures as image files, not inline data.

Every matplotlib figure of a chapter is displayed as an HTML ``<picture>`` (class
``posenc-figure``, :func:`posenc.book.plotting.figure_html`) with two drawings: a narrow one
for phones and the book-width one, each a ``data:`` URI so that the notebook stays one file on
Colab and Jupyter. Inline on the site, both would be downloaded with the page, twice the
bytes a reader needs. This writes each drawing to ``_images/`` under a name made from its
content (so equal figures share a file and parallel writes agree) and points the picture at
it: a browser then fetches only the drawing its screen selects.
"""

import base64
import hashlib
import re
from pathlib import Path

from docutils import nodes

PICTURE = 'class="posenc-figure"'
DATA_URI = re.compile(r'(?P<attr>src|srcset)="data:image/png;base64,(?P<data>[A-Za-z0-9+/=]+)"')


def figures_to_files(app, doctree, docname):
    if app.builder.format != "html":
        return
    images = Path(app.outdir) / "_images"
    prefix = "../" * docname.count("/") + "_images/"

    def to_file(match):
        png = base64.b64decode(match.group("data"))
        name = f"posenc-figure-{hashlib.sha256(png).hexdigest()[:20]}.png"
        path = images / name
        if not path.exists():
            images.mkdir(parents=True, exist_ok=True)
            path.write_bytes(png)
        return f'{match.group("attr")}="{prefix}{name}"'

    for raw in doctree.findall(nodes.raw):
        if "html" in raw.get("format", "").split() and PICTURE in raw.astext():
            text = DATA_URI.sub(to_file, raw.astext())
            raw.children = [nodes.Text(text)]
            raw.rawsource = text


def setup(app):
    app.connect("doctree-resolved", figures_to_files)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
