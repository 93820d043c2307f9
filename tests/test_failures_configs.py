"""The chapter of failures, 1–5 and 8 (posenc.experiments.failures.configs, .layouts,
.precision): each symptom is real (the wrong way differs by at least a stated amount)
and the package's fix removes it (equal to transformers' result or to the exact
answer within a tolerance). Tiny transformers models only; no pretrained weights."""

from __future__ import annotations

import math
import tempfile
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")

from posenc.experiments.failures import configs, precision  # noqa: E402
from posenc.layout import pair_permutation  # noqa: E402
from posenc.scaling import rope_inv_freq  # noqa: E402


def quiet(cls, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return getattr(transformers, cls)(**kwargs)


def tiny_llama(**rope):
    config = quiet("LlamaConfig", hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                   num_hidden_layers=2, intermediate_size=128, vocab_size=100, max_position_embeddings=256,
                   **rope)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


# 1. rope_scaling (v4) against rope_parameters (v5), and per-layer-type dicts


def test_v4_and_v5_configs_read_by_layer_type_give_transformers_frequencies():
    table = configs.rope_config_readers().set_index(["config", "layer type"])
    assert (table["fix"] < 1e-6).all()  # the fix: transformers' frequencies, every layer type
    # the symptom: the v4 reader takes rope_theta = 10000 where it is 500000 or 1e6
    assert table.loc[("Llama, v5 dict", "all"), "v4 reader"] > 10
    assert table.loc[("Gemma 3, v5 dict", "full_attention"), "v4 reader"] > 10
    assert table.loc[("Gemma 4", "full_attention"), "v4 reader"] == math.inf  # no partial rotation
    # one dict for every layer: the sliding layers get the full layers' frequencies
    sliding = table.xs("sliding_attention", level="layer type")["one dict"]
    assert (sliding > 0.5).all()
    # the same model configured both ways: transformers' own frequencies agree exactly
    built = configs.reader_configs()
    rotary = {name: configs._transformers_rotary(c) for name, c in built.items()}
    assert torch.equal(rotary["Llama, v4 dict"].inv_freq, rotary["Llama, v5 dict"].inv_freq)
    for layer_type in ("sliding_attention", "full_attention"):
        assert torch.equal(getattr(rotary["Gemma 3, v4 keys"], f"{layer_type}_inv_freq"),
                           getattr(rotary["Gemma 3, v5 dict"], f"{layer_type}_inv_freq"))


# 2. interleaved q/k rows in a half-layout model


def test_interleaved_rows_need_the_pair_permutation():
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    from posenc.experiments.failures.layouts import wrong_load_rows_as_stored
    from posenc.layers.pretrained import permute_qk_rows

    model = tiny_llama()
    with torch.no_grad():  # sharper attention than at initialisation, as in a trained model
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(10)
            layer.self_attn.k_proj.weight.mul_(10)
    ids = torch.arange(1, 41)[None] % 100
    with torch.no_grad():
        reference = model(ids).logits
    head_dim, heads = 16, {"q": 4, "k": 2}
    inverse = pair_permutation(head_dim).argsort()
    stored = {}  # Meta's / llama.cpp's interleaved row order
    for i, layer in enumerate(model.model.layers):
        for kind, n in heads.items():
            w = getattr(layer.self_attn, f"{kind}_proj").weight.detach()
            stored[i, kind] = w.view(n, head_dim, -1)[:, inverse].reshape(n * head_dim, -1).clone()
            # parity: transformers' GGUF loader undoes exactly this order
            back = LlamaTensorProcessor.__new__(LlamaTensorProcessor)._reverse_permute_weights(
                stored[i, kind].numpy(), n, n)
            assert torch.equal(torch.as_tensor(back), w)
    wrong_load_rows_as_stored(model, stored)
    with torch.no_grad():
        wrong = model(ids).logits
    assert (wrong - reference).abs().max() > 0.05  # the symptom: other logits
    permute_qk_rows(model, pair_permutation(head_dim))  # the fix
    with torch.no_grad():
        fixed = model(ids).logits
    torch.testing.assert_close(fixed, reference, atol=1e-5, rtol=0)


# 3. angles in bfloat16 / float16


def test_half_precision_angles_fail_early_and_float32_angles_do_not():
    summary, curves = precision.angle_errors(max_position=8192)
    rows = summary.set_index("way")
    first = rows["first position > 0.1 rad"]
    assert first["bfloat16 angles"] < 256 and first["float16 angles"] < 2048  # the symptom starts early
    assert first["float32 angles, bfloat16 θ"] < 256
    assert math.isnan(first["float32 angles (apply_rope)"])  # the fix: never above 0.1 rad
    assert float(curves["float32 angles (apply_rope)"].max()) < 1e-3
    assert rows.loc["bfloat16 angles", "score error, offset 16"] > 0.5
    assert rows.loc["float32 angles (apply_rope)", "score error, key at 0"] < 0.01
    # a θ rounded to bfloat16 errs in proportion to the offset: small near, large far
    assert rows.loc["float32 angles, bfloat16 θ", "score error, offset 16"] < 0.05
    assert rows.loc["float32 angles, bfloat16 θ", "score error, key at 0"] > 0.5


def test_apply_rope_in_bfloat16_keeps_float32_angles():
    from posenc.frequencies import compute_inv_freq
    from posenc.rope import apply_rope, rope_cos_sin

    head_dim, positions = 64, torch.arange(60000, 60064)
    inv_freq = compute_inv_freq(head_dim, 1e5)
    x = torch.randn(1, 64, head_dim)
    exact = apply_rope(x.double(), positions, inv_freq=compute_inv_freq(head_dim, 1e5, dtype=torch.float64))
    fixed = apply_rope(x.bfloat16(), positions, inv_freq=inv_freq).double()
    cos, sin = precision.wrong_half_precision_angles(positions, inv_freq, torch.bfloat16)
    cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    wrong = x.bfloat16() * cos + torch.cat((-x[..., 32:], x[..., :32]), -1).bfloat16() * sin
    assert (wrong.double() - exact).abs().max() > 1.0  # angles off by radians
    assert (fixed - exact).abs().max() < 0.05  # bfloat16 rounding of cos, sin and x only
    # parity: transformers' rotary under autocast gives float32 angles, rounded at the end
    rotary = tiny_llama().model.rotary_emb
    with torch.autocast("cpu", dtype=torch.bfloat16):
        hf_cos, _ = rotary(x.bfloat16(), positions[None])
    ours, _ = rope_cos_sin(positions, rotary.inv_freq)
    torch.testing.assert_close(hf_cos[0].float(), ours.bfloat16().float(), atol=1e-2, rtol=0)


def test_transformers_casts_inv_freq_with_the_model_but_not_on_load():
    model = tiny_llama()
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        loaded = transformers.LlamaForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)
    assert loaded.model.rotary_emb.inv_freq.dtype == torch.float32
    assert model.to(torch.bfloat16).model.rotary_emb.inv_freq.dtype == torch.bfloat16


# 4. past L, and YaRN with original_max_position_embeddings set wrongly


def test_yarn_with_a_wrong_original_length():
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from posenc.rope_config import rope_inv_freq_from_config

    table = configs.yarn_original_length().set_index("setting")
    right, small, new = table.index
    assert table.loc[right, "unseen pairs"] == 0  # the fix: nothing turns past its trained range
    assert table.loc[new, "unseen pairs"] >= 1  # the symptom: L too large leaves slow pairs unscaled
    assert table.loc[small, "interpolated"] > table.loc[right, "interpolated"]  # L too small: more pairs slowed
    assert table["attention factor"].nunique() == 1  # YaRN's attention factor depends on s alone
    # parity: transformers computes the same frequencies for every setting
    for params in configs._yarn_settings(8192, 2.0).values():
        rope = {**params, "rope_theta": 1e5}
        config = quiet("LlamaConfig", hidden_size=256, num_attention_heads=4, max_position_embeddings=16384,
                       rope_parameters=dict(rope))
        theirs, their_factor = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
        ours, factor = rope_inv_freq_from_config(rope, 64, max_position_embeddings=16384)
        torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=0)
        assert factor == pytest.approx(their_factor)


def test_past_the_trained_length_stored():
    stored = configs.past_context_stored()
    assert stored["none [L, 2L)"] > 3 * stored["none [0, L)"]  # the symptom
    assert stored["yarn [L, 2L)"] < 1.2 * stored["none [0, L)"]  # the fix


# 5. static YaRN below L against dynamic scaling


def test_dynamic_equals_the_unscaled_model_below_L_and_static_yarn_does_not():
    L = 8192
    plain, _ = rope_inv_freq(64, 1e5)
    dynamic, dyn_factor = rope_inv_freq(64, 1e5, {"rope_type": "dynamic", "factor": 2.0,
                                                  "original_max_position_embeddings": L}, seq_len=1024)
    static, attention = rope_inv_freq(64, 1e5, {"rope_type": "yarn", "factor": 2.0,
                                                "original_max_position_embeddings": L})
    assert torch.equal(dynamic, plain) and dyn_factor == 1.0
    assert attention > 1.05 and not torch.equal(static, plain)
    # the same on transformers' models: dynamic below max_position_embeddings is the unscaled model
    ids = torch.arange(1, 65)[None] % 100
    outputs = {}
    for name, rope in {"default": {"rope_type": "default"},
                       "dynamic": {"rope_type": "dynamic", "factor": 2.0},
                       "yarn": {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 128}}.items():
        with torch.no_grad():
            outputs[name] = tiny_llama(rope_parameters={**rope, "rope_theta": 1e4})(ids).logits
    torch.testing.assert_close(outputs["dynamic"], outputs["default"], atol=0, rtol=0)
    assert (outputs["yarn"] - outputs["default"]).abs().max() > 1e-3  # the symptom below L


# 8. Llama 3's low_freq_factor / high_freq_factor and original_max_position_embeddings


def test_llama3_pairs_and_a_wrong_original_length():
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    table = configs.llama3_pairs()
    for name, rows in table.groupby("setting"):
        ratio = rows.set_index("region")["ratio"]
        assert ((ratio["keep"] - 1).abs() < 1e-6).all()  # kept
        assert ((ratio["divide"] - 1 / 8).abs() < 1e-6).all()  # divided by factor 8
        assert ((ratio["blend"] > 1 / 8) & (ratio["blend"] < 1)).all()
    right, wrong = (table[table["setting"] == s].set_index("pair")["region"] for s in configs.llama3_settings())
    assert (right != wrong).sum() >= 10  # a wrong L keeps pairs that Meta's rule slows
    # parity with transformers' llama3 rule, for both settings
    for scaling in configs.llama3_settings().values():
        config = quiet("LlamaConfig", hidden_size=512, num_attention_heads=4, max_position_embeddings=131072,
                       rope_parameters={**scaling, "rope_theta": 500000.0})
        theirs, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
        ours, _ = rope_inv_freq(128, 500000.0, scaling)
        torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=0)
