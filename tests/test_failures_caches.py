"""The chapter of failures, 6, 7, 9 and 10 (posenc.experiments.failures.caches and
.position_ids): each symptom is real (the wrong way differs from the right one by a
stated amount) and the package's fix removes it (equal to transformers 5.23 or to the
exact answer), on tiny random-init transformers models."""

from __future__ import annotations

import types
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")

from transformers import DynamicCache, GPT2Config, GPT2LMHeadModel  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from posenc.experiments.failures import caches, position_ids  # noqa: E402
from posenc.layers.masks import (  # noqa: E402
    document_mask,
    packed_positions,
    padded_positions,
)
from posenc.rope_nd import mrope_next_positions, mrope_positions  # noqa: E402

L = 16  # the tiny models' original_max_position_embeddings


def tiny_llama(layers=2, max_position_embeddings=256, **rope):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = LlamaConfig(
            vocab_size=64, hidden_size=64, intermediate_size=128,
            num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=layers,
            max_position_embeddings=max_position_embeddings, initializer_range=0.2,
            rope_parameters={"rope_theta": 10000.0, **rope},
        )
    return LlamaForCausalLM(config).eval()


def tiny_gpt2():  # learned absolute positions
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = GPT2Config(vocab_size=64, n_embd=64, n_layer=2, n_head=4,
                            n_positions=64, initializer_range=0.2,
                            bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config).eval()


def token_ids(n, seed=1):
    return torch.randint(1, 64, (n,), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- 6: frequency switch

SHORT = [1.0 + 0.02 * i for i in range(8)]
LONG = [1.0 + 0.5 * i for i in range(8)]
SWITCHES = {
    "dynamic": ({"rope_type": "dynamic", "factor": 4.0}, L,
                {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": L}),
    "longrope": ({"rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG,
                  "original_max_position_embeddings": L, "factor": 4.0}, 4 * L,
                 {"rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG,
                  "original_max_position_embeddings": L, "factor": 4.0}),
}


@torch.no_grad()
def transformers_cached(model, ids, prompt_len):
    """transformers' own rotary embedding in cached generation (no swap_rope)."""
    cache = DynamicCache(config=model.config)
    out = [model(input_ids=ids[None, :prompt_len], past_key_values=cache, use_cache=True).logits[0]]
    for t in range(prompt_len, ids.numel()):
        out.append(model(input_ids=ids[None, t : t + 1], past_key_values=cache, use_cache=True).logits[0])
    return torch.cat(out)


@pytest.mark.parametrize("kind", SWITCHES)
def test_frequency_switch_stale_cache_diverges_and_fixed_frequencies_fix_it(kind):
    hf_rope, max_positions, scaling = SWITCHES[kind]
    ids, prompt_len = token_ids(40), 10
    # the wrong way is what transformers does: its own cached generation, and its own
    # full pass (the reference) at every step
    hf = transformers_cached(tiny_llama(max_position_embeddings=max_positions, **hf_rope), ids, prompt_len)
    model = tiny_llama(max_position_embeddings=max_positions, **hf_rope)
    stale = caches.stale_cache_logits(model, ids, prompt_len=prompt_len, scaling=scaling)
    torch.testing.assert_close(stale, hf, atol=1e-4, rtol=1e-4)
    rows, reference = caches.recomputed_logits(model, ids, prompt_len=prompt_len, scaling=scaling)
    with torch.no_grad():
        fresh = tiny_llama(max_position_embeddings=max_positions, **hf_rope)
        hf_full = torch.stack([fresh(input_ids=ids[None, : t + 1]).logits[0, -1] for t in rows.tolist()])
    torch.testing.assert_close(reference, hf_full, atol=1e-4, rtol=1e-4)
    # the symptom: equal inside L, apart past the switch; the fix: cached == one pass
    table = caches.frequency_switch_failure(model, ids, prompt_len=prompt_len, scaling=scaling)
    failure, _, fix = table.to_dict("records")
    assert failure["max_dlogit_inside"] < 1e-4 and failure["max_dlogit_past"] > 0.5
    assert fix["max_dlogit_inside"] < 1e-4 and fix["max_dlogit_past"] < 1e-4


def test_frequency_switch_checks():
    model, scaling = tiny_llama(), SWITCHES["dynamic"][2]
    with pytest.raises(ValueError, match="prompt_len <= L < T"):
        caches.stale_cache_logits(model, token_ids(40), prompt_len=L + 1, scaling=scaling)
    with pytest.raises(ValueError, match="original_max_position_embeddings"):
        caches.recomputed_logits(model, token_ids(40), prompt_len=4, scaling={"rope_type": "dynamic"})


# ---------------------------------------------------------------- 7: positions of a batch

def test_padded_positions_match_transformers_generate():
    from transformers.generation.utils import GenerationMixin

    mask = torch.tensor([[0, 0, 0, 1, 1], [1, 1, 1, 1, 1], [0, 1, 1, 1, 1]])
    hf = GenerationMixin._prepare_position_ids_for_generation(None, mask, {"attention_mask": mask})
    assert padded_positions(mask).equal(hf)
    assert padded_positions(mask.bool()).tolist()[0] == [0, 0, 0, 0, 1]
    with pytest.raises(ValueError, match="0/1 or bool mask"):
        padded_positions(torch.tensor([[0, 2, 1]]))


def test_left_padding_wrong_positions_and_fix():
    rows = [token_ids(20), token_ids(9, 2), token_ids(14, 3)]
    # learned absolute positions: arange(T) moves every padded row; the fix restores it
    gpt2 = position_ids.left_padding_failure(tiny_gpt2(), rows)
    assert gpt2["arange_max_dlogit"][1:].min() > 1.0
    assert gpt2["fix_max_dlogit"].max() < 1e-4
    assert (gpt2["padded_positions"] - gpt2["alone"]).abs().max() < 1e-5
    # RoPE: a constant shift leaves every score as it was (up to rounding)
    llama = position_ids.left_padding_failure(tiny_llama(), rows)
    assert llama["arange_max_dlogit"].max() < 1e-3 and llama["fix_max_dlogit"].max() < 1e-4


def test_packed_positions_and_mask_match_transformers():
    from transformers import DataCollatorWithFlattening
    from transformers.masking_utils import find_packed_sequence_indices, packed_sequence_mask_function

    lengths = [3, 5, 1, 4]
    doc_ids = torch.cat([torch.full((n,), k) for k, n in enumerate(lengths)])
    batch = DataCollatorWithFlattening(return_tensors="pt")(
        [{"input_ids": list(range(1, n + 1))} for n in lengths])
    positions = packed_positions(doc_ids)
    assert positions.equal(batch["position_ids"][0])
    assert packed_positions(doc_ids[None].repeat(2, 1)).equal(positions.expand(2, -1))
    found = find_packed_sequence_indices(positions[None])
    assert found[0].equal(doc_ids)
    same_document = packed_sequence_mask_function(found)
    T = doc_ids.numel()
    expected = torch.tensor([[bool(same_document(0, 0, i, j)) and j <= i for j in range(T)] for i in range(T)])
    assert document_mask(doc_ids).equal(expected)
    with pytest.raises(ValueError, match="integer document ids"):
        packed_positions(doc_ids.float())


def test_packing_needs_the_document_mask_and_for_absolute_positions_the_reset():
    docs = [token_ids(12), token_ids(9, 2), token_ids(10, 3)]
    for model, shift_invariant in ((tiny_llama(), True), (tiny_gpt2(), False)):
        table = position_ids.packing_failure(model, docs)["max_dloss"]
        assert table["continuous positions, causal mask"] > 0.1
        assert table["reset positions, causal mask"] > 0.1
        assert table["reset positions, document mask (fix)"] < 1e-4
        # RoPE needs only the mask; learned positions need both
        assert (table["continuous positions, document mask"] < 1e-4) == shift_invariant


# ---------------------------------------------------------------- 9: M-RoPE after an image

def _hf_rope_index(segments, merge=2):
    """transformers' Qwen2VLModel.get_rope_index without a model (as
    tests/test_mrope.py): ids (3, T) and rope_deltas (1, 1)."""
    from transformers.models.qwen2_vl import modeling_qwen2_vl as qwen2_vl

    model = types.SimpleNamespace(
        config=types.SimpleNamespace(vision_config=types.SimpleNamespace(spatial_merge_size=merge)),
        get_vision_position_ids=lambda *a, **k: qwen2_vl.Qwen2VLModel.get_vision_position_ids(None, *a, **k),
    )
    kinds, grids = [], []
    for seg in segments:
        if isinstance(seg, tuple):
            kinds += [1] * (seg[0] * seg[1] * seg[2])
            grids.append([seg[0], seg[1] * merge, seg[2] * merge])
        else:
            kinds += [0] * seg
    kinds = torch.tensor([kinds])
    ids, deltas = qwen2_vl.Qwen2VLModel.get_rope_index(
        model, torch.zeros_like(kinds), kinds, image_grid_thw=torch.tensor(grids))
    return ids[:, 0], deltas


def _hf_decode_positions(rope_deltas, past, num_new):
    """transformers' Qwen2VLModel.compute_3d_position_ids at a decoding step: the
    branch that adds the stored rope_deltas to the cache length."""
    from transformers.models.qwen2_vl import modeling_qwen2_vl as qwen2_vl

    model = types.SimpleNamespace(rope_deltas=rope_deltas)
    cache = types.SimpleNamespace(get_seq_length=lambda: past)
    ids = qwen2_vl.Qwen2VLModel.compute_3d_position_ids(
        model, None, torch.zeros(1, num_new, 1), past_key_values=cache)
    return ids[:, 0]


@pytest.mark.parametrize("segments", [[5, (1, 8, 8), 6], [3, (1, 2, 3), 4, (1, 4, 4), 2]])
def test_mrope_continuation_after_an_image(segments):
    prompt, deltas = _hf_rope_index(segments)
    assert prompt.equal(mrope_positions(segments))
    T = prompt.shape[1]
    right = mrope_next_positions(prompt, 3)
    assert right.equal(_hf_decode_positions(deltas, T, 3))
    assert mrope_next_positions(prompt[:, None].repeat(1, 2, 1), 3).equal(right[:, None].expand(3, 2, 3))
    result = position_ids.mrope_continuation_failure(segments, 3)
    assert result["rope_deltas"] == int(deltas) < 0
    assert result["right_ids"] == right[0].tolist()
    assert [w - r for w, r in zip(result["wrong_ids"], result["right_ids"])] == [-result["rope_deltas"]] * 3
    assert result["max_score_error"] > 0.3 * result["score_scale"]
    with pytest.raises(ValueError, match="num_new"):
        mrope_next_positions(prompt, 0)
    with pytest.raises(ValueError, match=r"\(3, T\)"):
        mrope_next_positions(prompt.float(), 1)


# ---------------------------------------------------------------- 10: double rotation

@torch.no_grad()
def test_streaming_cache_rotates_once_and_the_post_rope_cache_twice():
    from posenc.layers.pretrained import streaming_token_losses
    from posenc.layers.losses import nll

    model, ids, S, W = tiny_llama(layers=1), token_ids(40), 2, 8
    # the exact answer for one layer: every step sees the kept tokens (S sinks and
    # the last W) encoded afresh at positions 0 … S + W − 1
    exact = []
    for t in range(ids.numel() - 1):
        kept = ids[: t + 1] if t < S + W else torch.cat((ids[:S], ids[t - W + 1 : t + 1]))
        exact.append(nll(model(input_ids=kept[None]).logits[0, -1:], ids[t + 1 : t + 2])[0])
    exact = torch.stack(exact)
    right = streaming_token_losses(model, ids, sink_tokens=S, window=W)
    torch.testing.assert_close(right, exact, atol=1e-5, rtol=1e-5)
    wrong = streaming_token_losses(
        model, ids, sink_tokens=S, window=W,
        cache=caches.post_rope_streaming_cache(model, sink_tokens=S, window=W))
    assert (wrong - exact).abs().max() > 0.1
    table = caches.double_rotation_failure(model, ids, sink_tokens=S, window=W)
    dense, fix, failure = table.to_dict("records")
    assert abs(fix["loss_filling"] - dense["loss_filling"]) < 1e-5
    assert abs(failure["loss_filling"] - dense["loss_filling"]) > 0.05
    with pytest.raises(ValueError, match="sink_tokens \\+ window"):
        caches.double_rotation_failure(model, ids[: S + W], sink_tokens=S, window=W)
