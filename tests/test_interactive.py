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
        score = float(re.search(r"score q·k = (-?[\d.]+)", state["layout"]["annotations"][0]["text"])[1])
        by_offset.setdefault(pos_m - pos_n, set()).add(score)
    assert all(len(scores) == 1 for scores in by_offset.values()), "the score depends on m − n only"
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
    assert text == "5 of 32 buckets never reached within L (buckets 27–31)"  # max_distance 128, L 64


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
