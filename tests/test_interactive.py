"""posenc.book.interactive and the chapters' figures a reader moves (posenc.book.explorers):
every precomputed state holds the package's numbers, the page loads plotly.js from the site
only, and the decks get the static PNG. The browser side is in tests/test_site.py."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch

from posenc.book import explorers, interactive
from posenc.book.interactive import Control, Explorer
from posenc.relative_buckets import t5_relative_position_bucket


def _spec(html: str) -> dict:
    return json.loads(re.search(r'<script type="application/json"[^>]*>(.*?)</script>', html).group(1))


def test_rope_states_are_rotations_and_depend_on_the_offset_only():
    figure = explorers.rope_rotation()
    assert len(figure.states) == len(explorers.ROPE_POSITIONS) ** 2
    theta = explorers.ROPE_THETA
    by_offset = {}
    for (i, j), m in ((tuple(map(int, k.split(","))), k) for k in figure.states):
        pos_m, pos_n = explorers.ROPE_POSITIONS[i], explorers.ROPE_POSITIONS[j]
        state = figure.states[m]
        q_tip = (state["data"][0]["x"][1], state["data"][0]["y"][1])
        # the pair turned by mθ, written out with cos and sin (apply_rope forms its angles
        # in float32, as Hugging Face's Llama does: agreement to ~1e-7)
        c, s = math.cos(pos_m * theta), math.sin(pos_m * theta)
        q0, q1 = explorers.ROPE_Q
        assert q_tip == pytest.approx((c * q0 - s * q1, s * q0 + c * q1), abs=1e-6)
        readout = state["layout"]["annotations"][0]["text"]
        score = float(re.search(r"score q·k = (-?[\d.]+)", readout)[1])
        # the book's relative distance: key minus query, n − m, with its sign
        step, offset = readout.split("<br>")
        # θ per step is shown (a lecturer's room asks "turns by how much?"), in rad and °
        assert step == f"θ = {theta:g} rad ({math.degrees(theta):.0f}°) per step"
        assert offset.startswith(f"n − m = {pos_n - pos_m}: ")
        by_offset.setdefault(pos_n - pos_m, set()).add(score)
    assert all(len(scores) == 1 for scores in by_offset.values()), "the score depends on n − m only"
    assert len(by_offset) == 2 * len(explorers.ROPE_POSITIONS) - 1


@pytest.mark.parametrize("num_buckets", explorers.T5_NUM_BUCKETS)
@pytest.mark.parametrize("max_distance", explorers.T5_MAX_DISTANCE)
def test_t5_states_hold_the_package_buckets(num_buckets, max_distance):
    x, y = explorers.t5_bucket_steps(num_buckets, max_distance)
    full = t5_relative_position_bucket(-torch.arange(explorers.T5_DISTANCES), bidirectional=False,
                                       num_buckets=num_buckets, max_distance=max_distance).tolist()
    # the steps expand back to every distance's bucket
    expanded = [y[max(i for i, start in enumerate(x) if start <= d)] for d in range(len(full))]
    assert expanded == full
    for length in explorers.T5_TRAIN_LENGTHS:
        reached = set(full[:length])
        assert explorers.unreached_buckets(num_buckets, max_distance, length) == sorted(
            set(range(num_buckets)) - reached)


def test_t5_figure_says_which_buckets_training_never_reaches():
    figure = explorers.t5_buckets()
    assert len(figure.states) == 48
    text = figure.states[figure.default_key]["layout"]["annotations"][0]["text"]
    assert text == "5 of 32 buckets reached only past L<br>(buckets 27–31)"  # max_distance 128, L 64


def test_t5_readout_tells_a_bucket_no_distance_reaches_from_one_beyond_l():
    """32 buckets up to a max_distance of 32: the package maps no distance at all to
    bucket 20 (floor of the log jumps from 19 to 21), so "beyond L" would mislead."""
    full = t5_relative_position_bucket(-torch.arange(4096), bidirectional=False,
                                       num_buckets=32, max_distance=32)
    assert sorted(set(range(32)) - set(full.tolist())) == [20]
    for length in explorers.T5_TRAIN_LENGTHS:
        assert explorers.t5_buckets_readout(32, 32, length) == (
            "bucket 20: no distance maps to it<br>the other 31 of 32 buckets are reached within L")
    assert explorers.t5_buckets_readout(32, 32, 16) == (
        "bucket 20: no distance maps to it<br>15 of 32 buckets reached only past L<br>"
        "(buckets 16–19, 21–31)")
    assert explorers.t5_buckets_readout(16, 256, 128) == (
        "1 of 16 buckets reached only past L<br>(bucket 15)")


def test_the_site_loads_plotly_from_itself_and_notebooks_from_the_mirror(monkeypatch):
    figure = explorers.t5_buckets()
    site = figure.html("site")
    assert interactive.SITE_SCRIPT in site and "http" not in site.replace("data:image/png", "")
    assert interactive.NOTEBOOK_SCRIPT in figure.html("")
    monkeypatch.setenv(interactive.MODE_ENV, "site")
    assert interactive.SITE_SCRIPT in figure._repr_mimebundle_()["text/html"]
    spec = _spec(site)
    assert len(spec["states"]) == 48 and spec["layout"]["sliders"][2]["active"] == 0
    assert all(step["method"] == "skip" for s in spec["layout"]["sliders"] for step in s["steps"])
    assert spec["layout"]["font"]["size"] >= 12


def test_the_vendored_plotly_is_the_version_the_module_names():
    from pathlib import Path

    lock = json.loads((Path(__file__).parents[1] / "book/_vendor/package-lock.json").read_text())
    entry = lock["packages"]["node_modules/plotly.js-cartesian-dist-min"]
    assert entry["version"] == interactive.PLOTLY_JS_VERSION


def test_the_static_fallback_is_a_legible_png():
    from posenc.book.plotting import MIN_FONT_PT, png_text_metadata

    meta = png_text_metadata(explorers.rope_rotation().png())
    assert meta is not None and meta["font_pt_min"] >= MIN_FONT_PT


def test_bad_figures_are_refused():
    with pytest.raises(ValueError, match="MAX_STATES"):
        Explorer([Control("a", range(30)), Control("b", range(30))], lambda a, b: {"data": []})
    with pytest.raises(ValueError, match="names must differ"):
        Explorer([Control("a", [1]), Control("a", [2])], lambda a: {"data": []})
    with pytest.raises(ValueError, match="default index 3"):
        Control("a", [1, 2], default=3)
    with pytest.raises(ValueError, match="has no 'data'"):
        Explorer([Control("a", [1])], lambda a: {})
    with pytest.raises(ValueError, match="scatter and heatmap"):
        interactive.draw_static([{"type": "bar", "x": [1], "y": [1]}], {})


def test_the_decks_show_the_static_png():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "book" / "_slides"))
    from posenc_slides import static_figure

    bundle = explorers.t5_buckets()._repr_mimebundle_()
    out = static_figure({"output_type": "display_data", "data": dict(bundle)})
    assert set(out["data"]) == {"image/png", "text/plain"}
    plain = {"output_type": "display_data", "data": {"text/html": "<table></table>"}}
    assert static_figure(plain)["data"] == {"text/html": "<table></table>"}


def test_wavelength_states_are_two_pi_over_theta_and_count_the_long_pairs():
    figure = explorers.rope_wavelengths()
    assert len(figure.states) == 72
    for key, state in figure.states.items():
        i, j, k, s = map(int, key.split(","))
        d, b = explorers.WAVE_HEAD_DIMS[i], explorers.WAVE_BASES[j]
        length, factor = explorers.WAVE_TRAIN_LENGTHS[k], explorers.WAVE_FACTORS[s]
        expected = [2 * math.pi * b ** (2 * p / d) for p in range(d // 2)]  # RoFormer's θ_i
        assert state["data"][0]["y"] == pytest.approx(expected, rel=1e-4)
        assert state["data"][1]["y"] == [length] * 2 and state["data"][2]["y"] == [factor * length] * 2
        count = sum(w > length for w in expected)
        assert state["layout"]["annotations"][0]["text"].startswith(f"{count} of {d // 2} pairs")


def test_scaling_states_follow_each_rule():
    figure = explorers.scaling_curves()
    assert len(figure.states) == 120
    d, base, length = explorers.SCALE_HEAD_DIM, explorers.SCALE_BASE, explorers.SCALE_LENGTH
    # the training length every curve depends on is on the figure
    assert f"L = {length}" in figure.layout["xaxis"]["title"]["text"]
    for key, state in figure.states.items():
        i, _, _, lo, hi = map(int, key.split(","))
        s = explorers.SCALE_FACTORS[i]
        curves = {t["name"]: t["y"] for t in state["data"]}
        assert curves["PI (linear)"] == pytest.approx([1 / s] * (d // 2), rel=1e-4)
        # NTK-aware divides pair i's frequency by s^(2i/(d-2)) (the chapter's exercise)
        assert curves["NTK-aware"] == pytest.approx([s ** (-2 * p / (d - 2)) for p in range(d // 2)], rel=1e-3)
        assert curves["YaRN"][0] == pytest.approx(1) and curves["YaRN"][-1] == pytest.approx(1 / s, rel=1e-4)
        # Llama 3: pairs faster than L / high_freq_factor kept, slower than L / low_freq_factor divided by s
        low, high = explorers.SCALE_LOW_FREQ[lo], explorers.SCALE_HIGH_FREQ[hi]
        for p, ratio in enumerate(curves["Llama 3"]):
            wavelength = 2 * math.pi * base ** (2 * p / d)
            if wavelength < length / high:
                assert ratio == pytest.approx(1, rel=1e-4)
            elif wavelength > length / low:
                assert ratio == pytest.approx(1 / s, rel=1e-4)


def test_alibi_states_are_the_softmax_of_the_paper_slopes():
    figure = explorers.alibi_attention()
    assert len(figure.states) == 16
    for key, state in figure.states.items():
        i, j = map(int, key.split(","))
        heads, query = explorers.ALIBI_HEADS[i], explorers.ALIBI_QUERIES[j]
        assert len(state["data"]) == heads
        for h, trace in enumerate(state["data"]):
            slope = 2 ** (-8 * (h + 1) / heads)  # Press et al. 2022, §3, for H a power of two
            logits = [-slope * (query - n) for n in range(query + 1)]
            total = sum(math.exp(v) for v in logits)
            assert trace["y"] == pytest.approx([math.exp(v) / total for v in logits], rel=1e-4)


def test_attention_maps_are_the_models_weights_and_their_mean_distance():
    from posenc.layers.model import ModelConfig, TinyLM

    torch.manual_seed(0)
    models = {name: TinyLM(ModelConfig(scheme=name, d_model=32, num_heads=2, num_layers=2))
              for name in ("alibi", "rope")}
    tokens = torch.randint(0, 256, (12,))
    figure = explorers.attention_maps(models, tokens)
    assert len(figure.states) == 2 * 2 * 2
    _, weights = models["rope"](tokens[None], need_weights=True)
    z = torch.tensor(figure.states["1,1,0"]["data"][0]["z"])  # rope, layer 2, head 1
    assert torch.allclose(z, weights[1][0, 0], atol=0.005)
    w = weights[1][0, 0].double()
    by_hand = sum(float(w[m, n]) * (m - n) for m in range(12) for n in range(m + 1)) / 12
    assert explorers.mean_distance(w) == pytest.approx(by_hand)
    assert f"{by_hand:.1f} positions back" in figure.states["1,1,0"]["layout"]["annotations"][0]["text"]
    with pytest.raises(ValueError, match="differ in"):
        explorers.attention_maps(
            {**models, "one layer": TinyLM(ModelConfig(scheme="rope", d_model=32, num_heads=2, num_layers=1))},
            tokens)


def _every_explorer():
    from posenc.layers.model import ModelConfig, TinyLM

    torch.manual_seed(0)
    models = {name: TinyLM(ModelConfig(scheme=name, d_model=32, num_heads=2, num_layers=2))
              for name in ("alibi", "rope")}
    return {"rope": explorers.rope_rotation(), "t5": explorers.t5_buckets(),
            "wavelengths": explorers.rope_wavelengths(), "scaling": explorers.scaling_curves(),
            "alibi": explorers.alibi_attention(),
            "maps": explorers.attention_maps(models, torch.randint(0, 256, (12,)))}


def test_every_explorer_fits_a_phone_with_its_legend_below_the_plot():
    """Issue 39: at most PHONE_MAX_PX tall on a phone (the narrow layout), the legend horizontal
    under the plot's x-axis and above the sliders, on both layouts (tests/test_site.py measures
    the drawn figures at 414 px)."""
    for name, figure in _every_explorer().items():
        spec = figure.spec()
        assert spec["media"] == interactive.NARROW_MEDIA
        assert spec["narrow"]["height"] <= interactive.PHONE_MAX_PX, name
        assert spec["layout"]["height"] >= spec["narrow"]["height"], name
        for layout in (spec["layout"], spec["narrow"]):
            inner = layout["height"] - layout["margin"]["t"] - layout["margin"]["b"]
            plot_bottom = layout["yaxis"]["domain"][0]
            plot_px = (1 - plot_bottom) * inner
            assert plot_px >= interactive.MIN_PLOT_PX - 1e-9, name
            top_slider = max(s["y"] for s in layout["sliders"])
            assert top_slider == pytest.approx(interactive.SLIDER_PX * len(figure.controls) / inner)
            if layout["showlegend"]:
                legend = layout["legend"]
                assert legend["orientation"] == "h" and legend["yanchor"] == "top", name
                # below the x-axis labels and title, above the first slider
                assert (plot_bottom - legend["y"]) * inner >= interactive.AXIS_PX, name
                rows = figure.legend_rows(layout is spec["narrow"])
                assert legend["y"] - top_slider >= rows * interactive.LEGEND_ROW_PX / inner, name
        # the readout's lines fit the top margin
        assert spec["layout"]["margin"]["t"] >= interactive.LINE_PX * figure.readout_lines()


def test_a_figure_too_tall_for_a_phone_is_refused():
    with pytest.raises(ValueError, match="on a phone"):
        Explorer([Control(f"c{i}", [1, 2]) for i in range(8)], lambda **v: {"data": []}).spec()


def test_the_page_picks_the_layout_by_the_narrow_media_query():
    html = explorers.rope_rotation().html("site", png=b"")
    assert "window.matchMedia(spec.media)" in html and '"narrow":' in html


def test_the_yarn_sliders_name_the_papers_letters_the_right_way_round():
    """Peng et al. (YaRN, §3.2) keep a pair turning more than β times within L and fully
    interpolate one turning fewer than α times, α < β: transformers' beta_slow is α (default
    1) and beta_fast is β (default 32), as the context-extension chapter says."""
    labels = {c.name: c.label for c in explorers.scaling_curves().controls}
    assert labels["beta_slow"].endswith("α") and labels["beta_fast"].endswith("β")


@pytest.fixture(scope="module")
def study_editions():
    return explorers.study_editions()


def test_study_interval_states_hold_the_stored_studys_intervals(study_editions):
    """Every state of study_intervals against the stored per-seed losses: each label's
    95 % t interval over the first n seeds (SciPy's t.interval), and the readout's
    lowest mean, its unresolved rivals and the count of resolved pairs against
    posenc.experiments.stats.paired_difference on the same seeds."""
    import numpy as np
    from scipy import stats

    from posenc.experiments.stats import paired_difference

    figure = explorers.study_intervals(study_editions)
    names = list(explorers.STUDY_EDITIONS)
    multiples = figure.controls[1].values
    assert len(figure.states) == len(names) * len(multiples) * len(explorers.STUDY_SEED_COUNTS)
    for key, state in figure.states.items():
        i, j, k = map(int, key.split(","))
        edition, multiple = study_editions[names[i]], multiples[j]
        seeds = list(edition.preset["seeds"])[: explorers.STUDY_SEED_COUNTS[k]]
        segments = {t["y"][0]: t["x"] for t in state["data"] if t["mode"] == "lines"}
        means = {lab: x for t in state["data"] if t["mode"] == "markers"
                 for lab, x in zip(t["y"], t["x"])}
        runnable = [lab for lab in edition.main if len(edition.values(lab, multiple))]
        assert list(segments) == runnable and set(means) == set(runnable)
        for lab in runnable:
            v = edition.values(lab, multiple)[seeds].to_numpy()
            lo, hi = stats.t.interval(0.95, len(v) - 1, loc=v.mean(), scale=stats.sem(v))
            assert segments[lab] == pytest.approx([lo, hi], rel=1e-5)
            assert means[lab] == pytest.approx(v.mean(), rel=1e-5)
        best = min(runnable, key=lambda lab: edition.values(lab, multiple)[seeds].mean())
        sub = edition.lm[edition.lm["seed"].isin(seeds)]
        where = {"eval_length": multiple * edition.L, "metric": "loss_sliding"}
        resolved = {(a, b): paired_difference(sub, a, b, **where)["resolved"]
                    for n, a in enumerate(runnable) for b in runnable[n + 1:]}
        tied = [lab for lab in runnable if lab != best
                and not resolved.get((best, lab), resolved.get((lab, best)))]
        text = state["layout"]["annotations"][0]["text"]
        assert text.startswith(f"lowest mean: {best}; ")
        assert ("not resolved against " + ", ".join(tied[:explorers.STUDY_TIES_SHOWN])) in text if tied \
            else "resolved below all" in text
        assert f"{sum(resolved.values())} of {len(resolved)} pairs resolved" in text
        assert f"<br>{len(runnable)} models: each scheme at its defaults" in text
        assert np.isfinite(list(means.values())).all()


def test_study_intervals_refuse_one_seed_more_seeds_and_an_unscored_length(study_editions):
    edition = study_editions["first edition"]
    with pytest.raises(ValueError, match="got 1: an interval needs two seeds at least"):
        explorers.study_summary(edition, 1, 1)
    with pytest.raises(ValueError, match=r"seeds must be 2 … 3, got 4"):
        explorers.study_summary(edition, 1, 4)
    with pytest.raises(ValueError, match=r"multiple must be one of \[1, 2, 4, 8\].*got 3"):
        explorers.study_summary(edition, 3, 3)
