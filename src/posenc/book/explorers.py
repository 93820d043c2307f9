"""The chapters' figures a reader moves (:class:`posenc.book.interactive.Explorer`),
each computed by the package's own functions at every state.

* :func:`rope_rotation` (chapter "RoPE"): one pair of q and k rotated by
  :func:`posenc.apply_rope` at the query and key positions the reader picks; the score
  shown is the dot product of the rotated vectors.
* :func:`t5_buckets` (chapter "Relative positions"): T5's bucket of every distance
  (:func:`posenc.relative_buckets.t5_relative_position_bucket`, causal) for the
  ``num_buckets`` and ``max_distance`` picked, and the buckets a training length never
  reaches.

Shapes:
    one pair of q and k, (2,); distances (D,) and their buckets (D,).
"""

from __future__ import annotations

import torch

from ..relative_buckets import t5_relative_position_bucket
from ..rope import apply_rope
from .interactive import Control, Explorer
from .plotting import OKABE_ITO

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
    depends on m − n only (RoFormer §3.4.2, Eq. 16)."""

    def state(m: int, n: int) -> dict:
        q, k, score = rotated_pair(m, n)
        return {
            "data": [
                _arrow(q, f"q at m = {m}", OKABE_ITO[0]),
                _arrow(k, f"k at n = {n}", OKABE_ITO[1]),
            ],
            "annotations": [{
                "x": 0.0, "y": 1.0, "xref": "paper", "yref": "paper",
                "xanchor": "left", "yanchor": "bottom", "showarrow": False,
                "text": f"m − n = {m - n}: score q·k = {score:.4f}",
            }],
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
            "legend": {"x": 1, "xanchor": "right", "y": 1, "yanchor": "top",
                       "bgcolor": "rgba(255,255,255,0.8)"},
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


def t5_buckets() -> Explorer:
    """T5's buckets against distance (Raffel et al. 2020, §2.1), causal, with the
    training length as a line and the buckets it never reaches."""

    def state(num_buckets: int, max_distance: int, train_length: int) -> dict:
        x, y = t5_bucket_steps(num_buckets, max_distance)
        missing = unreached_buckets(num_buckets, max_distance, train_length)
        said = (
            f"{len(missing)} of {num_buckets} buckets never reached within L "
            f"(buckets {missing[0]}–{missing[-1]})" if missing
            else f"every one of the {num_buckets} buckets is reached within L"
        )
        return {
            "data": [{
                "type": "scatter", "x": x + [T5_DISTANCES - 1], "y": y + [y[-1]],
                "mode": "lines", "line": {"shape": "hv", "color": OKABE_ITO[0],
                                          "width": 3},
                "name": "bucket of the distance",
            }],
            "shapes": [{
                "type": "line", "x0": train_length, "x1": train_length, "y0": 0,
                "y1": 1, "yref": "paper",
                "line": {"color": OKABE_ITO[3], "dash": "dash"},
            }],
            "annotations": [{
                "x": 0.0, "y": 1.0, "xref": "paper", "yref": "paper",
                "xanchor": "left", "yanchor": "bottom", "showarrow": False,
                "text": said,
            }],
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
