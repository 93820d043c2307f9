"""The query temperatures of posenc.temperature, each against its source: Llama 4's
against transformers' Llama4TextAttention (with a KV cache; the test without one is
tests/test_layers.py), Qwen-1's log-n against its modeling_qwen.py rule written as a
loop, Scalable-Softmax against softmax(s·ln n·z) written from the paper's equation
(reference and SDPA paths, KV cache, window, gradients); bad input; the stored runs'
configuration keys; and the proofs of posenc.symbolic.temperature."""

import json
import math

import pytest
import torch

from posenc import build_scheme
from posenc.layers.attention import MultiHeadAttention
from posenc.layers.kv_cache import LayerKVCache
from posenc.layers.masks import attended_keys, attention_mask
from posenc.layers.model import ModelConfig, TinyLM, describe_layer
from posenc.scaling import yarn_attention_factor
from posenc.symbolic.temperature import (
    llama4_temperature_blocks,
    softmax_max_weight,
    yarn_logit_factor,
)
from posenc.temperature import (
    check_query_temperature,
    llama4_query_scale,
    logn_query_scale,
    ssmax_query_scale,
)

D, H = 16, 2


def _layer(query_temperature, scheme="none", **masks) -> MultiHeadAttention:
    torch.manual_seed(0)
    return MultiHeadAttention(
        D, H, build_scheme(scheme, d_model=D, num_heads=H),
        query_temperature=query_temperature, **masks,
    )


def _naive(layer, x, row_scale, *, window=None):
    """Causal NoPE attention written out: softmax over the attended keys j of
    τ_{h,i} · q_i·k_j / √d_h, τ from ``row_scale(h, i, n_i)`` (n_i the keys row i
    attends). x (B, T, d) → (B, T, d)."""
    batch, length, _ = x.shape
    qkv = layer.qkv(x).view(batch, length, 3, H, D // H).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    out = torch.zeros_like(q)
    for h in range(H):
        for i in range(length):
            first = 0 if window is None else max(0, i - window + 1)
            keys = range(first, i + 1)
            tau = row_scale(h, i, len(keys))
            logits = torch.stack(
                [(q[:, h, i] * k[:, h, j]).sum(-1) for j in keys], -1
            ) * tau / math.sqrt(D // H)
            weights = logits.softmax(-1)  # (B, n)
            out[:, h, i] = (weights[..., None] * v[:, h, first : i + 1]).sum(-2)
    return layer.proj(out.transpose(1, 2).reshape(batch, length, D))


# --------------------------------------------------------------------------------------
# Llama 4: transformers' Llama4TextAttention, with a KV cache
# --------------------------------------------------------------------------------------


def test_llama4_temperature_with_a_kv_cache_equals_transformers():
    """transformers counts p from the cache length (not position_ids) and applies τ on
    NoPE layers only; fed in two pieces through a cache, the layer matches it."""
    from transformers import DynamicCache, Llama4TextConfig
    from transformers.models.llama4 import modeling_llama4 as ml4

    config = Llama4TextConfig(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=4, head_dim=8,
        num_hidden_layers=1, no_rope_layers=[0], attn_temperature_tuning=True,
        floor_scale=4, attn_scale=0.1, use_qk_norm=False, attention_chunk_size=4,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
    )
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    hf = ml4.Llama4TextAttention(config, 0).eval()
    ours = MultiHeadAttention(
        32, 4, build_scheme("none", d_model=32, num_heads=4),
        query_temperature={"floor_scale": 4, "attn_scale": 0.1},
    )
    with torch.no_grad():
        ours.qkv.weight.copy_(
            torch.cat((hf.q_proj.weight, hf.k_proj.weight, hf.v_proj.weight))
        )
        ours.proj.weight.copy_(hf.o_proj.weight)
    x = torch.randn(2, 13, 32)
    cache, hf_cache = LayerKVCache(), DynamicCache(config=config)
    got, expected = [], []
    with torch.no_grad():
        for start, stop in ((0, 6), (6, 13)):
            mask = torch.zeros(stop - start, stop).masked_fill(
                ~attention_mask(stop - start, stop), float("-inf")
            )
            out, _ = hf(x[:, start:stop], None, mask[None, None],
                        past_key_values=hf_cache)
            expected.append(out)
            mine, _ = ours(x[:, start:stop], torch.arange(start, stop), cache=cache,
                           impl="reference")
            got.append(mine)
    torch.testing.assert_close(torch.cat(got, 1), torch.cat(expected, 1),
                               atol=1e-5, rtol=1e-5)
    # τ > 1 from position 3 on: without it the second piece differs
    plain = MultiHeadAttention(32, 4, build_scheme("none", d_model=32, num_heads=4))
    plain.load_state_dict(ours.state_dict())
    with torch.no_grad():
        untempered, _ = plain(x, torch.arange(13))
    assert (untempered[:, 6:] - expected[1]).abs().max() > 1e-3


# --------------------------------------------------------------------------------------
# log-n: Qwen-1's modeling_qwen.py
# --------------------------------------------------------------------------------------


def _qwen_logn(train_length: int, key_len: int, query_len: int) -> list[float]:
    """Qwen-1's rule, after QWenAttention (modeling_qwen.py of the Qwen-1 checkpoints,
    e.g. alibaba/MNN's copy transformers/llm/export/llm_models/Qwen-1_8B/): a table
    with log_L(i) for i > L, else 1, for i = 1, 2, …; the queries take its entries
    key_len − query_len … key_len − 1 (the query's index among cached + new keys)."""
    table = [math.log(i, train_length) if i > train_length else 1 for i in range(1, 200)]
    return table[key_len - query_len : key_len]


@pytest.mark.parametrize("train_length", [2, 8, 16])
def test_logn_scale_is_qwens_rule_with_and_without_a_cache(train_length):
    for key_len, query_len in ((40, 40), (40, 1), (33, 7), (5, 5)):
        positions = torch.arange(key_len - query_len, key_len)
        ours = logn_query_scale(positions, train_length=train_length)
        expected = torch.tensor(_qwen_logn(train_length, key_len, query_len))
        torch.testing.assert_close(ours, expected.float())


@pytest.mark.parametrize("impl", ["reference", "sdpa"])
def test_logn_layer_scales_each_query_with_a_cache(impl):
    L = 4
    layer = _layer({"type": "logn", "train_length": L})
    x = torch.randn(2, 11, D)
    expected = _naive(layer, x, lambda h, i, n: max(1.0, math.log(i + 1, L)))
    cache = LayerKVCache()
    with torch.no_grad():
        first, _ = layer(x[:, :5], torch.arange(5), cache=cache, impl=impl)
        second, _ = layer(x[:, 5:], torch.arange(5, 11), cache=cache, impl=impl)
    torch.testing.assert_close(torch.cat((first, second), 1), expected.detach(),
                               atol=1e-5, rtol=1e-5)
    # within L the layer is the plain one (Qwen's rule is the identity there)
    plain = _layer(None)
    with torch.no_grad():
        torch.testing.assert_close(plain(x[:, :L], torch.arange(L))[0], first[:, :L])


# --------------------------------------------------------------------------------------
# Scalable-Softmax: softmax(s · ln n · z), n the keys attended
# --------------------------------------------------------------------------------------


def _ssmax_layer(bias=False, **masks):
    layer = _layer({"type": "ssmax", "init": 0.5, "bias": bias}, **masks)
    with torch.no_grad():  # distinct heads, so a head mix-up cannot pass
        layer.ssmax_scale.copy_(torch.tensor([0.3, 0.8]))
        if bias:
            layer.ssmax_bias.copy_(torch.tensor([0.2, -0.1]))
    return layer


def _ssmax_row(layer):
    b = layer.ssmax_bias
    return lambda h, i, n: layer.ssmax_scale[h] * math.log(n) + (0 if b is None else b[h])


@pytest.mark.parametrize("impl", ["reference", "sdpa"])
@pytest.mark.parametrize("window", [None, 3])
def test_ssmax_equals_the_papers_softmax(impl, window):
    layer = _ssmax_layer(bias=window is None, window=window)
    x = torch.randn(2, 9, D)
    expected = _naive(layer, x, _ssmax_row(layer), window=window)
    got, _ = layer(x, torch.arange(9), impl=impl)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_ssmax_counts_the_keys_really_attended_with_a_cache():
    layer = _ssmax_layer()
    x = torch.randn(1, 10, D)
    expected = _naive(layer, x, _ssmax_row(layer))
    cache = LayerKVCache()
    outs = [layer(x[:, a:b], torch.arange(a, b), cache=cache)[0]
            for a, b in ((0, 4), (4, 5), (5, 10))]
    torch.testing.assert_close(torch.cat(outs, 1), expected, atol=1e-5, rtol=1e-5)


def test_ssmax_gradients_reach_s_and_b_as_in_the_naive_form():
    layer = _ssmax_layer(bias=True)
    x = torch.randn(2, 7, D)
    layer(x, torch.arange(7))[0].square().sum().backward()
    got = (layer.ssmax_scale.grad.clone(), layer.ssmax_bias.grad.clone())
    layer.zero_grad()
    _naive(layer, x, _ssmax_row(layer)).square().sum().backward()
    for ours, naive in zip(got, (layer.ssmax_scale.grad, layer.ssmax_bias.grad)):
        assert ours.abs().min() > 0
        torch.testing.assert_close(ours, naive, atol=1e-5, rtol=1e-4)


def test_ssmax_in_a_model_spec_is_trained_and_described():
    s0 = 1 / math.log(32)
    spec = {"query_temperature": {"type": "ssmax", "init": s0}}
    model = TinyLM(ModelConfig(scheme="none", num_layers=2, layers=[spec, spec]))
    names = [n for n, _ in model.named_parameters() if "ssmax" in n]
    assert names == ["blocks.0.attn.ssmax_scale", "blocks.1.attn.ssmax_scale"]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    tokens = torch.randint(0, 256, (2, 16))
    logits = model(tokens[:, :-1])
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).backward()
    opt.step()
    assert (model.blocks[0].attn.ssmax_scale - s0).abs().max() > 0
    assert describe_layer(spec, scheme="none") == "NoPE, full, SSMax (s₀ = 0.289)"


def test_ssmax_scale_is_s_log_n_per_head():
    n = torch.tensor([1, 2, 10])
    got = ssmax_query_scale(n, torch.tensor([0.5, 2.0]), torch.tensor([0.0, 1.0]))
    logs = torch.log(n.float())
    torch.testing.assert_close(got, torch.stack((0.5 * logs, 2.0 * logs + 1.0)))


@pytest.mark.parametrize(
    "masks", [{}, {"window": 3}, {"chunk": 4}, {"window": 3, "chunk": 4}]
)
@pytest.mark.parametrize("q_len,k_len", [(7, 7), (3, 9), (1, 5), (0, 2)])
def test_attended_keys_are_the_mask_row_sums(masks, q_len, k_len):
    expected = attention_mask(q_len, k_len, **masks).sum(-1)
    assert torch.equal(attended_keys(q_len, k_len, **masks), expected)
    assert torch.equal(attended_keys(3, 5, causal=False), torch.full((3,), 5))


# --------------------------------------------------------------------------------------
# Bad input; the stored runs
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad,error,match",
    [
        ({"type": "cubic"}, ValueError, "'type' is one of .*'cubic'"),
        ({"type": "logn"}, ValueError, "type 'logn' takes the keys \\['train_length'\\]"),
        ({"type": "logn", "train_length": 1}, ValueError, "train_length'\\] must be >= 2"),
        ({"type": "logn", "train_length": 8.5}, TypeError, "must be an integer"),
        ({"type": "ssmax", "init": 0.0}, ValueError, "'init'.* must be > 0, got 0.0"),
        ({"type": "ssmax", "init": 1, "bias": 1}, TypeError, "'bias'\\] must be a bool"),
        ({"type": "ssmax", "init": 1, "s": 1}, ValueError, "optionally \\['bias'\\]"),
        ({"floor_scale": 8, "attn_scale": -1}, ValueError, "attn_scale >= 0"),
        ({"floor_scale": math.inf, "attn_scale": 0.1}, TypeError, "finite real"),
        ("llama4", ValueError, "must be None or a dict"),
    ],
)
def test_bad_temperatures_are_rejected_naming_the_rule(bad, error, match):
    with pytest.raises(error, match=match):
        check_query_temperature(bad)
    with pytest.raises(error, match=match):
        ModelConfig(scheme="none", num_layers=1, layers=[{"query_temperature": bad}])


def test_ssmax_scale_rejects_no_keys_and_mismatched_heads():
    with pytest.raises(ValueError, match="n >= 1 keys, got n = 0"):
        ssmax_query_scale(torch.tensor([0, 1]), torch.ones(2))
    with pytest.raises(ValueError, match=r"shape \(H,\), got s \(2,\) and b \(3,\)"):
        ssmax_query_scale(torch.tensor([1]), torch.ones(2), torch.ones(3))


def test_todays_llama4_dict_keeps_its_meaning():
    """The dict without "type" (stored runs) is Llama 4's; spelled with the type it
    is the same temperature."""
    old = {"floor_scale": 16.0, "attn_scale": 0.1}
    assert check_query_temperature(old) == {"type": "llama4", **old}
    assert check_query_temperature({"type": "llama4", **old}) == check_query_temperature(old)
    positions = torch.arange(100)
    expected = 1 + 0.1 * torch.log1p(torch.floor((positions + 1.0) / 16))
    torch.testing.assert_close(llama4_query_scale(positions, **old), expected)
    assert describe_layer({"scheme": "none", "query_temperature": old}) == (
        "NoPE, full, temperature (F = 16, a = 0.1)"
    )


def test_the_stored_llama4_runs_keep_their_configuration_keys():
    """The stored study's Llama 4 pattern runs (a NoPE layer with today's dict) still
    hash to the keys of their stored files: the results are not stale."""
    from posenc.experiments import study
    from posenc.experiments.store import results_dir

    runs = [r for r in study.grid() if r.label == "pattern: llama4"]
    assert runs
    records = study._stored("length_generalization", "cpu")
    corpus = study.stored_corpus(records)
    folder = results_dir("length_generalization")
    for run in runs:
        layers = json.loads(run.layers)
        assert {"floor_scale", "attn_scale"} == set(layers[1]["query_temperature"])
        assert (folder / f"{run.key(corpus)}.json").is_file(), run


# --------------------------------------------------------------------------------------
# The proofs, and their statements on numbers
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "proof", [yarn_logit_factor, softmax_max_weight, llama4_temperature_blocks]
)
def test_symbolic_proofs_hold(proof):
    result = proof()
    assert result.claims and all(v == True for v in result.claims.values())  # noqa: E712


def test_yarn_factor_is_the_packages_and_squares_the_logits():
    proof = yarn_logit_factor()
    m_of = proof.formulas["m"]
    for factor in (2.0, 8.0, 40.0):
        m = float(m_of.subs(proof.symbols["s"], factor))
        assert m == pytest.approx(yarn_attention_factor(factor))
        q, k = torch.randn(2, 8, dtype=torch.float64)
        assert float((m * q) @ (m * k)) == pytest.approx(m * m * float(q @ k))


def test_max_weight_bounds_hold_on_random_rows():
    proof = softmax_max_weight()
    sym = proof.symbols
    generator = torch.Generator().manual_seed(0)
    for n in (2, 10, 300):
        for lam in (0.5, 1.0, 3.0):
            z = torch.randn(n, dtype=torch.float64, generator=generator)
            top = z.max()
            gaps = top - z[z < top]
            weight = float((lam * z).softmax(0).max())
            values = {sym["lambda"]: lam, sym["n"]: n, sym["delta"]: float(gaps.min()),
                      sym["Delta"]: float(gaps.max())}
            assert float(proof.formulas["lower bound"].subs(values)) <= weight + 1e-12
            assert weight <= float(proof.formulas["upper bound"].subs(values)) + 1e-12


def test_ssmax_keeps_the_leader_where_softmax_fades():
    """One logit leads the n − 1 others by δ = 3: softmax's weight on it falls with n,
    SSMax's (s = 0.5, sδ = 1.5 > 1) rises toward 1."""
    plain, scaled = [], []
    for n in (16, 256, 4096):
        z = torch.zeros(n, dtype=torch.float64)
        z[0] = 3.0
        plain.append(float(z.softmax(0)[0]))
        scaled.append(float((0.5 * math.log(n) * z).softmax(0)[0]))
    assert plain[0] > plain[1] > plain[2] and plain[2] < 0.01
    assert scaled[0] < scaled[1] < scaled[2] and scaled[2] > 0.9


def test_llama4_blocks_on_every_small_instance():
    proof = llama4_temperature_blocks()
    sym = proof.symbols
    for F in range(1, 6):
        positions = torch.arange(6 * F)
        tau = llama4_query_scale(positions, floor_scale=F, attn_scale=0.1)
        formula = proof.formulas["tau"].subs({sym["F"]: F, sym["a"]: 0.1})
        for p in range(6 * F):
            assert float(formula.subs(sym["p"], p)) == pytest.approx(float(tau[p]))
        assert (tau[: F - 1] == 1).all() and (F == 1 or tau[F - 1] > 1)
        for k in range(1, 5):  # block k: positions F·k − 1 … F·k + F − 2
            block = tau[F * k - 1 : F * k + F - 1]
            assert len(block) == F and (block == block[0]).all()
