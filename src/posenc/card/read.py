"""The position card's inputs: whatever names a model's configuration, read into one
plain dict (:func:`read_config`).

Accepted: a ``config.json`` path; a dict as transformers writes it (v4
``rope_scaling`` + ``rope_theta``, v5 ``rope_parameters``, flat or keyed by layer type);
a transformers config object (its ``to_dict()``; transformers is never imported here);
a GGUF file's metadata dict (keys such as ``llama.rope.freq_base``) or a ``.gguf`` path
(read with the ``gguf`` package, which is then needed). A multimodal config's
``text_config`` is followed.

Source: transformers 5.23.0 ``configuration_utils.py`` (``to_dict``) and
``modeling_rope_utils.py``; llama.cpp ``gguf-py/gguf/constants.py`` (``Keys.LLM``,
``Keys.Attention``, ``Keys.Rope``; gguf 0.19.0) for the GGUF key names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

#: Top-level keys a multimodal config keeps beside its ``text_config`` that still
#: describe the text model's positions when ``text_config`` lacks them.
_POSITION_KEYS = (
    "rope_parameters",
    "rope_scaling",
    "rope_theta",
    "max_position_embeddings",
    "partial_rotary_factor",
)

#: GGUF ``general.architecture`` → transformers ``model_type``, where they differ
#: (llama.cpp's converter, ``convert_hf_to_gguf.py``, names the architectures).
GGUF_MODEL_TYPES = {
    "gemma3": "gemma3_text",
    "deepseek2": "deepseek_v3",
    "command-r": "cohere",
    "cohere2": "cohere2",
    "qwen2vl": "qwen2_vl",
    "gpt-oss": "gpt_oss",
}

#: GGUF ``{arch}.rope.scaling.type`` → transformers ``rope_type`` ("none": plain).
GGUF_ROPE_TYPES = {"none": "default", "linear": "linear", "yarn": "yarn"}


def read_config(config: object) -> tuple[dict, str]:
    """The configuration ``config`` as a plain dict, and where it came from.

    Args:
        config: a path (str or ``pathlib.Path``) to a ``config.json`` or a ``.gguf``
            file; a dict (a ``config.json``'s content, or GGUF metadata: a dict with
            ``general.architecture``); or an object with ``to_dict()`` (a
            transformers ``PretrainedConfig``).

    Returns:
        ``(config_dict, source)``: a new dict (the text model's part of a multimodal
        config, see :func:`text_part`), and a short description such as
        ``"config.json: /path"``, ``"dict"``, ``"GGUF metadata"``,
        ``"LlamaConfig.to_dict()"``.

    Raises:
        FileNotFoundError: the path does not exist.
        ValueError: a file that is neither JSON nor GGUF; JSON that is not an object;
            a GGUF dict without ``{arch}.context_length``.
        ImportError: a ``.gguf`` path without the ``gguf`` package installed.
        TypeError: anything else (the message lists what is accepted).
    """
    if isinstance(config, (str, Path)):
        return _read_path(Path(config))
    if isinstance(config, Mapping):
        if "general.architecture" in config:
            return gguf_to_config(config), "GGUF metadata"
        return text_part(dict(config)), "dict"
    to_dict = getattr(config, "to_dict", None)
    if callable(to_dict):
        return text_part(to_dict()), f"{type(config).__name__}.to_dict()"
    raise TypeError(
        "position_card takes a config.json or .gguf path (str or Path), a config dict, "
        "GGUF metadata (a dict with 'general.architecture') or a transformers config "
        f"object (with to_dict()); got {type(config).__name__}"
    )


def _read_path(path: Path) -> tuple[dict, str]:
    if not path.exists():
        raise FileNotFoundError(f"no such config file: {path}")
    if path.is_dir():
        path = path / "config.json"
        if not path.exists():
            raise FileNotFoundError(f"no config.json in the folder {path.parent}")
    with path.open("rb") as handle:
        magic = handle.read(4)
    if magic == b"GGUF":
        return gguf_to_config(read_gguf_metadata(path)), f"GGUF file: {path}"
    try:
        data = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(
            f"{path} is neither a JSON config nor a GGUF file ({err}); pass a model's "
            "config.json or its .gguf file"
        ) from err
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise ValueError(f"{path} holds JSON {kind}, not a config object")
    return text_part(data), f"config.json: {path}"


def text_part(config: dict) -> dict:
    """The text model's config: ``config["text_config"]`` when there is one (Gemma 3,
    Llama 4, Qwen2-VL, ... as released), with the position keys of
    :data:`_POSITION_KEYS` that only the top level holds copied in; else ``config``.
    The result records the outer ``model_type`` as ``_outer_model_type``."""
    inner = config.get("text_config")
    if not isinstance(inner, Mapping):
        return dict(config)
    text = dict(inner)
    for key in _POSITION_KEYS:
        if key not in text and config.get(key) is not None:
            text[key] = config[key]
    text["_outer_model_type"] = config.get("model_type")
    return text


def read_gguf_metadata(path: str | Path) -> dict:
    """A GGUF file's key-value metadata as a dict (strings, numbers, lists), with the
    names of its tensors under ``"_tensors"`` (the card checks for ``rope_freqs``,
    llama.cpp's per-pair frequency factors).

    Raises:
        ImportError: the ``gguf`` package is not installed (``pip install gguf``).
    """
    try:
        import gguf
    except ImportError as err:
        raise ImportError(
            "reading a .gguf file needs the gguf package (pip install gguf, or "
            "posenc[pretrained]); or pass the file's metadata as a dict"
        ) from err
    reader = gguf.GGUFReader(str(path))
    metadata: dict = {}
    for key, field in reader.fields.items():
        if key.startswith(("GGUF.", "tokenizer.")):
            continue
        metadata[key] = field.contents()
    metadata["_tensors"] = [tensor.name for tensor in reader.tensors]
    return metadata


def _gguf_rope(get, rope_type: str) -> dict:
    """The ``rope_scaling`` part of :func:`gguf_to_config`."""
    scaling: dict = {"rope_type": rope_type}
    if rope_type in ("linear", "yarn"):
        scaling["factor"] = float(get("rope.scaling.factor", 1.0))
    if rope_type == "yarn":
        original = get("rope.scaling.original_context_length")
        if original is not None:
            scaling["original_max_position_embeddings"] = int(original)
        for gguf_key, key in (
            ("rope.scaling.yarn_beta_fast", "beta_fast"),
            ("rope.scaling.yarn_beta_slow", "beta_slow"),
            ("rope.scaling.attn_factor", "attention_factor"),
        ):
            if get(gguf_key) is not None:
                scaling[key] = float(get(gguf_key))
    return scaling


def gguf_to_config(metadata: Mapping) -> dict:
    """A transformers-style config dict from GGUF metadata.

    Reads, for ``arch = general.architecture``: ``{arch}.context_length`` →
    ``max_position_embeddings``; ``{arch}.block_count`` → ``num_hidden_layers``;
    ``{arch}.embedding_length`` and ``{arch}.attention.head_count`` → ``hidden_size``
    and ``num_attention_heads``; ``{arch}.attention.key_length`` → ``head_dim``
    (else embedding_length / head_count); ``{arch}.rope.dimension_count`` → the
    rotated width, as ``partial_rotary_factor`` = dimension_count / head_dim;
    ``{arch}.rope.freq_base`` → ``rope_theta`` (default 10000, as llama.cpp);
    ``{arch}.attention.sliding_window`` → ``sliding_window``; and
    ``{arch}.rope.scaling.type`` ("none", "linear", "yarn") with its factor, original
    context length, YaRN betas and attention factor → ``rope_scaling``. A
    "longrope" file keeps its factors in tensors, not metadata: it raises.

    Raises:
        ValueError: no ``general.architecture`` or ``{arch}.context_length``; a
            scaling type other than none, linear and yarn.
    """
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str):
        raise ValueError("GGUF metadata needs 'general.architecture' (a string)")

    def get(key: str, default=None):
        return metadata.get(f"{arch}.{key}", default)

    if get("context_length") is None:
        raise ValueError(
            f"GGUF metadata needs '{arch}.context_length' (the trained context), got "
            f"keys {sorted(k for k in metadata if not k.startswith('_'))}"
        )
    width, heads = get("embedding_length"), get("attention.head_count")
    if isinstance(heads, list):  # per-layer head counts: take the first
        heads = heads[0]
    head_dim = get("attention.key_length")
    if not head_dim and width and heads:
        head_dim = width // heads
    config: dict = {
        "model_type": GGUF_MODEL_TYPES.get(arch, arch),
        "max_position_embeddings": int(get("context_length")),
        "num_hidden_layers": get("block_count"),
        "hidden_size": width,
        "num_attention_heads": heads,
        "head_dim": head_dim,
        "rope_theta": float(get("rope.freq_base", 10000.0)),
        "_gguf_tensors": list(metadata.get("_tensors", [])),
    }
    if get("attention.sliding_window") is not None:
        config["sliding_window"] = int(get("attention.sliding_window"))
    rotary_dim = get("rope.dimension_count")
    if rotary_dim is not None and head_dim and rotary_dim != head_dim:
        config["partial_rotary_factor"] = rotary_dim / head_dim
    scaling_type = get("rope.scaling.type", "none")
    if scaling_type not in GGUF_ROPE_TYPES:
        raise ValueError(
            f"GGUF rope scaling type {scaling_type!r} is not read by the card (its "
            f"factors live in tensors); the card reads {sorted(GGUF_ROPE_TYPES)}: pass "
            "the model's config.json instead"
        )
    rope_type = GGUF_ROPE_TYPES[scaling_type]
    if rope_type != "default":
        config["rope_scaling"] = _gguf_rope(get, rope_type)
    return config
