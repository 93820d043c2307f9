"""nbconvert configuration of the lecture decks: `make slides` runs

    jupyter nbconvert --config book/_slides/nbconvert_config.py

after the book build. Every chapter notebook of _toc.yml, with the outputs that build stored in its
execution cache, becomes a reveal.js deck _build/html/slides/<chapter>.slides.html that
loads reveal.js and MathJax from the site's own _static/ (see templates/posenc_slides), so decks
work offline.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from posenc_slides import HERE, ROOT, BookToSlides, chapter_notebooks  # noqa: E402

c = get_config()  # noqa: F821 — provided by traitlets when nbconvert loads this file
c.NbConvertApp.notebooks = chapter_notebooks()
c.NbConvertApp.export_format = "slides"
c.FilesWriter.build_directory = str(ROOT / "_build" / "html" / "slides")
c.SlidesExporter.extra_template_basedirs = [str(HERE / "templates")]
c.SlidesExporter.template_name = "posenc_slides"
c.SlidesExporter.preprocessors = [BookToSlides]
c.SlidesExporter.exclude_input_prompt = True
c.SlidesExporter.exclude_output_prompt = True
c.SlidesExporter.reveal_url_prefix = "../_static/reveal.js"
c.SlidesExporter.mathjax_url = "../_static/mathjax/es5/tex-chtml.js"
c.SlidesExporter.reveal_theme = "white"
c.SlidesExporter.reveal_width = "1280"
c.SlidesExporter.reveal_height = "800"
