"""Failures in reading and choosing RoPE settings (the chapter of failures, 1, 4, 5, 8):

* :func:`rope_config_readers` — a transformers v4 ``rope_scaling`` dict against a v5
  ``rope_parameters`` dict, and Gemma 3 / 4's per-layer-type dicts: the v4 way of
  reading them (``config.rope_theta``, one dict for every layer) against
  :func:`posenc.rope_config.rope_inv_freq_from_config`, both against transformers'
  own rotary modules;
* :func:`yarn_original_length` — YaRN with ``original_max_position_embeddings`` set
  wrongly: which pairs it interpolates, its attention factor, and which pairs then
  turn to angles training never reached; :func:`past_context_stored` quotes the
  stored SmolLM2 runs past its trained length with no scaling;
* :func:`scaled_perplexities` — SmolLM2's perplexity on a short input under several
  scalings: static YaRN below L against dynamic scaling (failure 5) and YaRN with a
  wrong L (failure 4);
* :func:`llama3_pairs` — what Llama 3.1's ``low_freq_factor``, ``high_freq_factor``
  and ``original_max_position_embeddings`` select, pair by pair.

The fixes are :func:`posenc.rope_config.rope_inv_freq_from_config` and
:func:`posenc.scaling.rope_inv_freq`; each wrong way is written out here and named so.

Shapes: d_h ``head_dim``, r ``rotary_dim``; frequencies are (r/2,) float32.
"""

from __future__ import annotations

import math
import warnings

import torch

from ...frequencies import DEFAULT_BASE
from ...rope_config import RopeParametersWarning, rope_inv_freq_from_config
from ...scaling import rope_inv_freq, yarn_ramp
from ...utils import cpu_float64

#: The scaling keys a v4 reader passed on (``rope_theta`` sat at the config's top).
_V4_SCALING_KEYS = (
    "rope_type",
    "factor",
    "original_max_position_embeddings",
    "low_freq_factor",
    "high_freq_factor",
    "beta_fast",
    "beta_slow",
    "attention_factor",
)


def _config(name: str, **kwargs):
    """A transformers configuration class, built quietly (v4 keys log a warning)."""
    import transformers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return getattr(transformers, name)(**kwargs)


def wrong_v4_reader(config, head_dim: int) -> tuple[torch.Tensor, float]:
    """THE WRONG WAY (failure 1): read RoPE as transformers 4 code did —
    ``config.rope_theta`` (with RoPE's default 10000 when absent) and the scaling
    keys of ``config.rope_scaling`` — on a transformers 5 config, where ``rope_theta``
    lives inside ``rope_parameters`` (``getattr`` silently returns the default) and a
    per-layer-type model keys the dict by layer type (the reader then finds no
    ``rope_type`` and applies no scaling).

    Returns:
        ``(inv_freq, attention_factor)`` as :func:`posenc.scaling.rope_inv_freq`.
    """
    base = getattr(config, "rope_theta", DEFAULT_BASE)  # v5: absent → 10000, silently
    legacy = dict(getattr(config, "rope_scaling", None) or {})
    scaling = {k: v for k, v in legacy.items() if k in _V4_SCALING_KEYS}
    if scaling.get("rope_type", "default") == "default":
        scaling = None
    return rope_inv_freq(head_dim, base, scaling)


def wrong_one_dict(
    config, layer_type: str, head_dim: int
) -> tuple[torch.Tensor, float]:
    """THE WRONG WAY (failure 1): one layer type's dict (``"full_attention"``) for
    every layer, whatever ``layer_type`` asks for (vLLM's Gemma 3 regression, PR
    28542 → 29111). Returns ``(inv_freq, attention_factor)``."""
    return rope_inv_freq_from_config(
        config.rope_parameters["full_attention"],
        head_dim,
        max_position_embeddings=config.max_position_embeddings,
    )


def _transformers_rotary(config):
    """transformers' own rotary module for a Llama, Gemma 3 or Gemma 4 config."""
    name = type(config).__name__
    if name == "LlamaConfig":
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        return LlamaRotaryEmbedding(config)
    if name == "Gemma3TextConfig":
        from transformers.models.gemma3.modeling_gemma3 import Gemma3RotaryEmbedding

        return Gemma3RotaryEmbedding(config)
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextRotaryEmbedding

    return Gemma4TextRotaryEmbedding(config)


def reader_configs() -> dict[str, object]:
    """The configurations :func:`rope_config_readers` reads: one Llama 3-style model
    (base 500000, YaRN s = 4 from 8192) written as a v4 ``rope_scaling`` dict and as
    a v5 ``rope_parameters`` dict; Gemma 3 written the v4 way (``rope_theta``,
    ``rope_local_base_freq``, ``rope_scaling`` linear s = 8, as its 4B+ checkpoints)
    and the v5 way; Gemma 4 (its defaults, v5 only)."""
    yarn = {"rope_type": "yarn", "factor": 4.0}
    yarn["original_max_position_embeddings"] = 8192
    llama = {"max_position_embeddings": 32768}
    sliding = {"rope_type": "default", "rope_theta": 10000.0}
    full = {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}
    return {
        "Llama, v4 dict": _config(
            "LlamaConfig", rope_theta=500000.0, rope_scaling=yarn, **llama
        ),
        "Llama, v5 dict": _config(
            "LlamaConfig", rope_parameters={**yarn, "rope_theta": 500000.0}, **llama
        ),
        "Gemma 3, v4 keys": _config(
            "Gemma3TextConfig",
            rope_theta=1000000.0,
            rope_local_base_freq=10000.0,
            rope_scaling={"rope_type": "linear", "factor": 8.0},
        ),
        "Gemma 3, v5 dict": _config(
            "Gemma3TextConfig",
            rope_parameters={"sliding_attention": sliding, "full_attention": full},
        ),
        "Gemma 4": _config("Gemma4TextConfig"),
    }


def _layer_head_dim(config, layer_type: str | None) -> int:
    """d_h of a layer type (Gemma 4's full-attention layers are wider)."""
    per_layer = getattr(config, "per_layer_config", None)
    if layer_type is not None and per_layer is not None:
        return per_layer[layer_type].head_dim
    return getattr(config, "head_dim", None) or (
        config.hidden_size // config.num_attention_heads
    )


def _relative_error(inv_freq: torch.Tensor, reference: torch.Tensor) -> float:
    """max_i |θ_i − θ_i^ref| / θ_i^ref over the pairs that rotate (θ^ref > 0); inf
    for another number of pairs or a pair rotating where θ^ref = 0."""
    if inv_freq.shape != reference.shape:
        return math.inf
    ours, ref = cpu_float64(inv_freq), cpu_float64(reference)
    rotating = ref > 0
    if (ours[~rotating] != 0).any():  # a pair rotates that should not
        return math.inf
    return float(((ours - ref).abs()[rotating] / ref[rotating]).max())


def rope_config_readers():
    """Failure 1, v4 ``rope_scaling`` against v5 ``rope_parameters`` and per-layer
    dicts: for each configuration of :func:`reader_configs` and layer type, the
    largest relative frequency error of the two wrong ways and of the fix, against
    the frequencies transformers' own rotary module computes.

    Returns:
        pandas DataFrame, one row per (configuration, layer type): ``config``,
        ``layer type``, ``rope_theta`` (transformers'), ``v4 reader`` (max |Δθ|/θ of
        :func:`wrong_v4_reader`), ``one dict`` (:func:`wrong_one_dict`; NaN for a
        model with one dict), ``fix``
        (:func:`posenc.rope_config.rope_inv_freq_from_config` on the layer type's
        dict); inf where the number of pairs differs.

    Source: transformers 5.23 ``LlamaRotaryEmbedding``, ``Gemma3RotaryEmbedding``,
    ``Gemma4TextRotaryEmbedding`` (the ``{layer_type}_inv_freq`` buffers).
    """
    import pandas as pd

    rows = []
    for name, config in reader_configs().items():
        rotary = _transformers_rotary(config)
        layer_types = sorted(set(getattr(config, "layer_types", None) or [None]))
        for layer_type in layer_types:
            prefix = f"{layer_type}_" if layer_type else ""
            theirs = getattr(rotary, f"{prefix}inv_freq")
            params = config.rope_parameters
            params = params[layer_type] if layer_type else params
            head_dim = _layer_head_dim(config, layer_type)
            fix, _ = rope_inv_freq_from_config(
                params, head_dim, max_position_embeddings=config.max_position_embeddings
            )
            rows.append(
                {
                    "config": name,
                    "layer type": layer_type or "all",
                    "rope_theta": params["rope_theta"],
                    "v4 reader": _relative_error(
                        wrong_v4_reader(config, head_dim)[0], theirs
                    ),
                    "one dict": _relative_error(
                        wrong_one_dict(config, layer_type, head_dim)[0], theirs
                    )
                    if layer_type
                    else math.nan,
                    "fix": _relative_error(fix, theirs),
                }
            )
    return pd.DataFrame(rows)


def _yarn_settings(trained: int, factor: float) -> dict[str, dict]:
    """The YaRN settings of :func:`yarn_original_length`: ``rope_parameters`` of a
    model trained at L = ``trained`` and extended to s·L, with
    ``original_max_position_embeddings`` right, too small, and the new length."""
    longest = int(factor * trained)
    yarn = {"rope_type": "yarn", "factor": factor}
    return {
        f"right: L = {trained}": {**yarn, "original_max_position_embeddings": trained},
        f"too small: L = {trained // 4}": {
            **yarn,
            "original_max_position_embeddings": trained // 4,
        },
        f"the new length: L = {longest}": {
            **yarn,
            "original_max_position_embeddings": longest,
        },
    }


def yarn_original_length(
    head_dim: int = 64, base: float = 1e5, trained: int = 8192, factor: float = 2.0
):
    """Failure 4, YaRN with ``original_max_position_embeddings`` set wrongly: for the
    right L and two wrong ones (:func:`_yarn_settings`), how many pairs
    YaRN keeps, ramps and interpolates, its attention factor, and how many pairs
    turn, within the new length s·L, past the largest angle that pair reached in
    training (L·θ_i for a pair that never completed a turn; such angles are unseen).
    Defaults: SmolLM2 (d_h 64, b = 1e5, L = 8192) extended twice.

    Returns:
        pandas DataFrame, one row per setting: ``setting``, ``kept`` (γ_i = 0),
        ``ramp``, ``interpolated`` (γ_i = 1), ``attention factor``, ``unseen pairs``
        (pairs with θ_i·L < 2π whose angle at s·L exceeds θ_i·L).

    Source: Peng et al. 2023 (YaRN), Eq. 17–22; transformers 5.23
    ``_compute_yarn_parameters``.
    """
    import pandas as pd

    plain, _ = rope_inv_freq(head_dim, base)
    longest = int(factor * trained)
    never_turned = plain * trained < 2 * math.pi
    rows = []
    for name, params in _yarn_settings(trained, factor).items():
        with warnings.catch_warnings():  # the wrong lengths are the demonstration
            warnings.simplefilter("ignore", RopeParametersWarning)
            inv_freq, attention = rope_inv_freq_from_config(
                {**params, "rope_theta": base}, head_dim,
                max_position_embeddings=longest,
            )
        gamma = yarn_ramp(
            head_dim,
            base,
            beta_fast=32.0,
            beta_slow=1.0,
            original_max_position_embeddings=params["original_max_position_embeddings"],
        )
        # the largest angle within s·L against the largest within L (1e-4: rounding)
        unseen = never_turned & (inv_freq * longest > plain * trained * (1 + 1e-4))
        rows.append(
            {
                "setting": name,
                "kept": int((gamma == 0).sum()),
                "ramp": int(((gamma > 0) & (gamma < 1)).sum()),
                "interpolated": int((gamma == 1).sum()),
                "attention factor": attention,
                "unseen pairs": int(unseen.sum()),
            }
        )
    return pd.DataFrame(rows)


def past_context_stored(text: str = "prose", trained: int = 8192) -> dict[str, float]:
    """Failure 4, a model run past its trained length with no scaling: the stored
    SmolLM2 runs over 2L tokens (one forward pass each,
    :mod:`posenc.experiments.pretrained_study`), as perplexity over [0, L) and
    [L, 2L), unscaled and with YaRN at s = 2.

    Returns:
        ``"none [0, L)"``, ``"none [L, 2L)"``, ``"yarn [0, L)"``, ``"yarn [L, 2L)"``
        → perplexity.
    """
    from ..pretrained_study import load_real_model_results, range_perplexity

    df = load_real_model_results()
    out = {}
    for method in ("none", "yarn"):
        for label, (start, stop) in {
            "[0, L)": (0, trained),
            "[L, 2L)": (trained, 2 * trained),
        }.items():
            out[f"{method} {label}"] = range_perplexity(
                df, text=text, method=method, start=start, stop=stop
            )
    return out


def scaled_perplexities(
    model, ids: torch.Tensor, scalings: dict, *, cache: dict | None = None
):
    """SmolLM2's perplexity on one short sequence under several scalings (failures 4
    and 5): each entry's frequencies come from :func:`posenc.scaling.rope_inv_freq`
    at the sequence's length ℓ = T (so "dynamic" sees ℓ) and are rotated in by
    :func:`posenc.layers.pretrained.swap_rope`.

    Args:
        model: a Llama-style model (SmolLM2). ids: int64 (T,) token ids.
        scalings: name → a scaling dict of :func:`posenc.scaling.rope_inv_freq`, or
            None for the model's own frequencies.
        cache: a dict to reuse losses across calls; two scalings whose frequencies
            and attention factor are equal share one forward pass (the computation
            is the same).

    Returns:
        pandas DataFrame, one row per scaling: ``scaling``, ``perplexity``,
        ``max |Δθ|/θ`` (against the unscaled frequencies), ``attention factor``.
    """
    import pandas as pd

    from ...layers import pretrained

    cache = {} if cache is None else cache
    config = pretrained.rope_config(model)
    plain, _ = rope_inv_freq(config["rotary_dim"], config["base"])
    rows = []
    for name, scaling in scalings.items():
        inv_freq, attention = rope_inv_freq(
            config["rotary_dim"], config["base"], scaling, seq_len=len(ids)
        )
        key = (len(ids), ids.sum().item(), inv_freq.numpy().tobytes(), attention)
        if key not in cache:
            with pretrained.swap_rope(
                model, inv_freq=inv_freq, attention_factor=attention
            ):
                cache[key] = pretrained.token_losses(model, ids)
        rows.append(
            {
                "scaling": name,
                "perplexity": math.exp(float(cpu_float64(cache[key]).mean())),
                "max |Δθ|/θ": float(((inv_freq - plain).abs() / plain).max()),
                "attention factor": attention,
            }
        )
    return pd.DataFrame(rows)


def llama3_settings(trained: int = 8192) -> dict[str, dict]:
    """Llama 3.1's ``rope_parameters`` (factor 8, low 1, high 4, L = 8192) and the same
    with ``original_max_position_embeddings`` set to the new context (131072) — a
    wrong L."""
    llama = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
    }
    return {
        f"right: L = {trained}": {**llama, "original_max_position_embeddings": trained},
        "wrong: L = 131072": {**llama, "original_max_position_embeddings": 131072},
    }


def llama3_pairs(head_dim: int = 128, base: float = 500000.0, trained: int = 8192):
    """Failure 8, what Llama 3's ``low_freq_factor`` / ``high_freq_factor`` and
    ``original_max_position_embeddings`` select: every pair's wavelength
    λ_i = 2π/θ_i, and per setting of :func:`llama3_settings` whether the pair keeps
    its frequency (λ_i < L/high_freq_factor), is divided by ``factor``
    (λ_i > L/low_freq_factor) or blended between, with its new frequency.

    Returns:
        pandas DataFrame, one row per (setting, pair): ``setting``, ``pair``,
        ``wavelength``, ``region`` ("keep", "blend", "divide"), ``ratio``
        (θ'_i/θ_i), ``low wavelength`` L/low_freq_factor, ``high wavelength``
        L/high_freq_factor.

    Source: Meta's Llama 3.1 reference code, ``apply_scaling``; transformers 5.23
    ``_compute_llama3_parameters``.
    """
    import pandas as pd

    plain, _ = rope_inv_freq(head_dim, base)
    wavelength = 2 * math.pi / cpu_float64(plain)
    rows = []
    for name, scaling in llama3_settings(trained).items():
        scaled, _ = rope_inv_freq(head_dim, base, scaling)
        L = scaling["original_max_position_embeddings"]
        low, high = L / scaling["low_freq_factor"], L / scaling["high_freq_factor"]
        for i, lam in enumerate(wavelength.tolist()):
            region = "keep" if lam < high else "divide" if lam > low else "blend"
            rows.append(
                {
                    "setting": name,
                    "pair": i,
                    "wavelength": lam,
                    "region": region,
                    "ratio": float(scaled[i] / plain[i]),
                    "low wavelength": low,
                    "high wavelength": high,
                }
            )
    return pd.DataFrame(rows)
