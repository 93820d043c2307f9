"""The RoPE benchmark of the chapter "The cost of positions" (book/cost.ipynb): every
way of rotating q and k (posenc's, transformers', the CPU kernel, fused GPU kernels
when installed), timed against the bytes they must move at least.

Shapes: B batch, H heads, T positions, d_h ``head_dim``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .measure import _synchronized, time_it


def rope_bytes(
    batch: int, num_heads: int, seq_len: int, head_dim: int, element_size: int = 4
) -> dict:
    """Bytes that rotating q and k must move at least (the chapter derives it): read q
    and k once, write the results once, read the cos and sin tables (T × d_h/2 each,
    float32) once.

    Returns:
        ``{"qk": 4·B·H·T·d_h·s, "table": 2·T·(d_h/2)·4, "total": their sum}``, bytes.
    """
    qk = 4 * batch * num_heads * seq_len * head_dim * element_size
    table = 2 * seq_len * (head_dim // 2) * 4
    return {"qk": qk, "table": table, "total": qk + table}


def _hf_llama_rope(head_dim: int, device):
    """transformers' Llama rotary embedding and ``apply_rotary_pos_emb``, or None."""
    try:
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import (
            LlamaRotaryEmbedding,
            apply_rotary_pos_emb,
        )
    except ImportError:
        return None
    config = LlamaConfig(
        hidden_size=4 * head_dim,
        num_attention_heads=4,
        head_dim=head_dim,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )
    return LlamaRotaryEmbedding(config).to(device), apply_rotary_pos_emb


def rope_candidates(q: torch.Tensor, k: torch.Tensor) -> dict[str, Callable]:
    """The ways of rotating q and k that the RoPE benchmark compares, each a function
    of no arguments that starts from q, k and the positions 0 … T−1 (each computes
    its own cos/sin table). ``"copy q, k (floor)"`` only copies q and k into
    preallocated outputs: one read and one write of each element, the floor.

    On CUDA, Liger-Kernel's and flash-attn's rotary kernels join when installed.
    """
    from ..rope import apply_rope
    from .kernels import apply_rope_qk

    positions = torch.arange(q.shape[-2], device=q.device)
    out_q, out_k = torch.empty_like(q), torch.empty_like(k)
    work_q, work_k = q.clone(), k.clone()
    candidates: dict[str, Callable] = {
        "copy q, k (floor)": lambda: (out_q.copy_(q), out_k.copy_(k)),
    }
    hf = _hf_llama_rope(q.shape[-1], q.device)
    if hf is not None:
        rotary, apply_rotary_pos_emb = hf
        position_ids = positions[None]

        def transformers_eager():
            cos, sin = rotary(q, position_ids)
            return apply_rotary_pos_emb(q, k, cos, sin)

        candidates["transformers (eager)"] = transformers_eager
    compiled_rope = torch.compile(apply_rope, dynamic=False)
    candidates.update(
        {
            "posenc apply_rope on q and on k": lambda: (
                apply_rope(q, positions),
                apply_rope(k, positions),
            ),
            "torch.compile(apply_rope) on q and on k": lambda: (
                compiled_rope(q, positions),
                compiled_rope(k, positions),
            ),
            "apply_rope_qk": lambda: apply_rope_qk(q, k, positions),
            "apply_rope_qk, out=": lambda: apply_rope_qk(
                q, k, positions, out=(out_q, out_k)
            ),
            "apply_rope_qk, in place": lambda: apply_rope_qk(
                work_q, work_k, positions, out=(work_q, work_k)
            ),
            "apply_rope_qk, fused, out=": lambda: apply_rope_qk(
                q, k, positions, out=(out_q, out_k), fused=True
            ),
        }
    )
    if q.device.type == "cuda":
        candidates.update(_gpu_rope_candidates(q, k, positions))
    return candidates


def _gpu_rope_candidates(q, k, positions) -> dict[str, Callable]:
    """Liger-Kernel's and flash-attn's rotary kernels where installed (CUDA only)."""
    from ..rope import rope_cos_sin
    from ..frequencies import compute_inv_freq

    found: dict[str, Callable] = {}
    inv_freq = compute_inv_freq(q.shape[-1], 10000.0, device=q.device)
    try:  # Liger: q, k (B, H, T, d_h); cos, sin (1, T, d_h), half layout
        from liger_kernel.ops.rope import LigerRopeFunction

        def liger():
            cos, sin = rope_cos_sin(positions, inv_freq)
            return LigerRopeFunction.apply(
                q, k, cos[None].to(q.dtype), sin[None].to(q.dtype)
            )

        found["Liger-Kernel rope"] = liger
    except ImportError:
        pass
    try:  # flash-attn: x (B, T, H, d_h); cos, sin (T, d_h/2); interleaved=False: half
        from flash_attn.layers.rotary import apply_rotary_emb

        q_t, k_t = q.transpose(1, 2), k.transpose(1, 2)

        def flash():
            angles = positions.float()[:, None] * inv_freq
            cos, sin = angles.cos().to(q.dtype), angles.sin().to(q.dtype)
            return apply_rotary_emb(q_t, cos, sin), apply_rotary_emb(k_t, cos, sin)

        found["flash-attn apply_rotary_emb"] = flash
    except ImportError:
        pass
    return found


def rope_benchmark(
    *,
    batch: int = 1,
    num_heads: int = 32,
    seq_len: int = 4096,
    head_dim: int = 128,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    min_run_time: float = 1.0,
    threads: int | None = None,
    only: tuple[str, ...] | None = None,
) -> list[dict]:
    """Time every :func:`rope_candidates` entry on queries and keys of shape (B, H, T,
    d_h), in one process, one after another.

    Returns:
        One dict per candidate: ``name``, ``median_ms``, ``iqr_ms``, ``runs``,
        ``bytes`` (:func:`rope_bytes` ``total``: the least any candidate must move),
        ``GB_per_s`` (bytes / median), ``x_floor`` (median / the floor's median) and
        ``x_faster_than_transformers`` (transformers' median / median; None without
        transformers).
    """
    device = torch.device(device)
    g = torch.Generator().manual_seed(0)
    shape = (batch, num_heads, seq_len, head_dim)
    q = torch.randn(shape, generator=g).to(device, dtype)
    k = torch.randn(shape, generator=g).to(device, dtype)
    nbytes = rope_bytes(batch, num_heads, seq_len, head_dim, q.element_size())
    rows = []
    for name, fn in rope_candidates(q, k).items():
        if only is not None and name not in only and "floor" not in name:
            continue
        t = time_it(
            _synchronized(fn, device), min_run_time=min_run_time, threads=threads
        )
        rows.append(
            {
                "name": name,
                "median_ms": t["median_s"] * 1e3,
                "iqr_ms": t["iqr_s"] * 1e3,
                "runs": t["runs"],
                "bytes": nbytes["total"],
            }
        )
    return add_rope_ratios(rows)


def add_rope_ratios(rows: list[dict]) -> list[dict]:
    """Fill ``GB_per_s``, ``x_floor`` and ``x_faster_than_transformers`` from the
    medians and bytes of :func:`rope_benchmark`'s rows (also used to check stored
    results)."""
    by_name = {r["name"]: r for r in rows}
    floor = by_name["copy q, k (floor)"]["median_ms"]
    hf = by_name.get("transformers (eager)", {}).get("median_ms")
    for r in rows:
        r["GB_per_s"] = r["bytes"] / (r["median_ms"] * 1e-3) / 1e9
        r["x_floor"] = r["median_ms"] / floor
        r["x_faster_than_transformers"] = None if hf is None else hf / r["median_ms"]
    return rows
