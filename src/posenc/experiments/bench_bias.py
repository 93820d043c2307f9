"""The relative-bias benchmark of the chapter "The cost of attention"
(book/cost_attention.ipynb): causal attention with each scheme's bias on three paths
(the reference scores, SDPA with a mask tensor, FlexAttention), timed, with its peak
memory measured and modelled.

Shapes: B batch, H heads, T positions, d_h ``head_dim``.
"""

from __future__ import annotations

import math

import torch

from .measure import _synchronized, peak_memory, peak_rss, time_it


BIAS_SCHEMES = ("none", "alibi", "t5", "shaw", "transformer_xl", "deberta")
BIAS_PATHS = ("reference", "sdpa + mask", "flex")


def bias_inputs(scheme: str, *, batch, num_heads, seq_len, head_dim, device="cpu"):
    """The scheme module (random parameters), q, k, v (B, H, T, d_h) and positions."""
    from ..schemes import build_scheme

    torch.manual_seed(0)
    module = build_scheme(scheme, d_model=num_heads * head_dim, num_heads=num_heads)
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 0.02)
    module = module.to(device)
    shape = (batch, num_heads, seq_len, head_dim)
    q, k, v = (torch.randn(shape, device=device) for _ in range(3))
    return module, q, k, v, torch.arange(seq_len, device=device)


def bias_attention(path: str, module, q, k, v, positions) -> torch.Tensor:
    """Causal attention with ``module``'s score bias on one of :data:`BIAS_PATHS`;
    the bias (or its small tables) is computed inside, as it would be in a model.

    ``"reference"`` forms scores, bias and weights as (B, H, T, T) tensors;
    ``"sdpa + mask"`` passes the bias to SDPA as a float mask, still (H, T, T);
    ``"flex"`` adds it inside FlexAttention through the scheme's ``score_mod`` (or,
    for Transformer-XL, folds it into wider queries and keys), so that no T×T tensor
    is stored.
    """
    from ..layers.attention import attention_flex, attention_reference, attention_sdpa

    scale = 1.0 / math.sqrt(module.score_scale_factor * q.shape[-1])
    if path == "flex":
        augmented = module.augment_qk(q, k, positions, positions)
        if augmented is not None:
            return attention_flex(*augmented, v, scale=scale)
        return attention_flex(
            q,
            k,
            v,
            score_mod=module.score_mod(positions, positions, q=q, k=k),
            scale=scale,
        )
    bias = module.score_bias(q, k, positions, positions)
    fn = attention_reference if path == "reference" else attention_sdpa
    out = fn(q, k, v, bias=bias, scale=scale)
    return out[0] if isinstance(out, tuple) else out


def bias_memory_model(scheme: str, path: str, *, batch, num_heads, seq_len) -> int:
    """Bytes of the largest (·, T, T) float32 tensors a path must hold at once, by the
    chapter's count: the reference path holds the scores, the bias and the weights
    (3·B·H·T²·4; the scheme's bias without a batch axis when it has none); SDPA with
    a mask holds the bias (H·T² or B·H·T² floats); FlexAttention none."""
    per_head = num_heads * seq_len * seq_len * 4
    full = batch * per_head
    no_batch = scheme in ("alibi", "t5")  # the bias is (H, T, T)
    bias = 0 if scheme == "none" else (per_head if no_batch else full)
    if path == "reference":
        return 2 * full + bias
    if path == "sdpa + mask":
        return bias
    return 0


def bias_benchmark(
    *,
    batch: int = 1,
    num_heads: int = 8,
    head_dim: int = 64,
    seq_lens=(256, 512, 1024, 2048, 4096),
    schemes=BIAS_SCHEMES,
    paths=BIAS_PATHS,
    device="cpu",
    min_run_time: float = 1.0,
    backward: bool = True,
) -> list[dict]:
    """Time and peak memory of causal attention with each scheme's bias on each path,
    against T.

    Memory is :func:`peak_rss` on the CPU (it sees compiled kernels' buffers too) and
    the caching allocator's peak on CUDA, both after a warm-up call. The backward pass
    (``loss = out.sum()``) is timed where the path has one: torch 2.13's FlexAttention
    has none on the CPU (``backward_ms`` None there).

    Returns:
        One dict per (scheme, path, T): ``forward_ms``, ``backward_ms`` (forward +
        backward), ``peak_bytes`` (measured), ``model_bytes``
        (:func:`bias_memory_model`), ``GFLOP`` (4·B·H·T²·d_h, the two matrix
        products) and ``x_floor`` (forward time over the same T's "none" on SDPA).
    """
    import torch._dynamo

    # One FlexAttention kernel per (scheme, T): past dynamo's recompile limit (8) it
    # would silently run the uncompiled FlexAttention, which stores T×T scores. Start
    # from a fresh dynamo (a limit once hit stays hit), allow every kernel, and fail
    # rather than fall back.
    torch._dynamo.reset()
    limits = dict(
        recompile_limit=1024,
        accumulated_recompile_limit=4096,
        fail_on_recompile_limit_hit=True,
    )
    with torch._dynamo.config.patch(**limits):
        rows = _bias_rows(
            batch,
            num_heads,
            head_dim,
            seq_lens,
            schemes,
            paths,
            device,
            min_run_time,
            backward,
        )
    return add_bias_ratios(rows)


def _bias_rows(
    batch, num_heads, head_dim, seq_lens, schemes, paths, device, min_run_time, backward
) -> list[dict]:
    device = torch.device(device)
    rows = []
    for seq_len in seq_lens:
        sizes = dict(batch=batch, num_heads=num_heads, seq_len=seq_len)
        for scheme in schemes:
            module, q, k, v, pos = bias_inputs(
                scheme, head_dim=head_dim, device=device, **sizes
            )
            for path in paths:

                def forward(path_fn=path, module=module, q=q, k=k, v=v, pos=pos):
                    with torch.no_grad():
                        return bias_attention(path_fn, module, q, k, v, pos)

                fwd = time_it(_synchronized(forward, device), min_run_time=min_run_time)
                peak = (
                    peak_memory(forward, device)
                    if device.type == "cuda"
                    else peak_rss(forward)
                )
                bwd = None
                if backward and not (path == "flex" and device.type == "cpu"):
                    params = [x.requires_grad_() for x in (q, k, v)]

                    def step(path_fn=path, module=module, q=q, k=k, v=v, pos=pos):
                        out = bias_attention(path_fn, module, q, k, v, pos)
                        out.sum().backward()

                    bwd = (
                        time_it(_synchronized(step, device), min_run_time=min_run_time)[
                            "median_s"
                        ]
                        * 1e3
                    )
                    for x in params:
                        x.requires_grad_(False)
                        x.grad = None
                rows.append(
                    {
                        "scheme": scheme,
                        "path": path,
                        "seq_len": seq_len,
                        "forward_ms": fwd["median_s"] * 1e3,
                        "backward_ms": bwd,
                        "peak_bytes": int(peak),
                        "model_bytes": bias_memory_model(scheme, path, **sizes),
                        "GFLOP": 4 * batch * num_heads * seq_len**2 * head_dim / 1e9,
                    }
                )
    return rows


def add_bias_ratios(rows: list[dict]) -> list[dict]:
    """``x_floor``: each forward time over "none" on "sdpa + mask" (plain SDPA) at the
    same T; ``GFLOP_per_s`` from the forward time."""
    floor = {
        r["seq_len"]: r["forward_ms"]
        for r in rows
        if r["scheme"] == "none" and r["path"] == "sdpa + mask"
    }
    for r in rows:
        base = floor.get(r["seq_len"])
        r["x_floor"] = None if base is None else r["forward_ms"] / base
        r["GFLOP_per_s"] = r["GFLOP"] / (r["forward_ms"] * 1e-3)
    return rows


# --- the command --------------------------------------------------------------------
