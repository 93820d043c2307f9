import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from posenc.book.plotting import memory_plot, perplexity_plot  # noqa: E402


def test_length_axes_are_labelled_with_the_lengths():
    fig, (a, b) = plt.subplots(1, 2)
    memory_plot(a, [128, 256, 512], {"path": [0.0, 1.0, 4.0]})
    perplexity_plot(b, {"s": {64: 5.0, 128: 6.0}}, train_len=64)
    assert [t.get_text() for t in a.get_xticklabels()] == ["128", "256", "512"]
    assert [t.get_text() for t in b.get_xticklabels()] == ["64", "128"]
    assert min(a.get_lines()[0].get_ydata()) == 2**-10  # 0 MiB drawn at the 1 KiB floor
    plt.close(fig)


def test_interval_plot_draws_the_interval_of_each_scheme():
    import pandas as pd

    from posenc.book.plotting import interval_plot

    rows = [
        ("a", 64, 64, "language_modeling", "loss_sliding", 2.0, 1.9, 2.2, 3),
        ("a", 64, 128, "language_modeling", "loss_sliding", 2.5, 2.4, 2.6, 3),
        ("b", 64, 64, "language_modeling", "loss_sliding", 3.0, float("nan"), float("nan"), 1),
        ("a", 256, 256, "language_modeling", "loss_sliding", 9.0, 8.0, 10.0, 3),
    ]
    columns = ["scheme", "train_length", "eval_length", "task", "metric", "mean", "lower", "upper", "n"]
    fig, ax = plt.subplots()
    interval_plot(ax, pd.DataFrame(rows, columns=columns), train_length=64)
    bars = [c for c in ax.containers]
    assert len(bars) == 2  # one error-bar series per scheme of this training length
    (line_a, caps, (segments,)) = bars[0]
    assert list(line_a.get_ydata()) == [2.0, 2.5]
    lows = sorted(seg[0][1] for seg in segments.get_segments())
    assert lows == pytest.approx([1.9, 2.4])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["64", "128"]
    plt.close(fig)


def test_figures_are_the_columns_width_and_record_their_smallest_text():
    from posenc.book import plotting

    plotting.use_style()
    fig, ax = plotting.figure()
    assert tuple(fig.get_size_inches()) == (plotting.FIGURE_WIDTH, plotting.PANEL_HEIGHT)
    ax.plot([0, 1], [0, 1], label="a line")
    ax.set(xlabel="x", ylabel="y", title="title")
    ax.legend()
    ax.text(0.5, 0.5, "small", fontsize=7)
    ax.text(0.2, 0.2, "", fontsize=3)  # empty text is not drawn and does not count
    assert plotting.smallest_font_pt(fig) == 7
    meta = plotting.png_text_metadata(plotting.figure_png(fig, dpi=100))
    assert meta["font_pt_min"] == 7 and meta["dpi"] == 100
    assert abs(meta["natural_px"] - 100 * plotting.FIGURE_WIDTH) < 0.15 * 100 * plotting.FIGURE_WIDTH
    plt.close(fig)
    # without the text of size 7, the smallest is the tick labels' and legend's size
    fig, ax = plotting.figure(1, 2)
    ax[0].plot([0, 1])
    ax[1].set_visible(False)
    assert plotting.smallest_font_pt(fig) == plotting.MIN_FONT_PT
    plt.close(fig)
    with pytest.raises(ValueError, match="ncols=3"):
        plotting.figure(1, 3)


def test_text_as_displayed():
    from posenc.book import plotting

    # 10-pt text at 150 dpi in a 6-inch (900-px) figure shown 690 px wide
    assert plotting.displayed_text_px(10, 150, 900, 690) == pytest.approx(10 * 690 / (72 * 6))
    # the book's smallest text in the column is comfortably above the goal
    shown = plotting.displayed_text_px(plotting.MIN_FONT_PT, 150, 150 * plotting.FIGURE_WIDTH, plotting.COLUMN_PX)
    assert shown >= plotting.MIN_TEXT_PX * 1.3
    assert plotting.png_text_metadata(_plain_png()) is None


def _plain_png() -> bytes:
    import io

    fig, ax = plt.subplots()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def test_each_scheme_has_one_style_and_one_name_and_figures_never_share_a_colour():
    from posenc.book.plotting import SCHEME_NAMES, SCHEME_STYLES
    from posenc.experiments.study_grid import main_labels

    assert set(SCHEME_NAMES) == set(SCHEME_STYLES)
    pairs = [(s["color"], s["marker"]) for s in SCHEME_STYLES.values()]
    assert len(set(pairs)) == len(pairs)  # no two schemes look alike
    study = ["none", "alibi", "learned", "sinusoidal", "shaw", "transformer_xl", "t5", "deberta",
             "rope", "xpos", "fire", "kerple, log"]
    assert set(main_labels(study, 64)) <= set(SCHEME_STYLES)
    assert len(set(SCHEME_NAMES.values())) == len(SCHEME_NAMES)  # nor share a name
    for group in DRAWN_TOGETHER:
        colours = [SCHEME_STYLES[s]["color"] for s in group]
        assert len(set(colours)) == len(colours), group


#: The schemes and methods each figure of the book draws together (the study's figures
#: in the ALiBi chapter, the second edition and the tour; the context-extension,
#: remapping and temperature methods in the tour, context extension, real-model,
#: RoPE-variants and remapping chapters; the remapping chapter's table of nine, should it
#: become a figure; the temperatures' table of four).
DRAWN_TOGETHER = [
    ["alibi", "shaw", "transformer_xl", "t5", "deberta", "sinusoidal", "learned", "none"],
    ["none", "sinusoidal", "learned", "rope", "xpos"],
    ["none", "alibi", "shaw", "transformer_xl", "t5", "deberta", "kerple, log", "fire"],
    ["alibi", "deberta", "rope", "fire", "kerple, log"],
    ["sinusoidal", "rope", "none", "alibi", "transformer_xl"],
    ["linear", "ntk", "yarn"],
    ["default", "linear", "yarn"],
    ["linear", "ntk", "dynamic", "yarn", "llama3"],
    ["default", "linear", "ntk", "dynamic", "yarn", "llama3"],
    ["default", "linear", "ntk", "dynamic", "yarn", "llama3", "self_extend", "dual_chunk", "rerope"],
    ["longrope", "linear", "ntk"],
    ["yarn", "logn", "llama4", "ssmax"],
]
#: The chapters that draw context-extension, remapping or temperature methods.
METHOD_CHAPTERS = ["tour", "context_extension", "rope_real_model", "rope_variants", "remapping"]


def test_methods_drawn_together_differ_in_marker_too():
    from posenc.book.plotting import SCHEME_STYLES

    for group in DRAWN_TOGETHER[5:]:
        markers = [SCHEME_STYLES[s]["marker"] for s in group]
        assert len(set(markers)) == len(markers), group


def test_figures_of_methods_take_their_style_from_the_one_map():
    """Every code cell of these chapters that draws a context-extension, remapping or
    temperature method styles it from SCHEME_STYLES, not from a palette of its own."""
    import json
    import re
    from pathlib import Path

    import posenc.layers.remapped_schemes  # noqa: F401  (registers the remapping methods)
    from posenc.book.plotting import SCHEME_STYLES
    from posenc.scaling import ROPE_TYPES
    from posenc.schemes import available_schemes
    from posenc.temperature import TEMPERATURE_TYPES

    methods = [*ROPE_TYPES, *available_schemes("attention"), *TEMPERATURE_TYPES]
    assert {"self_extend", "dual_chunk", "rerope"} <= set(methods)
    assert set(methods) - {"proportional"} <= set(SCHEME_STYLES)  # every method has a style
    draws = re.compile(r"\.(plot|semilogy|semilogx|loglog|errorbar|scatter)\(|perplexity_plot\(|interval_plot\(")
    names = "|".join(m for m in methods if m != "proportional")
    mentions = re.compile(rf'"({names})"|scaling_methods\(|pretrained_study\.methods\(|_query_scale\(')
    book = Path(__file__).resolve().parents[1] / "book"
    checked = 0
    for chapter in METHOD_CHAPTERS:
        cells = json.loads((book / f"{chapter}.ipynb").read_text(encoding="utf-8"))["cells"]
        for cell in cells:
            source = "".join(cell["source"])
            if cell["cell_type"] != "code" or not (draws.search(source) and mentions.search(source)):
                continue
            checked += 1
            assert "SCHEME_STYLES[" in source, (chapter, cell.get("id"))
            assert "OKABE_ITO[" not in source and "MARKERS[" not in source, (chapter, cell.get("id"))
    assert checked >= 7  # the figures changed for issue 39


def test_a_figure_is_drawn_again_for_a_phone_with_its_text_legible_there():
    """figure_html: a <picture> whose narrow source phones get, both PNGs with their text
    metadata; the phone's drawing shows the smallest text at MIN_TEXT_PX or more in a phone's
    column, where the wide drawing would not; the figure keeps its own size; decks take the PNG."""
    import base64
    import re
    import sys
    from pathlib import Path

    from posenc.book import plotting

    plotting.use_style()
    fig, axes = plotting.figure(1, 2)
    for ax in axes:
        ax.plot(range(100), label="a series")
        ax.set(xlabel="position m", ylabel="score", title="a panel")
        ax.legend()
    # a legend beside its panel, as several chapters place one: under the panel on a phone
    beside = axes[1].legend(loc="upper left", bbox_to_anchor=(1.02, 1))
    fig.canvas.draw()
    where = beside.get_window_extent().bounds
    out = plotting.figure_html(fig)
    assert tuple(fig.get_size_inches()) == (plotting.FIGURE_WIDTH, plotting.PANEL_HEIGHT)
    fig.canvas.draw()
    assert beside.get_window_extent().bounds == pytest.approx(where, abs=0.5) and beside.get_in_layout()  # restored
    picture = re.fullmatch(
        r'<picture class="posenc-figure"><source media="([^"]+)" srcset="data:image/png;base64,([^"]+)"/>'
        r'<img src="data:image/png;base64,([^"]+)" alt="([^"]+)"/></picture>', out)
    assert picture, out[:200]
    media, narrow, wide, alt = picture.groups()
    assert media == plotting.NARROW_MEDIA and alt == "a panel; a panel"

    def shown_px(png, column):
        meta = plotting.png_text_metadata(base64.b64decode(png))
        return plotting.displayed_text_px(meta["font_pt_min"], meta["dpi"], meta["natural_px"],
                                          min(column, meta["natural_px"]))

    assert shown_px(narrow, plotting.PHONE_COLUMN_PX) >= plotting.MIN_TEXT_PX
    assert shown_px(wide, plotting.PHONE_COLUMN_PX) < plotting.MIN_TEXT_PX  # why it exists
    assert shown_px(wide, plotting.COLUMN_PX) >= plotting.MIN_TEXT_PX
    # the narrow drawing is as wide as asked, plus the tight bounding box's padding
    meta = plotting.png_text_metadata(base64.b64decode(narrow))
    assert meta["natural_px"] <= (plotting.NARROW_WIDTH + 0.25) * meta["dpi"]
    # a deck shows the PNG, not the picture
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "book" / "_slides"))
    from posenc_slides import static_figure

    bundle = {"text/html": out, "image/png": wide, "text/plain": "<Figure>"}
    assert "text/html" not in static_figure({"output_type": "display_data", "data": bundle})["data"]
    plt.close(fig)


def test_a_figures_legend_beside_the_panels_goes_under_them_on_a_phone():
    """A figure-level legend at the right (``outside right upper``, as the decoding chapter
    places one) would squeeze the panel of a 4-inch drawing to nothing: the phone's drawing
    puts it under the panel, as wide as the drawing, with the figure grown to keep the
    panel's height; the figure is left as it was."""
    import io

    from PIL import Image

    from posenc.book import phone, plotting

    plotting.use_style()
    fig, ax = plotting.figure(height=3.6)
    for k in range(9):
        ax.plot([1, 2, 4], [k, k + 1, k + 2], marker="o", label=f"scheme number {k}")
    ax.set(xlabel="prompt length T", ylabel="speed-up", title="what the cache saves")
    legend = fig.legend(loc="outside right upper")
    png = phone.narrow_png(fig)
    assert fig.legends == [legend] and tuple(fig.get_size_inches()) == (plotting.FIGURE_WIDTH, 3.6)
    meta = plotting.png_text_metadata(png)
    assert meta["natural_px"] <= (plotting.NARROW_WIDTH + 0.25) * meta["dpi"]
    with Image.open(io.BytesIO(png)) as image:  # the legend's nine rows went under the panel
        assert image.size[1] > 3.6 * meta["dpi"]
    plt.close(fig)
