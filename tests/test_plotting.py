import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from posenc.plotting import memory_plot, perplexity_plot  # noqa: E402


def test_length_axes_are_labelled_with_the_lengths():
    fig, (a, b) = plt.subplots(1, 2)
    memory_plot(a, [128, 256, 512], {"path": [0.0, 1.0, 4.0]})
    perplexity_plot(b, {"s": {64: 5.0, 128: 6.0}}, train_len=64)
    assert [t.get_text() for t in a.get_xticklabels()] == ["128", "256", "512"]
    assert [t.get_text() for t in b.get_xticklabels()] == ["64", "128"]
    assert min(a.get_lines()[0].get_ydata()) == 2**-10  # 0 MiB drawn at the 1 KiB floor
    plt.close(fig)
