"""What transformers' config classes fill in when a config is silent about positions.

A ``config.json`` often leaves ``rope_theta`` or ``partial_rotary_factor`` out; the
config class of its ``model_type`` then supplies them (``GlmConfig`` rotates half of
each head, ``Qwen3NextConfig`` a quarter, ``SmolLM3Config`` uses a base of 2e6). The
card reads configs without importing transformers, so it reads these defaults from
``class_defaults.json``, which :func:`generate` writes from the installed transformers
(``python -m posenc.card.class_defaults``: every ``model_type`` of
``CONFIG_MAPPING_NAMES`` whose text config has ``rope_parameters``, instantiated with
no arguments). tests/test_card.py regenerates it and requires the stored file back,
so it cannot go stale against the pinned transformers.

Source: transformers 5.23.0, ``models/auto/configuration_auto.py``
(``CONFIG_MAPPING_NAMES``) and each ``models/<name>/configuration_<name>.py``.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

PATH = Path(__file__).with_name("class_defaults.json")
#: The keys recorded per model type.
KEYS = ("rope_theta", "partial_rotary_factor")


@cache
def _stored() -> dict:
    return json.loads(PATH.read_text())


def transformers_version() -> str:
    """The transformers version the stored defaults were generated from."""
    return _stored()["transformers"]


def known(model_type: str | None) -> bool:
    """Whether transformers (at :func:`transformers_version`) has a RoPE config class
    for ``model_type``."""
    return (model_type or "") in _stored()["model_types"]


def class_default(model_type: str | None, key: str, layer_type: str | None = None):
    """The value ``model_type``'s config class gives ``key`` (one of :data:`KEYS`)
    when the config does not, for ``layer_type`` where the class keys its parameters
    by layer type; None when the class gives none or the model type is unknown.

    Raises:
        ValueError: ``key`` is not one of :data:`KEYS`.
    """
    if key not in KEYS:
        raise ValueError(f"key must be one of {KEYS}, got {key!r}")
    value = _stored()["model_types"].get(model_type or "", {}).get(key)
    if isinstance(value, dict):
        value = value.get(layer_type or "full_attention")
    return value


def generate() -> dict:
    """The defaults of every RoPE config class of the installed transformers.

    Raises:
        ImportError: transformers is not installed.
    """
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    out = {}
    for model_type in sorted(CONFIG_MAPPING_NAMES):
        try:
            text = transformers.AutoConfig.for_model(model_type).get_text_config()
        except Exception:  # composite configs with several text parts, audio-only …
            continue
        rope = getattr(text, "rope_parameters", None)
        if not isinstance(rope, dict) or not rope:
            continue
        top = getattr(text, "partial_rotary_factor", None)
        entry = {}
        if all(isinstance(v, dict) for v in rope.values()):
            by_type = sorted(rope.items())
            entry["rope_theta"] = {lt: p.get("rope_theta") for lt, p in by_type}
            entry["partial_rotary_factor"] = {
                lt: p.get("partial_rotary_factor", top) for lt, p in by_type
            }
        else:
            entry["rope_theta"] = rope.get("rope_theta")
            entry["partial_rotary_factor"] = rope.get("partial_rotary_factor", top)
        out[model_type] = entry
    return {"transformers": transformers.__version__, "model_types": out}


def main() -> None:
    PATH.write_text(json.dumps(generate(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {PATH} ({len(_stored.__wrapped__()['model_types'])} model types)")


if __name__ == "__main__":
    main()
