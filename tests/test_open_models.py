"""posenc.open_models: the table of open models' positional settings matches the
transformers config classes it is read from (transformers 5.23.0 class defaults)."""

import inspect
import re
from pathlib import Path

import pytest

from posenc import open_models
from posenc.open_models import (
    FIELDS,
    layer_pattern,
    positional_settings,
    settings_table,
)

# open_models imports transformers only when called
transformers = pytest.importorskip("transformers")

SOURCES = {"config defaults", "rope function comments"}

# transformers 5.23.0 class defaults, pinned so that an upgrade that changes them fails
# here before the book's table silently changes. None: not in the config class.
PINNED = {
    "Llama (LlamaConfig defaults)": {
        "rope_theta": 10_000.0,
        "max_position_embeddings": 2048,
    },
    "Llama 3.1 (llama3 RoPE)": {
        "rope_theta": None,
        "rope_type": "llama3",
        "rope_factor": 8.0,
        "original_max_position_embeddings": 8192,
    },
    "Llama 4": {
        "rope_theta": 500_000.0,
        "rope_type": "default",
        "head_dim": 128,
        "window": 8192,
        "max_position_embeddings": 131_072,
        "layer_pattern": "3 chunked : 1 full (48 layers); NoPE every 4th layer "
        "(12 of 48) = the full layers",
    },
    "Gemma 3": {
        "rope_theta": {"sliding_attention": 10_000.0, "full_attention": 1_000_000.0},
        "head_dim": 256,
        "window": 4096,
        "max_position_embeddings": 131_072,
        "layer_pattern": "5 sliding : 1 full (26 layers; the last 2 are sliding)",
    },
    "Gemma 4": {
        "rope_theta": {"sliding_attention": 10_000.0, "full_attention": 1_000_000.0},
        "rope_type": {"sliding_attention": "default", "full_attention": "proportional"},
        "partial_rotary_factor": {"sliding_attention": None, "full_attention": 0.25},
        "head_dim": {"sliding_attention": 256, "full_attention": 512},
        "window": 512,
        "layer_pattern": "5 sliding : 1 full (30 layers)",
    },
    "SmolLM3": {
        "rope_theta": 2_000_000.0,
        "head_dim": 128,
        "window": None,
        "layer_pattern": "all full (36 layers); NoPE every 4th layer (9 of 36)",
    },
    "Command R7B": {
        "rope_theta": 10_000.0,
        "window": 4096,
        "max_position_embeddings": 8192,
        "layer_pattern": "3 sliding : 1 full (40 layers)",
    },
    "Phi-3 / Phi-4-mini": {
        "rope_theta": 10_000.0,
        "rope_type": "default",
        "partial_rotary_factor": 1.0,
        "original_max_position_embeddings": 4096,
        "head_dim": 96,
    },
    "Qwen2-VL": {
        "rope_theta": 1_000_000.0,
        "extra": {"mrope_fallback": "[16, 24, 24]"},
    },
    "Qwen2.5-VL": {"rope_theta": 1_000_000.0},
    "Qwen3": {"rope_theta": 10_000.0, "head_dim": 128, "window": None},
    "DeepSeek-V3": {
        "rope_theta": 10_000.0,
        "rope_type": "default",
        "head_dim": 64,
        "max_position_embeddings": 4096,
    },
    "gpt-oss": {
        "rope_theta": 150_000.0,
        "rope_type": "yarn",
        "rope_factor": 32.0,
        "original_max_position_embeddings": 4096,
        "head_dim": 64,
        "window": 128,
        "layer_pattern": "1 sliding : 1 full (36 layers)",
    },
    "Ministral 8B": {"window": 4096, "layer_pattern": "all sliding (32 layers)"},
    "Ministral 3": {
        "rope_theta": 1_000_000.0,
        "rope_type": "yarn",
        "rope_factor": 16.0,
        "original_max_position_embeddings": 16_384,
        "max_position_embeddings": 262_144,
    },
    "OLMo 2": {"rope_theta": 10_000.0, "max_position_embeddings": 2048},
    "Olmo 3": {
        "rope_theta": {"sliding_attention": 500_000.0, "full_attention": 500_000.0},
        "window": 4096,
        "layer_pattern": "3 sliding : 1 full (32 layers)",
    },
}


@pytest.fixture(scope="module")
def rows():
    return positional_settings()


def _config_source(class_name: str) -> str:
    return inspect.getsource(inspect.getmodule(getattr(transformers, class_name)))


def test_one_row_per_family_with_every_field(rows):
    assert [r["model"] for r in rows] == list(open_models.FAMILIES)
    for row in rows:
        assert set(row) == set(FIELDS), row["model"]
        assert row["source"] in SOURCES
        assert hasattr(transformers, row["config_class"])


def _flat_or_per_type(rope: dict, key: str):
    nested = all(isinstance(v, dict) for v in rope.values())
    if not nested:
        return rope.get(key)
    values = {t: p.get(key) for t, p in rope.items()}
    return None if all(v is None for v in values.values()) else values


def test_rows_equal_a_fresh_instance_of_their_class(rows):
    for row in rows:
        if row["source"] != "config defaults":
            continue
        cfg = getattr(transformers, row["config_class"])()
        rope = cfg.rope_parameters
        name = row["model"]
        for key, field in [
            ("rope_theta", "rope_theta"),
            ("rope_type", "rope_type"),
            ("factor", "rope_factor"),
        ]:
            assert row[field] == _flat_or_per_type(rope, key), (name, field)
        if isinstance(row["rope_theta"], dict):
            assert set(row["rope_theta"]) == set(rope) == set(cfg.layer_types), name
        assert row["max_position_embeddings"] == cfg.max_position_embeddings, name
        assert (
            row["num_hidden_layers"]
            == cfg.num_hidden_layers
            == len(getattr(cfg, "layer_types", None) or [0] * cfg.num_hidden_layers)
        ), name
        window = getattr(cfg, "attention_chunk_size", None) or getattr(
            cfg, "sliding_window", None
        )
        assert row["window"] == window, name
        if isinstance(row["head_dim"], dict):  # per layer (Gemma 4)
            for layer_type, dim in row["head_dim"].items():
                i = cfg.layer_types.index(layer_type)
                assert cfg.per_layer_config[i].head_dim == dim, name
        else:
            expected = vars(cfg).get("head_dim") or (
                cfg.hidden_size // cfg.num_attention_heads
            )
            assert row["head_dim"] == expected, name
        for key, value in row["extra"].items():
            if key == "mrope_fallback":
                continue
            actual = getattr(cfg, key) if hasattr(cfg, key) else rope[key]
            assert actual == value, (name, key)


def test_pinned_to_transformers_5_23_defaults(rows):
    assert transformers.__version__ == open_models.TRANSFORMERS_VERSION, (
        "transformers changed: re-check the class defaults, then update PINNED, "
        "TRANSFORMERS_VERSION and the module docstring"
    )
    by_model = {r["model"]: r for r in rows}
    assert set(PINNED) == set(by_model)
    for model, expected in PINNED.items():
        for key, value in expected.items():
            assert by_model[model][key] == value, (model, key)


def test_defaults_read_from_the_source_text(rows):
    """A few values checked against the class source text, not an instance."""
    by_model = {r["model"]: r for r in rows}

    def default(class_name: str, pattern: str) -> str:
        found = re.search(pattern, _config_source(class_name))
        assert found, (class_name, pattern)
        return found.group(1)

    gemma3 = by_model["Gemma 3"]
    assert (
        int(default("Gemma3TextConfig", r"sliding_window: int \| None = (\d+)"))
        == (gemma3["window"])
    )
    theta = default("Gemma3TextConfig", r'default_theta = \{"global": ([\d_.]+)')
    assert float(theta) == gemma3["rope_theta"]["full_attention"]
    assert default("Gemma3TextConfig", r'"sliding_window_pattern", (\d+)') == "6"
    gpt = by_model["gpt-oss"]
    assert int(default("GptOssConfig", r"sliding_window: int \| None = (\d+)")) == 128
    assert float(default("GptOssConfig", r'"factor": ([\d.]+)')) == gpt["rope_factor"]
    llama4 = by_model["Llama 4"]
    chunk = default("Llama4TextConfig", r"attention_chunk_size: int \| None = (\d+)")
    assert int(chunk) == llama4["window"]
    assert default("SmolLM3Config", r"no_rope_layer_interval: int = (\d+)") == "4"
    assert default("Gemma4TextConfig", r'"global_head_dim", (\d+)') == "512"
    assert (
        float(default("Gemma4TextConfig", r'"partial_rotary_factor": ([\d.]+)'))
        == (by_model["Gemma 4"]["partial_rotary_factor"]["full_attention"])
    )
    assert (
        int(default("DeepseekV3Config", r"qk_rope_head_dim: int = (\d+)"))
        == (by_model["DeepSeek-V3"]["head_dim"])
    )


def test_llama31_row_comes_from_the_llama3_rope_comments(rows):
    row = next(r for r in rows if r["model"] == "Llama 3.1 (llama3 RoPE)")
    text = inspect.getsource(
        transformers.modeling_rope_utils._compute_llama3_parameters
    )
    assert "llama 3.1" in text
    for key, value in [
        ("factor", 8),
        ("original_max_position_embeddings", 8192),
        ("low_freq_factor", 1),
        ("high_freq_factor", 4),
    ]:
        assert f'["{key}"]  # `{value}` in the original implementation' in text
    assert row["rope_factor"] == 8.0 and row["extra"]["high_freq_factor"] == 4


def test_gemma3_full_layers_are_every_sixth():
    cfg = transformers.Gemma3TextConfig()
    full = [i + 1 for i, t in enumerate(cfg.layer_types) if t == "full_attention"]
    assert full == [6, 12, 18, 24]


def test_cohere2_rope_only_on_sliding_layers_is_in_the_modeling_source(rows):
    path = (
        Path(transformers.__file__).parent
        / "models"
        / "cohere2"
        / "modeling_cohere2.py"
    )
    assert "if self.sliding_window is not None:" in path.read_text()
    row = next(r for r in rows if r["config_class"] == "Cohere2Config")
    assert row["specials"].startswith("RoPE only on sliding layers")


def test_layer_pattern_on_small_lists():
    s, f, c = "sliding_attention", "full_attention", "chunked_attention"
    assert layer_pattern([s, s, f] * 2 + [s]) == (
        "2 sliding : 1 full (7 layers; the last 1 are sliding)"
    )
    assert layer_pattern([f] * 3) == "all full (3 layers)"
    assert layer_pattern([c, f, c, f], [1, 0, 1, 0]) == (
        "1 chunked : 1 full (4 layers); NoPE every 2nd layer (2 of 4) = the full layers"
    )
    assert layer_pattern(None, [1, 0, 0]) == "NoPE layers [2, 3] (1-based, 2 of 3)"
    assert layer_pattern(None, [1, 1]) == "no NoPE layers"
    assert layer_pattern(None) is None
    with pytest.raises(ValueError, match="0 \\(NoPE\\) or 1"):
        layer_pattern(None, [2, 1])
    with pytest.raises(ValueError, match="same layers"):
        layer_pattern([f, f], [1])


def test_settings_table_has_one_line_per_model(rows):
    table = settings_table(rows)
    lines = table.splitlines()
    assert len(lines) == len(rows) + 2
    assert set(lines[1].replace("|", "").split()) == {"---"}
    n_columns = lines[0].count(" | ")
    for row, line in zip(rows, lines[2:], strict=True):
        assert line.startswith(f"| {row['model']} |")
        assert line.count(" | ") == n_columns
    assert (
        "sliding 10,000 / full 1,000,000"
        in lines[2 + list(open_models.FAMILIES).index("Gemma 3")]
    )


def test_errors_name_the_bad_value(rows):
    with pytest.raises(ValueError, match="Llama 9"):
        positional_settings(["Llama 9"])
    with pytest.raises(ValueError, match="at least one row"):
        settings_table([])
    with pytest.raises(TypeError, match="list"):
        settings_table([[1, 2]])
    with pytest.raises(ValueError, match="lacks keys"):
        settings_table([{"model": "x"}])
    assert positional_settings(["Qwen3"])[0]["config_class"] == "Qwen3Config"
