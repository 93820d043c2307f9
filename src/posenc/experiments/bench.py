"""Measuring memory, for the book's benchmarks (never inside tests' assertions about
speed).

:func:`peak_memory` reports the peak bytes of tensor memory that a function holds at
once: on CUDA from the caching allocator's own statistics, elsewhere by following every
tensor storage that the function's operations create (a ``TorchDispatchMode``) until it
is freed. Kernels' private workspaces are invisible to the second method, which is what
we want when asking whether a T×T tensor is ever stored.

:func:`peak_rss` answers the same question for code that runs outside the dispatcher,
such as a ``torch.compile``-d kernel on the CPU: it reads the process's peak resident
memory (Linux only).
"""

from __future__ import annotations

import ctypes
import gc
import json
import math
import os
import re
import sys
import weakref
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from . import store
from .store import results_dir
from ..utils import synchronize


class _StorageTracker(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._seen: set[int] = set()

    def _free(self, key: int, nbytes: int) -> None:
        self._seen.discard(key)
        self.live -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                storage = t.untyped_storage()
                key, nbytes = storage.data_ptr(), storage.nbytes()
                if nbytes == 0 or key in self._seen:
                    continue  # a view of something already counted
                self._seen.add(key)
                self.live += nbytes
                self.peak = max(self.peak, self.live)
                weakref.finalize(t, self._free, key, nbytes)
        return out


def peak_memory(fn: Callable[[], object], device: torch.device | str = "cpu") -> int:
    """Peak bytes of tensor memory allocated while ``fn()`` runs, above what existed
    before.

    Args:
        fn: a function of no arguments; its result is discarded.
        device: where ``fn`` computes; CUDA uses ``torch.cuda.max_memory_allocated``.

    Returns:
        Bytes (int).
    """
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    tracker = _StorageTracker()
    with tracker:
        fn()
    return tracker.peak


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters


def _proc_status_bytes(key: str) -> int:
    with open("/proc/self/status") as f:
        return (
            int(re.search(rf"^{key}:\s+(\d+) kB", f.read(), re.MULTILINE).group(1))
            * 1024
        )


def peak_rss(fn: Callable[[], object]) -> int:
    """Peak resident memory of the process while ``fn()`` runs, above the resident
    memory before it.

    Sees every allocation, including those of compiled kernels that :func:`peak_memory`
    cannot follow, and also everything else the process does meanwhile: use it on one
    thing at a time, after a warm-up call (compilation itself allocates). While ``fn``
    runs, glibc's ``M_MMAP_THRESHOLD`` is 64 KiB and ``M_TRIM_THRESHOLD`` 0, so that
    every large block is mapped when allocated and returned when freed (otherwise malloc
    keeps freed memory and the resident size reflects history rather than ``fn``). That
    mode is slow — every large tensor costs page faults — so afterwards the thresholds
    are set to 32 MiB and 64 MiB, glibc's own upper limits on 64-bit (its adaptive mode
    cannot be switched back on). The peak is reset through ``/proc/self/clear_refs``
    (Linux ≥ 4.0). Resolution: a few hundred KiB, since the kernel updates its
    per-thread page counts in batches.

    Args:
        fn: a function of no arguments; its result is discarded.

    Returns:
        Bytes (int).

    Raises:
        RuntimeError: when not on Linux with glibc.
    """
    if not sys.platform.startswith("linux"):
        raise RuntimeError(
            f"peak_rss needs Linux's /proc (this is {sys.platform!r}); use peak_memory"
        )
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError as error:
        raise RuntimeError(
            "peak_rss needs glibc (libc.so.6) to control when memory is returned"
        ) from error
    libc.mallopt(_M_MMAP_THRESHOLD, 64 * 1024)
    libc.mallopt(_M_TRIM_THRESHOLD, 0)
    try:
        gc.collect()
        libc.malloc_trim(0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current resident size
        before = _proc_status_bytes("VmRSS")
        fn()
        return max(0, _proc_status_bytes("VmHWM") - before)
    finally:
        libc.mallopt(_M_MMAP_THRESHOLD, 32 * 2**20)
        libc.mallopt(_M_TRIM_THRESHOLD, 64 * 2**20)


# ======================================================================================
# The benchmarks behind book/cost.ipynb (RoPE) and book/cost_attention.ipynb (relative
# biases, decoding): python -m posenc.experiments.bench
# ======================================================================================
#
# Timings use torch.utils.benchmark (blocked_autorange: as many runs per block as fill
# the block, medians over blocks); ratios are taken between candidates measured in the
# same process, one after another. Every table carries the physical limit: the bytes a
# candidate must move at least, the bandwidth it achieved, and the floor.

def results_file(device: torch.device | str = "cpu") -> Path:
    """Where the stored run of a kind of device lives: ``results/bench/<type>.json``
    (``cpu.json``, ``cuda.json``, ``mps.json``), so that a run on a GPU never replaces
    the CPU run the book reads."""
    kind = torch.device(device).type
    return results_dir("bench") / f"{kind}.json"


#: The stored CPU run, which the chapter "The cost of positions" reads.
RESULTS_FILE = results_file("cpu")

#: The configuration of the stored run (``make bench``); tests fail when the stored
#: results were made with another one.
BENCH_CONFIG = {
    "rope": {"batch": 1, "num_heads": 32, "seq_len": 4096, "head_dim": 128},
    "bias": {
        "batch": 1,
        "num_heads": 8,
        "head_dim": 64,
        "seq_lens": [256, 512, 1024, 2048, 4096],
    },
    "decode": {"prompt_lens": [64, 256, 1024]},
    "min_run_time": 1.0,
    # One thread: on a shared 2-core machine a second OpenMP thread waits for a core
    # that another process holds, and every operation's barrier stalls (the same
    # RoPE call measured 20 ms on one thread and 80–900 ms on two).
    "threads": 1,
}

#: Smaller sizes for a live measurement in the chapter and for ``--quick``.
QUICK_CONFIG = {
    "rope": {"batch": 1, "num_heads": 8, "seq_len": 1024, "head_dim": 128},
    "bias": {"batch": 1, "num_heads": 4, "head_dim": 32, "seq_lens": [128, 256]},
    "decode": {"prompt_lens": [32, 128]},
    "min_run_time": 0.2,
    "threads": None,  # the caller's setting
}


def time_it(fn: Callable[[], object], *, min_run_time: float = 1.0, threads=None):
    """Median and interquartile range of ``fn()``'s wall time, in seconds, from
    ``torch.utils.benchmark.Timer.blocked_autorange`` (a warm-up call first).

    Args:
        fn: a function of no arguments. min_run_time: seconds of measurement.
        threads: torch's intra-op threads during the measurement (default: the
            current ``torch.get_num_threads()``).

    Returns:
        ``{"median_s", "iqr_s", "runs"}``.
    """
    from torch.utils import benchmark

    threads = torch.get_num_threads() if threads is None else int(threads)
    fn()
    timer = benchmark.Timer("fn()", globals={"fn": fn}, num_threads=threads)
    m = timer.blocked_autorange(min_run_time=min_run_time)
    return {"median_s": m.median, "iqr_s": m.iqr, "runs": len(m.times)}


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


def _synchronized(fn: Callable, device: torch.device) -> Callable:
    """``fn`` followed by waiting for ``device`` (CUDA, MPS, ...), so that a timer
    measures the kernels and not only their launch."""
    if device.type == "cpu":
        return fn

    def run():
        fn()
        synchronize(device)

    return run


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


def copy_bandwidth(
    nbytes: int = 64 * 2**20, device="cpu", min_run_time: float = 0.5
) -> float:
    """Bytes per second of copying a float32 tensor of ``nbytes`` into a preallocated
    one (each byte read once and written once: 2·nbytes moved), the floor the decoding
    table divides by."""
    device = torch.device(device)
    src = torch.ones(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    t = time_it(
        _synchronized(lambda: dst.copy_(src), device), min_run_time=min_run_time
    )
    return 2 * nbytes / t["median_s"]


# --- decoding: tokens per second with and without the KV cache ---------------------


def decode_model(scheme: str, *, max_len: int, device="cpu"):
    """The book's small TinyLM for ``scheme``
    (:func:`posenc.experiments.experiment_config`) with random weights (speed does not
    depend on them), in eval mode. A learned table gets ``max_len`` rows so that it
    covers the longest prompt."""
    from .runs import experiment_config
    from ..layers.model import TinyLM

    options = {"max_len": max_len} if scheme == "learned" else {}
    model_cfg, _ = experiment_config(scheme, **options)
    torch.manual_seed(0)
    return TinyLM(model_cfg).to(device).eval()


def _decode_step(model, prompt: torch.Tensor, cached: bool) -> Callable:
    """A function that computes the next token's logits after ``prompt`` (1, T): with
    the KV cache (already holding the prompt; the step appends one token and the cache
    is put back afterwards, so every call decodes at the same context length) or by
    running the whole sequence of T + 1 tokens again."""
    device = prompt.device
    length = prompt.shape[1]
    token = prompt[:, -1:]
    if not cached:
        tokens = torch.cat((prompt, token), dim=1)
        positions = torch.arange(length + 1, device=device)
        return lambda: model(tokens, positions)
    cache = model.new_cache()
    with torch.no_grad():
        model(prompt, torch.arange(length, device=device), cache=cache)
    saved = [(layer.k, layer.v, layer.positions) for layer in cache.layers]
    position = torch.tensor([length], device=device)

    def step():
        logits = model(token, position, cache=cache)
        for layer, (k, v, pos) in zip(cache.layers, saved, strict=True):
            layer.k, layer.v, layer.positions = k, v, pos
        return logits

    return step


def decode_benchmark(
    *,
    prompt_lens=(64, 256, 1024),
    schemes=None,
    device="cpu",
    min_run_time: float = 1.0,
    bandwidth: float | None = None,
) -> list[dict]:
    """Tokens per second of decoding for every registered scheme, with and without
    the KV cache, at several context lengths.

    One decoding step after a prompt of T tokens: with the cache, one token's forward
    pass against T cached keys and values (the cache is restored after each timed
    step); without it, the forward pass over all T + 1 tokens that a model without a
    cache needs for every new token. The prompt's own forward pass (the prefill) is
    timed too.

    Returns:
        One dict per (scheme, prompt_len, cached): ``tokens_per_s``, ``ms_per_token``,
        ``prefill_ms``, ``bytes_per_token`` (the weights plus, with the cache, every
        layer's cached keys and values, float32: the least a cached step reads),
        ``GB_per_s`` and ``floor_ms`` (bytes / ``bandwidth``, the copy bandwidth,
        when given).
    """
    from ..schemes import available_schemes

    device = torch.device(device)
    schemes = list(available_schemes() if schemes is None else schemes)
    rows = []
    for scheme in schemes:
        model = decode_model(scheme, max_len=max(prompt_lens) + 1, device=device)
        cfg = model.config
        weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        for prompt_len in prompt_lens:
            prompt = torch.randint(0, 256, (1, prompt_len), device=device)
            with torch.no_grad():
                prefill = time_it(
                    _synchronized(_decode_step(model, prompt[:, :-1], False), device),
                    min_run_time=min_run_time,
                )["median_s"]
                for cached in (True, False):
                    per_token = time_it(
                        _synchronized(_decode_step(model, prompt, cached), device),
                        min_run_time=min_run_time,
                    )["median_s"]
                    kv = 2 * cfg.num_layers * prompt_len * cfg.d_model * 4
                    nbytes = weight_bytes + (kv if cached else 0)
                    rows.append(
                        {
                            "scheme": scheme,
                            "prompt_len": prompt_len,
                            "cached": cached,
                            "tokens_per_s": 1.0 / per_token,
                            "ms_per_token": per_token * 1e3,
                            "prefill_ms": prefill * 1e3,
                            "bytes_per_token": nbytes,
                            "GB_per_s": nbytes / per_token / 1e9,
                            "floor_ms": None
                            if bandwidth is None
                            else nbytes / bandwidth * 1e3,
                        }
                    )
    return rows


# --- relative biases: the T×T tensor, and the kernels that never build it ----------

#: Schemes of the bias benchmark. "none" is attention without positions (the floor of
#: what any scheme adds); "shaw" is Shaw et al.'s key term alone (its value term
#: changes the output, not the scores, and has no score_mod).
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


def provenance(device) -> dict:
    """Machine, versions and date of a benchmark run:
    :func:`posenc.experiments.store.provenance` with transformers' version, the device's
    name, the cores, the platform and the checkout's commit
    (:func:`posenc.experiments.store.git_commit`)."""
    import platform

    record = store.provenance()
    try:
        import transformers

        record["transformers"] = transformers.__version__
    except ImportError:
        record["transformers"] = None
    device = torch.device(device)
    record["device"] = (
        torch.cuda.get_device_name(device) if device.type == "cuda" else record["cpu"]
    )
    record["cores"] = os.cpu_count()
    record["platform"] = platform.platform()
    record["commit"] = store.git_commit()
    return record


def run_all(config: dict, *, device="cpu", parts=("rope", "bias", "decode")) -> dict:
    """Run the benchmarks of ``config`` (:data:`BENCH_CONFIG` or
    :data:`QUICK_CONFIG`) and return ``{"config", "provenance", "copy_GB_per_s",
    part: rows}``."""
    device = torch.device(device)
    t = config["min_run_time"]
    results = {"config": config, "provenance": provenance(device)}
    results["copy_GB_per_s"] = copy_bandwidth(device=device) / 1e9
    if "rope" in parts:
        results["rope"] = rope_benchmark(
            **config["rope"], device=device, min_run_time=t
        )
    if "bias" in parts:
        results["bias"] = bias_benchmark(
            **config["bias"], device=device, min_run_time=t
        )
    if "decode" in parts:
        results["decode"] = decode_benchmark(
            **config["decode"],
            device=device,
            min_run_time=t,
            bandwidth=results["copy_GB_per_s"] * 1e9,
        )
    return results


def load_results(path: Path | str = RESULTS_FILE) -> dict:
    """The stored benchmark run (``make bench``), as :func:`run_all` returns it."""
    return json.loads(Path(path).read_text())


def tables(results: dict) -> dict:
    """The printed tables of a run, as pandas DataFrames keyed by part."""
    import pandas as pd

    out = {}
    if "rope" in results:
        out["rope"] = pd.DataFrame(results["rope"]).set_index("name")
    if "bias" in results:
        out["bias"] = pd.DataFrame(results["bias"]).set_index(
            ["seq_len", "scheme", "path"]
        )
    if "decode" in results:
        out["decode"] = pd.DataFrame(results["decode"]).set_index(
            ["scheme", "prompt_len", "cached"]
        )
    return out


def main(argv=None) -> int:
    """``python -m posenc.experiments.bench [--quick] [--parts rope bias decode] [--save
    PATH]``: run the benchmarks, print one table per part, optionally store the run."""
    import argparse

    import pandas as pd

    from ..utils import get_device

    parser = argparse.ArgumentParser(prog="python -m posenc.experiments.bench")
    parser.add_argument("--quick", action="store_true", help="small sizes, seconds")
    parser.add_argument("--parts", nargs="+", default=["rope", "bias", "decode"])
    parser.add_argument("--device", default=None, help="default: posenc.get_device()")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (default: the configuration's, else torch's)",
    )
    parser.add_argument(
        "--save",
        nargs="?",
        const="",
        default=None,
        help="store the run (default path: results/bench/<device type>.json)",
    )
    args = parser.parse_args(argv)
    config = QUICK_CONFIG if args.quick else BENCH_CONFIG
    torch.set_num_threads(
        args.threads or config.get("threads") or torch.get_num_threads()
    )
    device = torch.device(args.device) if args.device else get_device()
    results = run_all(config, device=device, parts=tuple(args.parts))
    prov = results["provenance"]
    print(
        f"{prov['device']} · {prov['threads']} threads · torch {prov['torch']} · "
        f"transformers {prov['transformers']} · {prov['date']} · copy bandwidth "
        f"{results['copy_GB_per_s']:.1f} GB/s"
    )
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        for part, frame in tables(results).items():
            print(f"\n== {part} ==")
            print(frame.to_string(float_format=lambda x: f"{x:.3g}"))
    if args.save is not None:
        path = Path(args.save) if args.save else results_file(device)
        store.write_json(path, results, indent=1)
        print(f"\nstored in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
