"""A tiny decoder-only language model whose positional scheme is chosen by name.

Token embedding → scheme's embedding term (plug-in point 1) → ``num_layers`` pre-norm
blocks (LayerNorm → :class:`~posenc.layers.attention.MultiHeadAttention` → residual;
LayerNorm → GELU MLP → residual) → LayerNorm → linear head over the byte vocabulary. It
is small enough to train in a minute on a laptop CPU and reads top to bottom in one
sitting (after nanoGPT's ``model.py``).

Shapes:
    B batch, T tokens, d model width (``d_model``), V = 256 bytes: tokens (B, T) → x
    (B, T, d) through every block → logits (B, T, V); positions (T,) or (B, T) at the
    boundary (what attention does with them: :mod:`posenc.layers.attention`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from .._checks import check_choice, check_int
from .attention import ATTENTION_IMPLS, MultiHeadAttention, check_impl
from .kv_cache import KVCache, StreamingKVCache
from .masks import check_sink, check_window
from ..schemes import build_scheme, get_scheme_class
from ..temperature import check_query_temperature, describe_query_temperature

#: The keys a layer of :attr:`ModelConfig.layers` may hold.
LAYER_KEYS = (
    "scheme",
    "scheme_options",
    "window",
    "chunk",
    "query_temperature",
    "sink",
)


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
        attn_impl: ``"auto"``, ``"reference"``, ``"sdpa"`` or ``"flex"`` (see
            MultiHeadAttention.forward).
        layers: None (every layer the same: ``scheme`` with ``scheme_options``, full
            causal attention), or one dict per layer for a *layer pattern* (Llama 4,
            Gemma 3, SmolLM3, Command R7B: see :func:`layer_preset`) with keys from
            :data:`LAYER_KEYS`: ``scheme`` and ``scheme_options`` (default: the
            model's ``scheme`` and ``scheme_options``; a layer that names another
            scheme gets ``{}``), ``window`` (sliding window) or ``chunk`` (chunked
            attention), ``query_temperature`` (a per-query temperature: Llama 4's
            NoPE temperature, Qwen-1's log-n, or Scalable-Softmax with a learned
            scale per head; :mod:`posenc.temperature`) and
            ``sink`` (a learned sink logit per head, gpt-oss); see
            :class:`~posenc.layers.attention.MultiHeadAttention`. A pattern's schemes
            act inside attention; a scheme that adds to the embeddings (sinusoidal,
            learned) acts once, before the first layer, and cannot be given per
            layer.

    Raises:
        ValueError / TypeError: on construction, for an unknown scheme or attention
        path, sizes that are not positive integers, d_model not divisible by
        num_heads, or a ``layers`` list that is not one valid dict per layer (the
        message names the layer and the rule).
    """

    scheme: str = "sinusoidal"
    scheme_options: dict = field(default_factory=dict)
    vocab_size: int = 256
    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 2
    mlp_ratio: int = 4
    attn_impl: str = "auto"
    layers: list[dict] | None = None

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
        self._check_impl_serves(scheme_cls)
        if not isinstance(self.scheme_options, dict):
            raise TypeError(
                "scheme_options must be a dict, got "
                f"{type(self.scheme_options).__name__}"
            )
        if self.layers is not None:
            self.layers = self._checked_layers()

    def _checked_layers(self) -> list[dict]:
        if not isinstance(self.layers, (list, tuple)) or len(self.layers) != (
            self.num_layers
        ):
            raise ValueError(
                f"layers must be a list of num_layers = {self.num_layers} dicts, got "
                f"{self.layers!r}"
            )
        out = []
        for i, layer in enumerate(self.layers):
            if not isinstance(layer, dict) or set(layer) - set(LAYER_KEYS):
                raise ValueError(
                    f"layers[{i}] must be a dict with keys from {LAYER_KEYS}, got "
                    f"{layer!r}"
                )
            spec = self.layer_spec(layer)
            if not isinstance(spec["scheme_options"], dict):
                raise TypeError(
                    f"layers[{i}]['scheme_options'] must be a dict, got "
                    f"{spec['scheme_options']!r}"
                )
            check_window(f"layers[{i}]['window']", spec["window"])
            check_window(f"layers[{i}]['chunk']", spec["chunk"])
            check_query_temperature(spec["query_temperature"])
            check_sink(f"layers[{i}]['sink']", spec["sink"])
            for name in (spec["scheme"], self.scheme):
                cls = get_scheme_class(name)
                if "embed" in cls.hooks:
                    raise ValueError(
                        f"layers[{i}]: scheme {name!r} adds to the embeddings, once "
                        "before the first layer; a layer pattern takes schemes that "
                        "act inside attention"
                    )
                self._check_impl_serves(cls, sink=spec["sink"], where=f"layers[{i}]: ")
            out.append(dict(layer))
        return out

    def _check_impl_serves(self, scheme, *, sink=False, where="") -> None:
        """:func:`~posenc.layers.attention.check_impl`'s rule for ``attn_impl``, the
        error naming the layer and the scheme."""
        try:
            check_impl(self.attn_impl, scheme, sink=sink)
        except ValueError as error:
            raise ValueError(
                f"{where}attn_impl={self.attn_impl!r} cannot serve scheme "
                f"{scheme.name!r}: {error}"
            ) from None

    def layer_spec(self, layer: dict | None) -> dict:
        """A layer's full specification, its defaults filled in: ``{"scheme",
        "scheme_options", "window", "chunk", "query_temperature", "sink"}``."""
        layer = layer or {}
        scheme = layer.get("scheme", self.scheme)
        default_options = self.scheme_options if scheme == self.scheme else {}
        return {
            "scheme": scheme,
            "scheme_options": layer.get("scheme_options", default_options),
            "window": layer.get("window"),
            "chunk": layer.get("chunk"),
            "query_temperature": layer.get("query_temperature"),
            "sink": layer.get("sink", False),
        }

    def to_dict(self) -> dict:
        """The config as a dict; without ``layers`` when it is None, so that adding
        the field left the cache keys of uniform models unchanged."""
        out = asdict(self)
        if out["layers"] is None:
            del out["layers"]
        return out


class Block(nn.Module):
    """One pre-norm transformer block: LayerNorm → attention → residual; LayerNorm →
    GELU MLP → residual.

    Args:
        config: the sizes ``d_model``, ``num_heads``, ``mlp_ratio``: a
            :class:`ModelConfig`, or the tiny ViT's
            :class:`posenc.layers.vit.ViTConfig`.
        scheme: the positional scheme of the attention (shared between blocks).
        layer: an entry of :attr:`ModelConfig.layers` (window, chunk, query
            temperature, sink), or None for full attention.
        causal: a decoder's mask (the language model) or none (the ViT's encoder).
    """

    def __init__(
        self, config, scheme, layer: dict | None = None, *, causal: bool = True
    ) -> None:
        super().__init__()
        spec = config.layer_spec(layer) if layer is not None else {}
        self.ln1 = nn.LayerNorm(config.d_model)
        self.attn = MultiHeadAttention(
            config.d_model,
            config.num_heads,
            scheme,
            causal=causal,
            window=spec.get("window"),
            chunk=spec.get("chunk"),
            query_temperature=spec.get("query_temperature"),
            sink=spec.get("sink", False),
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
        layers = config.layers or [None] * config.num_layers
        # one scheme module per distinct (scheme, options), shared by its layers, as
        # the one scheme of a uniform model is shared by all
        schemes = {_spec_key(config.scheme, config.scheme_options): self.scheme}
        layer_schemes = []
        for layer in layers:
            spec = config.layer_spec(layer)
            key = _spec_key(spec["scheme"], spec["scheme_options"])
            if key not in schemes:
                schemes[key] = build_scheme(
                    spec["scheme"],
                    d_model=config.d_model,
                    num_heads=config.num_heads,
                    **spec["scheme_options"],
                )
            layer_schemes.append(schemes[key])
        self.layer_schemes = nn.ModuleList(
            m for m in schemes.values() if m is not self.scheme
        )
        self.blocks = nn.ModuleList(
            Block(config, scheme, layer)
            for scheme, layer in zip(layer_schemes, layers, strict=True)
        )
        self.ln_f = nn.LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)

    def new_cache(self) -> KVCache:
        """An empty :class:`~posenc.layers.kv_cache.KVCache` for incremental decoding
        with this model."""
        return KVCache(self.config.num_layers)

    def new_streaming_cache(self, *, sink_tokens: int, window: int) -> StreamingKVCache:
        """An empty :class:`~posenc.layers.kv_cache.StreamingKVCache` (StreamingLLM,
        Xiao et al. 2024): the first ``sink_tokens`` tokens and the last ``window`` are
        kept, and positions are slots in the cache. Feed it one token per step once it
        is full.

        Raises:
            ValueError: the scheme adds to the embeddings (sinusoidal, learned): its
            positions cannot be re-assigned to cached keys.
        """
        if "embed" in self.scheme.hooks:
            raise ValueError(
                f"scheme {self.config.scheme!r} adds positions to the embeddings; a "
                "streaming cache re-positions cached keys and needs a scheme that acts "
                "inside attention"
            )
        return StreamingKVCache(
            self.config.num_layers, sink_tokens=sink_tokens, window=window
        )

    @property
    def max_positions(self) -> int | None:
        """The longest sequence every layer's scheme can encode (None: no limit)."""
        limits = [
            m.max_positions
            for m in (self.scheme, *self.layer_schemes)
            if m.max_positions is not None
        ]
        return min(limits) if limits else None

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
        x = self.tok_emb(tokens)  # (B, T, d)
        if "embed" in self.scheme.hooks:
            x = self.scheme.embed(x, positions)  # plug-in point 1
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


def _spec_key(scheme: str, options: dict) -> str:
    return json.dumps([scheme, options], sort_keys=True, default=str)


#: The positional layer patterns of open-weight models, from their transformers 5.23
#: config classes (the rows of :func:`posenc.open_models.positional_settings`): the
#: period, and the local and global layers' settings; ``W`` stands for the window.
#: The last layer of each period is the global one, as in the config classes
#: (``(i + 1) % period == 0``).
LAYER_PRESETS: dict[str, dict] = {
    # Llama 4 (iRoPE): 3 chunked RoPE layers (chunk 8192), then a global NoPE layer
    # whose queries get the attention temperature (floor_scale 8192 = the chunk)
    "llama4": {
        "period": 4,
        "local": {"scheme": "rope", "base": 500000.0, "chunk": "W"},
        "global": {"scheme": "none", "temperature": 0.1},
    },
    # Gemma 3: 5 sliding-window layers at base 10,000, then a global one at 1,000,000
    "gemma3": {
        "period": 6,
        "local": {"scheme": "rope", "base": 10000.0, "window": "W"},
        "global": {"scheme": "rope", "base": 1000000.0},
    },
    # SmolLM3: full attention everywhere, RoPE (base 2,000,000) except every 4th layer
    "smollm3": {
        "period": 4,
        "local": {"scheme": "rope", "base": 2000000.0},
        "global": {"scheme": "none"},
    },
    # Command R7B (Cohere2): 3 sliding RoPE layers, then a global layer without RoPE
    "command_r7b": {
        "period": 4,
        "local": {"scheme": "rope", "base": 10000.0, "window": "W"},
        "global": {"scheme": "none"},
    },
    # gpt-oss: sliding and full layers alternate, RoPE at base 150,000 on both, and
    # every layer has a learned sink logit per head (its YaRN scaling is left out: it
    # extends a trained model)
    "gpt_oss": {
        "period": 2,
        "local": {"scheme": "rope", "base": 150000.0, "window": "W", "sink": True},
        "global": {"scheme": "rope", "base": 150000.0, "sink": True},
    },
}


def layer_preset(
    name: str, num_layers: int, *, window: int, period: int | None = None
) -> list[dict]:
    """The :attr:`ModelConfig.layers` of a model's positional layer pattern, scaled
    to a small model.

    Each preset keeps its model's schemes, RoPE bases, temperature and sinks
    (:data:`LAYER_PRESETS`); what cannot keep its size is scaled: the window or chunk
    (and Llama 4's ``floor_scale``, its chunk size) is ``window``, and ``period`` may
    be shortened for a model with fewer layers than one period (a 2-layer model with
    ``period=2`` has one local and one global layer).

    Args:
        name: a key of :data:`LAYER_PRESETS`. num_layers: N ≥ 1. window: W ≥ 1
            (positions). period: default the model's own.

    Returns:
        N layer dicts; layer i is global when ``(i + 1) % period == 0``.

    Raises:
        ValueError / TypeError: unknown name (the message lists the presets), sizes
        not positive integers.
    """
    preset = LAYER_PRESETS[check_choice("name", name, tuple(LAYER_PRESETS))]
    num_layers = check_int("num_layers", num_layers, minimum=1)
    window = check_int("window", window, minimum=1)
    period = preset["period"] if period is None else period
    period = check_int("period", period, minimum=1)

    def layer(kind: dict) -> dict:
        out: dict = {"scheme": kind["scheme"]}
        if "base" in kind:
            out["scheme_options"] = {"base": kind["base"]}
        for key in ("window", "chunk"):
            if key in kind:
                out[key] = window
        if "temperature" in kind:
            out["query_temperature"] = {
                "floor_scale": float(window),
                "attn_scale": kind["temperature"],
            }
        if kind.get("sink"):
            out["sink"] = True
        return out

    return [
        layer(preset["global"] if (i + 1) % period == 0 else preset["local"])
        for i in range(num_layers)
    ]


def describe_layer(layer: dict, *, scheme: str = "rope") -> str:
    """One entry of :attr:`ModelConfig.layers` in words, for tables: e.g. ``"RoPE, b =
    10,000, window 16"`` or ``"NoPE, full, temperature (F = 16, a = 0.1)"``.

    Args:
        layer: a layer dict (:data:`LAYER_KEYS`). scheme: the model's scheme, for a
            layer that names none.
    """
    name = layer.get("scheme", scheme)
    text = {"none": "NoPE", "rope": "RoPE"}.get(name, f"`{name}`")
    base = layer.get("scheme_options", {}).get("base")
    if base is not None:
        text += f", b = {base:,.0f}"
    if layer.get("window") is not None:
        text += f", window {layer['window']}"
    elif layer.get("chunk") is not None:
        text += f", chunk {layer['chunk']}"
    else:
        text += ", full"
    if layer.get("query_temperature"):
        text += ", " + describe_query_temperature(layer["query_temperature"])
    return text + (", sink logits" if layer.get("sink") else "")
