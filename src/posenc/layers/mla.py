"""Multi-head Latent Attention (MLA) and its decoupled RoPE (DeepSeek-V2, §2.1).

MLA caches one small latent per token instead of per-head keys and values. For a token
h_t (width d):

* low-rank joint compression (§2.1.2): ``c_kv = RMSNorm(W_dkv h_t)`` (kv_lora_rank
  features); every head's key and value are up-projections of it,
  ``k_nope_i = W_uk_i c_kv`` and ``v_i = W_uv_i c_kv``; queries are likewise
  ``q_i = W_uq_i RMSNorm(W_dq h_t)`` (or ``W_q h_t`` without a query rank);
* decoupled RoPE (§2.1.3): a position-dependent rotation between W_uk and c_kv would
  stop W_uk from being absorbed into the query, so RoPE acts on extra features only:
  every query head gets ``q_pe_i = RoPE(·)`` (qk_rope_head_dim features) and all heads
  share one rotary key ``k_pe = RoPE(W_kr h_t)``. A head's score is

      (q_nope_i · k_nope_i + q_pe_i · k_pe) / √(qk_nope_head_dim + qk_rope_head_dim).

At inference the cache holds ``(c_kv, k_pe)``: kv_lora_rank + qk_rope_head_dim numbers
per token and layer. Since ``q_nope_i · (W_uk_i c_kv) = (W_uk_iᵀ q_nope_i) · c_kv``,
W_uk folds into the query and W_uv into the output, and the per-head keys and values
are never formed (:meth:`MLAttention.forward_absorbed`).

DeepSeek's checkpoints store the rotary features as interleaved pairs (2i, 2i + 1)
(``layout="interleaved"``, transformers' ``rope_interleave=True``). transformers'
``apply_rotary_pos_emb_interleave`` rotates those pairs and writes the result
de-interleaved, ``[rotated evens | rotated odds]``: it equals
``apply_rope(x, layout="interleaved")[..., pair_permutation(r)]``. Queries and keys get
the same permutation, so every score, hence the attention, is unchanged.

Sources: DeepSeek-AI 2024, "DeepSeek-V2" (arXiv:2405.04434), §2.1.2 (Eq. 9–11: c_kv,
k^C, v^C) and §2.1.3 (decoupled RoPE); DeepSeek-AI 2024, "DeepSeek-V3 Technical
Report" (arXiv:2412.19437), §2.1.1; transformers 5.23, ``DeepseekV3Attention``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import nn

from .._checks import check_choice, check_even_dim, check_int
from .attention import attention_reference
from .masks import causal_mask
from ..rope import ROPE_LAYOUTS, apply_rope
from ..scaling import rope_inv_freq

KV_CACHE_KINDS = ("mha", "gqa", "mqa", "mla")


class MLACache(NamedTuple):
    """The absorbed MLA cache of one layer: what is stored per token.

    Attributes:
        c_kv: (B, T, kv_lora_rank), the normalised latent (before the up-projection).
        k_pe: (B, T, qk_rope_head_dim), the shared rotary key, already rotated.
    """

    c_kv: torch.Tensor
    k_pe: torch.Tensor


class RMSNorm(nn.Module):
    """Root-mean-square norm computed in float32, as DeepSeek's reference code and
    transformers' ``DeepseekV3RMSNorm`` do: ``w ⊙ x / √(mean(x²) + ε)``.

    Args:
        dim: width of the normalised (last) dimension. eps: ε (1e-6 in DeepSeek).

    Source: Zhang & Sennrich 2019, "Root Mean Square Layer Normalization", Eq. 4.
    """

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., dim) → (..., dim), x's dtype."""
        x32 = x.to(torch.float32)
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class MLAttention(nn.Module):
    """Multi-head Latent Attention with decoupled RoPE (DeepSeek-V2 and V3).

    The sub-modules carry the names of transformers' ``DeepseekV3Attention`` (and of
    DeepSeek's checkpoints), so that one's ``state_dict`` loads into the other:
    ``q_proj`` (or ``q_a_proj``, ``q_a_layernorm``, ``q_b_proj`` with a query rank),
    ``kv_a_proj_with_mqa`` (W_dkv and W_kr stacked: d → kv_lora_rank +
    qk_rope_head_dim), ``kv_a_layernorm``, ``kv_b_proj`` (W_uk and W_uv, per head
    ``[k_nope | v]``: kv_lora_rank → H·(qk_nope_head_dim + v_head_dim)) and
    ``o_proj``. No biases (DeepSeek's ``attention_bias=False``).

    Args:
        d_model: model width d.
        num_heads: H.
        kv_lora_rank: width of the cached latent c_kv (512 in DeepSeek-V2 and V3).
        q_lora_rank: width of the query latent (1536 in V2 and V3), or None for a
            direct query projection (DeepSeek-V2-Lite).
        qk_nope_head_dim: per-head query/key features without position (128).
        qk_rope_head_dim: per-head rotary query features, and the width of the
            shared rotary key (64); even.
        v_head_dim: per-head value width (128).
        base: RoPE frequency base b (10000 in DeepSeek).
        layout: ``"interleaved"`` (pairs (2i, 2i + 1): DeepSeek's checkpoints,
            transformers' ``rope_interleave=True``) or ``"half"`` (pairs (i, i + r/2):
            ``rope_interleave=False``).
        scaling: None, or a context-extension dict for
            :func:`posenc.scaling.rope_inv_freq` over the qk_rope_head_dim features
            (DeepSeek uses ``"yarn"``; its ``attention_factor`` is
            m(s, mscale) / m(s, mscale_all_dim) with m(s, a) = 0.1·a·ln s + 1).
        softmax_scale: the score scale; default 1/√(qk_nope_head_dim +
            qk_rope_head_dim). DeepSeek's YaRN checkpoints multiply it by
            m(s, mscale_all_dim)².
        rms_norm_eps: ε of the two latent norms (transformers uses 1e-6 for them).

    Raises:
        TypeError: a size that is not an integer.
        ValueError: a size < 1, an odd qk_rope_head_dim, an unknown layout, a
            softmax_scale that is not finite and > 0, or an invalid ``scaling``.

    Source: DeepSeek-V2 (arXiv:2405.04434) §2.1.2–2.1.3; DeepSeek-V3
    (arXiv:2412.19437) §2.1.1; transformers 5.23 ``DeepseekV3Attention``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        kv_lora_rank: int,
        qk_nope_head_dim: int,
        qk_rope_head_dim: int,
        v_head_dim: int,
        q_lora_rank: int | None = None,
        base: float = 10000.0,
        layout: str = "interleaved",
        scaling: dict | None = None,
        softmax_scale: float | None = None,
        rms_norm_eps: float = 1e-6,
    ) -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.num_heads = check_int("num_heads", num_heads, minimum=1)
        self.kv_lora_rank = check_int("kv_lora_rank", kv_lora_rank, minimum=1)
        self.qk_nope_head_dim = check_int(
            "qk_nope_head_dim", qk_nope_head_dim, minimum=1
        )
        self.qk_rope_head_dim = check_even_dim("qk_rope_head_dim", qk_rope_head_dim)
        self.v_head_dim = check_int("v_head_dim", v_head_dim, minimum=1)
        self.q_lora_rank = (
            None
            if q_lora_rank is None
            else check_int("q_lora_rank", q_lora_rank, minimum=1)
        )
        self.layout = check_choice("layout", layout, ROPE_LAYOUTS)
        self.qk_head_dim = self.qk_nope_head_dim + self.qk_rope_head_dim
        if softmax_scale is None:
            softmax_scale = 1.0 / math.sqrt(self.qk_head_dim)
        if not (
            isinstance(softmax_scale, (int, float)) and 0 < softmax_scale < math.inf
        ):
            raise ValueError(
                f"softmax_scale must be finite and > 0, got {softmax_scale}"
            )
        self.softmax_scale = float(softmax_scale)
        inv_freq, self.attention_factor = rope_inv_freq(
            self.qk_rope_head_dim, base, scaling
        )
        self.register_buffer("inv_freq", inv_freq, persistent=False)

        heads, d = self.num_heads, self.d_model
        q_out = heads * self.qk_head_dim
        if self.q_lora_rank is None:
            self.q_proj = nn.Linear(d, q_out, bias=False)
        else:
            self.q_a_proj = nn.Linear(d, self.q_lora_rank, bias=False)
            self.q_a_layernorm = RMSNorm(self.q_lora_rank, rms_norm_eps)
            self.q_b_proj = nn.Linear(self.q_lora_rank, q_out, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(
            d, self.kv_lora_rank + self.qk_rope_head_dim, bias=False
        )
        self.kv_a_layernorm = RMSNorm(self.kv_lora_rank, rms_norm_eps)
        self.kv_b_proj = nn.Linear(
            self.kv_lora_rank,
            heads * (self.qk_nope_head_dim + self.v_head_dim),
            bias=False,
        )
        self.o_proj = nn.Linear(heads * self.v_head_dim, d, bias=False)

    # -- the pieces -------------------------------------------------------------------

    def _check_inputs(self, x: object, positions: object) -> torch.Tensor:
        """Validate x (B, T, d) and positions (T,) or (B, T); return them in the one
        shape they keep inside: (B′, 1, T), B′ ∈ {1, B}, broadcasting against the
        heads of (B, H, T, ·) tensors (row ``[:, 0]``, (B′, T), against (B, T, ·)),
        as :func:`posenc.layers.attention.head_positions`."""
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            raise TypeError(
                f"x must be a floating tensor, got {getattr(x, 'dtype', type(x))}"
            )
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"x must have shape (B, T, d_model={self.d_model}), got "
                f"{tuple(x.shape)}"
            )
        batch, seq_len = x.shape[:2]
        if not isinstance(positions, torch.Tensor):
            raise TypeError(
                f"positions must be a tensor (T,) or (B, T), got {type(positions)}"
            )
        if positions.shape not in ((seq_len,), (batch, seq_len)):
            raise ValueError(
                f"positions must have shape (T,) = ({seq_len},) or (B, T) = ({batch}, "
                f"{seq_len}), got {tuple(positions.shape)}"
            )
        return positions.view(-1, 1, seq_len)  # (T,) → (1, 1, T); (B, T) → (B, 1, T)

    def _rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotate x (..., T, qk_rope_head_dim) by positions that broadcast to (...,
        T)."""
        return apply_rope(
            x,
            positions,
            inv_freq=self.inv_freq.to(x.device),
            layout=self.layout,
            attention_factor=self.attention_factor,
        )

    def queries(
        self, x: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(q_nope, q_pe)``: (B, H, T, qk_nope_head_dim) and (B, H, T,
        qk_rope_head_dim), the latter rotated by the positions (DeepSeek-V2 §2.1.3)."""
        positions = self._check_inputs(x, positions)
        batch, seq_len = x.shape[:2]
        if self.q_lora_rank is None:
            q = self.q_proj(x)
        else:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.view(batch, seq_len, self.num_heads, self.qk_head_dim).transpose(1, 2)
        q_nope, q_pe = q.split([self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1)
        return q_nope, self._rope(q_pe, positions)  # positions (B′, 1, T)

    def latents(self, x: torch.Tensor, positions: torch.Tensor) -> MLACache:
        """The per-token cache entries of x: ``MLACache(c_kv (B, T, kv_lora_rank),
        k_pe (B, T, qk_rope_head_dim))``, c_kv normalised and k_pe rotated."""
        positions = self._check_inputs(x, positions)
        c_kv, k_pe = self.kv_a_proj_with_mqa(x).split(
            [self.kv_lora_rank, self.qk_rope_head_dim], dim=-1
        )
        # k_pe (B, T, r) has no head axis: it reads the positions' row, (B′, T)
        return MLACache(self.kv_a_layernorm(c_kv), self._rope(k_pe, positions[:, 0]))

    def _up_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """W_uk (H, qk_nope_head_dim, kv_lora_rank) and W_uv (H, v_head_dim,
        kv_lora_rank), the per-head blocks of kv_b_proj."""
        weight = self.kv_b_proj.weight.view(
            self.num_heads, self.qk_nope_head_dim + self.v_head_dim, self.kv_lora_rank
        )
        return weight.split([self.qk_nope_head_dim, self.v_head_dim], dim=1)

    def _output(self, out: torch.Tensor) -> torch.Tensor:
        """(B, H, T, v_head_dim) → o_proj of the concatenated heads, (B, T, d)."""
        batch, _, seq_len, _ = out.shape
        return self.o_proj(out.transpose(1, 2).reshape(batch, seq_len, -1))

    # -- the two paths ----------------------------------------------------------------

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Causal MLA over a whole sequence, the naive way: up-project every token's
        latent to per-head keys and values, append the shared rotary key to every
        head, and attend with :func:`posenc.layers.attention.attention_reference`
        (scores and softmax in float32).

        Args:
            x: (B, T, d_model) float.
            positions: (T,) or (B, T) integer (or float) positions.

        Returns:
            (B, T, d_model), x's dtype.

        Raises:
            TypeError: x not a floating tensor, positions not a tensor.
            ValueError: x not (B, T, d_model); positions neither (T,) nor (B, T).
        """
        q_nope, q_pe = self.queries(x, positions)
        c_kv, k_pe = self.latents(x, positions)
        batch, seq_len = x.shape[:2]
        kv = self.kv_b_proj(c_kv).view(
            batch, seq_len, self.num_heads, self.qk_nope_head_dim + self.v_head_dim
        )
        k_nope, v = kv.transpose(1, 2).split(
            [self.qk_nope_head_dim, self.v_head_dim], dim=-1
        )
        k_pe = k_pe[:, None].expand(-1, self.num_heads, -1, -1)  # shared by all heads
        q = torch.cat((q_nope, q_pe), dim=-1)
        k = torch.cat((k_nope, k_pe), dim=-1)
        out, _ = attention_reference(q, k, v, causal=True, scale=self.softmax_scale)
        return self._output(out)

    def forward_absorbed(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        cache: MLACache | None = None,
    ) -> tuple[torch.Tensor, MLACache]:
        """MLA at inference: cache only ``(c_kv, k_pe)`` and absorb W_uk into the
        query and W_uv into the output (DeepSeek-V2 §2.1.2, last paragraph).

        Per head i, with c_j the cached latents:
        ``score = (W_uk_iᵀ q_nope_i) · c_j + q_pe_i · k_pe_j`` and
        ``out_i = W_uv_i Σ_j p_j c_j``. The new tokens are the last T of the keys
        (bottom-right causal mask), so ``x`` may be a prompt (with cache None) or the
        next tokens after a cached prefix. Equal to :meth:`forward` up to rounding.

        Args:
            x: (B, T, d_model) float, the new tokens.
            positions: (T,) or (B, T) positions of the new tokens.
            cache: the :class:`MLACache` of the previous tokens, or None.

        Returns:
            ``(out, cache)``: out (B, T, d_model) in x's dtype; the cache extended by
            the new tokens, c_kv (B, T_past + T, kv_lora_rank) and k_pe (B, T_past + T,
            qk_rope_head_dim).

        Raises:
            TypeError: as :meth:`forward`, or a cache that is not an MLACache.
            ValueError: as :meth:`forward`, or a cache whose batch size or widths
                do not match.
        """
        q_nope, q_pe = self.queries(x, positions)
        new = self.latents(x, positions)
        if cache is not None:
            self._check_cache(cache, x.shape[0])
            new = MLACache(
                torch.cat((cache.c_kv, new.c_kv), dim=1),
                torch.cat((cache.k_pe, new.k_pe), dim=1),
            )
        w_uk, w_uv = self._up_weights()
        q_latent = torch.einsum("bhtn,hnr->bhtr", q_nope, w_uk)  # W_uk absorbed
        scores = q_latent @ new.c_kv[:, None].transpose(-2, -1)
        scores = scores + q_pe @ new.k_pe[:, None].transpose(-2, -1)
        scores = scores.float() * self.softmax_scale
        allowed = causal_mask(x.shape[1], new.c_kv.shape[1], device=x.device)
        weights = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
        out_latent = weights.to(x.dtype) @ new.c_kv[:, None]  # (B, H, T, kv_lora_rank)
        out = torch.einsum("bhtr,hvr->bhtv", out_latent, w_uv)  # W_uv absorbed
        return self._output(out), new

    def _check_cache(self, cache: object, batch: int) -> None:
        if not isinstance(cache, MLACache):
            raise TypeError(f"cache must be an MLACache or None, got {type(cache)}")
        c_kv, k_pe = cache
        ok = (
            c_kv.dim() == 3
            and k_pe.shape[:2] == c_kv.shape[:2]
            and c_kv.shape[0] == batch
            and (c_kv.shape[-1], k_pe.shape[-1])
            == (self.kv_lora_rank, self.qk_rope_head_dim)
        )
        if not ok:
            raise ValueError(
                "cache must hold c_kv (B, T_past, kv_lora_rank) and k_pe (B, T_past, "
                f"qk_rope_head_dim) with B={batch}, kv_lora_rank={self.kv_lora_rank}, "
                f"qk_rope_head_dim={self.qk_rope_head_dim}; got c_kv "
                f"{tuple(c_kv.shape)}, k_pe {tuple(k_pe.shape)}"
            )

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, num_heads={self.num_heads}, "
            f"kv_lora_rank={self.kv_lora_rank}, q_lora_rank={self.q_lora_rank}, "
            f"qk_nope_head_dim={self.qk_nope_head_dim}, "
            f"qk_rope_head_dim={self.qk_rope_head_dim}, v_head_dim={self.v_head_dim}, "
            f"layout={self.layout!r}, softmax_scale={self.softmax_scale:.6g}"
        )


def kv_cache_bytes_per_token(
    kind: str,
    *,
    num_heads: int | None = None,
    head_dim: int | None = None,
    v_head_dim: int | None = None,
    num_kv_heads: int | None = None,
    kv_lora_rank: int | None = None,
    qk_rope_head_dim: int | None = None,
    dtype: torch.dtype = torch.bfloat16,
) -> int:
    """Bytes of KV cache per token and per layer (multiply by the number of layers).

    Elements per token and layer, times ``dtype``'s size in bytes:

    * ``"mha"``: H·(d_h + d_v) = 2·H·d_h (every head caches a key and a value);
    * ``"gqa"``: H_kv·(d_h + d_v) = 2·H_kv·d_h (Ainslie et al. 2023);
    * ``"mqa"``: d_h + d_v = 2·d_h, one shared key-value head (Shazeer 2019);
    * ``"mla"``: kv_lora_rank + qk_rope_head_dim (the absorbed cache (c_kv, k_pe),
      whatever the number of heads; DeepSeek-V2 §2.1.4, Table 1: (d_c + d_h^R)).

    DeepSeek-V3 (kv_lora_rank 512, qk_rope_head_dim 64, 128 heads, qk_nope_head_dim
    128, v_head_dim 128) caches 512 + 64 = 576 elements, 1152 bytes in bf16, per token
    and layer. MHA with the same 128 heads caches 2·128·128 = 32 768 elements at
    d_h = 128 (65 536 bytes, 56.9× more), or 128·(192 + 128) = 40 960 at MLA's own
    key width 192 = 128 + 64 (81 920 bytes, 71.1× more); GQA with 8 KV heads at
    d_h = 128 caches 2048 (4096 bytes, 3.6× more). Over V3's 61 layers MLA holds
    70 272 bytes (≈ 68.6 KiB) per token.

    Args:
        kind: ``"mha"``, ``"gqa"``, ``"mqa"`` or ``"mla"``.
        num_heads: H ("mha").
        head_dim: key width d_h per head ("mha", "gqa", "mqa").
        v_head_dim: value width d_v per head; default head_dim.
        num_kv_heads: H_kv ("gqa").
        kv_lora_rank, qk_rope_head_dim: the MLA widths ("mla").
        dtype: the cache's element type (bf16 by default).

    Returns:
        An int, bytes per token per layer.

    Raises:
        ValueError: unknown ``kind``; a size that ``kind`` needs is missing or < 1.
        TypeError: a size that is not an integer, or dtype not a torch.dtype.

    Source: DeepSeek-V2 (arXiv:2405.04434) §2.1.4 and Table 1.
    """
    kind = check_choice("kind", kind, KV_CACHE_KINDS)
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {dtype!r}")

    def need(name: str, value: int | None) -> int:
        if value is None:
            raise ValueError(f"kind={kind!r} needs {name}, got None")
        return check_int(name, value, minimum=1)

    if kind == "mla":
        elements = need("kv_lora_rank", kv_lora_rank) + need(
            "qk_rope_head_dim", qk_rope_head_dim
        )
    else:
        d_k = need("head_dim", head_dim)
        d_v = d_k if v_head_dim is None else need("v_head_dim", v_head_dim)
        heads = {
            "mha": lambda: need("num_heads", num_heads),
            "gqa": lambda: need("num_kv_heads", num_kv_heads),
            "mqa": lambda: 1,
        }[kind]()
        elements = heads * (d_k + d_v)
    return elements * dtype.itemsize
