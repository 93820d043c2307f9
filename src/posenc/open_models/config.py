"""Reading one transformers config class: the shared vocabulary of
:mod:`posenc.open_models` — the row's keys (:data:`FIELDS`), the pinned transformers
release, importing transformers on demand (:func:`import_transformers`), a class's
default instance (:func:`load_config`), the per-layer attention pattern in words
(:func:`layer_pattern`) and the generic row every family starts from
(:func:`config_row`: θ, RoPE type and factor, rotary fraction, head width, context,
layer pattern and window, read from the instance). The per-family rows are in
:mod:`posenc.open_models.families`, the Markdown table in
:mod:`posenc.open_models.table`.

Source: transformers 5.23.0, ``models/<name>/configuration_<name>.py``.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .._versions import BOOK_PINS

TRANSFORMERS_VERSION = BOOK_PINS["transformers"]
"""The transformers release whose class defaults the docstrings and tests describe."""

FIELDS = (
    "model",
    "config_class",
    "source",
    "docstring_checkpoint",
    "rope_theta",
    "rope_type",
    "rope_factor",
    "original_max_position_embeddings",
    "partial_rotary_factor",
    "head_dim",
    "max_position_embeddings",
    "num_hidden_layers",
    "layer_pattern",
    "window",
    "mrope_section",
    "specials",
    "notes",
    "extra",
)
"""Keys of every row of :func:`posenc.open_models.positional_settings`, in table
order."""

_SHORT = {
    "sliding_attention": "sliding",
    "full_attention": "full",
    "chunked_attention": "chunked",
}


def short_layer_type(layer_type: str) -> str:
    """``"sliding_attention"`` → ``"sliding"`` (also full, chunked); any other name
    unchanged."""
    return _SHORT.get(layer_type, layer_type)


class TransformersUnavailableError(ImportError):
    """transformers is not installed (``pip install posenc[pretrained]``)."""


def import_transformers():
    """The ``transformers`` module, imported on first use (the package does not need
    it otherwise).

    Raises:
        TransformersUnavailableError: transformers is not installed.
    """
    try:
        import transformers
    except ImportError as err:  # pragma: no cover - the test env has it
        raise TransformersUnavailableError(
            "posenc.open_models reads transformers' config classes; install "
            f"transformers=={TRANSFORMERS_VERSION} (pip install posenc[pretrained])"
        ) from err
    return transformers


def load_config(class_name: str) -> tuple[type, Any]:
    """The transformers config class ``class_name`` and its default instance
    ``Cls()`` (the class defaults this module reads).

    Raises:
        AttributeError: transformers has no class ``class_name``.
        TransformersUnavailableError: transformers is not installed.
    """
    cls = getattr(import_transformers(), class_name)
    return cls, cls()


def _docstring_checkpoint(cls) -> str | None:
    """The checkpoint a config class's docstring says its defaults are similar to."""
    found = re.search(r"similar configuration to that of the \[([^\]]+)\]", cls.__doc__)
    return found.group(1) if found else None


# ----------------------------------------------------------------- layer patterns


def _ordinal(n: int) -> str:
    teens = 10 <= n % 100 <= 20
    suffix = "th" if teens else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _period(seq: Sequence) -> int:
    """Smallest p with seq[i] == seq[i % p] for every i (a truncated last period is
    allowed)."""
    for p in range(1, len(seq) + 1):
        if all(seq[i] == seq[i % p] for i in range(len(seq))):
            return p
    return len(seq)


def _runs(seq: Sequence[str]) -> str:
    """``["a", "a", "b"]`` → ``"2 a : 1 b"`` (run lengths, in order)."""
    parts: list[list] = []
    for item in seq:
        if parts and parts[-1][1] == item:
            parts[-1][0] += 1
        else:
            parts.append([1, item])
    return " : ".join(f"{n} {short_layer_type(t)}" for n, t in parts)


def layer_pattern(
    layer_types: Sequence[str] | None, no_rope_layers: Sequence[int] | None = None
) -> str | None:
    """A short description of a config's per-layer attention types and NoPE layers.

    Args:
        layer_types: the config's ``layer_types`` list (``"sliding_attention"``,
            ``"full_attention"``, ``"chunked_attention"``), or None.
        no_rope_layers: the config's ``no_rope_layers`` list, 1 where a layer uses
            RoPE and 0 where it is NoPE (transformers' convention), or None.

    Returns:
        For example ``"5 sliding : 1 full (26 layers; the last 2 are sliding)"``,
        ``"all full (36 layers); NoPE every 4th layer (9 of 36)"``; None when both
        arguments are None.

    Raises:
        ValueError: if both lists are given with different lengths, or
            ``no_rope_layers`` holds a value other than 0 or 1.
    """
    if layer_types is None and no_rope_layers is None:
        return None
    parts = []
    if layer_types is not None:
        n = len(layer_types)
        p = _period(layer_types)
        if p == 1:
            parts.append(f"all {short_layer_type(layer_types[0])} ({n} layers)")
        else:
            text = f"{_runs(layer_types[:p])} ({n} layers"
            if n % p:
                tail = layer_types[n - n % p :]
                kind = short_layer_type(tail[0]) if len(set(tail)) == 1 else _runs(tail)
                text += f"; the last {n % p} are {kind}"
            parts.append(text + ")")
    if no_rope_layers is not None:
        if set(no_rope_layers) - {0, 1}:
            raise ValueError(
                "no_rope_layers must hold 0 (NoPE) or 1 (RoPE), got "
                f"{list(no_rope_layers)}"
            )
        if layer_types is not None and len(layer_types) != len(no_rope_layers):
            raise ValueError(
                f"layer_types has {len(layer_types)} entries but no_rope_layers has "
                f"{len(no_rope_layers)}; they must describe the same layers"
            )
        n = len(no_rope_layers)
        nope = [i + 1 for i, uses_rope in enumerate(no_rope_layers) if not uses_rope]
        k = nope[0] if nope else 0
        if not nope:
            parts.append("no NoPE layers")
        elif nope == list(range(k, n + 1, k)):
            parts.append(f"NoPE every {_ordinal(k)} layer ({len(nope)} of {n})")
        else:
            parts.append(f"NoPE layers {nope} (1-based, {len(nope)} of {n})")
        if nope and layer_types is not None:
            kinds = {layer_types[i - 1] for i in nope}
            if len(kinds) == 1 and len(set(layer_types)) > 1:
                (kind,) = kinds
                parts[-1] += f" = the {short_layer_type(kind)} layers"
    return "; ".join(parts)


# ------------------------------------------------------------------- rope fields


def _is_per_type(rope_parameters: dict) -> bool:
    values = rope_parameters.values()
    return bool(rope_parameters) and all(isinstance(v, dict) for v in values)


def _rope_field(rope_parameters: dict, key: str) -> Any:
    """``rope_parameters[key]``, or ``{layer_type: value}`` for per-type parameters."""
    if _is_per_type(rope_parameters):
        values = {t: p.get(key) for t, p in rope_parameters.items()}
        return values if any(v is not None for v in values.values()) else None
    return rope_parameters.get(key)


def _head_dim(cfg) -> int:
    """``config.head_dim``, or hidden_size // num_attention_heads where the class has
    none (what the modeling files fall back to)."""
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


def config_row(model: str, cls: type, cfg: Any, **fields: Any) -> dict:
    """A row of :data:`FIELDS` read from the config instance ``cfg`` of class ``cls``
    under the name ``model``; ``fields`` override or add to what is read (a family's
    ``specials``, ``notes``, ``extra``, a per-layer ``head_dim``).

    θ, RoPE type, factor, original context and rotary fraction come from
    ``cfg.rope_parameters`` (``{layer_type: value}`` dicts where it is keyed by layer
    type), the latter two falling back to the config's own attributes; the layer
    pattern from ``layer_types`` and ``no_rope_layers`` (:func:`layer_pattern`); the
    window from ``sliding_window``. A value the config lacks is None.
    """
    rope = dict(cfg.rope_parameters or {})
    partial = _rope_field(rope, "partial_rotary_factor")
    if partial is None:
        partial = getattr(cfg, "partial_rotary_factor", None)
    original = _rope_field(rope, "original_max_position_embeddings")
    if original is None:
        original = getattr(cfg, "original_max_position_embeddings", None)
    row = {
        "model": model,
        "config_class": cls.__name__,
        "source": "config defaults",
        "docstring_checkpoint": _docstring_checkpoint(cls),
        "rope_theta": _rope_field(rope, "rope_theta"),
        "rope_type": _rope_field(rope, "rope_type"),
        "rope_factor": _rope_field(rope, "factor"),
        "original_max_position_embeddings": original,
        "partial_rotary_factor": partial,
        "head_dim": fields["head_dim"] if "head_dim" in fields else _head_dim(cfg),
        "max_position_embeddings": cfg.max_position_embeddings,
        "num_hidden_layers": cfg.num_hidden_layers,
        "layer_pattern": layer_pattern(
            getattr(cfg, "layer_types", None), getattr(cfg, "no_rope_layers", None)
        )
        or f"all alike ({cfg.num_hidden_layers} layers; no layer_types)",
        "window": getattr(cfg, "sliding_window", None),
        "mrope_section": None,
        "specials": "",
        "notes": "",
        "extra": {},
    }
    row.update(fields)
    return row


def comment_values(func: Callable) -> dict[str, int]:
    """``{key: n}`` from the source lines of ``func`` like
    ``x = d["key"]  # `n` in the original implementation`` (how transformers documents
    the llama3 RoPE parameters)."""
    pattern = r'\["(\w+)"\]\s*#\s*`(\d+)` in the original implementation'
    return {k: int(v) for k, v in re.findall(pattern, inspect.getsource(func))}


def modeling_text(module: str) -> str:
    """Text of transformers' models/<module>/modeling_<module>.py, read, not imported
    (for a behaviour that lives in the model, not the config).

    Raises:
        FileNotFoundError: transformers has no such modeling file.
    """
    root = Path(import_transformers().__file__).parent
    return (root / "models" / module / f"modeling_{module}.py").read_text()


def model_rotary_embedding(config: Any):
    """The model's own rotary embedding module, as its modeling file builds it from
    ``config`` (a transformers config instance): the ``*RotaryEmbedding`` class of
    ``modeling_<name>.py`` beside the config's class (the last by name, vision and
    audio ones left out), called with the config. Its ``forward(x, position_ids)``
    gives the (cos, sin) the model multiplies q and k by, dynamic and LongRoPE updates
    included.

    Raises:
        TypeError: ``config`` is not a transformers config instance (a config.json
            dict, say: read it with the model's config class first).
        LookupError: the modeling module has no such class.

    Source: transformers 5.23.0, ``models/<name>/modeling_<name>.py``.
    """
    import importlib

    transformers = import_transformers()
    if not isinstance(config, transformers.PretrainedConfig):
        raise TypeError(
            f"config must be a transformers config instance, got "
            f"{type(config).__name__}: read a config.json dict with its class first, "
            "e.g. transformers.AutoConfig.for_model(d['model_type'], **d)"
        )
    module = importlib.import_module(
        type(config).__module__.replace(".configuration_", ".modeling_")
    )
    names = sorted(
        name for name, value in vars(module).items()
        if isinstance(value, type) and name.endswith("RotaryEmbedding")
        and not re.search("Vision|Audio", name)
    )
    if not names:
        raise LookupError(f"no rotary embedding class in {module.__name__}")
    return getattr(module, names[-1])(config)
