"""A CPU kernel for RoPE on queries and keys at once, measured by the benchmarks
(:mod:`posenc.experiments.bench`, the cost chapter): :func:`apply_rope_qk` rotates
tile by tile into preallocated outputs, so that memory sees about one read and one write
of each tensor. It equals :func:`posenc.rope.apply_rope` on q and on k (tests hold it);
the layers use :func:`posenc.rope.apply_rope`.

Where the time goes in the plain form ``x⊙cos + rotate(x)⊙sin``: RoPE does 3
floating-point operations per element, so it is bound by memory traffic, and the plain
form moves each element many times (``rotate`` builds a copy, each product another,
the sum another, and the cos/sin tables are repeated over both halves).
:func:`apply_rope_qk` instead

* computes the angles once, (..., T, r/2), for q and k together (:func:`_cos_sin`);
* rotates tile by tile (:data:`ROPE_TILE_BYTES`: a group of heads and a range of
  positions), each tile by a few element-wise passes that find it in the CPU's
  cache — half layout: ``x⊙[cos, cos]`` over whole rows, then ``−x₂⊙sin`` and
  ``+x₁⊙sin`` into the halves; interleaved float32: one complex multiplication — so
  that memory traffic stays close to one read and one write of q and k
  (:func:`_rotate_pairs_into`);
* takes preallocated outputs (``out=``), or rotates **in place** when ``out`` is
  ``(q, k)`` (as flash-attn's ``apply_rotary_emb(..., inplace=True)``): a fresh
  output tensor costs page faults that can exceed the rotation itself on a CPU;
* with ``fused=True``, runs one ``torch.compile``-d element-wise kernel per tensor
  instead (:func:`_compiled_rotation`; each element read once and written once in
  principle; the first call per layout and shape compiles, seconds on a CPU). In the
  stored CPU run (``make bench``) it was the fastest candidate, 1.6× the
  read-and-write floor against 2.4× for the tiled passes (an earlier version that
  wrote the halves by slice assignment was slower than them); on a GPU it becomes
  one Triton kernel.

``python -m posenc.experiments.bench`` measures it against transformers' eager path
and the read-and-write floor (the chapter "The cost of positions: RoPE on a CPU",
book/cost.ipynb).

Shapes:
    B batch, H heads, T tokens, d_h head width, r = 2·len(inv_freq) rotated width.
"""

from __future__ import annotations

import functools
import itertools

import torch

from ..rope import check_rope_input


def _check_qk(
    q: torch.Tensor,
    k: object,
    positions: torch.Tensor,
    inv_freq: torch.Tensor | None,
    base: float,
    layout: str,
) -> tuple[torch.Tensor, torch.Tensor, str]:
    """``(positions, inv_freq, layout)`` as :func:`posenc.rope.check_rope_input`
    returns them for q, after checking that k is a floating tensor that matches q
    (head_dim, dtype, device) and passes the same checks. Raises as
    :func:`apply_rope_qk`."""
    positions, inv_freq, layout = check_rope_input(
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
    check_rope_input(k, positions, inv_freq, base, layout, "k")
    return positions, inv_freq, layout


def _cos_sin(
    positions: torch.Tensor,
    inv_freq: torch.Tensor,
    attention_factor: float,
    like: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the angles m·θ_i, (..., T, r/2), times ``attention_factor``:
    computed in float32 once for q and k together, then cast to ``like``'s dtype and
    device."""
    angles = positions.to(torch.float32)[..., None] * inv_freq.to(
        device=positions.device, dtype=torch.float32
    )
    cos = (angles.cos() * attention_factor).to(device=like.device, dtype=like.dtype)
    sin = (angles.sin() * attention_factor).to(device=like.device, dtype=like.dtype)
    return cos, sin


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
#: Measured on the book's CPU (``python -m posenc.experiments.bench``): one (T = 4096,
#: d_h = 128)
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

    The angles are computed once for both tensors; each tensor is then rotated tile
    by tile into its output (or in place), or by one compiled kernel with
    ``fused=True``. Why this is faster than the plain form, and by how much in the
    stored run: the module docstring.

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
    positions, inv_freq, layout = _check_qk(q, k, positions, inv_freq, base, layout)
    out = _check_out(out, q, k)
    cos, sin = _cos_sin(positions, inv_freq, attention_factor, q)
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
