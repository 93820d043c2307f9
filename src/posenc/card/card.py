"""The position card: what a model's config does to positions, layer type by layer
type (:class:`PositionCard`, built by :func:`position_card`).

Per layer group (full, sliding, chunked, NoPE, linear attention): the layer indices,
rope_type, head_dim, rotary_dim, base b (``rope_theta``), a table with one row per
frequency pair i — θ_i = b^(−2i/r), the frequency θ′_i the model uses, its wavelength
2π/θ′_i in tokens, its turns L·θ′_i/2π within the trained context L, θ′_i/θ_i and a
region ("kept", "blended", "interpolated", "not rotated") — the attention factor that
multiplies cos and sin, and the multiplier every score gets; then the contexts, the
window or chunk, attention sinks, and the lints (:mod:`posenc.card.lints`).

The frequencies are :func:`posenc.rope_config.rope_inv_freq_from_config`'s, the
package's transformers-equal rules. Source: transformers 5.23.0
``modeling_rope_utils.py``; DeepSeek-V3's softmax factor from
``models/deepseek_v3/modeling_deepseek_v3.py`` (``yarn_apply_mscale``); Llama 4's
temperature from ``models/llama4/modeling_llama4.py``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass, field

from .. import rope_config
from ..rope_config import IGNORED_ROPE_PARAMETERS, rope_inv_freq_from_config
from ..scaling import ROPE_INIT_FUNCTIONS, rope_inv_freq
from ..utils import cpu_float64
from .parse import CHUNKED, FULL, LINEAR, SLIDING, head_dim_of

#: Model types whose attention multiplies the softmax scale by m(s, mscale_all_dim)²
#: when RoPE is scaled (transformers 5.23's ``yarn_apply_mscale`` in their modeling
#: files; tests/test_card.py checks the list against them).
MLA_MSCALE_MODEL_TYPES = (
    "axk1",
    "axk2",
    "bailing_hybrid",
    "deepseek_v2",
    "deepseek_v3",
    "deepseek_v32",
    "glm4_moe_lite",
    "glm_moe_dsa",
    "hy_v4",
    "kimi_k2",
    "longcat_flash",
    "minicpm3",
    "mistral4",
    "mistral_large4",
    "youtu",
)

#: Model types with learned per-head attention sinks (an extra logit per head).
SINK_MODEL_TYPES = {"gpt_oss": "learned per-head sink logits (modeling_gpt_oss)"}

_KIND = {FULL: "full", SLIDING: "sliding", CHUNKED: "chunked", LINEAR: "linear"}


@dataclass(frozen=True)
class PairRow:
    """One frequency pair i of a layer group (angles in radians per position)."""

    pair: int
    theta: float  # θ_i = b^(−2i/r)
    theta_scaled: float  # θ′_i, the frequency the model uses (past L for longrope)
    wavelength: float  # 2π/θ′_i in tokens (inf when θ′_i = 0)
    turns_in_original: float  # L·θ′_i/2π, full turns within the trained context
    ratio: float  # θ′_i/θ_i
    region: str  # "kept", "blended", "interpolated" or "not rotated"
    ratio_short: float | None = None  # longrope: θ′/θ for ℓ ≤ L (short_factor)


@dataclass(frozen=True)
class LayerGroup:
    """The layers of one attention type that share one positional setting."""

    name: str  # "full", "sliding", "chunked", "linear", with " (NoPE)" for NoPE
    layer_type: str  # transformers' name: "full_attention", ...
    rope: bool  # False: NoPE (or no attention positions at all)
    layers: tuple[int, ...]  # 0-based layer indices
    rope_type: str | None = None
    head_dim: int | None = None
    rotary_dim: int | None = None
    rope_theta: float | None = None
    rope_parameters: dict = field(default_factory=dict)
    pairs: tuple[PairRow, ...] = ()
    attention_factor: float = 1.0  # multiplies cos and sin, so q·k by its square
    score_multiplier: float = 1.0  # what every score gets, over 1/√d
    score_note: str = ""  # what the multiplier leaves out (position-dependent terms)
    window: int | None = None  # sliding_window
    chunk: int | None = None  # attention_chunk_size
    mrope_section: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Lint:
    """A finding: ``id`` (short, stable), ``severity`` ("warning" or "note"), the
    ``message`` (what is wrong and what to do) and the book ``chapter`` that explains
    it."""

    id: str
    severity: str
    message: str
    chapter: str


@dataclass(frozen=True)
class PositionCard:
    """What a model's config does to positions, built by
    :func:`~posenc.card.build.position_card` (frozen; render it with
    :meth:`to_markdown`, :meth:`to_html`, :meth:`to_json`, :meth:`to_text`).

    Attributes:
        model_type: transformers' ``model_type`` ("llama", "qwen3", ...; a GGUF
            file's ``general.architecture`` mapped to it), None if the config has
            none.
        source: where the config came from ("config.json: PATH", "GGUF file:
            PATH", "dict", "GGUF metadata", "LlamaConfig.to_dict()", ...).
        num_hidden_layers: the number of decoder layers; None when the config gives
            none (then the one group has no layer indices and ``warnings`` holds
            ``layer-count-unknown``).
        original_max_position_embeddings: L, the trained context in tokens
            (``original_max_position_embeddings`` of the RoPE parameters or the
            config, else ``max_position_embeddings``).
        max_position_embeddings: the extended (served) context in tokens, as the
            config states it.
        groups: one :class:`LayerGroup` per kind of layer (full, sliding, chunked,
            linear, NoPE), in the order of their first layer: 0-based layer indices,
            rope_type, head_dim d_h, rotary_dim r, base b (``rope_theta``), the
            per-pair table (:class:`PairRow`: θ_i, θ′_i in radians per position,
            wavelength 2π/θ′_i in tokens, turns within L, θ′/θ, region), the
            attention factor on cos and sin (dimensionless), the multiplier every
            score gets on top of 1/√d_h, window or chunk in tokens.
        sinks: the attention sinks the model type has (gpt-oss's learned per-head
            logits), None if none.
        warnings: the lints (:class:`Lint`: id, severity, message, book chapter;
            :data:`posenc.card.lints.LINTS`).

    Source: the values follow transformers 5.23.0 (``modeling_rope_utils.py``'s
    rope rules, the config classes' layer-type rules); see :mod:`posenc.card.card`.
    """

    model_type: str | None
    source: str
    num_hidden_layers: int | None
    original_max_position_embeddings: int | None  # L, the trained context
    max_position_embeddings: int | None  # the extended (served) context
    groups: tuple[LayerGroup, ...]
    sinks: str | None = None
    warnings: tuple[Lint, ...] = ()

    def group(self, name: str) -> LayerGroup:
        """The group called ``name`` ("full", "sliding", "chunked", "full (NoPE)",
        ...). Raises KeyError naming the groups there are."""
        for found in self.groups:
            if found.name == name:
                return found
        names = [g.name for g in self.groups]
        raise KeyError(f"no group {name!r}; the card has {names}")

    def to_dict(self) -> dict:
        """The card as plain Python values (floats, ints, str, lists, dicts); an
        infinite wavelength is the string "inf"."""
        return _plain(asdict(self))

    def to_json(self, indent: int | None = 2) -> str:
        """:meth:`to_dict` as JSON text."""
        import json

        return json.dumps(self.to_dict(), indent=indent)

    def to_markdown(self) -> str:
        """The card as Markdown (a summary table per group, the lints, the per-pair
        tables)."""
        from .render import card_markdown

        return card_markdown(self)

    def to_html(self) -> str:
        """The card as HTML (each per-pair table folded in a ``<details>``)."""
        from .render import card_html

        return card_html(self)

    def to_text(self, width: int = 100) -> str:
        """The card as a plain-text table of at most ``width`` columns (the CLI's)."""
        from .render import card_text

        return card_text(self, width)

    def _repr_html_(self) -> str:
        return self.to_html()

    def __str__(self) -> str:
        return self.to_text()


def _plain(value):
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return value


def region_of(ratio: float, factor: float | None, theta_scaled: float) -> str:
    """The pair's region from θ′/θ: "not rotated" (θ′ = 0), "kept" (1),
    "interpolated" (1/factor), else "blended" (relative tolerance 1e-5)."""
    if theta_scaled == 0.0:
        return "not rotated"
    if math.isclose(ratio, 1.0, rel_tol=1e-5):
        return "kept"
    if factor and factor > 1 and math.isclose(ratio, 1.0 / factor, rel_tol=1e-5):
        return "interpolated"
    return "blended"


def rule_parameters(params: dict) -> dict:
    """``params`` without the keys that the rope_type's rule does not read (the lints
    report them), so that the frequencies are computed as transformers computes them:
    posenc's :data:`~posenc.scaling.ROPE_INIT_FUNCTIONS` keys, plus ``rope_type``,
    ``rope_theta``, ``partial_rotary_factor``, YaRN's ``mscale`` and
    ``mscale_all_dim``, and :data:`~posenc.rope_config.IGNORED_ROPE_PARAMETERS`."""
    rope_type = params.get("rope_type", params.get("type", "default"))
    rule = ROPE_INIT_FUNCTIONS.get(rope_type)
    keep = {"rope_type", "type", "rope_theta", "partial_rotary_factor"}
    keep |= set(IGNORED_ROPE_PARAMETERS)
    if rule is not None:
        keep |= rule.required | rule.optional
    if rope_type == "yarn":
        keep |= {"mscale", "mscale_all_dim"}
    return {key: value for key, value in params.items() if key in keep}


def _rotary_width(params: dict, head_dim: int) -> int:
    if params.get("rope_type") == "proportional":
        return head_dim
    return int(head_dim * float(params.get("partial_rotary_factor") or 1.0))


def scaled_frequencies(params: dict, head_dim: int, config: dict):
    """``(θ, θ′, θ′_short, attention_factor, L)`` of one group: the plain and the used
    frequencies (float64 tensors, r/2 entries), for longrope also the short ones
    (else None), the cos/sin factor and the training length L.

    "dynamic" is evaluated at ℓ = factor·L (θ′ grows with the length: below L it is
    θ); "longrope" at ℓ = L + 1 (long_factor), with short_factor's in θ′_short."""
    max_pos = config.get("max_position_embeddings")
    rope_type = params.get("rope_type", "default")
    length = params.get("original_max_position_embeddings")
    if rope_type == "dynamic":
        length = max_pos  # transformers' dynamic rule takes L from the config
    length = length or max_pos
    seq_len = None
    if rope_type == "dynamic" and length:
        seq_len = int(math.ceil(float(params.get("factor", 1.0)) * length))
    elif rope_type == "longrope":
        seq_len = int(length) + 1
    kwargs = {"max_position_embeddings": max_pos}
    with warnings.catch_warnings():
        # the card reports a factor that disagrees with the lengths as a lint
        category = getattr(rope_config, "RopeParametersWarning", None)
        if category is not None:
            warnings.simplefilter("ignore", category)
        used, attention_factor = rope_inv_freq_from_config(
            params, head_dim, seq_len=seq_len, **kwargs
        )
        short = None
        if rope_type == "longrope":
            short, _ = rope_inv_freq_from_config(params, head_dim, **kwargs)
    width = _rotary_width(params, head_dim)
    plain, _ = rope_inv_freq(width, float(params["rope_theta"]))
    return cpu_float64(plain), cpu_float64(used), short, attention_factor, length


def pair_rows(plain, used, short, length, factor) -> tuple[PairRow, ...]:
    """The per-pair table from :func:`scaled_frequencies`' values."""
    rows = []
    for i, (theta, theta_scaled) in enumerate(zip(plain.tolist(), used.tolist())):
        ratio = theta_scaled / theta
        wavelength = 2 * math.pi / theta_scaled if theta_scaled else math.inf
        turns = length * theta_scaled / (2 * math.pi) if length else math.nan
        rows.append(
            PairRow(
                pair=i,
                theta=theta,
                theta_scaled=theta_scaled,
                wavelength=wavelength,
                turns_in_original=turns,
                ratio=ratio,
                region=region_of(ratio, factor, theta_scaled),
                ratio_short=None if short is None else float(short[i]) / theta,
            )
        )
    return tuple(rows)


def mscale(factor: float, scale: float) -> float:
    """transformers' ``yarn_get_mscale``: 0.1·scale·ln s + 1 for s > 1, else 1."""
    return 0.1 * scale * math.log(factor) + 1.0 if factor > 1 else 1.0


def score_multiplier(params: dict, attention_factor: float, config: dict):
    """``(multiplier, note)``: attention_factor² (cos and sin multiply q and k), times
    MLA's m(s, mscale_all_dim)² on the softmax scale for the model types of
    :data:`MLA_MSCALE_MODEL_TYPES`; the note names what multiplies the scores by
    position (Ministral 3's ``llama_4_scaling_beta``) rather than by one number."""
    multiplier = attention_factor**2
    notes = []
    if attention_factor != 1:
        notes.append(f"attention_factor² = {attention_factor:.6g}²")
    if (
        config.get("model_type") in MLA_MSCALE_MODEL_TYPES
        and params.get("rope_type", "default") != "default"
        and params.get("mscale_all_dim")
    ):
        extra = mscale(float(params["factor"]), float(params["mscale_all_dim"])) ** 2
        multiplier *= extra
        notes.append(f"MLA softmax scale × m(s, mscale_all_dim)² = {extra:.6g}")
    beta = params.get("llama_4_scaling_beta")
    if beta:
        floor = params.get("original_max_position_embeddings")
        notes.append(
            f"queries × 1 + {beta}·ln(1 + ⌊m/{floor}⌋) by position m "
            "(llama_4_scaling_beta; 1 for m < its floor)"
        )
    return multiplier, "; ".join(notes)


def llama4_temperature_note(config: dict) -> str:
    """Llama 4's NoPE-layer query temperature, position-dependent (one line)."""
    if not config.get("attn_temperature_tuning", True):
        return ""
    scale, floor = config.get("attn_scale", 0.1), config.get("floor_scale", 8192)
    return (
        f"queries × 1 + {scale}·ln(1 + ⌊(m + 1)/{floor}⌋) by position m "
        "(attn_temperature_tuning; 1 for m + 1 < floor_scale): no single number"
    )


def group_window(layer_type: str, config: dict) -> tuple[int | None, int | None]:
    """``(window, chunk)`` of a layer type's layers."""
    if layer_type == SLIDING:
        return config.get("sliding_window"), None
    if layer_type == CHUNKED:
        return None, config.get("attention_chunk_size")
    return None, None


def group_name(layer_type: str, rope: bool) -> str:
    """"full", "sliding", "chunked", "linear", with " (NoPE)" for a NoPE group."""
    name = _KIND.get(layer_type, layer_type)
    return name if rope or layer_type == LINEAR else f"{name} (NoPE)"


def head_dim_for(config: dict, layer_type: str) -> int:
    """d_h of a layer type, or a ValueError that says which keys are missing."""
    head_dim = head_dim_of(config, layer_type)
    if head_dim is None:
        raise ValueError(
            "the config gives no head width: it needs 'head_dim', or 'hidden_size' "
            "and 'num_attention_heads'"
        )
    return head_dim
