"""A tiny decoder-only language model whose positional scheme is chosen by name.

Token embedding → scheme's embedding term (plug-in point 1) → ``num_layers`` pre-norm
blocks (LayerNorm → :class:`~posenc.attention.MultiHeadAttention` → residual; LayerNorm
→ GELU MLP → residual) → LayerNorm → linear head over the byte vocabulary. It is small
enough to train in a minute on a laptop CPU and reads top to bottom in one sitting
(after nanoGPT's ``model.py``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from ._checks import check_choice, check_int
from .attention import ATTENTION_IMPLS, KVCache, MultiHeadAttention
from .schemes import build_scheme, get_scheme_class


@dataclass
class ModelConfig:
    """Everything that defines a :class:`TinyLM`.

    Attributes:
        scheme: registered positional scheme name (``posenc.available_schemes()``).
        scheme_options: keyword options of that scheme, e.g. ``{"max_len": 256}`` for
            "learned".
        vocab_size: 256 for the byte-level corpus.
        d_model: width d. num_heads: H. num_layers: N blocks. mlp_ratio: MLP hidden
            width / d.
        attn_impl: ``"auto"``, ``"reference"`` or ``"sdpa"`` (see
            MultiHeadAttention.forward).

    Raises:
        ValueError / TypeError: on construction, for an unknown scheme or attention
        path, sizes that are not positive integers, or d_model not divisible by
        num_heads.
    """

    scheme: str = "sinusoidal"
    scheme_options: dict = field(default_factory=dict)
    vocab_size: int = 256
    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 2
    mlp_ratio: int = 4
    attn_impl: str = "auto"

    def __post_init__(self) -> None:
        scheme_cls = get_scheme_class(self.scheme)
        for name in ("vocab_size", "d_model", "num_heads", "num_layers", "mlp_ratio"):
            check_int(name, getattr(self, name), minimum=1)
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model must be divisible by num_heads, got d_model={self.d_model}, "
                f"num_heads={self.num_heads}"
            )
        check_choice("attn_impl", self.attn_impl, ATTENTION_IMPLS)
        if self.attn_impl in ("sdpa", "flex") and scheme_cls.needs_attention_weights:
            raise ValueError(
                f"attn_impl={self.attn_impl!r} cannot serve scheme {self.scheme!r}: "
                "its value term needs the "
                "attention weights; use 'auto' or 'reference'"
            )
        if not isinstance(self.scheme_options, dict):
            raise TypeError(
                "scheme_options must be a dict, got "
                f"{type(self.scheme_options).__name__}"
            )

    def to_dict(self) -> dict:
        return asdict(self)


class Block(nn.Module):
    """One pre-norm transformer block."""

    def __init__(self, config: ModelConfig, scheme) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(config.d_model)
        self.attn = MultiHeadAttention(
            config.d_model, config.num_heads, scheme, causal=True
        )
        self.ln2 = nn.LayerNorm(config.d_model)
        hidden = config.mlp_ratio * config.d_model
        self.mlp = nn.Sequential(
            nn.Linear(config.d_model, hidden),
            nn.GELU(),
            nn.Linear(hidden, config.d_model),
        )

    def forward(self, x, positions, *, impl="auto", need_weights=False, cache=None):
        a, weights = self.attn(
            self.ln1(x), positions, impl=impl, need_weights=need_weights, cache=cache
        )
        x = x + a
        return x + self.mlp(self.ln2(x)), weights


class TinyLM(nn.Module):
    """Decoder-only LM over bytes with a pluggable positional scheme.

    The scheme is one module shared by all blocks (``self.scheme``).

    Shape:
        ``forward(tokens, positions=None)``: tokens int64 (B, T) in ``0 …
        vocab_size−1``; positions (T,) or (B, T), default ``0 … T−1`` → logits float32
        (B, T, vocab_size); with ``need_weights=True`` also the list of per-layer
        attention weights (B, H, T, T_k). ``cache``: a :meth:`new_cache` that keeps keys
        and values between calls; positions then default to ``len(cache) … len(cache) +
        T − 1``, so feeding a sequence in pieces gives the logits of one full forward
        pass.

    Raises:
        TypeError: tokens that are not an integer tensor.
        ValueError: tokens not of shape (B, T) or outside the vocabulary; what the
            scheme raises (e.g. a sequence longer than a learned table).
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.scheme = build_scheme(
            config.scheme,
            d_model=config.d_model,
            num_heads=config.num_heads,
            **config.scheme_options,
        )
        self.blocks = nn.ModuleList(
            Block(config, self.scheme) for _ in range(config.num_layers)
        )
        self.ln_f = nn.LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)

    def new_cache(self) -> KVCache:
        """An empty :class:`~posenc.attention.KVCache` for incremental decoding with
        this model."""
        return KVCache(self.config.num_layers)

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
        cache: KVCache | None = None,
    ):
        if (
            not isinstance(tokens, torch.Tensor)
            or tokens.is_floating_point()
            or tokens.is_complex()
        ):
            raise TypeError(
                "tokens must be an integer tensor, got "
                f"{getattr(tokens, 'dtype', type(tokens))}"
            )
        if tokens.dim() != 2:
            raise ValueError(
                f"tokens must have shape (B, T), got {tuple(tokens.shape)}"
            )
        if tokens.numel() and (
            int(tokens.min()) < 0 or int(tokens.max()) >= self.config.vocab_size
        ):
            raise ValueError(
                f"token ids must lie in 0..{self.config.vocab_size - 1}, got range "
                f"{int(tokens.min())}..{int(tokens.max())}"
            )
        if positions is None:
            positions = (
                torch.arange(tokens.shape[1], device=tokens.device)
                if cache is None
                else cache.next_positions(tokens.shape[1], device=tokens.device)
            )
        if cache is not None and len(cache.layers) != len(self.blocks):
            raise ValueError(
                f"cache has {len(cache.layers)} layers, the model {len(self.blocks)}; "
                "use model.new_cache()"
            )
        x = self.scheme.embed(self.tok_emb(tokens), positions)
        all_weights = []
        for i, block in enumerate(self.blocks):
            layer_cache = None if cache is None else cache.layers[i]
            x, w = block(
                x,
                positions,
                impl=self.config.attn_impl,
                need_weights=need_weights,
                cache=layer_cache,
            )
            all_weights.append(w)
        logits = self.head(self.ln_f(x))
        return (logits, all_weights) if need_weights else logits

    def with_scheme_options(self, **scheme_options) -> "TinyLM":
        """A new model with the same weights and the scheme rebuilt with
        ``scheme_options`` (merged over the current ones), on the same device, in eval
        mode: e.g. a trained RoPE model with a context-extension ``scaling`` and no
            further training.

        Raises:
            ValueError / RuntimeError: invalid options, or options that change the
            weights' shapes.
        """
        from dataclasses import replace

        options = {**self.config.scheme_options, **scheme_options}
        model = TinyLM(replace(self.config, scheme_options=options))
        model.load_state_dict(self.state_dict())
        return model.to(next(self.parameters()).device).eval()

    def num_parameters(self) -> int:
        """Number of distinct trainable parameters."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)
