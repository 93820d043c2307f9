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
    drawn_together = [  # the figures of the ALiBi chapter and of the second edition
        ["alibi", "shaw", "transformer_xl", "t5", "deberta", "sinusoidal", "learned", "none"],
        ["none", "sinusoidal", "learned", "rope", "xpos"],
        ["none", "alibi", "shaw", "transformer_xl", "t5", "deberta", "kerple, log", "fire"],
        ["alibi", "deberta", "rope", "fire", "kerple, log"],
    ]
    for group in drawn_together:
        colours = [SCHEME_STYLES[s]["color"] for s in group]
        assert len(set(colours)) == len(colours), group
