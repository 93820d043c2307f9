"""FlexAttention for the one attention (:mod:`.attention`): the compiled kernel with a
block mask and a ``score_mod``, so that no T×T score, bias or mask tensor is stored,
and the device workarounds it needs (narrow heads padded on a GPU, decoding steps
eager on a CPU).
"""

from __future__ import annotations

import functools
import math
import warnings

import torch
import torch.nn.functional as F

from .masks import check_spans


#: The narrowest head FlexAttention's GPU kernel takes (:func:`attention_flex` pads).
FLEX_MIN_HEAD_DIM = 16


def _eager_flex(*args, **kwargs):
    from torch.nn.attention.flex_attention import flex_attention

    with warnings.catch_warnings():  # "called without torch.compile()": on purpose
        warnings.simplefilter("ignore", UserWarning)
        return flex_attention(*args, **kwargs)


@functools.lru_cache(maxsize=None)
def _compiled_flex_functions():
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    # dynamic=False: one kernel per shape. torch 2.13's CPU template miscompiles the
    # dynamic-shape kernel that a second shape would otherwise trigger (an undeclared
    # variable in the C++).
    return torch.compile(flex_attention, dynamic=False), torch.compile(
        create_block_mask, dynamic=False
    )


@functools.lru_cache(maxsize=32)
def flex_block_mask(
    q_len: int,
    k_len: int,
    causal: bool,
    device: str,
    window: int | None = None,
    chunk: int | None = None,
):
    """The FlexAttention ``BlockMask`` of a (bottom-right aligned) causal, full,
    sliding-window or chunked attention (the rules of :func:`attention_mask`), built by
    a compiled ``create_block_mask`` (the eager one evaluates the mask on a dense
    ``q_len × k_len`` grid) and cached per shape.

    Without a block mask, torch 2.13's CPU kernel stores a ``T × T`` buffer; with one it
    does not, and on every device it skips the blocks the mask rules out: above the
    diagonal, and outside the window or chunk.

    Raises:
        ValueError: as :func:`attention_mask`.
    """
    window, chunk = check_spans(causal, window, chunk)
    offset = k_len - q_len

    def causal_mask_mod(b, h, q_idx, kv_idx):
        return q_idx + offset >= kv_idx

    def window_mask_mod(b, h, q_idx, kv_idx):
        query = q_idx + offset
        allowed = query >= kv_idx
        if window is not None:
            allowed = allowed & (query - kv_idx < window)
        if chunk is not None:
            allowed = allowed & (query // chunk == kv_idx // chunk)
        return allowed

    def full_mask_mod(b, h, q_idx, kv_idx):
        return q_idx >= 0

    _, create_block_mask = _compiled_flex_functions()
    if window is not None or chunk is not None:
        mask_mod = window_mask_mod
    else:
        mask_mod = causal_mask_mod if causal else full_mask_mod
    return create_block_mask(mask_mod, None, None, q_len, k_len, device=device)


def attention_flex(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    score_mod=None,
    causal: bool = True,
    scale: float | None = None,
    window: int | None = None,
    chunk: int | None = None,
) -> torch.Tensor:
    """The same attention through FlexAttention (``torch.nn.attention.flex_attention``),
    compiled once per process: the bias comes from ``score_mod`` and is applied inside
    the kernel, and the causal, sliding-window or chunked mask is a block mask
    (:func:`flex_block_mask`), so no T×T score, bias or mask tensor is stored.

    Args:
        q, k, v: as :func:`attention_reference`. score_mod: ``(score, b, h, q_idx,
        kv_idx) → score`` or None. causal: mask future keys (bottom-right aligned).
        scale: default 1/√d_h. window, chunk: as :func:`attention_mask`.

    Returns:
        (B, H, T_q, d_v): v may be narrower than q and k (as after
        :meth:`~posenc.schemes.PositionalScheme.augment_qk`; pass ``scale`` then). The
        first call per shape and ``score_mod`` compiles (seconds to tens of seconds on
        a CPU). On the CPU, torch 2.13's FlexAttention has no backward pass: it raises
        NotImplementedError when q, k or v requires grad (even under
        ``torch.no_grad``), and a ``score_mod`` that captures a tensor requiring grad
        fails to compile (InductorError); use it there for inference, under
        ``torch.no_grad``, and train on SDPA or a GPU. Off the CPU, heads narrower
        than :data:`FLEX_MIN_HEAD_DIM` are padded with zero features (the GPU kernel
        refuses them) and the output cut back to d_v.
    """
    flex_attention, _ = _compiled_flex_functions()
    block_mask = flex_block_mask(
        q.shape[-2], k.shape[-2], causal, str(q.device), window, chunk
    )
    if q.device.type == "cpu" and q.shape[-2] != k.shape[-2]:
        # torch 2.13's compiled CPU kernel gave wrong rows for T_q < T_k (a decoding
        # step) on an AVX2 machine; the eager form, O(T_q·T_k) here, is exact
        flex_attention = _eager_flex
    width = FLEX_MIN_HEAD_DIM
    if q.device.type == "cpu" or min(q.shape[-1], v.shape[-1]) >= width:
        return flex_attention(
            q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale
        )
    # zero features change no q·k; the zero columns of v are cut from the output
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    q, k, v_wide = (F.pad(t, (0, max(0, width - t.shape[-1]))) for t in (q, k, v))
    out = flex_attention(
        q, k, v_wide, score_mod=score_mod, block_mask=block_mask, scale=scale
    )
    return out[..., : v.shape[-1]]
