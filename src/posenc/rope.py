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
(:func:`posenc.layout.pair_permutation`). The element-wise form ``x⊙cos +
rotate(x)⊙sin`` used here equals the block-diagonal matrix form of :func:`rope_matrix`
(RoFormer Eq. 34); the chapter and the tests prove and check it.
"""

from __future__ import annotations

import functools
import itertools
import math

import torch

from ._checks import check_base, check_choice, check_even_dim, check_int
from .layout import pair_permutation
from .scaling import check_scaling, rope_inv_freq
from .schemes import PositionalScheme, register_scheme
from .sinusoidal import compute_inv_freq
from .utils import cpu_float64

ROPE_LAYOUTS = ("half", "interleaved")


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

    Args:
        positions: (..., T) integer or float positions.
        inv_freq: (r/2,) frequencies θ_i in radians per position.
        layout: ``"half"`` (each angle repeated as [θ_0 … θ_{r/2−1}, θ_0 … θ_{r/2−1}])
            or ``"interleaved"`` ([θ_0, θ_0, θ_1, θ_1, …]).
        attention_factor: multiplies cos and sin (YaRN's temperature; 1 otherwise).

    Returns:
        ``(cos, sin)``, float32, each (..., T, r).
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
    base: float = 10000.0,
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
        positions: (T,) integer or float positions, or any shape (..., T) that
            broadcasts against x's leading dimensions, e.g. (B, 1, T) for per-sequence
            offsets.
        inv_freq: (rotary_dim/2,) frequencies in radians per position; default
            ``base^(−2i/head_dim)`` (full rotary), e.g. from
            :func:`posenc.scaling.rope_inv_freq`.
        base: frequency base b when ``inv_freq`` is None (10000 in RoFormer, 500000 in
            Llama 3).
        layout: ``"half"`` (pairs (i, i + r/2)) or ``"interleaved"`` (pairs (2i, 2i +
            1)).
        attention_factor: scales cos and sin, hence every score by its square (YaRN).

    Returns:
        A tensor of x's shape, dtype and device.

    Raises:
        TypeError: if x is not a floating tensor or positions not a real tensor.
        ValueError: odd head_dim; inv_freq not 1-D or rotary_dim > head_dim; positions
            whose last dimension is not T; non-finite positions; unknown layout; base
            not finite and > 0.

    Source: Su et al. 2021, RoFormer, §3.2 (Eq. 12–16) and §3.4.2 (Eq. 34); half layout
    from GPT-NeoX / Hugging Face ``rotate_half``.
    """
    positions, inv_freq, layout = _check_rope_input(
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


def _check_rope_input(
    x: object, positions: object, inv_freq, base: float, layout: str, name: str
) -> tuple[torch.Tensor, torch.Tensor, str]:
    """The public checks of :func:`apply_rope` and :func:`apply_rope_qk`: returns the
    checked positions, the inv_freq to use and the layout."""
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
    positions = _check_positions(positions, x.shape[-2])
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


def _check_out(out: object, q: torch.Tensor, k: torch.Tensor) -> tuple | None:
    if out is None:
        return None
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(f"out must be a pair (q_out, k_out) or None, got {type(out)}")
    for name, o, x in (("q_out", out[0], q), ("k_out", out[1], k)):
        if not isinstance(o, torch.Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(o).__name__}")
        if o.shape != x.shape or o.dtype != x.dtype or o.device != x.device:
            raise ValueError(
                f"{name} must have the input's shape, dtype and device "
                f"{tuple(x.shape)}, {x.dtype}, {x.device}; got {tuple(o.shape)}, "
                f"{o.dtype}, {o.device}"
            )
        shared = o.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        if shared and o is not x:
            raise ValueError(
                f"{name} shares memory with its input without being it: pass the "
                "input itself (in place) or a separate tensor"
            )
    return tuple(out)


#: Bytes of x in one tile of :func:`_rotate_pairs_into`: a few passes over a tile find
#: it in the CPU's cache, so memory traffic stays close to one read and one write.
#: Measured on the book's CPU (``python -m posenc.bench``): one (T = 4096, d_h = 128)
#: head in float32 per tile rotates faster than smaller tiles or tiles across heads.
ROPE_TILE_BYTES = 1 << 21


def _rotate_pairs_into(
    x: torch.Tensor, out: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, half: bool
) -> None:
    """``out = rotation of x`` on the pairs of the last dimension; cos and sin are
    (..., T, r/2), one angle per pair, broadcasting against x's leading dimensions.
    ``out`` may be ``x`` itself.

    x is cut into tiles of about :data:`ROPE_TILE_BYTES`: a group of consecutive heads
    (x's last leading dimension) and a range of positions. Each tile is rotated by a
    few element-wise passes that find it in the cache. Half layout: ``out = x⊙[cos,
    cos]`` in one pass over whole rows, then ``out₁ −= x₂⊙sin`` and ``out₂ += x₁⊙sin``.
    Interleaved layout in float32/64: one complex multiplication,
    ``(x_{2i} + i·x_{2i+1})·(cos + i·sin)``; otherwise four strided passes.
    """
    r = 2 * cos.shape[-1]
    inplace = out is x
    seq_len, width = x.shape[-2], x.shape[-1]
    lead = tuple(x.shape[:-2]) or (1,)
    xs, os_ = x.view(*lead, seq_len, width), out.view(*lead, seq_len, width)
    if half:
        table = torch.cat((cos, cos), dim=-1)
    elif x.dtype in (torch.float32, torch.float64):
        table = torch.complex(cos, sin)
    else:
        table = cos
    table = table.expand(*lead, seq_len, table.shape[-1])
    sin = sin.expand(*lead, seq_len, sin.shape[-1])
    row_bytes = width * x.element_size()
    tile_t = max(8, min(seq_len, ROPE_TILE_BYTES // row_bytes))
    heads = max(1, ROPE_TILE_BYTES // (tile_t * row_bytes))
    for outer in itertools.product(*(range(n) for n in lead[:-1])):
        for h0 in range(0, lead[-1], heads):
            for t0 in range(0, seq_len, tile_t):
                at = (*outer, slice(h0, h0 + heads), slice(t0, t0 + tile_t))
                xt, ot, tt, st = xs[at], os_[at], table[at], sin[at]
                if half:
                    _rotate_half_tile(xt, ot, tt, st, r, inplace)
                elif tt.is_complex():
                    _rotate_complex_tile(xt, ot, tt, r)
                else:
                    _rotate_strided_tile(xt, ot, tt, st, r, inplace)
    if r < width and not inplace:
        out[..., r:].copy_(x[..., r:])


def _rotate_half_tile(x, out, cos_full, sin, r, inplace):
    h = r // 2
    x1, x2 = x[..., :h], x[..., h:r]
    o1, o2 = out[..., :h], out[..., h:r]
    if inplace:  # in place: keep what the second half still needs
        x1_sin, x2_sin = x1 * sin, x2 * sin
        x[..., :r].mul_(cos_full)
        o1.sub_(x2_sin)  # x₁cos − x₂sin
        o2.add_(x1_sin)  # x₂cos + x₁sin
        return
    torch.mul(x[..., :r], cos_full, out=out[..., :r])
    o1.addcmul_(x2, sin, value=-1)
    o2.addcmul_(x1, sin)


def _rotate_strided_tile(x, out, cos, sin, r, inplace):
    x1, x2 = x[..., 0:r:2], x[..., 1:r:2]
    o1, o2 = out[..., 0:r:2], out[..., 1:r:2]
    if inplace:
        x1_sin, x2_sin = x1 * sin, x2 * sin
        o1.mul_(cos).sub_(x2_sin)
        o2.mul_(cos).add_(x1_sin)
        return
    torch.mul(x1, cos, out=o1)
    o1.addcmul_(x2, sin, value=-1)
    torch.mul(x2, cos, out=o2)
    o2.addcmul_(x1, sin)


def _rotate_complex_tile(x, out, phase, r):
    xc = torch.view_as_complex(x[..., :r].unflatten(-1, (r // 2, 2)))
    oc = torch.view_as_complex(out[..., :r].unflatten(-1, (r // 2, 2)))
    torch.mul(xc, phase, out=oc)


@functools.lru_cache(maxsize=None)
def _compiled_rotation(half: bool):
    """The rotation as one ``torch.compile``-d element-wise kernel per layout (one
    compilation per shape): each pair is viewed as an axis of size 2, and
    ``out = x⊙[cos, cos] + flip(x)⊙[−sin, sin]`` along it, so that Inductor emits a
    single vectorised loop that reads each element of x once (its partner comes from
    the same cache line or row) and writes each element of out once."""

    def rotate(x, out, cos, sin):
        r = 2 * cos.shape[-1]
        pair = -2 if half else -1
        shape = (2, r // 2) if half else (r // 2, 2)
        xv = x[..., :r].unflatten(-1, shape)
        c = torch.stack((cos, cos), dim=pair)
        s = torch.stack((-sin, sin), dim=pair)
        out[..., :r].copy_((xv * c + xv.flip(pair) * s).flatten(-2))
        if r < x.shape[-1]:
            out[..., r:].copy_(x[..., r:])

    return torch.compile(rotate, dynamic=False)


def apply_rope_qk(
    q: torch.Tensor,
    k: torch.Tensor,
    positions: torch.Tensor,
    *,
    inv_freq: torch.Tensor | None = None,
    base: float = 10000.0,
    layout: str = "half",
    attention_factor: float = 1.0,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
    fused: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate queries and keys by their positions: the package's fast path, the same
    rotation as :func:`apply_rope` applied to ``q`` and to ``k``.

    Where the time goes in the plain form ``x⊙cos + rotate(x)⊙sin``: RoPE does 3
    floating-point operations per element, so it is bound by memory traffic, and the
    plain form moves each element many times (``rotate`` builds a copy, each product
    another, the sum another, and the cos/sin tables are repeated over both halves).
    This function instead

    * computes the angles once, (..., T, r/2), for q and k together;
    * rotates tile by tile (:data:`ROPE_TILE_BYTES`: a group of heads and a range of
      positions), each tile by a few element-wise passes that find it in the CPU's
      cache — half layout: ``x⊙[cos, cos]`` over whole rows, then ``−x₂⊙sin`` and
      ``+x₁⊙sin`` into the halves; interleaved float32: one complex multiplication — so
      that memory traffic stays close to one read and one write of q and k;
    * takes preallocated outputs (``out=``), or rotates **in place** when ``out`` is
      ``(q, k)`` (as flash-attn's ``apply_rotary_emb(..., inplace=True)``): a fresh
      output tensor costs page faults that can exceed the rotation itself on a CPU;
    * with ``fused=True``, runs one ``torch.compile``-d element-wise kernel per tensor
      instead (each element read once and written once in principle; the first call
      per layout and shape compiles, seconds on a CPU). In the stored CPU run
      (``make bench``) it was the fastest candidate, 1.6× the read-and-write floor
      against 2.4× for the tiled passes (an earlier version that wrote the halves by
      slice assignment was slower than them); on a GPU it becomes one Triton kernel.

    ``python -m posenc.bench`` measures it against transformers' eager path and the
    read-and-write floor (the chapter "The cost of positions: RoPE on a CPU",
    book/cost.ipynb).

    Args:
        q: (..., T, head_dim) float queries, e.g. (B, H, T, d_h).
        k: (..., T_k, head_dim) keys of q's dtype and device, with T_k = T (the same
            positions rotate both; for a KV cache call :func:`apply_rope` per tensor).
        positions: (T,) integer or float positions, or (..., T) broadcasting against
            q's leading dimensions, e.g. (B, 1, T).
        inv_freq: (rotary_dim/2,) frequencies in radians per position; default
            ``base^(−2i/head_dim)``.
        base: frequency base when ``inv_freq`` is None.
        layout: ``"half"`` (pairs (i, i + r/2)) or ``"interleaved"`` (pairs (2i,
            2i + 1)).
        attention_factor: scales cos and sin (YaRN's temperature).
        out: ``(q_out, k_out)`` with q's and k's shapes, dtypes and devices, written and
            returned; ``(q, k)`` rotates in place. Outputs must not partly overlap the
            inputs (memory shared with an input
            must be that input). Default: new tensors.
        fused: use the compiled single-pass kernel.

    Returns:
        ``(q_rot, k_rot)``, the shapes, dtype and device of q and k. In float32 each
        element equals :func:`apply_rope`'s up to the rounding of one multiply-add
        (the operations are the same: ``x₁cos − x₂sin``, ``x₂cos + x₁sin``, with cos and
        sin computed in float32 and cast to x's dtype); in bfloat16/float16 the sum is
        rounded once instead of three times, so results may differ from
        :func:`apply_rope`'s by one unit in the last place.

    Raises:
        TypeError: q or k not floating tensors; positions not a real tensor; inv_freq
            not a tensor; out not a pair of tensors.
        ValueError: as :func:`apply_rope`; q and k with different head_dim, T, dtype or
            device; ``out`` tensors of the wrong shape, dtype or device, or partly
            overlapping an input.

    Source: Su et al. 2021, RoFormer, §3.4.2 (Eq. 34: the computationally efficient
    element-wise form); in-place rotation as in flash-attn's ``apply_rotary_emb``.
    """
    positions, inv_freq, layout = _check_rope_input(
        q, positions, inv_freq, base, layout, "q"
    )
    if not isinstance(k, torch.Tensor) or not k.is_floating_point():
        raise TypeError(
            f"k must be a floating tensor, got {getattr(k, 'dtype', type(k))}"
        )
    if k.shape[-1] != q.shape[-1] or k.dtype != q.dtype or k.device != q.device:
        raise ValueError(
            "q and k must share head_dim, dtype and device, got "
            f"{tuple(q.shape)} {q.dtype} {q.device} and {tuple(k.shape)} {k.dtype} "
            f"{k.device}"
        )
    _check_rope_input(k, positions, inv_freq, base, layout, "k")
    out = _check_out(out, q, k)
    angles = positions.to(torch.float32)[..., None] * inv_freq.to(
        device=positions.device, dtype=torch.float32
    )
    cos = (angles.cos() * attention_factor).to(device=q.device, dtype=q.dtype)
    sin = (angles.sin() * attention_factor).to(device=q.device, dtype=q.dtype)
    if out is None:
        out = (torch.empty_like(q), torch.empty_like(k))
    half = layout == "half"
    for x, o in zip((q, k), out, strict=True):
        if fused:
            if o is x:
                x = x.clone()
            _compiled_rotation(half)(x, o, cos, sin)
        else:
            _rotate_pairs_into(x, o, cos, sin, half)
    return out


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
    """Row i of batched positions (B, ...), or the positions themselves if they are
    shared (1-D, or B = 1)."""
    if positions.dim() == 1 or positions.shape[0] == 1:
        return positions
    return positions[i : i + 1]


@register_scheme
class RotaryScheme(PositionalScheme):
    """RoPE at plug-in point 2: queries and keys are rotated by their positions before
    the scores.

    Args:
        d_model, num_heads: model sizes (head_dim = d_model / num_heads must be even).
        base: frequency base b. layout: ``"half"`` or ``"interleaved"``.
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
        base: float = 10000.0,
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
        """Rotate q (B, H, T_q, d_h) and k (B, H, T_k, d_h) by their positions, (T,) or
        (B, 1, T)."""
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
    distances: torch.Tensor, head_dim: int, base: float = 10000.0
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
        base: frequency base b.

    Returns:
        float64 tensor (N,).
    """
    head_dim = check_even_dim("head_dim", head_dim)
    theta = compute_inv_freq(head_dim, check_base(base)).double()
    phases = cpu_float64(distances)[:, None] * theta[None, :]
    partial_sums = torch.cumsum(torch.polar(torch.ones_like(phases), phases), dim=-1)
    return partial_sums.abs().mean(dim=-1)


def convert_rope_layout(model, layout: str):
    """The same trained model for the other RoPE layout: a copy whose scheme uses
    ``layout`` and whose query and key projections have their output rows permuted
    within every head, so that the logits are unchanged
    (:func:`posenc.layout.pair_permutation`: R_half = P R_interleaved Pᵀ).

    Args:
        model: a :class:`posenc.model.TinyLM` with the "rope" scheme.
        layout: ``"half"`` or ``"interleaved"``.

    Returns:
        A new TinyLM in eval mode on the model's device.

    Raises:
        ValueError: if the model's scheme is not "rope", or ``layout`` is unknown.
    """
    layout = check_choice("layout", layout, ROPE_LAYOUTS)
    scheme = model.scheme
    if scheme.name != "rope":
        raise ValueError(
            "convert_rope_layout needs a model with the 'rope' scheme, got "
            f"{scheme.name!r}"
        )
    converted = model.with_scheme_options(layout=layout)
    if layout == scheme.layout:
        return converted
    perm = pair_permutation(scheme.rotary_dim)
    # interleaved → half takes feature perm[i] to place i; half → interleaved is the
    # inverse
    order = perm if layout == "half" else torch.argsort(perm)
    order = torch.cat(
        (order, torch.arange(scheme.rotary_dim, scheme.head_dim))
    )  # unrotated features stay
    heads, d_model = converted.config.num_heads, converted.config.d_model
    with torch.no_grad():
        for block in converted.blocks:
            weight = block.attn.qkv.weight.view(3, heads, scheme.head_dim, d_model)
            weight[:2] = weight[
                :2, :, order.to(weight.device)
            ]  # queries and keys; values are not rotated
    return converted


# --------------------------------------------------------------------------------------
# Multimodal RoPE (Qwen2-VL) and 2-D axial RoPE (vision transformers)
# --------------------------------------------------------------------------------------

MROPE_AXES = ("temporal", "height", "width")
ROPE_2D_FREQUENCIES = ("shared", "alternating")


def _check_x_4d(x: object) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(
            f"x must be a floating tensor, got {getattr(x, 'dtype', type(x))}"
        )
    if x.dim() != 4:
        raise ValueError(f"x must have shape (B, H, T, head_dim), got {tuple(x.shape)}")
    return x


def check_axis_positions(
    positions: object, num_axes: int, seq_len: int, batch: int, axes: str
) -> torch.Tensor:
    """Validate positions (A, T) or (A, B, T) of A axes (M-RoPE's (temporal, height,
    width), 2-D RoPE's and the ViT's (row, column)) and return them unchanged.

    Raises:
        TypeError: positions not an integer or float tensor.
        ValueError: another shape (the message names A, T and B), or non-finite ids.
    """
    if (
        not isinstance(positions, torch.Tensor)
        or positions.is_complex()
        or positions.dtype == torch.bool
    ):
        raise TypeError(
            "positions must be an integer or float tensor, got "
            f"{getattr(positions, 'dtype', type(positions))}"
        )
    shape = tuple(positions.shape)
    if (
        positions.dim() not in (2, 3)
        or shape[0] != num_axes
        or shape[-1] != seq_len
        or (positions.dim() == 3 and shape[1] not in (1, batch))
    ):
        raise ValueError(
            f"positions must have shape ({num_axes}, T) or ({num_axes}, B, T), one row "
            f"of ids per axis ({axes}), with T={seq_len} and B={batch}; got {shape}"
        )
    if positions.is_floating_point() and not torch.isfinite(positions).all():
        raise ValueError("positions must be finite, got a tensor with inf or nan")
    return positions


def _axis_positions(
    positions: object, num_axes: int, x: torch.Tensor, axes: str
) -> torch.Tensor:
    """Checked positions (A, T) or (A, B, T) as (B or 1, 1, T, A): ready to be
    indexed by the axis of each pair and to broadcast against x (B, H, T, d_h)."""
    batch, _, seq_len, _ = x.shape
    positions = check_axis_positions(positions, num_axes, seq_len, batch, axes)
    if positions.dim() == 2:
        positions = positions[:, None]
    return positions.movedim(0, -1)[:, None]  # (B or 1, 1, T, A)


def _rotate_by_pair_angles(
    x: torch.Tensor, angles: torch.Tensor, layout: str
) -> torch.Tensor:
    """Rotate every feature pair of x (..., d) by its own angle, angles (..., d/2)
    float32: ``x⊙cos + rotate(x)⊙sin`` with cos and sin cast to x's dtype."""
    if layout == "half":
        angles = torch.cat((angles, angles), dim=-1)
    else:
        angles = angles.repeat_interleave(2, dim=-1)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    rotate = rotate_half if layout == "half" else rotate_interleaved
    return x * cos + rotate(x) * sin


def mrope_axis_of_pair(
    mrope_section, head_dim: int, *, mrope_interleaved: bool = False
) -> list[int]:
    """Which position axis (0 temporal, 1 height, 2 width) each rotary pair of M-RoPE
    reads.

    Chunked (Qwen2-VL, Qwen2.5-VL): the first ``mrope_section[0]`` pairs read the
    temporal id, the next ``mrope_section[1]`` the height, the last ``mrope_section[2]``
    the width. Interleaved (Qwen3-VL): pair i reads the height if i ≡ 1 (mod 3) and i <
    3·``mrope_section[1]``, the width if i ≡ 2 (mod 3) and i < 3·``mrope_section[2]``,
    the temporal id otherwise, so every axis gets high and low frequencies (with
    [24, 20, 20] of Qwen3-VL: 20 pairs each for height and width, 24 temporal).

    Args:
        mrope_section: three positive ints, pairs per axis, summing to head_dim / 2.
        head_dim: d_h (even).
        mrope_interleaved: Qwen3-VL's interleaved assignment instead of chunks.

    Returns:
        A list of head_dim / 2 axis indices.

    Raises:
        TypeError: if the sections are not integers.
        ValueError: odd head_dim; not three sections; a section < 1; a sum ≠ d_h / 2.
    """
    head_dim = check_even_dim("head_dim", head_dim)
    try:
        sections = list(mrope_section)
    except TypeError:
        raise TypeError(
            "mrope_section must be a sequence of 3 ints (pairs per temporal, height, "
            f"width axis), got {mrope_section!r}"
        ) from None
    if len(sections) != 3:
        raise ValueError(
            "mrope_section must hold 3 ints (pairs per temporal, height, width axis), "
            f"got {len(sections)}: {mrope_section!r}"
        )
    sections = [
        check_int(f"mrope_section[{i}]", s, minimum=1) for i, s in enumerate(sections)
    ]
    if sum(sections) != head_dim // 2:
        raise ValueError(
            f"mrope_section must sum to head_dim / 2 = {head_dim // 2} (one entry per "
            f"rotary pair), got {sections} with sum {sum(sections)}"
        )
    if not mrope_interleaved:
        return [axis for axis, size in enumerate(sections) for _ in range(size)]
    return [
        i % 3 if i % 3 in (1, 2) and i < 3 * sections[i % 3] else 0
        for i in range(head_dim // 2)
    ]


def apply_mrope(
    x: torch.Tensor,
    positions: torch.Tensor,
    mrope_section,
    *,
    base: float = 10000.0,
    mrope_interleaved: bool = False,
) -> torch.Tensor:
    """Multimodal rotary position embedding, M-RoPE (Qwen2-VL, §2.1): RoPE whose rotary
    pairs are split into three groups that rotate with the temporal, height and width
    id of the token.

    Pair i (features (i, i + d_h/2), ``"half"`` layout) is rotated by the angle
    ``p_{a(i)}·θ_i``, with θ_i = b^(−2i/d_h) over the whole head as in 1-D RoPE and
    a(i) the axis whose section holds pair i (:func:`mrope_axis_of_pair`): with
    ``mrope_section = [16, 24, 24]`` and d_h = 128, pairs 0–15 (the highest
    frequencies) follow the temporal id, pairs 16–39 the height, pairs 40–63 the width.
    A text token has equal ids (m, m, m), so every pair turns by m·θ_i and M-RoPE
    is 1-D RoPE (proved in :func:`posenc.symbolic.mrope_text_reduction`); between two
    image patches the score depends only on the differences of the ids
    (:func:`posenc.symbolic.mrope_relative_score`). Angles are formed in float32;
    cos and sin are cast to x's dtype, as in Hugging Face's Qwen2-VL.

    Args:
        x: (B, H, T, d_h) float queries or keys.
        positions: (3, T) or (3, B, T) integer (or float) ids, rows (temporal,
            height, width), e.g. from :func:`mrope_positions`; (3, B, T) gives each
            sequence of the batch its own ids.
        mrope_section: three ints, the pairs per axis, summing to d_h / 2 (Qwen2-VL's
            ``rope_parameters["mrope_section"]``, [16, 24, 24] for d_h = 128).
        base: frequency base b (``rope_theta``; 1000000 in Qwen2-VL).
        mrope_interleaved: Qwen3-VL's interleaved axis assignment instead of chunks.

    Returns:
        A tensor of x's shape, dtype and device.

    Raises:
        TypeError: if x is not a floating tensor, positions not a real tensor, or a
            section not an int.
        ValueError: x not 4-D or with odd d_h; positions not (3, T) or (3, B, T)
            matching x; non-finite positions; mrope_section not three positive ints
            summing to d_h / 2; base not finite and > 0.

    Source: Wang et al. 2024, "Qwen2-VL: Enhancing Vision-Language Model's Perception
    of the World at Any Resolution", arXiv:2409.12191, §2.1 "Multimodal Rotary
    Position Embedding (M-RoPE)"; Hugging Face ``Qwen2VLRotaryEmbedding`` (chunked)
    and ``Qwen3VLTextRotaryEmbedding`` (interleaved); RoPE: Su et al. 2021, RoFormer,
    §3.4.2, Eq. 34.
    """
    x = _check_x_4d(x)
    head_dim = check_even_dim("head_dim", x.shape[-1])
    axis = mrope_axis_of_pair(
        mrope_section, head_dim, mrope_interleaved=mrope_interleaved
    )
    positions = _axis_positions(positions, 3, x, "temporal, height, width")
    inv_freq = compute_inv_freq(head_dim, check_base(base), device=x.device)
    ids = positions.to(device=x.device, dtype=torch.float32)[
        ..., torch.tensor(axis, device=x.device)
    ]  # (B or 1, 1, T, d_h/2): the id each pair reads
    return _rotate_by_pair_angles(x, ids * inv_freq, "half")


def rope_2d_inv_freq(
    head_dim: int, base: float = 10000.0, *, frequencies: str = "shared"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The frequencies of 2-D axial RoPE: d_h/4 for the row, d_h/4 for the column.

    ``"shared"``: both axes use θ_j = b^(−4j/d_h), j = 0 … d_h/4 − 1 — the 1-D RoPE
    frequencies of a head of width d_h/2 (Heo et al. 2024 RoPE-Axial; Qwen2-VL's
    vision encoder). ``"alternating"``: the row takes the even-indexed 1-D
    frequencies b^(−2(2j)/d_h) and the column the odd-indexed b^(−2(2j+1)/d_h)
    (Pixtral), so the two axes together cover every frequency of 1-D RoPE.

    Returns:
        ``(row, column)``, float32, each (d_h/4,).

    Raises:
        ValueError: head_dim not a positive multiple of 4; unknown ``frequencies``;
            base not finite and > 0.
    """
    head_dim = check_even_dim("head_dim", head_dim)
    if head_dim % 4:
        raise ValueError(
            "head_dim must be a multiple of 4 for 2-D RoPE (half of the pairs per "
            f"axis), got {head_dim}"
        )
    frequencies = check_choice("frequencies", frequencies, ROPE_2D_FREQUENCIES)
    base = check_base(base)
    if frequencies == "shared":
        inv_freq = compute_inv_freq(head_dim // 2, base)
        return inv_freq, inv_freq.clone()
    inv_freq = compute_inv_freq(head_dim, base)
    return inv_freq[0::2].contiguous(), inv_freq[1::2].contiguous()


def apply_rope_2d(
    x: torch.Tensor,
    positions: torch.Tensor,
    *,
    base: float = 10000.0,
    layout: str = "half",
    frequencies: str = "shared",
) -> torch.Tensor:
    """2-D axial RoPE for image patches (ViT style, no temporal axis): the first half
    of the rotary pairs rotates with the patch's row, the second half with its column.

    Pair i < d_h/4 turns by ``row·θ^row_i``, pair d_h/4 + j by ``column·θ^col_j``
    (:func:`rope_2d_inv_freq`), so the score between two patches is a sum of a 1-D
    RoPE score over the row offset and one over the column offset: it depends only on
    (Δrow, Δcolumn), and along one row it is 1-D RoPE of width d_h/2 on the column
    pairs. With the defaults (``"half"`` layout, row first, shared frequencies) this
    is exactly Hugging Face's ``Qwen2VLVisionRotaryEmbedding`` (Qwen2-VL and
    Qwen2.5-VL vision encoders); ``frequencies="alternating"`` is
    ``PixtralRotaryEmbedding``. Heo et al.'s reference code (naver-ai/rope-vit,
    ``compute_axial_cis``, base 100) uses the ``"interleaved"`` layout with the
    column (x) first: pass ``positions.flip(0)`` to get it.

    Args:
        x: (B, H, T, d_h) float, d_h a multiple of 4.
        positions: (2, T) or (2, B, T) integer (or float) ids, rows (row, column).
        base: frequency base b (10000 in Qwen2-VL's and Pixtral's encoders).
        layout: ``"half"`` (pairs (i, i + d_h/2)) or ``"interleaved"`` (pairs (2i,
            2i + 1)).
        frequencies: ``"shared"`` or ``"alternating"`` (see :func:`rope_2d_inv_freq`).

    Returns:
        A tensor of x's shape, dtype and device.

    Raises:
        TypeError: if x is not a floating tensor or positions not a real tensor.
        ValueError: x not 4-D or d_h not a multiple of 4; positions not (2, T) or
            (2, B, T) matching x; non-finite positions; unknown layout or
            frequencies; base not finite and > 0.

    Source: Heo et al. 2024, "Rotary Position Embedding for Vision Transformer"
    (ECCV 2024, arXiv:2403.13298), §3, RoPE-Axial ("axial frequency"); Wang et
    al. 2024, Qwen2-VL, arXiv:2409.12191, §2.1 (2D-RoPE in the ViT); RoFormer, Su et
    al. 2021, §3.4.2.
    """
    x = _check_x_4d(x)
    layout = check_choice("layout", layout, ROPE_LAYOUTS)
    row_freq, col_freq = rope_2d_inv_freq(x.shape[-1], base, frequencies=frequencies)
    positions = _axis_positions(positions, 2, x, "row, column")
    ids = positions.to(device=x.device, dtype=torch.float32)
    quarter = row_freq.numel()
    axis = torch.tensor([0] * quarter + [1] * quarter, device=x.device)
    inv_freq = torch.cat((row_freq, col_freq)).to(x.device)
    return _rotate_by_pair_angles(x, ids[..., axis] * inv_freq, layout)


def mrope_positions(segments, *, device: torch.device | str | None = None):
    """Qwen2-VL's (temporal, height, width) ids for a sequence of text runs and
    vision grids.

    A text run of n tokens gets ids s, s+1, …, s+n−1 on all three axes; a vision
    grid of t × h × w tokens (in the order t, then rows, then columns) gets the ids
    (s + τ, s + row, s + column). The next segment starts at s' = (largest id so
    far) + 1: Qwen2-VL §2.1 starts each modality's ids one past the largest id of the
    one before. For images (t = 1) and videos with
    t ≤ max(h, w) this is Hugging Face's ``Qwen2VLModel.get_rope_index``; version
    5.23 advances by max(h, w) only, so for longer videos its ids of the following
    text overlap the video's temporal ids.

    Args:
        segments: a sequence whose items are an int n ≥ 1 (a text run) or a triple
            (t, h, w) of positive ints (a vision grid in language-model tokens, i.e.
            after the 2 × 2 spatial merge).
        device: where to create the ids.

    Returns:
        int64 tensor (3, T), T the total number of tokens, rows (temporal, height,
        width), for :func:`apply_mrope`.

    Raises:
        TypeError: a segment neither an int nor a triple of ints.
        ValueError: a run or a grid size < 1; no segments.

    Source: Wang et al. 2024, Qwen2-VL, arXiv:2409.12191, §2.1 and Figure 3.
    """
    parts, start = [], 0
    for k, segment in enumerate(segments):
        if isinstance(segment, (tuple, list)):
            if len(segment) != 3:
                raise ValueError(
                    f"segments[{k}] must be a (t, h, w) vision grid, got {segment!r}"
                )
            t, h, w = (
                check_int(f"segments[{k}][{i}]", s, minimum=1)
                for i, s in enumerate(segment)
            )
            grid = torch.meshgrid(
                torch.arange(t, device=device),
                torch.arange(h, device=device),
                torch.arange(w, device=device),
                indexing="ij",
            )
            parts.append(torch.stack(grid).reshape(3, -1) + start)
            start += max(t, h, w)
        else:
            n = check_int(f"segments[{k}] (a text run)", segment, minimum=1)
            parts.append(torch.arange(start, start + n, device=device).expand(3, -1))
            start += n
    if not parts:
        raise ValueError("segments must hold at least one text run or vision grid")
    return torch.cat(parts, dim=1)
