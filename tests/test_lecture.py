"""The lecture pipeline (issue 41): a chapter's figure glued with its slide drawing
(posenc.book.plotting.glue_figure), and the builder posenc.book.lecture."""

from __future__ import annotations

import base64

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from posenc.book import plotting  # noqa: E402
from posenc.book.slide_figure import (  # noqa: E402
    SLIDE_FIGURE_BOX,
    SLIDE_MIN_TEXT_PX,
    slide_css_width,
    slide_png,
)


def _glued(name, fig):
    """The outputs ``glue_figure(name, fig)`` displays, captured from an IPython shell."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    InteractiveShell.instance()
    with capture_output() as captured:
        plotting.glue_figure(name, fig)
    return captured.outputs


def _book_figure(ncols=1, nrows=1, legend_outside=False):
    plotting.use_style()
    fig, axes = plotting.figure(nrows, ncols)
    for ax in fig.axes:
        ax.plot([0, 1], [0, 2], label="a line")
        ax.set(xlabel="position m", ylabel="angle (rad)", title="a title")
    if legend_outside:
        fig.axes[-1].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def _shown_text_px(png: bytes) -> float:
    """The smallest text of a slide drawing as the deck shows it: at the width the deck
    gives the image (slide_css_width)."""
    meta = plotting.png_text_metadata(png)
    return plotting.displayed_text_px(
        meta["font_pt_min"], meta["dpi"], meta["natural_px"], slide_css_width(png)
    )


def test_glue_figure_displays_the_books_figure_and_its_slide_drawing_labelled_for_myst_nb():
    fig = _book_figure(ncols=2, legend_outside=True)
    (output,) = _glued("rope-test-figure", fig)
    # what myst_nb.glue writes (myst_nb/ext/glue/__init__.py), so that {glue} finds it
    assert output.metadata == {"scrapbook": {"name": "rope-test-figure", "mime_prefix": ""}}
    assert set(output.data) == {"text/plain", "text/html", "image/png", plotting.SLIDE_MIME}
    assert plotting.SLIDE_MIME == "application/vnd.posenc.slide-png+base64"
    assert output.data["text/html"].startswith('<picture class="posenc-figure">')
    page = plotting.png_text_metadata(base64.b64decode(output.data["image/png"]))
    assert page["font_pt_min"] == plotting.MIN_FONT_PT  # the book's drawing, unchanged
    slide = base64.b64decode(output.data[plotting.SLIDE_MIME])
    assert _shown_text_px(slide) >= SLIDE_MIN_TEXT_PX
    assert not plt.fignum_exists(fig.number)  # closed: the inline backend shows it once


@pytest.mark.parametrize("shape", [(1, 1, False), (1, 2, True), (3, 1, False), (2, 2, True)])
def test_a_slide_drawing_fits_the_slide_with_its_text_at_least_18_px(shape):
    nrows, ncols, outside = shape
    fig = _book_figure(ncols, nrows, outside)
    before = (tuple(fig.get_size_inches()), plotting.smallest_font_pt(fig))
    png = slide_png(fig)
    width = slide_css_width(png)
    meta = plotting.png_text_metadata(png)
    height = meta["natural_px"] and width * _png_height(png) / meta["natural_px"]
    assert width <= SLIDE_FIGURE_BOX[0] + 1 and height <= SLIDE_FIGURE_BOX[1] + 1
    assert _shown_text_px(png) >= SLIDE_MIN_TEXT_PX
    # it fills the box in one direction at least (a slide figure is not a thumbnail)
    assert max(width / SLIDE_FIGURE_BOX[0], height / SLIDE_FIGURE_BOX[1]) > 0.8
    # the chapter's figure is left as it was
    assert (tuple(fig.get_size_inches()), plotting.smallest_font_pt(fig)) == before
    plt.close(fig)


def _png_height(png: bytes) -> int:
    import io

    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        return image.size[1]


def test_a_label_that_is_not_kebab_case_and_a_figure_without_text_are_refused():
    fig = _book_figure()
    with pytest.raises(ValueError, match="'Rope_Fig' is not kebab-case"):
        plotting.glue_figure("Rope_Fig", fig)
    plt.close(fig)
    bare = plt.figure()
    bare.add_subplot().set_axis_off()
    with pytest.raises(ValueError, match="no visible text"):
        slide_png(bare)
    plt.close(bare)
