"""Rotary position embedding, RoPE (Su et al. 2021, "RoFormer: Enhanced Transformer with
Rotary Position Embedding", §3.2–3.4).

Each pair of features ``(x_a, x_b)`` of a query or key at position m is rotated by the
angle ``m·θ_i``, θ_i = b^(−2i/d):

    (x_a, x_b) ↦ (x_a cos mθ_i − x_b sin mθ_i,  x_a sin mθ_i + x_b cos mθ_i)

so that ⟨R_m q, R_n k⟩ = ⟨q, R_{n−m} k⟩ depends on the offset only (RoFormer Eq. 16).
Which features form a pair is the *layout*:

* ``"interleaved"``: pairs (2i, 2i+1) — RoFormer, GPT-J, Meta's original Llama code;
* ``"half"``: pairs (i, i + r/2) — GPT-NeoX and Hugging Face's Llama (``rotate_half``).

The two are the same rotation up to a fixed permutation of the features
(:func:`posenc.layout.pair_permutation`). ``"half"`` is the feature order that
:func:`posenc.sinusoidal.sinusoidal_encoding` calls ``"concatenated"`` (``[sin |
cos]``): one permutation under two names, each the one its field uses.

The element-wise form ``x⊙cos + rotate(x)⊙sin`` used here equals the block-diagonal
matrix form of :func:`rope_matrix` (RoFormer Eq. 34); the chapter and the tests prove
and check it.
"""

from __future__ import annotations

import math

import torch

from ._checks import check_base, check_choice, check_even_dim, check_int
from .scaling import check_scaling, rope_inv_freq
from .schemes import PositionalScheme, register_scheme
from .frequencies import DEFAULT_BASE, compute_inv_freq
from .layout import ROPE_LAYOUTS  # noqa: F401 (re-exported)
from .utils import cpu_float64



def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``(x₁, x₂) ↦ (−x₂, x₁)`` on the two halves of the last dimension: the 90° turn of
    every pair (i, i + r/2) in the ``"half"`` layout. x: (..., r) with r even → (...,
    r)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rotate_interleaved(x: torch.Tensor) -> torch.Tensor:
    """``(x_{2i}, x_{2i+1}) ↦ (−x_{2i+1}, x_{2i})``: the 90° turn of every adjacent pair
    in the ``"interleaved"`` layout. x: (..., r) with r even → (..., r)."""
    return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)


def _check_positions(positions: object, seq_len: int) -> torch.Tensor:
    """A real, finite tensor of positions whose last dimension is T = ``seq_len``
    (the shape rule against a tensor x is :func:`positions_for`)."""
    if (
        not isinstance(positions, torch.Tensor)
        or positions.is_complex()
        or positions.dtype == torch.bool
    ):
        raise TypeError(
            "positions must be a real tensor, got "
            f"{getattr(positions, 'dtype', type(positions))}"
        )
    if positions.dim() == 0 or positions.shape[-1] != seq_len:
        raise ValueError(
            f"positions must have shape (T,) (or (..., T)) with T={seq_len}, the "
            "length of x, "
            f"got {tuple(positions.shape)}"
        )
    if positions.is_floating_point() and not torch.isfinite(positions).all():
        raise ValueError("positions must be finite")
    return positions


def allowed_position_shapes(x_shape: tuple[int, ...]) -> str:
    """The position shapes :func:`positions_for` accepts for x of ``x_shape``, in
    words, for error messages."""
    *lead, seq_len, _ = x_shape
    names = ["B", "H", *(f"D{i}" for i in range(2, len(lead)))][: len(lead)]
    shapes = ["(T,)"]
    if lead:
        shapes.append("(B, T)")
    if len(lead) >= 2:
        shapes.append("(" + ", ".join(f"{n} or 1" for n in names) + ", T)")
    sizes = ", ".join(f"{n}={size}" for n, size in zip(names, lead, strict=True))
    rule = " or ".join(shapes)
    text = f"{rule} with T={seq_len}" + (f", {sizes}" if sizes else "")
    if lead:
        same = "; (B, 1, T) is the same" if len(lead) >= 2 else ""
        row = "one row per sequence, as transformers' position_ids"
        text += f" ((B, T) is {row}{same})"
    return text


def positions_for(
    x: torch.Tensor, positions: object, name: str = "positions"
) -> torch.Tensor:
    """``positions`` checked against x (..., T, d) and shaped to broadcast against
    x's leading dimensions, each sequence of the batch reading its own row.

    * (T,): every sequence and head alike; returned as is.
    * (B, T) with B = x.shape[0] (or 1): one row per sequence, as transformers'
      ``position_ids``; for x (B, H, T, d_h) returned as the view (B, 1, T), never
      broadcast against the heads (a (B, T) row matched against H heads would turn
      head h by sequence h's positions).
    * (B or 1, H or 1, …, T), as many dimensions as x has before its last: broadcast
      as is, e.g. the attention's (B′, 1, T).

    Args:
        x: (..., T, d) the tensor to rotate. positions: as above, integer or float.
        name: the argument's name in messages.

    Returns:
        The positions, a view of the input (no copy).

    Raises:
        TypeError: positions not a real tensor.
        ValueError: any other shape (the message names the shape received and the
            shapes allowed); non-finite positions.

    Source: the shape of ``position_ids`` in transformers 5.23
    (``LlamaRotaryEmbedding.forward``: cos and sin (B, T, d) unsqueezed at dim 1
    against (B, H, T, d_h) in ``apply_rotary_pos_emb``).
    """
    if (
        not isinstance(positions, torch.Tensor)
        or positions.is_complex()
        or positions.dtype == torch.bool
    ):
        raise TypeError(
            f"{name} must be a real tensor, got "
            f"{getattr(positions, 'dtype', type(positions))}"
        )
    lead, seq_len = tuple(x.shape[:-2]), x.shape[-2]
    shape = tuple(positions.shape)
    ok = bool(shape) and shape[-1] == seq_len
    if ok and len(shape) == 2 and lead and shape[0] in (1, lead[0]):
        positions = positions.reshape(shape[0], *([1] * (len(lead) - 1)), seq_len)
    elif ok and len(shape) > 1:
        ok = len(shape) == len(lead) + 1 and all(
            p in (1, n) for p, n in zip(shape[:-1], lead, strict=True)
        )
    if not ok:
        raise ValueError(
            f"{name} must have shape {allowed_position_shapes(tuple(x.shape))} for x "
            f"of shape {tuple(x.shape)}; got {shape}"
        )
    if positions.is_floating_point() and not torch.isfinite(positions).all():
        raise ValueError(f"{name} must be finite, got a tensor with inf or nan")
    return positions


def rope_cos_sin(
    positions: torch.Tensor,
    inv_freq: torch.Tensor,
    *,
    layout: str = "half",
    attention_factor: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The cos and sin tables of RoPE, laid out to multiply the rotated features
    element-wise.

    Angles ``m·θ_i`` are formed in float32 whatever the positions' dtype (an angle of
    10⁵ radians needs float32's 24-bit mantissa; bfloat16 keeps 8 bits).

    The tables take the positions' shape: transformers' ``position_ids`` (B, T) give
    (B, T, r), which multiply q (B, H, T, d_h) only after ``cos[:, None]`` (one row
    per sequence, as transformers' ``apply_rotary_pos_emb(..., unsqueeze_dim=1)``);
    multiplied as they are, (B, T, r) would broadcast against (H, T, r) and turn head
    h by sequence h's positions. :func:`apply_rope` does this itself
    (:func:`positions_for`).

    Args:
        positions: (..., T) integer or float positions, e.g. (T,), (B, T) or
            (B, 1, T).
        inv_freq: (r/2,) frequencies θ_i in radians per position.
        layout: ``"half"`` (each angle repeated as [θ_0 … θ_{r/2−1}, θ_0 … θ_{r/2−1}])
            or ``"interleaved"`` ([θ_0, θ_0, θ_1, θ_1, …]).
        attention_factor: multiplies cos and sin (YaRN's temperature; 1 otherwise).

    Returns:
        ``(cos, sin)``, float32, each (..., T, r).

    Raises:
        ValueError: unknown layout.

    Source: Su et al. 2021, RoFormer, §3.4.2, Eq. 34; transformers 5.23
    ``LlamaRotaryEmbedding.forward`` (float32 angles).
    """
    layout = check_choice("layout", layout, ROPE_LAYOUTS)
    angles = positions.to(torch.float32)[..., None] * inv_freq.to(
        device=positions.device, dtype=torch.float32
    )
    if layout == "half":
        angles = torch.cat((angles, angles), dim=-1)
    else:
        angles = angles.repeat_interleave(2, dim=-1)
    return angles.cos() * attention_factor, angles.sin() * attention_factor


def apply_rope(
    x: torch.Tensor,
    positions: torch.Tensor,
    *,
    inv_freq: torch.Tensor | None = None,
    base: float = DEFAULT_BASE,
    layout: str = "half",
    attention_factor: float = 1.0,
) -> torch.Tensor:
    """Rotate the features of queries or keys by their positions (RoFormer §3.4.2, Eq.
    34).

    ``x ↦ x⊙cos + rotate(x)⊙sin`` on the first ``rotary_dim = 2·len(inv_freq)``
    features; the remaining ``head_dim − rotary_dim`` features pass unchanged (partial
    rotary, as in GPT-NeoX and GPT-J). cos and sin are computed in float32, multiplied
    by ``attention_factor`` and cast to x's dtype before the products, as Hugging Face's
    Llama does.

    Args:
        x: (..., T, head_dim) float, e.g. (B, H, T, d_h).
        positions: integer or float positions (:func:`positions_for`): (T,) for
            every sequence alike; (B, T), B = x.shape[0], one row per sequence (the
            shape of transformers' ``position_ids``; for x (B, H, T, d_h) each row
            turns its own sequence's heads, never broadcast over the heads); or a
            shape with x's number of leading dimensions that broadcasts against them,
            e.g. (B, 1, T).
        inv_freq: (rotary_dim/2,) frequencies in radians per position; default
            ``base^(−2i/head_dim)`` (full rotary), e.g. from
            :func:`posenc.scaling.rope_inv_freq`.
        base: frequency base b when ``inv_freq`` is None, default ``DEFAULT_BASE``
            (10000, as RoFormer; 500000 in Llama 3).
        layout: ``"half"`` (pairs (i, i + r/2)) or ``"interleaved"`` (pairs (2i, 2i +
            1)).
        attention_factor: scales cos and sin, hence every score by its square (YaRN).

    Returns:
        A tensor of x's shape, dtype and device.

    Raises:
        TypeError: if x is not a floating tensor or positions not a real tensor.
        ValueError: odd head_dim; inv_freq not 1-D or rotary_dim > head_dim; positions
            of another shape (the message names it and the shapes allowed), e.g. (B, T)
            with B ≠ x.shape[0]; non-finite positions; unknown layout; base not finite
            and > 0.

    Source: Su et al. 2021, RoFormer, §3.2 (Eq. 12–16) and §3.4.2 (Eq. 34); half layout
    from GPT-NeoX / Hugging Face ``rotate_half``; (B, T) positions as transformers
    5.23's ``position_ids`` (``models/llama/modeling_llama.py``,
    ``apply_rotary_pos_emb`` with ``unsqueeze_dim=1``).
    """
    positions, inv_freq, layout = check_rope_input(
        x, positions, inv_freq, base, layout, "x"
    )
    rotary_dim = 2 * inv_freq.numel()
    cos, sin = rope_cos_sin(
        positions, inv_freq, layout=layout, attention_factor=attention_factor
    )
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    rotate = rotate_half if layout == "half" else rotate_interleaved
    x_rot, x_pass = x[..., :rotary_dim], x[..., rotary_dim:]
    rotated = x_rot * cos + rotate(x_rot) * sin
    return torch.cat((rotated, x_pass), dim=-1) if rotary_dim < x.shape[-1] else rotated


def check_rope_input(
    x: object, positions: object, inv_freq, base: float, layout: str, name: str
) -> tuple[torch.Tensor, torch.Tensor, str]:
    """The public checks of :func:`apply_rope` and :func:`apply_rope_qk`: returns the
    checked positions shaped against x (:func:`positions_for`: (B, T) becomes
    (B, 1, T) for 4-D x), the inv_freq to use and the layout."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(
            f"{name} must be a floating tensor, got {getattr(x, 'dtype', type(x))}"
        )
    if x.dim() < 2:
        raise ValueError(
            f"{name} must have shape (..., T, head_dim), got {tuple(x.shape)}"
        )
    head_dim = check_even_dim("head_dim", x.shape[-1])
    layout = check_choice("layout", layout, ROPE_LAYOUTS)
    positions = positions_for(x, positions)
    if inv_freq is None:
        inv_freq = compute_inv_freq(head_dim, check_base(base), device=x.device)
    if not isinstance(inv_freq, torch.Tensor):
        raise TypeError(f"inv_freq must be a tensor, got {type(inv_freq).__name__}")
    if inv_freq.dim() != 1 or inv_freq.numel() == 0:
        raise ValueError(
            f"inv_freq must have shape (rotary_dim/2,), got {tuple(inv_freq.shape)}"
        )
    rotary_dim = 2 * inv_freq.numel()
    if rotary_dim > head_dim:
        raise ValueError(
            f"rotary_dim = 2·len(inv_freq) = {rotary_dim} must not exceed head_dim = "
            f"{head_dim}"
        )
    return positions, inv_freq, layout


def rope_matrix(
    position: float,
    inv_freq: torch.Tensor,
    *,
    layout: str = "half",
    head_dim: int | None = None,
) -> torch.Tensor:
    """The rotation R_{Θ,m} of one position as an explicit (head_dim, head_dim) matrix
    (RoFormer Eq. 15): the naive reference for :func:`apply_rope` (``apply_rope(x) == x
    @ R.T``). O(d²) per position; for teaching and tests.

    Args:
        position: the position m (float).
        inv_freq: (r/2,) frequencies. layout: as in :func:`apply_rope`.
        head_dim: total width (≥ r); the features beyond r are left unchanged. Default
            r.

    Returns:
        float64 matrix (head_dim, head_dim), orthogonal.
    """
    layout = check_choice("layout", layout, ROPE_LAYOUTS)
    half = inv_freq.numel()
    head_dim = 2 * half if head_dim is None else head_dim
    if head_dim < 2 * half:
        raise ValueError(
            f"head_dim = {head_dim} must be at least rotary_dim = {2 * half}"
        )
    matrix = torch.eye(head_dim, dtype=torch.float64)
    for i, theta in enumerate(cpu_float64(inv_freq).tolist()):
        a, b = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + half)
        c, s = math.cos(position * theta), math.sin(position * theta)
        matrix[a, a], matrix[a, b], matrix[b, a], matrix[b, b] = c, -s, s, c
    return matrix


def _row(positions: torch.Tensor, i: int) -> torch.Tensor:
    """Row i of the attention's positions (B′, 1, T), or the positions themselves if
    they are shared (B′ = 1, or a direct call's (T,))."""
    if positions.dim() == 1 or positions.shape[0] == 1:
        return positions
    return positions[i : i + 1]


@register_scheme
class RotaryScheme(PositionalScheme):
    """RoPE at plug-in point 2: queries and keys are rotated by their positions before
    the scores.

    Args:
        d_model, num_heads: model sizes (head_dim = d_model / num_heads must be even).
        base: frequency base b, default ``DEFAULT_BASE`` (10000). layout: ``"half"``
            or ``"interleaved"``.
        rotary_dim: features rotated per head (even, ≤ head_dim); default head_dim.
        scaling: None or a context-extension dict for
            :func:`posenc.scaling.rope_inv_freq` (``{"rope_type": "yarn", "factor": 4.0,
            "original_max_position_embeddings": 64}``). For ``"dynamic"`` and
            ``"longrope"`` (whose factors switch at the trained length) the current
            length is ``max(k_positions) + 1`` of each call.

    Source: Su et al. 2021, RoFormer, §3.4; scaling: see :mod:`posenc.scaling`.
    """

    name = "rope"
    hooks = frozenset({"transform_qk"})

    def __init__(
        self,
        *,
        d_model: int,
        num_heads: int,
        base: float = DEFAULT_BASE,
        layout: str = "half",
        rotary_dim: int | None = None,
        scaling: dict | None = None,
    ) -> None:
        super().__init__(d_model=d_model, num_heads=num_heads)
        check_even_dim("head_dim", self.head_dim)
        self.base = check_base(base)
        self.layout = check_choice("layout", layout, ROPE_LAYOUTS)
        self.rotary_dim = (
            self.head_dim
            if rotary_dim is None
            else check_even_dim("rotary_dim", rotary_dim)
        )
        if self.rotary_dim > self.head_dim:
            raise ValueError(
                f"rotary_dim = {self.rotary_dim} must not exceed head_dim = "
                f"{self.head_dim}"
            )
        self.scaling = check_scaling(scaling)  # validated now, not mid-forward
        self.dynamic = self.scaling is not None and self.scaling["rope_type"] in (
            "dynamic",
            "longrope",
        )
        # the other types have fixed frequencies: computed once, moved with the module
        inv_freq, self.attention_factor = rope_inv_freq(
            self.rotary_dim, self.base, self.scaling
        )
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def transform_qk(self, q, k, q_positions, k_positions):
        """Rotate q (B, H, T_q, d_h) and k (B, H, T_k, d_h) by their positions, the
        attention's (B′, 1, T), B′ ∈ {1, B} (or (T,) on a direct call)."""
        if self.dynamic:
            return self._transform_dynamic(q, k, q_positions, k_positions)
        rope = dict(
            inv_freq=self.inv_freq.to(q.device),
            layout=self.layout,
            attention_factor=self.attention_factor,
        )
        return apply_rope(q, q_positions, **rope), apply_rope(k, k_positions, **rope)

    def _transform_dynamic(self, q, k, q_positions, k_positions):
        """``"dynamic"`` and ``"longrope"`` scaling: the frequencies follow the current
        length ``max(k_positions) + 1``, taken per sequence for (B, 1, T) positions,
        so that a row of a batch is rotated as it would be alone (Hugging Face takes
        one maximum over the batch)."""
        if k_positions.dim() > 1 and k_positions.shape[0] > 1:
            rows = [
                self._transform_dynamic(
                    q[i : i + 1],
                    k[i : i + 1],
                    _row(q_positions, i),
                    _row(k_positions, i),
                )
                for i in range(q.shape[0])
            ]
            return torch.cat([qi for qi, _ in rows]), torch.cat([ki for _, ki in rows])
        seq_len = int(k_positions.max()) + 1 if k_positions.numel() else 1
        inv_freq, factor = rope_inv_freq(
            self.rotary_dim, self.base, self.scaling, seq_len=seq_len
        )
        rope = dict(
            inv_freq=inv_freq.to(q.device), layout=self.layout, attention_factor=factor
        )
        return apply_rope(q, q_positions, **rope), apply_rope(k, k_positions, **rope)

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, base={self.base}, layout={self.layout!r}, "
            f"rotary_dim={self.rotary_dim}, "
            f"scaling={self.scaling}"
        )


def long_term_decay(
    distances: torch.Tensor, head_dim: int, base: float = DEFAULT_BASE
) -> torch.Tensor:
    """RoFormer's upper bound on the rotary score as a function of the relative distance
    (§3.4.3).

    Writing the score as Re Σ_i h_i e^{i(m−n)θ_i} with h_i the product of the i-th
    complex pairs of q and k, Abel summation bounds it by (max_i |h_{i+1} − h_i|) ·
    Σ_{j=1}^{d/2} |S_j|, with partial sums S_j = Σ_{k=0}^{j−1} e^{i(m−n)θ_k}. This
    returns the relative size (1/(d/2)) Σ_j |S_j|, the curve of the paper's Figure 2; it
    is (d/2 + 1)/2 at distance 0 (every |S_j| = j) and decays, with oscillation, as the
    distance grows.

    Args:
        distances: (N,) relative distances m − n (int or float). head_dim: d (even).
        base: frequency base b, default ``DEFAULT_BASE`` (10000).

    Returns:
        float64 tensor (N,).
    """
    head_dim = check_even_dim("head_dim", head_dim)
    theta = compute_inv_freq(head_dim, check_base(base)).double()
    phases = cpu_float64(distances)[:, None] * theta[None, :]
    partial_sums = torch.cumsum(torch.polar(torch.ones_like(phases), phases), dim=-1)
    return partial_sums.abs().mean(dim=-1)


def token_discrimination(
    distances: torch.Tensor, head_dim: int, base: float = DEFAULT_BASE
) -> torch.Tensor:
    """B_{m,θ} = Σ_{i<d/2} cos(m θ_i), the expected attention score (the logit, before
    the softmax) a key similar to the query gains over a random key at distance m, in
    units of 2σ² (Men et al., NeurIPS 2024, "Base of RoPE Bounds Context Length",
    arXiv 2405.14591).

    For a query q with i.i.d. zero-mean components of variance σ², a similar key
    k* = q + ε and a random key k (ε and k independent of q, zero-mean),
    E[qᵀR_m k*] − E[qᵀR_m k] = E[qᵀR_m q] = σ² tr R_m = 2σ² B_{m,θ}: each of the d/2
    rotation blocks has trace 2 cos(m θ_i). Where B_{m,θ} < 0 the similar key scores
    below a random one on average.

    Args:
        distances: (N,) relative distances m (int or float tensor). head_dim: d
            (even). base: frequency base b, default ``DEFAULT_BASE`` (10000).

    Returns:
        float64 tensor (N,); d/2 at distance 0.

    Raises:
        TypeError / ValueError: ``distances`` not a 1-D real tensor, an odd or
            non-positive ``head_dim``, a base that is not a finite number > 0.
    """
    if not isinstance(distances, torch.Tensor) or distances.is_complex():
        raise TypeError(
            f"distances must be a real tensor, got {type(distances).__name__}"
        )
    if distances.dim() != 1:
        raise ValueError(
            f"distances must be a 1-D tensor (N,), got shape {tuple(distances.shape)}"
        )
    head_dim = check_even_dim("head_dim", head_dim)
    theta = compute_inv_freq(head_dim, base, dtype=torch.float64)
    return torch.cos(cpu_float64(distances)[:, None] * theta[None, :]).sum(dim=-1)


def base_lower_bound(
    head_dim: int,
    context_length: int,
    *,
    min_base: float = 1.0,
    max_base: float = 1e12,
    rtol: float = 1e-7,
) -> float:
    """The smallest RoPE base b ≥ ``min_base`` whose B_{m,θ}
    (:func:`token_discrimination`) is ≥ 0 at every distance m = 0 … ``context_length``:
    Men et al.'s lower bound of the base for a context length (NeurIPS 2024, arXiv
    2405.14591; their Figure 1 plots it for d = 128).

    The bases that pass are not an interval: at d = 128 they form many windows, some
    narrower than 0.1 % of b, with failing bases between them and above the
    smallest. The search walks up from ``min_base`` and skips only bases proven to
    fail. At a failing b, take a distance m where B_m = −δ < 0. Since
    |dB_m/d ln b| = |Σ_i mθ_i (2i/d) sin(mθ_i)| ≤ D = Σ_i mθ_i (2i/d), and D shrinks
    as b grows (θ_i = b^(−2i/d)), B_m stays negative on [b, b·e^(δ/D)):
    the walk jumps to the farthest such point over the failing distances. Steps are
    at least a factor 1 + ``rtol``, so a passing window narrower than that could be
    missed: the result is exact to that precision. At d = 128 and L = 1024 it is
    4.29e3 (the paper's figure reads about 4e3 there).

    Args:
        head_dim: d (even). context_length: L (int ≥ 1).
        min_base: where the search starts (> 0). max_base: where it stops (≥
            ``min_base``). rtol: the smallest relative step (> 0).

    Returns:
        The bound b (float).

    Raises:
        TypeError / ValueError: an odd ``head_dim``, a non-positive length, bases
            that are not finite and > 0 or out of order, an ``rtol`` not > 0; no base
            up to ``max_base`` passes (at d = 2, θ_0 = 1 for every base and none
            passes once L ≥ 2).
    """
    head_dim = check_even_dim("head_dim", head_dim)
    length = check_int("context_length", context_length, minimum=1)
    low, high = check_base(min_base), check_base(max_base)
    if high < low:
        raise ValueError(f"max_base ({high:g}) must be >= min_base ({low:g})")
    if not (isinstance(rtol, (int, float)) and rtol > 0 and math.isfinite(rtol)):
        raise ValueError(f"rtol must be a finite number > 0, got {rtol!r}")
    m = torch.arange(length + 1, dtype=torch.float64)
    weights = torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim
    b = low
    while b <= high:
        theta = compute_inv_freq(head_dim, b, dtype=torch.float64)
        values = torch.cos(m[:, None] * theta).sum(dim=1)
        failing = values < 0
        if not bool(failing.any()):
            return b
        # D = m·Σ_i θ_i (2i/d) at every failing m; the longest proven skip wins
        slope = m[failing] * float((theta * weights).sum())
        skip = float((-values[failing] / slope).max())
        b *= math.exp(max(skip, math.log1p(rtol)))
    raise ValueError(
        f"no base in {low:g} … {high:g} keeps B_m >= 0 for every m <= {length} at "
        f"head_dim {head_dim}"
    )


# --------------------------------------------------------------------------------------
# Multimodal RoPE (Qwen2-VL) and 2-D axial RoPE (vision transformers)
# --------------------------------------------------------------------------------------


