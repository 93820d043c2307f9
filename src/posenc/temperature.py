"""Attention temperature: one family of per-query multipliers of q.

Each form multiplies the query of row i by a scalar τ_i ≥ 0 before the scores are
taken, so every logit of that row becomes τ_i · q_iᵀk_j / √d_h: a softmax temperature
of 1/τ_i. A τ > 1 sharpens the row, and a τ that grows with the number of keys keeps a
long row from fading to uniform (:mod:`posenc.symbolic.temperature` proves when).

=========  ===========================================  ============  ==================
form       τ for the query at position p (0-based)      learned?      where
=========  ===========================================  ============  ==================
YaRN       m² with m = 0.1 ln s + 1, every query        no            all RoPE layers
Llama 4    1 + a · ln(1 + ⌊(p + 1)/F⌋)                  no            NoPE layers only
log-n      log_L(p + 1) when p + 1 > L, else 1          no            every layer
SSMax      s_h · ln n (+ b_h), n the keys attended      s_h (and b_h) every layer
=========  ===========================================  ============  ==================

YaRN's m multiplies cos and sin, so both q and k (:func:`posenc.scaling.
yarn_attention_factor`); it is a constant, not a function of p, and lives in the RoPE
scheme. The other three are a layer's ``query_temperature`` option
(:func:`check_query_temperature`, used by :class:`posenc.layers.attention.
MultiHeadAttention`); this module holds their pure formulas. The learned s_h and b_h of
SSMax are parameters of the attention layer, trained with the model.

Shapes:
    positions any shape, integer or float; ``num_keys`` (T_q,) integers ≥ 1; SSMax's
    ``s`` and ``b`` (H,); results float32 (SSMax: (H, T_q), in s's dtype).
"""

from __future__ import annotations

import math

import torch

from ._checks import check_int

#: The forms a ``query_temperature`` dict may name with its ``"type"`` key.
TEMPERATURE_TYPES = ("llama4", "logn", "ssmax")

#: The keys of each form's dict (besides ``"type"``); the optional ones in the second
#: set. A dict without ``"type"`` is Llama 4's, as it was before the other forms.
_KEYS = {
    "llama4": ({"floor_scale", "attn_scale"}, set()),
    "logn": ({"train_length"}, set()),
    "ssmax": ({"init"}, {"bias"}),
}


def llama4_query_scale(
    positions: torch.Tensor, *, floor_scale: float, attn_scale: float
) -> torch.Tensor:
    """Llama 4's attention temperature for its NoPE layers: queries are multiplied by

        τ(p) = 1 + attn_scale · log(1 + ⌊(p + 1) / floor_scale⌋),

    which is 1 for p < floor_scale − 1 and grows like log p after, so that the scores of
    a layer without positions stay sharp when the context grows (transformers 5.23,
    ``Llama4TextAttention.forward``; Llama 4 uses floor_scale 8192, attn_scale 0.1).
    transformers applies it only where ``attn_temperature_tuning`` is set and the layer
    has no RoPE (``not self.use_rope``), after the q/k norm and before the KV cache, in
    training and inference alike, with p = the number of cached tokens + the query's
    index (not ``position_ids``). It has no learned parameter; Meta's announcement
    calls it "inference time temperature scaling" and cites Scalable-Softmax
    (https://ai.meta.com/blog/llama-4-multimodal-intelligence/).

    Args:
        positions: integer or float positions, any shape. floor_scale: > 0.
        attn_scale: ≥ 0.

    Returns:
        float32 τ of the positions' shape.
    """
    return (
        torch.log1p(torch.floor((positions.float() + 1.0) / floor_scale)) * attn_scale
        + 1.0
    )


def logn_query_scale(positions: torch.Tensor, *, train_length: int) -> torch.Tensor:
    """Qwen-1's log-n attention scaling (``use_logn_attn``): the query at position p
    is multiplied by

        τ(p) = log_L(p + 1) = ln(p + 1) / ln L  when p + 1 > L,  else 1,

    L the training length (Qwen's ``config.seq_length``). It has no parameter to learn
    and is off in training: Qwen's ``QWenAttention.forward`` (``modeling_qwen.py`` of
    the Qwen-1 checkpoints; its ``logn_list`` holds log_L(i) for i = 1 … 32767) applies
    it only when ``not self.training`` and the keys outnumber L, and counts p as the
    query's index among the keys (cached + new), which is its position when positions
    run 0, 1, … from the first cached token. Within L it is the identity, so a model
    is unchanged on the inputs it was trained on.

    Args:
        positions: integer or float positions, any shape (p ≤ L − 1 gives 1).
        train_length: L ≥ 2 (log base L).

    Returns:
        float32 τ of the positions' shape, ≥ 1.

    Raises:
        TypeError / ValueError: ``train_length`` not an integer ≥ 2.
    """
    train_length = check_int("train_length", train_length, minimum=2)
    count = positions.float() + 1.0
    grown = torch.log(count.clamp(min=1.0)) / math.log(train_length)
    return torch.where(count > train_length, grown, torch.ones_like(count))


def ssmax_query_scale(
    num_keys: torch.Tensor, s: torch.Tensor, b: torch.Tensor | None = None
) -> torch.Tensor:
    """Scalable-Softmax's multiplier (Nakanishi 2025, arXiv 2501.19399, §2): a row
    of n logits z goes through softmax((s · ln n) · z) instead of softmax(z), with a
    scalar s learned per layer and head; the paper implements it by multiplying the
    query by s · ln n, and also tries a learned bias, softmax((s · ln n + b) · z).

    Here n is the number of keys the query attends (a causal query at index i of the
    keys: i + 1; with a sliding window W: min(i + 1, W); see
    :func:`posenc.layers.masks.attended_keys`), so each row is scaled by its own n.

    Args:
        num_keys: (T_q,) integer counts n ≥ 1. s: (H,) per-head scale. b: (H,) bias
            or None.

    Returns:
        (H, T_q) multipliers s_h · ln n_i (+ b_h), in s's dtype; gradients reach s
        and b.

    Raises:
        ValueError: a count below 1 (ln n is undefined at 0); s or b not 1-D, or of
        different lengths.
    """
    if s.dim() != 1 or (b is not None and b.shape != s.shape):
        raise ValueError(
            f"ssmax needs s and b of shape (H,), got s {tuple(s.shape)} and b "
            f"{None if b is None else tuple(b.shape)}"
        )
    if num_keys.numel() and int(num_keys.min()) < 1:
        raise ValueError(
            "ssmax needs every query to attend n >= 1 keys, got n = "
            f"{int(num_keys.min())}"
        )
    log_n = torch.log(num_keys.to(device=s.device, dtype=s.dtype))
    scale = s[:, None] * log_n[None, :]
    return scale if b is None else scale + b[:, None]


def _real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"query_temperature[{name!r}] must be a finite real number, got {value!r}"
        )
    if not math.isfinite(value):
        raise TypeError(
            f"query_temperature[{name!r}] must be a finite real number, got {value!r}"
        )
    return float(value)


def check_query_temperature(value: object) -> dict | None:
    """A layer's ``query_temperature``: None, or one form of :data:`TEMPERATURE_TYPES`.

    * ``{"floor_scale": F, "attn_scale": a}`` (optionally ``"type": "llama4"``):
      :func:`llama4_query_scale`, F > 0, a ≥ 0. The dict without ``"type"`` is the
      one stored runs were made with; it keeps its meaning.
    * ``{"type": "logn", "train_length": L}``: :func:`logn_query_scale`, L ≥ 2.
    * ``{"type": "ssmax", "init": s₀, "bias": False}``: :func:`ssmax_query_scale`
      with a learned s per head, initialised to s₀ > 0 (s₀ = 1/ln L makes the
      multiplier 1 at n = L, the plain softmax at the training length), and with
      ``"bias": True`` a learned b per head, initialised to 0.

    Returns:
        The dict normalised: ``"type"`` filled in, numbers as floats (L an int),
        ``"bias"`` a bool.

    Raises:
        TypeError / ValueError: naming the value and the rule.
    """
    if value is None:
        return None
    kind = value.get("type", "llama4") if isinstance(value, dict) else None
    if kind not in TEMPERATURE_TYPES:
        raise ValueError(
            "query_temperature must be None or a dict whose 'type' is one of "
            f"{TEMPERATURE_TYPES} (no 'type': llama4), got {value!r}"
        )
    required, optional = _KEYS[kind]
    keys = set(value) - {"type"}
    if not required <= keys <= required | optional:
        raise ValueError(
            f"query_temperature of type {kind!r} takes the keys {sorted(required)}"
            + (f" and optionally {sorted(optional)}" if optional else "")
            + f", got {value!r}"
        )
    if kind == "llama4":
        floor_scale = _real("floor_scale", value["floor_scale"])
        attn_scale = _real("attn_scale", value["attn_scale"])
        if floor_scale <= 0 or attn_scale < 0:
            raise ValueError(
                "query_temperature needs floor_scale > 0 and attn_scale >= 0, got "
                f"floor_scale={floor_scale}, attn_scale={attn_scale}"
            )
        return {"type": kind, "floor_scale": floor_scale, "attn_scale": attn_scale}
    if kind == "logn":
        length = check_int(
            "query_temperature['train_length']", value["train_length"], minimum=2
        )
        return {"type": kind, "train_length": length}
    init, bias = _real("init", value["init"]), value.get("bias", False)
    if init <= 0:
        raise ValueError(
            f"query_temperature['init'] (ssmax's s₀) must be > 0, got {init}"
        )
    if not isinstance(bias, bool):
        raise TypeError(f"query_temperature['bias'] must be a bool, got {bias!r}")
    return {"type": kind, "init": init, "bias": bias}


def describe_query_temperature(value: dict) -> str:
    """A ``query_temperature`` in words, for tables: e.g. ``"temperature (F = 16, a =
    0.1)"``, ``"log-n (L = 64)"``, ``"SSMax (s₀ = 0.24)"``."""
    qt = check_query_temperature(value)
    if qt["type"] == "llama4":
        return f"temperature (F = {qt['floor_scale']:g}, a = {qt['attn_scale']:g})"
    if qt["type"] == "logn":
        return f"log-n (L = {qt['train_length']})"
    return f"SSMax (s₀ = {qt['init']:.3g}" + (", bias)" if qt["bias"] else ")")
