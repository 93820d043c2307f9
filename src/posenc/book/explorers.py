"""The chapters' figures a reader moves (:class:`posenc.book.interactive.Explorer`),
each computed by the package's own functions at every state.

* :func:`rope_rotation` (chapter "RoPE"): one pair of q and k rotated by
  :func:`posenc.apply_rope` at the query and key positions the reader picks; the score
  shown is the dot product of the rotated vectors.
* :func:`t5_buckets` (chapter "Relative positions"): T5's bucket of every distance
  (:func:`posenc.relative_buckets.t5_relative_position_bucket`, causal) for the
  ``num_buckets`` and ``max_distance`` picked, and the buckets a training length never
  reaches.
* :func:`rope_wavelengths` and :func:`scaling_curves` (chapter "Extending the
  context"): every pair's wavelength against the training and target lengths, and
  θ′/θ per pair for each ``rope_type``, from :func:`posenc.rope_inv_freq`.
* :func:`alibi_attention` and :func:`attention_maps` (chapter "ALiBi"): the attention
  each head's bias alone gives at one query, and the trained tiny LMs' attention maps.
* :func:`study_intervals` (the lecture "The evidence"): each scheme's mean loss past L
  with its interval over seeds, from the stored length-generalization study, and the
  pairs resolved, by edition, multiple of L and number of seeds.

Shapes:
    one pair of q and k, (2,); distances (D,) and their buckets (D,); inv_freq (r/2,);
    attention maps (T, T), queries by keys.
"""

from __future__ import annotations

import math

import torch

from ..alibi import alibi_bias, alibi_slopes
from ..relative_buckets import t5_relative_position_bucket
from ..rope import apply_rope
from ..scaling import rope_inv_freq
from ..utils import cpu_float64
from .interactive import Control, Explorer
from .plotting import OKABE_ITO, SEQUENTIAL_CMAP

#: The pair of the RoPE chapter's first figure (its cell ``q_pair, k_pair``), at θ.
ROPE_Q, ROPE_K, ROPE_THETA = (1.0, 0.15), (0.35, 0.85), 0.4
ROPE_POSITIONS = tuple(range(12))
#: The unit circle the arrows turn on (a layout shape shared by every state).
UNIT_CIRCLE = {"type": "circle", "x0": -1, "y0": -1, "x1": 1, "y1": 1,
               "line": {"color": "#bbbbbb", "width": 1}}


def rotated_pair(m: int, n: int) -> tuple[list[float], list[float], float]:
    """The RoPE chapter's q at position ``m`` and k at ``n``, rotated by
    :func:`posenc.apply_rope` (one pair, θ = :data:`ROPE_THETA`), and their score.

    Returns:
        ``(q, k, score)``: the rotated vectors as [x, y] and q·k, all float64.
    """
    x = torch.tensor([ROPE_Q, ROPE_K], dtype=torch.float64)[:, None, :]  # (2, 1, 2)
    inv_freq = torch.tensor([ROPE_THETA], dtype=torch.float64)
    q = apply_rope(x[:1], torch.tensor([m]), inv_freq=inv_freq)[0, 0]
    k = apply_rope(x[1:], torch.tensor([n]), inv_freq=inv_freq)[0, 0]
    return q.tolist(), k.tolist(), float(q @ k)


def _arrow(vector, name: str, color: str) -> dict:
    return {
        "type": "scatter", "x": [0.0, vector[0]], "y": [0.0, vector[1]],
        "mode": "lines+markers", "name": name,
        "line": {"color": color, "width": 3}, "marker": {"size": [0, 11]},
    }


def rope_rotation() -> Explorer:
    """RoPE's rotation as arrows: q turns with its position m, k with n; the score
    depends on the relative distance n − m only (key minus query, the book's
    convention; RoFormer §3.4.2, Eq. 16, writes the same rotation as R_{n−m})."""

    def state(m: int, n: int) -> dict:
        q, k, score = rotated_pair(m, n)
        return {
            "data": [
                _arrow(q, f"q at m = {m}", OKABE_ITO[0]),
                _arrow(k, f"k at n = {n}", OKABE_ITO[1]),
            ],
            "annotations": [_readout(
                f"θ = {ROPE_THETA:g} rad ({math.degrees(ROPE_THETA):.0f}°) per step"
                f"<br>n − m = {n - m}: score q·k = {score:.4f}"
            )],
        }

    return Explorer(
        controls=[
            Control("m", ROPE_POSITIONS, "query position m", default=3),
            Control("n", ROPE_POSITIONS, "key position n", default=0),
        ],
        state=state,
        layout={
            "xaxis": {"range": [-1.15, 1.15], "constrain": "domain"},
            "yaxis": {
                "range": [-1.15, 1.15], "scaleanchor": "x", "constrain": "domain"
            },
            "shapes": [UNIT_CIRCLE],
        },
        title="",
    )


#: The choices of :func:`t5_buckets` (48 states).
T5_NUM_BUCKETS = (8, 16, 32)
T5_MAX_DISTANCE = (32, 64, 128, 256)
T5_TRAIN_LENGTHS = (64, 128, 256, 512)
T5_DISTANCES = 512


def t5_bucket_steps(num_buckets: int, max_distance: int) -> tuple[list[int], list[int]]:
    """Causal T5 buckets of the distances 0 … :data:`T5_DISTANCES` − 1, as the
    distances where the bucket changes and the bucket from there on."""
    distance = torch.arange(T5_DISTANCES)
    bucket = t5_relative_position_bucket(
        -distance, bidirectional=False, num_buckets=num_buckets,
        max_distance=max_distance,
    )
    change = torch.ones_like(bucket, dtype=torch.bool)
    change[1:] = bucket[1:] != bucket[:-1]
    return distance[change].tolist(), bucket[change].tolist()


def unreached_buckets(num_buckets: int, max_distance: int, train_length: int) -> list:
    """The buckets no distance below ``train_length`` falls in (a causal model trained
    at that length never trains their biases)."""
    distance = torch.arange(train_length)
    seen = t5_relative_position_bucket(
        -distance, bidirectional=False, num_buckets=num_buckets,
        max_distance=max_distance,
    ).unique()
    return sorted(set(range(num_buckets)) - set(seen.tolist()))


def _bucket_runs(buckets: list) -> str:
    """``[20]`` → "bucket 20", ``[20, 27, 28, 29]`` → "buckets 20, 27–29"."""
    runs: list[list[int]] = []
    for b in buckets:
        if runs and b == runs[-1][-1] + 1:
            runs[-1].append(b)
        else:
            runs.append([b])
    said = ", ".join(f"{r[0]}" if len(r) == 1 else f"{r[0]}–{r[-1]}" for r in runs)
    return f"bucket {said}" if len(buckets) == 1 else f"buckets {said}"


def t5_buckets_readout(num_buckets: int, max_distance: int, train_length: int) -> str:
    """The explorer's readout: the buckets only distances of ``train_length`` or more
    reach, apart from those no distance reaches at all (every distance from
    ``max_distance`` on shares the last bucket, so none beyond it can reach them)."""
    missing = unreached_buckets(num_buckets, max_distance, train_length)
    never = unreached_buckets(num_buckets, max_distance, max_distance + 1)
    beyond = [b for b in missing if b not in never]
    if beyond:
        lines = [f"{len(beyond)} of {num_buckets} buckets reached only past L<br>"
                 f"({_bucket_runs(beyond)})"]
    elif never:
        lines = [f"the other {num_buckets - len(never)} of {num_buckets} buckets "
                 "are reached within L"]
    else:
        lines = [f"every one of the {num_buckets} buckets is reached within L"]
    if never:
        them = "them" if len(never) > 1 else "it"
        lines.insert(0, f"{_bucket_runs(never)}: no distance maps to {them}")
    return "<br>".join(lines)


def t5_buckets() -> Explorer:
    """T5's buckets against distance (Raffel et al. 2020, §2.1), causal, with the
    training length as a line and the buckets it never reaches."""

    def state(num_buckets: int, max_distance: int, train_length: int) -> dict:
        x, y = t5_bucket_steps(num_buckets, max_distance)
        said = t5_buckets_readout(num_buckets, max_distance, train_length)
        return {
            "data": [{
                "type": "scatter", "x": x + [T5_DISTANCES - 1], "y": y + [y[-1]],
                "mode": "lines", "line": {"shape": "hv", "color": OKABE_ITO[0],
                                          "width": 3},
                "name": "bucket of the distance",
            }],
            "shapes": [{
                "type": "line", "x0": train_length, "x1": train_length, "y0": 0,
                "y1": 1, "yref": "y domain",
                "line": {"color": OKABE_ITO[3], "dash": "dash"},
            }],
            "annotations": [_readout(said)],
        }

    return Explorer(
        controls=[
            Control("num_buckets", T5_NUM_BUCKETS, "num_buckets", default=2),
            Control("max_distance", T5_MAX_DISTANCE, "max_distance", default=2),
            Control("train_length", T5_TRAIN_LENGTHS, "training length L (dashed)",
                    default=0),
        ],
        state=state,
        layout={
            "xaxis": {"title": {"text": "distance query − key"},
                      "range": [0, T5_DISTANCES]},
            "yaxis": {"title": {"text": "bucket"}, "range": [-0.5, 32]},
            "showlegend": False,
        },
    )


def _line(x, y, name: str, color: str, **extra) -> dict:
    return {"type": "scatter", "x": list(x), "y": [float(f"{v:.6g}") for v in y],
            "mode": "lines", "name": name, "line": {"color": color, "width": 2.5},
            **extra}


def _readout(text: str) -> dict:
    return {"x": 0.0, "y": 1.0, "xref": "paper", "yref": "paper", "xanchor": "left",
            "yanchor": "bottom", "showarrow": False, "text": text, "align": "left"}


#: The choices of :func:`rope_wavelengths` (72 states).
WAVE_HEAD_DIMS = (64, 128)
WAVE_BASES = (10_000.0, 500_000.0, 1_000_000.0)
WAVE_TRAIN_LENGTHS = (2048, 4096, 8192)
WAVE_FACTORS = (2, 4, 8, 16)


def rope_wavelengths() -> Explorer:
    """Every pair's wavelength 2π/θ_i (θ_i from :func:`posenc.rope_inv_freq`) against
    the training length L and a target length s·L (RoFormer §3.4; YaRN §3.2)."""

    def state(head_dim: int, base: float, train_length: int, factor: int) -> dict:
        inv_freq, _ = rope_inv_freq(head_dim, base)
        wavelength = (2 * torch.pi / cpu_float64(inv_freq)).tolist()
        pairs = range(head_dim // 2)
        ends = [0, head_dim // 2 - 1]
        # pairs that turn less than once within L: past it they reach unseen angles
        count = sum(w > train_length for w in wavelength)
        return {
            "data": [
                _line(pairs, wavelength, "wavelength 2π/θ_i", OKABE_ITO[0],
                      mode="lines+markers", marker={"size": 4}),
                _line(ends, [train_length] * 2, "training length L", OKABE_ITO[3],
                      line={"color": OKABE_ITO[3], "dash": "dash", "width": 2}),
                _line(ends, [factor * train_length] * 2, f"target {factor}·L",
                      OKABE_ITO[2], line={"color": OKABE_ITO[2], "dash": "dot",
                                          "width": 2}),
            ],
            "annotations": [_readout(
                f"{count} of {head_dim // 2} pairs turn less than once within L"
            )],
        }

    return Explorer(
        controls=[
            Control("head_dim", WAVE_HEAD_DIMS, "head_dim", default=1),
            Control("base", WAVE_BASES, "base (rope_theta)", default=1),
            Control("train_length", WAVE_TRAIN_LENGTHS, "training length L", default=2),
            Control("factor", WAVE_FACTORS, "target length s·L, s", default=1),
        ],
        state=state,
        layout={
            "xaxis": {"title": {"text": "pair i"}},
            "yaxis": {"title": {"text": "tokens per turn"}, "type": "log",
                      "exponentformat": "e", "dtick": 1},
        },
    )


#: The choices of :func:`scaling_curves` (120 states), for the context-extension
#: chapter's Llama-2-sized head (d = 128, b = 10000, L = 4096).
SCALE_HEAD_DIM, SCALE_BASE, SCALE_LENGTH = 128, 10_000.0, 4096
SCALE_FACTORS = (2, 4, 8, 16, 32)
SCALE_BETA_FAST = (16, 32, 64)
SCALE_BETA_SLOW = (1, 2)
SCALE_LOW_FREQ = (1, 2)
SCALE_HIGH_FREQ = (4, 8)


def scaled_ratios(factor, beta_fast, beta_slow, low_freq_factor, high_freq_factor):
    """θ′_i/θ_i of every pair for each ``rope_type`` the figure draws, from
    :func:`posenc.rope_inv_freq` (dynamic at the length s·L)."""
    length = SCALE_LENGTH
    plain, _ = rope_inv_freq(SCALE_HEAD_DIM, SCALE_BASE)
    configs = {
        "PI (linear)": ({"rope_type": "linear", "factor": factor}, None),
        "NTK-aware": ({"rope_type": "ntk", "factor": factor}, None),
        "dynamic at s·L": ({"rope_type": "dynamic", "factor": factor,
                            "original_max_position_embeddings": length},
                           factor * length),
        "YaRN": ({"rope_type": "yarn", "factor": factor, "beta_fast": beta_fast,
                  "beta_slow": beta_slow, "original_max_position_embeddings": length},
                 None),
        "Llama 3": ({"rope_type": "llama3", "factor": factor,
                     "low_freq_factor": low_freq_factor,
                     "high_freq_factor": high_freq_factor,
                     "original_max_position_embeddings": length}, None),
    }
    ratios = {}
    for name, (scaling, seq_len) in configs.items():
        scaled, _ = rope_inv_freq(SCALE_HEAD_DIM, SCALE_BASE, scaling, seq_len=seq_len)
        ratios[name] = (cpu_float64(scaled) / cpu_float64(plain)).tolist()
    return ratios


def scaling_curves() -> Explorer:
    """θ′/θ per pair for PI, NTK-aware, dynamic, YaRN and Llama 3 (PI: Chen et al.
    2023, Eq. 2; YaRN: Peng et al. 2023, §3.2–3.3; Llama 3.1's ``apply_scaling``)."""

    def state(factor, beta_fast, beta_slow, low_freq_factor, high_freq_factor):
        ratios = scaled_ratios(
            factor, beta_fast, beta_slow, low_freq_factor, high_freq_factor
        )
        pairs = range(SCALE_HEAD_DIM // 2)
        kept = {n: sum(r > 0.999 for r in v) for n, v in ratios.items()}
        slowest = {n: v[-1] for n, v in ratios.items()}
        return {
            "data": [
                _line(pairs, r, name, OKABE_ITO[k])
                for k, (name, r) in enumerate(ratios.items())
            ],
            "annotations": [_readout(
                f"slowest pair θ′/θ: PI {slowest['PI (linear)']:.4f}, "
                f"NTK {slowest['NTK-aware']:.4f}<br>pairs kept (θ′/θ > 0.999): "
                f"YaRN {kept['YaRN']}, Llama 3 {kept['Llama 3']}"
            )],
        }

    return Explorer(
        controls=[
            Control("factor", SCALE_FACTORS, "factor s", default=2),
            Control("beta_fast", SCALE_BETA_FAST, "YaRN beta_fast β", default=1),
            Control("beta_slow", SCALE_BETA_SLOW, "YaRN beta_slow α", default=0),
            Control("low_freq_factor", SCALE_LOW_FREQ, "Llama 3 low_freq_factor",
                    default=0),
            Control("high_freq_factor", SCALE_HIGH_FREQ, "Llama 3 high_freq_factor",
                    default=0),
        ],
        state=state,
        layout={
            # every curve depends on L: the axis names it (a lecturer's room asks)
            "xaxis": {"title": {
                "text": f"pair i (head_dim {SCALE_HEAD_DIM}, L = {SCALE_LENGTH})"
            }},
            "yaxis": {"title": {"text": "θ′/θ"}, "type": "log", "dtick": 1,
                      "exponentformat": "e"},
        },
    )


def _viridis(fraction: float) -> str:
    """A colour of the book's sequential map, as plotly.js reads it."""
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    return to_hex(colormaps[SEQUENTIAL_CMAP](0.9 * fraction))


#: The choices of :func:`alibi_attention` (16 states).
ALIBI_HEADS = (2, 4, 8, 16)
ALIBI_QUERIES = (16, 32, 64, 128)


def alibi_weights(num_heads: int, query: int) -> torch.Tensor:
    """The attention each head gives the keys 0 … ``query`` from its ALiBi bias alone
    (equal content scores): softmax over n of −m_h·(query − n), (H, query + 1)."""
    slopes = cpu_float64(alibi_slopes(num_heads))
    keys = torch.arange(query + 1)
    bias = alibi_bias(torch.tensor([query]), keys, slopes)  # (H, 1, query + 1)
    return torch.softmax(cpu_float64(bias)[:, 0], dim=-1)


def alibi_attention() -> Explorer:
    """ALiBi's attention at one query from the bias alone, every head, as the number
    of heads changes (Press et al. 2022, §3: slopes 2^(−8h/H))."""

    def state(num_heads: int, query: int) -> dict:
        weights = alibi_weights(num_heads, query)
        slopes = alibi_slopes(num_heads).tolist()
        near = weights[:, -8:].sum(-1)  # the last 8 keys, the query's own included
        return {
            "data": [
                _line(range(query + 1), w.tolist(), f"head {h + 1}",
                      _viridis(h / max(num_heads - 1, 1)),
                      showlegend=h in (0, num_heads - 1))
                for h, w in enumerate(weights)
            ],
            "annotations": [_readout(
                f"slopes {slopes[0]:.3g} … {slopes[-1]:.3g}<br>"
                "the last 8 keys get "
                f"{near[0]:.0%} (head 1) … {near[-1]:.0%} (head {num_heads})"
            )],
        }

    return Explorer(
        controls=[
            Control("num_heads", ALIBI_HEADS, "number of heads H", default=2),
            Control("query", ALIBI_QUERIES, "query position m", default=1),
        ],
        state=state,
        layout={
            "xaxis": {"title": {"text": "key position n"}},
            "yaxis": {"title": {"text": "attention weight"}, "type": "log",
                      "exponentformat": "e", "dtick": 1, "range": [-6, 0.05]},
        },
    )


def _compact(weights: torch.Tensor) -> list[list]:
    """A (T, T) map as JSON-friendly rows: two decimals (what the colour scale shows),
    masked entries as the integer 0."""
    rows = weights.round(decimals=2).tolist()
    return [[0 if v == 0 else v for v in row] for row in rows]


def mean_distance(weights: torch.Tensor) -> float:
    """How far back one head looks on average: Σ_n w(m, n)·(m − n), averaged over
    the queries m of a (T, T) attention map."""
    t = weights.shape[-1]
    offset = torch.arange(t)[:, None] - torch.arange(t)[None, :]  # (T, T): m − n
    return float((cpu_float64(weights) * offset.clamp(min=0)).sum(-1).mean())


@torch.no_grad()
def attention_maps(models: dict, tokens: torch.Tensor) -> Explorer:
    """Each trained model's attention over ``tokens`` (T,), for every scheme, layer
    and head the reader picks; the readout is the head's :func:`mean_distance`.

    Args:
        models: scheme label → a :class:`posenc.layers.model.TinyLM` (its weights as
            trained; run here in eval mode on its own device).
        tokens: (T,) integer tokens, T² · heads · layers · schemes ≤ a few 10⁵.

    Raises:
        ValueError: models that differ in layers or heads; more than
            :data:`~posenc.book.interactive.MAX_STATES` states.
    """
    maps = {}
    for label, model in models.items():
        model.eval()
        device = next(model.parameters()).device
        _, weights = model(tokens[None].to(device), need_weights=True)
        maps[label] = [w[0].float().cpu() for w in weights]  # per layer (H, T, T)
    shapes = {tuple(len(v) for v in (m, m[0])) for m in maps.values()}
    if len(shapes) != 1:
        raise ValueError(f"the models differ in (layers, heads): {sorted(shapes)}")
    layers, heads = shapes.pop()

    def state(scheme: str, layer: int, head: int) -> dict:
        w = maps[scheme][layer - 1][head - 1]
        return {
            "data": [{"type": "heatmap", "z": _compact(w),
                      "zmin": 0, "zmax": 1, "colorscale": "Viridis",
                      "colorbar": {"title": {"text": "weight"}, "thickness": 12,
                                   "len": 0.5, "y": 1, "yanchor": "top"}}],
            "annotations": [_readout(
                f"{scheme}, layer {layer}, head {head}:<br>looks "
                f"{mean_distance(w):.1f} positions back on average"
            )],
        }

    return Explorer(
        controls=[
            Control("scheme", list(maps), "scheme"),
            Control("layer", list(range(1, layers + 1)), "layer"),
            Control("head", list(range(1, heads + 1)), "head"),
        ],
        state=state,
        layout={
            "xaxis": {"title": {"text": "key position n"}, "constrain": "domain"},
            "yaxis": {"title": {"text": "query position m"}, "autorange": "reversed",
                      "scaleanchor": "x", "constrain": "domain"},
            "showlegend": False,
        },
    )


#: The choices of :func:`study_intervals` (16 states): the stored editions of the
#: length-generalization study (their presets), the evaluation length E as a multiple
#: of L, and how many of the seeds (the first n) the intervals use.
STUDY_EDITIONS = {"first edition": "cpu", "second edition": "cpu2"}
STUDY_SEED_COUNTS = (2, 3)
#: The most labels the readout names as not resolved against the lowest mean.
STUDY_TIES_SHOWN = 4


def study_editions() -> dict:
    """Each stored edition of the study as a :class:`posenc.experiments.ledger.Edition`
    (read by :func:`posenc.experiments.study.load_results`, as the study chapters read
    it; strict: a store that does not cover its grid raises ``StaleResultsError``)."""
    from ..experiments.ledger import Edition
    from ..experiments.study import load_results

    return {name: Edition(load_results(preset=preset), preset)
            for name, preset in STUDY_EDITIONS.items()}


def study_summary(edition, multiple: int, seeds: int) -> dict:
    """One edition's main labels at E = ``multiple`` × L over its first ``seeds``
    seeds: each label's ``(mean, lower, upper)`` by
    :func:`posenc.experiments.stats.mean_ci` (95 % Student-t over seeds), the label
    of the lowest mean, and every pair's paired difference (row minus column, seed by
    seed) by :func:`posenc.experiments.stats.difference_interval`.

    Returns:
        ``{"intervals": {label: (mean, lower, upper)}, "best": label,
        "pairs": {(a, b): interval}}``, labels in the edition's order, pairs once
        each (a before b); a label that cannot run the length (a learned table past
        its end) is left out.

    Raises:
        ValueError: ``seeds`` outside 2 … the edition's number of seeds (one seed
            has no interval), or ``multiple`` a length the edition did not score.
    """
    from ..experiments.stats import difference_interval, mean_ci

    kept = list(edition.preset["seeds"])
    if not 2 <= seeds <= len(kept):
        raise ValueError(
            f"seeds must be 2 … {len(kept)}, got {seeds}: an interval needs two seeds "
            f"at least, and the edition has {len(kept)} ({kept})"
        )
    scored = sorted({m for lab in edition.main for m in (1, 2, 4, 8)
                     if len(edition.values(lab, m))})
    if multiple not in scored:
        raise ValueError(f"multiple must be one of {scored} (the lengths the edition "
                         f"scored, × L), got {multiple}")
    kept = kept[:seeds]
    values = {}
    for lab in edition.main:
        v = edition.values(lab, multiple)
        if len(v):
            values[lab] = v.reindex(kept)
    intervals = {lab: mean_ci(v.to_numpy()) for lab, v in values.items()}
    pairs = {}
    labs = list(values)
    for i, a in enumerate(labs):
        for b in labs[i + 1:]:
            pairs[a, b] = difference_interval((values[a] - values[b]).tolist())
    best = min(intervals, key=lambda lab: intervals[lab][0])
    return {"intervals": intervals, "best": best, "pairs": pairs}


def study_intervals(editions: dict | None = None) -> Explorer:
    """Each scheme's mean loss past L with its 95 % interval over seeds, from the
    stored length-generalization study (both editions), at the multiple of L and the
    number of seeds picked; the readout names the lowest mean, the labels not
    resolved against it (paired by seed), and how many pairs are resolved.

    Args:
        editions: name → :class:`posenc.experiments.ledger.Edition`, the names of
            :data:`STUDY_EDITIONS` (default: :func:`study_editions`, the stored
            results; no training).
    """
    editions = study_editions() if editions is None else editions
    multiples = (1, 2, 4, 8)

    def state(edition: str, multiple: int, seeds: int) -> dict:
        found = study_summary(editions[edition], multiple, seeds)
        best, pairs = found["best"], found["pairs"]
        tied = [lab for lab in found["intervals"] if lab != best and not pairs[
            (best, lab) if (best, lab) in pairs else (lab, best)]["resolved"]]
        color = {lab: OKABE_ITO[0] if lab == best else OKABE_ITO[1] if lab in tied
                 else "#999999" for lab in found["intervals"]}
        data = [  # one segment per label: its interval
            {"type": "scatter", "mode": "lines", "name": lab, "showlegend": False,
             "x": [float(f"{lo:.6g}"), float(f"{hi:.6g}")], "y": [lab, lab],
             "line": {"color": color[lab], "width": 4}}
            for lab, (_, lo, hi) in found["intervals"].items()
        ]
        for hue in dict.fromkeys(color.values()):  # the means, one trace per colour
            labs = [lab for lab in found["intervals"] if color[lab] == hue]
            data.append({
                "type": "scatter", "mode": "markers", "name": "mean",
                "x": [float(f"{found['intervals'][lab][0]:.6g}") for lab in labs],
                "y": labs, "showlegend": False,
                "marker": {"color": hue, "size": 9},
            })
        shown = ", ".join(tied[:STUDY_TIES_SHOWN]) + (
            f" and {len(tied) - STUDY_TIES_SHOWN} more"
            if len(tied) > STUDY_TIES_SHOWN else "")
        resolved = sum(d["resolved"] for d in pairs.values())
        return {
            "data": data,
            "annotations": [_readout(
                f"lowest mean: {best}; "
                + (f"not resolved against {shown}" if tied else "resolved below all")
                + f"<br>{resolved} of {len(pairs)} pairs resolved (paired, "
                f"{seeds} seeds, 95 %)<br>{len(found['intervals'])} models: "
                "each scheme at its defaults, the layer patterns; no variants"
            )],
        }

    return Explorer(
        controls=[
            Control("edition", list(STUDY_EDITIONS), "edition"),
            Control("multiple", multiples, "evaluation length E, multiple of L",
                    default=3),
            Control("seeds", STUDY_SEED_COUNTS, "seeds used (the first n)",
                    default=len(STUDY_SEED_COUNTS) - 1),
        ],
        state=state,
        layout={
            "xaxis": {"title": {"text": "loss at E (nats per byte): mean, 95 % "
                                        "interval"}},
            "yaxis": {"autorange": "reversed", "type": "category", "automargin": True},
            "showlegend": False,
        },
    )
