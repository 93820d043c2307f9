"""xPos: RoPE with an exponential decay per pair (Sun et al. 2022, "A Length-
Extrapolatable Transformer", arXiv:2212.10554, §3.2–3.3).

xPos rotates queries and keys exactly as RoPE does and, in addition, multiplies the
i-th feature pair of a query at position m by ``ζ_i^{(m−c)/B}`` and that of a key at
position n by ``ζ_i^{−(n−c)/B}``, with

    ζ_i = (2i/r + γ) / (1 + γ),   i = 0 … r/2 − 1,   γ = 0.4,   B = scale_base = 512,

(r the rotated width, ``(2i + γr) / ((1 + γ)r)`` as both reference codes write it). The
score of the pair i is then the RoPE score times ``ζ_i^{(m−n)/B}``: it depends on the
offset m − n only, and since every ζ_i < 1 it decays as the query moves away from an
earlier key, fastest for the high-frequency pairs (ζ_0 = γ/(1+γ) = 2/7), slowest for
the low-frequency ones (ζ_{r/2−1} → 1). The centre c cancels in every score; it only
keeps the factors inside the float range (see :func:`xpos_max_distance`).

The two public implementations agree on ζ, B = 512 and the ``"interleaved"`` layout
(pairs (2i, 2i + 1)) and differ in the centre:

* Microsoft's torchscale 0.3.0 (``torchscale/component/xpos_relative_position.py``,
  ``XPOS.forward(x, offset, downscale)``): c = ⌈T/2⌉ for T = ``len + offset`` keys at
  positions 0 … T − 1 (``min_pos = -(length + offset) // 2``), recomputed from the
  current key length at every decoding step; keys are ``downscale=True``;
* lucidrains' rotary-embedding-torch 0.9.1 (``RotaryEmbedding(dim, use_xpos=True)``,
  ``rotate_queries_and_keys``): c = ⌊T/2⌋ (``t - len(t) // 2``).

posenc takes positions explicitly: :func:`apply_xpos` centres at torchscale's c (per
sequence, :func:`xpos_center`) unless ``center`` is given; ``center=T // 2``
reproduces rotary-embedding-torch.
"""

from __future__ import annotations

import math
from numbers import Real

import torch

from ._checks import check_base, check_choice, check_even_dim
from .rope import (
    ROPE_LAYOUTS,
    _check_positions,
    positions_for,
    rotate_half,
    rotate_interleaved,
)
from .schemes import PositionalScheme, register_scheme
from .frequencies import DEFAULT_BASE, compute_inv_freq

XPOS_GAMMA = 0.4
XPOS_SCALE_BASE = 512.0


def _check_positive(name: str, value: object, *, allow_inf: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(
            f"{name} must be a real number, got {value!r} of type "
            f"{type(value).__name__}"
        )
    value = float(value)
    finite = math.isfinite(value) or (allow_inf and value == math.inf)
    if not finite or value <= 0.0:
        rule = "> 0 (math.inf allowed)" if allow_inf else "finite and > 0"
        raise ValueError(f"{name} must be {rule}, got {value}")
    return value


def xpos_zeta(
    rotary_dim: int,
    *,
    gamma: float = XPOS_GAMMA,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The per-pair decay rates ζ_i of xPos.

    ``ζ_i = (2i + γ·r) / ((1 + γ)·r)``, i = 0 … r/2 − 1, increasing from γ/(1 + γ)
    (2/7 for γ = 0.4) towards 1, computed in float32 as both reference codes do.

    Args:
        rotary_dim: r, the rotated width (even).
        gamma: γ > 0, finite (0.4 in the paper and in both codes).
        device: where to create the tensor.

    Returns:
        float32 tensor (r/2,).

    Raises:
        TypeError: rotary_dim not an int or gamma not a real number.
        ValueError: rotary_dim not positive and even; gamma not finite and > 0.

    Source: Sun et al. 2022, arXiv:2212.10554, §3.2; torchscale 0.3.0 ``XPOS.scale``.
    """
    r = check_even_dim("rotary_dim", rotary_dim)
    gamma = _check_positive("gamma", gamma, allow_inf=False)
    two_i = torch.arange(0, r, 2, dtype=torch.float32, device=device)
    return (two_i + gamma * r) / ((1.0 + gamma) * r)


def xpos_scale(
    positions: torch.Tensor,
    zeta: torch.Tensor,
    *,
    scale_base: float = XPOS_SCALE_BASE,
    center: float | torch.Tensor = 0.0,
) -> torch.Tensor:
    """The query factors ``ζ_i^{(p − c)/B}``, one per position and pair (a key's are
    their reciprocals).

    Args:
        positions: (..., T) integer or float positions p.
        zeta: (r/2,) decay rates, e.g. from :func:`xpos_zeta`.
        scale_base: B > 0; ``math.inf`` makes every factor 1 (plain RoPE).
        center: c, a number or a tensor broadcastable to positions' shape (e.g. (...,
            1) from :func:`xpos_center`).

    Returns:
        float32 tensor (..., T, r/2).

    Raises:
        TypeError: scale_base not a real number.
        ValueError: scale_base not > 0 (or NaN).

    Source: Sun et al. 2022, arXiv:2212.10554, §3.2–3.3.
    """
    scale_base = _check_positive("scale_base", scale_base, allow_inf=True)
    exponent = (positions.to(torch.float32) - center) / scale_base
    zeta = zeta.to(device=positions.device, dtype=torch.float32)
    return zeta ** exponent[..., None]


def xpos_center(k_positions: torch.Tensor) -> torch.Tensor:
    """The default centre of :func:`apply_xpos`: ``⌈(min n + max n + 1)/2⌉`` over the
    key positions of each sequence, i.e. ⌈T/2⌉ for T keys 0 … T − 1 (torchscale's).

    Args:
        k_positions: (..., T_k) key positions, T_k ≥ 1.

    Returns:
        float32 tensor (..., 1).

    Raises:
        TypeError: k_positions not a real tensor.
        ValueError: no key positions (T_k = 0), or non-finite ones.
    """
    if not isinstance(k_positions, torch.Tensor) or k_positions.dim() == 0:
        raise TypeError(
            "k_positions must be a tensor (..., T_k), got "
            f"{getattr(k_positions, 'shape', type(k_positions))}"
        )
    k = _check_positions(k_positions, k_positions.shape[-1])
    if k.shape[-1] == 0:
        raise ValueError("k_positions must hold at least one position, got (..., 0)")
    k = k.to(torch.float32)
    lo, hi = k.amin(dim=-1, keepdim=True), k.amax(dim=-1, keepdim=True)
    return torch.ceil((lo + hi + 1.0) / 2.0)


def xpos_max_distance(
    dtype: torch.dtype = torch.float32,
    *,
    scale_base: float = XPOS_SCALE_BASE,
    gamma: float = XPOS_GAMMA,
) -> float:
    """The largest |p − c| for which every xPos factor stays finite in ``dtype``.

    The extreme factor is the key factor of the fastest pair, ``ζ_0^{−(p−c)/B}`` with
    ζ_0 = γ/(1 + γ); it overflows once (p − c)·ln((1 + γ)/γ)/B > ln(max of dtype). With
    the defaults that is |p − c| ≈ 36 260.7 in float32 and bfloat16 and 4 532 in float16
    (the query factor ζ_0^{(p−c)/B} turns subnormal a little earlier, past 35 694 in
    float32, and 0 from 42 494, so that scores read inf, then 0·inf = NaN).
    Uncentred positions (c = 0, the paper's form) break beyond ~36k tokens in float32;
    centring at the middle of the keys doubles the span (~72k), as in torchscale.

    Args:
        dtype: a floating dtype.
        scale_base: B > 0, finite. gamma: γ > 0, finite.

    Returns:
        scale_base · ln(finfo(dtype).max) / ln((1 + γ)/γ).
    """
    scale_base = _check_positive("scale_base", scale_base, allow_inf=False)
    gamma = _check_positive("gamma", gamma, allow_inf=False)
    return scale_base * math.log(torch.finfo(dtype).max) / math.log((1 + gamma) / gamma)


def _check_x(name: str, x: object) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(
            f"{name} must be a floating tensor, got {getattr(x, 'dtype', type(x))}"
        )
    if x.dim() < 2:
        raise ValueError(
            f"{name} must have shape (..., T, head_dim), got {tuple(x.shape)}"
        )
    check_even_dim(f"head_dim of {name}", x.shape[-1])
    return x


def _inv_freq(x, inv_freq, base):
    if inv_freq is None:
        return compute_inv_freq(x.shape[-1], base, device=x.device)
    if inv_freq.dim() != 1 or inv_freq.numel() == 0:
        raise ValueError(
            f"inv_freq must have shape (rotary_dim/2,), got {tuple(inv_freq.shape)}"
        )
    if 2 * inv_freq.numel() > x.shape[-1]:
        raise ValueError(
            f"rotary_dim = 2·len(inv_freq) = {2 * inv_freq.numel()} must not exceed "
            f"head_dim = {x.shape[-1]}"
        )
    return inv_freq.to(device=x.device, dtype=torch.float32)


def _center_for(center, given: torch.Tensor, positions: torch.Tensor):
    """A tensor centre as float32 on the positions' device; a (B, 1) centre of (B, T)
    positions follows them to (B, 1, 1) when :func:`positions_for` gave them a head
    axis (as given, it would broadcast over the heads)."""
    if not isinstance(center, torch.Tensor):
        return center
    center = center.to(device=positions.device, dtype=torch.float32)
    if center.dim() == 2 and given.dim() == 2 and positions.dim() > 2:
        center = center.reshape(center.shape[0], *positions.shape[1:-1], -1)
    return center


def rotate_xpos(
    x: torch.Tensor,
    positions: torch.Tensor,
    *,
    key: bool,
    center: float | torch.Tensor = 0.0,
    inv_freq: torch.Tensor | None = None,
    base: float = DEFAULT_BASE,
    scale_base: float = XPOS_SCALE_BASE,
    gamma: float = XPOS_GAMMA,
    layout: str = "interleaved",
) -> torch.Tensor:
    """xPos on one tensor: RoPE, then the factor ``ζ_i^{±(p − c)/B}`` on pair i (+ for
    queries, − for keys).

    ``x ↦ x⊙(s·cos) + rotate(x)⊙(s·sin)`` on the first r = 2·len(inv_freq) features,
    s = ζ^{(p−c)/B} for a query and its reciprocal for a key; cos, sin and s are
    computed in float32 and cast to x's dtype before the products (as
    :func:`posenc.rope.apply_rope`). Queries and keys must share ``center``: use
    this for a KV cache with a fixed centre, :func:`apply_xpos` otherwise.

    Args:
        x: (..., T, head_dim) float, e.g. (B, H, T, d_h).
        positions: (T,); (B, T), one row per sequence, as transformers'
            ``position_ids`` (never broadcast over the heads); or a shape with x's
            number of leading dimensions that broadcasts against them, e.g. (B, 1,
            T) (:func:`posenc.rope.positions_for`).
        key: False for queries (decaying factor), True for keys (its reciprocal:
            torchscale's ``downscale=True``).
        center: c, a number or a tensor broadcastable to positions (e.g. (B, 1, 1),
            or (B, 1) with (B, T) positions).
        inv_freq: (r/2,) frequencies; default ``base^(−2i/head_dim)``.
        base: frequency base b when inv_freq is None, default ``DEFAULT_BASE``
            (10000).
        scale_base: B (512); ``math.inf`` gives plain RoPE.
        gamma: γ of ζ_i (0.4).
        layout: ``"interleaved"`` (pairs (2i, 2i + 1), both reference codes) or
            ``"half"`` (pairs (i, i + r/2)).

    Returns:
        A tensor of x's shape, dtype and device.

    Raises:
        TypeError: x not a floating tensor; positions not a real tensor; key not a
            bool; scale_base, gamma or base not real numbers.
        ValueError: x not (..., T, even head_dim); positions of another shape (the
            message names it and the shapes allowed), or non-finite; inv_freq not 1-D
            or wider than head_dim; unknown layout; scale_base not > 0; gamma or base
            not finite and > 0.

    Source: Sun et al. 2022, arXiv:2212.10554, §3.2–3.3; torchscale 0.3.0
    ``XPOS.forward``.
    """
    x = _check_x("x", x)
    if not isinstance(key, bool):
        raise TypeError(f"key must be a bool, got {key!r}")
    layout = check_choice("layout", layout, ROPE_LAYOUTS)
    given = positions
    positions = positions_for(x, positions)  # (B, T) → (B, 1, T) for 4-D x
    inv_freq = _inv_freq(x, inv_freq, base)
    zeta = xpos_zeta(2 * inv_freq.numel(), gamma=gamma, device=x.device)
    center = _center_for(center, given, positions)
    scale = xpos_scale(positions, zeta, scale_base=scale_base, center=center)
    if key:
        scale = 1.0 / scale
    angles = positions.to(device=x.device, dtype=torch.float32)[..., None] * inv_freq
    scale = scale.to(x.device)
    if layout == "half":
        angles, scale = torch.cat((angles, angles), -1), torch.cat((scale, scale), -1)
        rotate = rotate_half
    else:
        angles = angles.repeat_interleave(2, dim=-1)
        scale = scale.repeat_interleave(2, dim=-1)
        rotate = rotate_interleaved
    cos, sin = (angles.cos() * scale).to(x.dtype), (angles.sin() * scale).to(x.dtype)
    r = angles.shape[-1]
    x_rot, x_pass = x[..., :r], x[..., r:]
    rotated = x_rot * cos + rotate(x_rot) * sin
    return torch.cat((rotated, x_pass), dim=-1) if r < x.shape[-1] else rotated


def apply_xpos(
    q: torch.Tensor,
    k: torch.Tensor,
    q_positions: torch.Tensor,
    k_positions: torch.Tensor,
    *,
    center: float | torch.Tensor | None = None,
    inv_freq: torch.Tensor | None = None,
    base: float = DEFAULT_BASE,
    scale_base: float = XPOS_SCALE_BASE,
    gamma: float = XPOS_GAMMA,
    layout: str = "interleaved",
) -> tuple[torch.Tensor, torch.Tensor]:
    """xPos on queries and keys (Sun et al. 2022, §3.2–3.3).

    Query i at position m becomes ``R_m q ⊙ ζ^{(m−c)/B}`` and key j at n becomes
    ``R_n k ⊙ ζ^{−(n−c)/B}`` (R_m the RoPE rotation, factors per pair), so that

        ⟨q̃_m, k̃_n⟩ = Σ_i ζ_i^{(m−n)/B} · (RoPE score of pair i),

    a function of m − n only, decaying for m > n. The centre c cancels; it keeps the
    factors finite (:func:`xpos_max_distance`). With scale_base = ``math.inf`` this is
    :func:`posenc.rope.apply_rope`.

    Args:
        q: (B, H, T_q, d_h) float (any (..., T_q, d_h)).
        k: (B, H, T_k, d_h) float, the same d_h.
        q_positions: (T_q,); (B, T_q), one row per sequence as transformers'
            ``position_ids`` (never broadcast over the heads); or (B, 1, T_q) (any
            shape with q's number of leading dimensions that broadcasts against them,
            :func:`posenc.rope.positions_for`).
        k_positions: (T_k,), (B, T_k) or (B, 1, T_k), likewise against k.
        center: c; None (default) takes :func:`xpos_center` of k_positions per
            sequence, ⌈T/2⌉ for T keys 0 … T − 1: torchscale 0.3.0's centre, also when
            decoding with a cache (its ``offset``). ``T // 2`` reproduces
            rotary-embedding-torch 0.9.1's ``rotate_queries_and_keys``; 0 is the
            paper's uncentred form.
        inv_freq, base, scale_base, gamma, layout: as in :func:`rotate_xpos`.

    Returns:
        ``(q_rot, k_rot)`` of q's and k's shapes, dtypes and device.

    Raises:
        TypeError: q or k not floating tensors; positions not real tensors.
        ValueError: q and k with different head_dim; positions of another shape (the
            message names it and the shapes allowed); as :func:`rotate_xpos`.

    Source: Sun et al. 2022, "A Length-Extrapolatable Transformer", arXiv:2212.10554,
    §3.2 (ζ, Eq. of f_q and f_k) and §3.3; torchscale 0.3.0
    ``component/xpos_relative_position.py``; rotary-embedding-torch 0.9.1.
    """
    q, k = _check_x("q", q), _check_x("k", k)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same head_dim, got {q.shape[-1]} and {k.shape[-1]}"
        )
    given = k_positions
    k_positions = positions_for(k, k_positions, "k_positions")
    q_positions = positions_for(q, q_positions, "q_positions")
    center = _center_for(center, given, k_positions)
    if center is None:
        if k.shape[-2] == 0:
            center = 0.0
        else:
            center = xpos_center(k_positions)
    options = dict(
        center=center,
        inv_freq=inv_freq,
        base=base,
        scale_base=scale_base,
        gamma=gamma,
        layout=layout,
    )
    return (
        rotate_xpos(q, q_positions, key=False, **options),
        rotate_xpos(k, k_positions, key=True, **options),
    )


@register_scheme
class XPosScheme(PositionalScheme):
    """xPos at plug-in point 2: queries and keys are rotated as RoPE rotates them and
    scaled by ``ζ_i^{±(p − c)/B}`` per pair (:func:`apply_xpos`), so that each pair's
    score decays as ``ζ_i^{(m − n)/B}`` with the distance.

    The centre c is fixed (default 0, the paper's uncentred form), not taken from each
    call's keys: keys stored in a KV cache keep the factor of the centre they were
    scaled with, so a centre that moved with the cache's length would change the
    scores of old keys. With c = 0, float32 factors stay finite for positions up to
    :func:`xpos_max_distance` (about 36,260 with the defaults); give a larger ``center``
    for longer sequences.

    Args:
        d_model, num_heads: model sizes (head_dim must be even).
        base: frequency base b, default ``DEFAULT_BASE`` (10000). scale_base: B (512,
            the paper's; ``math.inf`` gives RoPE). gamma: γ (0.4). layout:
            ``"interleaved"`` (the reference codes') or ``"half"``. center: c.

    Source: Sun et al. 2022, "A Length-Extrapolatable Transformer", arXiv:2212.10554,
    §3.2–3.3 (without its blockwise causal attention, §3.4, an inference-time mask).
    """

    name = "xpos"
    hooks = frozenset({"transform_qk"})

    def __init__(
        self,
        *,
        d_model: int,
        num_heads: int,
        base: float = DEFAULT_BASE,
        scale_base: float = XPOS_SCALE_BASE,
        gamma: float = XPOS_GAMMA,
        layout: str = "interleaved",
        center: float = 0.0,
    ) -> None:
        super().__init__(d_model=d_model, num_heads=num_heads)
        check_even_dim("head_dim", self.head_dim)
        self.base = check_base(base)
        self.scale_base = _check_positive("scale_base", scale_base, allow_inf=True)
        self.gamma = _check_positive("gamma", gamma, allow_inf=False)
        self.layout = check_choice("layout", layout, ROPE_LAYOUTS)
        if isinstance(center, bool) or not isinstance(center, Real):
            raise TypeError(f"center must be a real number, got {center!r}")
        if not math.isfinite(center):
            raise ValueError(f"center must be finite, got {center}")
        self.center = float(center)
        self.register_buffer(
            "inv_freq", compute_inv_freq(self.head_dim, self.base), persistent=False
        )

    def transform_qk(self, q, k, q_positions, k_positions):
        """xPos on q (B, H, T_q, d_h) and k (B, H, T_k, d_h) at their positions, the
        attention's (B′, 1, T) (or (T,) on a direct call)."""
        return apply_xpos(
            q,
            k,
            q_positions,
            k_positions,
            center=self.center,
            inv_freq=self.inv_freq,
            scale_base=self.scale_base,
            gamma=self.gamma,
            layout=self.layout,
        )

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, base={self.base}, scale_base={self.scale_base}, "
            f"gamma={self.gamma}, layout={self.layout!r}, center={self.center}"
        )
