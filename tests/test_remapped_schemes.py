"""The registry's "attention" namespace: SelfExtend, ReRoPE and DCA as attention-level
methods — in the one attention (reference = fast path, decoding with a KV cache of
un-rotated keys) and inside a transformers Llama (posenc.layers.pretrained.swap_rope),
where a method whose windows cover the whole input must give transformers' own logits."""

from __future__ import annotations

import pytest
import torch

import posenc.layers  # noqa: F401  (registers the "attention" namespace)
from posenc import available_schemes, build_scheme
from posenc.schemes import get_scheme_class
from posenc.layers import remapped_attention as ra
from posenc.layers.attention import MultiHeadAttention
from posenc.layers.kv_cache import LayerKVCache
from posenc.layers.pretrained import swap_rope
from posenc.schemes import PositionalScheme, register_scheme  # noqa: E402

D_MODEL, HEADS, T = 32, 2, 37
METHODS = {
    "self_extend": dict(group_size=3, window_size=7),
    "rerope": dict(window=6),
    "dual_chunk": dict(chunk_size=8, pretraining_length=14, local_window=4),
}
# settings under which every pair of T tokens is an ordinary RoPE pair
WHOLE = {
    "self_extend": dict(group_size=4, window_size=64),
    "rerope": dict(window=64),
    "dual_chunk": dict(chunk_size=64, pretraining_length=80),
}


def test_the_namespace_holds_the_three_methods_and_only_them():
    assert available_schemes("attention") == tuple(METHODS)
    assert not set(METHODS) & set(available_schemes())  # not book schemes
    for name in METHODS:
        assert get_scheme_class(name, "attention").hooks == {"attend"}


def test_attend_belongs_to_the_attention_namespace_only():
    class Loose(PositionalScheme):
        name = "loose_test_only"
        hooks = frozenset({"attend"})

        def attend(self, q, k, v, q_positions, k_positions, *, scale, need_weights=False):
            return v, None

    with pytest.raises(ValueError, match="declares 'attend' exactly when .* namespace '1d'"):
        register_scheme(Loose)

    class Plain(PositionalScheme):
        name = "plain_test_only"

    with pytest.raises(ValueError, match="namespace 'attention'"):
        register_scheme(Plain, namespace="attention")
    assert "loose_test_only" not in available_schemes() + available_schemes("attention")


def _attention(name, dtype=torch.float64, **extra):
    scheme = build_scheme(
        name, namespace="attention", d_model=D_MODEL, num_heads=HEADS,
        **METHODS[name], **extra,
    )
    torch.manual_seed(0)
    return MultiHeadAttention(D_MODEL, HEADS, scheme).to(dtype)


@pytest.mark.parametrize("name", METHODS)
def test_in_the_one_attention_fast_path_equals_reference_and_the_function(name):
    att = _attention(name)
    x = torch.randn(2, T, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    positions = torch.arange(T)
    fast, none = att(x, positions, impl="sdpa")
    ref, weights = att(x, positions, impl="reference", need_weights=True)
    assert none is None and weights.shape == (2, HEADS, T, T)
    assert (fast - ref).abs().max().item() < 1e-12
    # the layer hands the method its un-rotated q, k, v: the same as calling it directly
    q, k, v = att._project(x)
    direct = getattr(ra, f"{name}_attention")(q, k, v, **METHODS[name])
    assert torch.allclose(att._merge(direct), fast, atol=1e-12)


@pytest.mark.parametrize("name", METHODS)
def test_decoding_with_a_cache_of_unrotated_keys_equals_the_full_pass(name):
    att = _attention(name)
    x = torch.randn(1, T, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    full, _ = att(x, torch.arange(T))
    cache, steps = LayerKVCache(), []
    for t in range(T):
        out, _ = att(x[:, t : t + 1], torch.tensor([t]), cache=cache)
        steps.append(out)
    assert (torch.cat(steps, 1) - full).abs().max().item() < 1e-12


def test_bad_combinations_are_refused():
    scheme = build_scheme("rerope", namespace="attention", d_model=D_MODEL, num_heads=HEADS, window=4)
    with pytest.raises(ValueError, match="takes no window, chunk, sink or causal=False"):
        MultiHeadAttention(D_MODEL, HEADS, scheme, window=8)
    att = MultiHeadAttention(D_MODEL, HEADS, scheme)
    x = torch.randn(1, 5, D_MODEL)
    with pytest.raises(ValueError, match="impl='reference' or 'sdpa' and no sink logits, got impl='flex'"):
        att(x, torch.arange(5), impl="flex")
    with pytest.raises(ValueError, match="inv_freq must be a tensor of shape"):
        build_scheme("rerope", namespace="attention", d_model=D_MODEL, num_heads=HEADS,
                     window=4, inv_freq=torch.ones(20))
    with pytest.raises(ValueError, match="window"):
        build_scheme("rerope", namespace="attention", d_model=D_MODEL, num_heads=HEADS, window=0)


@pytest.mark.parametrize("impl", ["sdpa", "reference"])
@pytest.mark.parametrize("name", METHODS)
def test_per_row_positions_in_the_one_attention_give_each_row_alone(name, impl):
    """(B, T) positions with a different offset per row (as a left-padded batch's):
    each row attends as it does alone; until issue 40 the layer refused them."""
    att = _attention(name)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, T, D_MODEL, dtype=torch.float64, generator=g)
    positions = torch.stack([torch.arange(T), torch.arange(4, 4 + T)])
    options = dict(impl=impl, need_weights=impl == "reference")
    batched, _ = att(x, positions, **options)
    for b in range(2):
        alone, _ = att(x[b : b + 1], positions[b], **options)
        assert (batched[b : b + 1] - alone).abs().max().item() < 1e-12
    shifted, _ = att(x[1:], positions[0], **options)  # the offset matters: DCA's chunks
    if name == "dual_chunk":
        assert (shifted - batched[1:]).abs().max().item() > 1e-6


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("name", METHODS)
def test_attend_takes_a_padding_mask_and_gives_each_row_alone_without_its_pads(
    name, need_weights
):
    """attend(..., attention_mask=(B, T_k)), as swap_rope passes transformers' mask: a
    left-padded batch at padded_positions gives each row's real tokens what the row
    alone without its pads gets, the pads' rows zeros (fast path and reference)."""
    from posenc.layers.masks import padded_positions

    scheme = build_scheme(
        name, namespace="attention", d_model=D_MODEL, num_heads=HEADS, **METHODS[name]
    )
    g = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(2, HEADS, T, 16, generator=g, dtype=torch.float64) for _ in range(3))
    mask = torch.ones(2, T, dtype=torch.bool)
    mask[1, :11] = False
    positions = padded_positions(mask)[:, None]  # (B, 1, T), as the attention's
    options = dict(scale=0.25, need_weights=need_weights)
    out, _ = scheme.attend(q, k, v, positions, positions, attention_mask=mask, **options)
    for b in range(2):
        real = mask[b]
        n = int(real.sum())
        alone, _ = scheme.attend(
            q[b : b + 1, :, real], k[b : b + 1, :, real], v[b : b + 1, :, real],
            torch.arange(n)[None, None], torch.arange(n)[None, None], **options,
        )
        assert (out[b : b + 1, :, real] - alone).abs().max().item() < 1e-12
        assert bool((out[b][:, ~real] == 0).all())
    unmasked, _ = scheme.attend(q, k, v, positions, positions, **options)
    assert (unmasked[1:, :, mask[1]] - out[1:, :, mask[1]]).abs().max().item() > 1e-3


def test_the_fast_path_in_small_blocks_equals_the_reference(monkeypatch):
    """Many query blocks, each case over only its own key columns."""
    monkeypatch.setattr(ra, "BLOCK_ENTRIES", 3 * T)  # 3 query rows per block
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, T, 8, generator=g, dtype=torch.float64) for _ in range(3))
    for name, kw in METHODS.items():
        fast = getattr(ra, f"{name}_attention")(q, k, v, **kw)
        ref, _ = getattr(ra, f"{name}_attention_reference")(q, k, v, **kw)
        assert (fast - ref).abs().max().item() < 1e-12, name


TWO_BANDS = {k: v for k, v in METHODS.items() if k != "dual_chunk"}
TWO_BANDS["leaky_rerope"] = dict(window=6, scaling_factor=3.0)


@pytest.mark.parametrize("rows", [7, 512])  # many band blocks, or one
@pytest.mark.parametrize("name", TWO_BANDS)
def test_the_fused_two_band_path_equals_the_reference_and_the_blocked_path(
    monkeypatch, name, rows
):
    """SelfExtend and ReRoPE on a CPU prefill: the band in blocks and the far pairs as
    one causal attention, merged by their log-sum-exps, give the reference's rows, in
    float64 to rounding and in float32 as closely as the blocked path does."""
    assert ra._CPU_FLASH is not None  # the pinned torch has the fused CPU kernel
    monkeypatch.setattr(ra, "FUSED_BAND_ROWS", rows)
    fused_calls = []
    fused = ra._two_bands_fused
    monkeypatch.setattr(ra, "_two_bands_fused", lambda *a: fused_calls.append(1) or fused(*a))
    attend = getattr(ra, f"{name.removeprefix('leaky_')}_attention")
    reference = getattr(ra, f"{name.removeprefix('leaky_')}_attention_reference")
    g = torch.Generator().manual_seed(4)
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-5)):
        q, k, v = (torch.randn(2, 3, T, 8, generator=g, dtype=dtype) for _ in range(3))
        fast = attend(q, k, v, **TWO_BANDS[name])
        ref, _ = reference(q, k, v, **TWO_BANDS[name])
        assert (fast - ref).abs().max().item() < tol, (name, dtype)
        shifted = attend(q, k, v, torch.arange(5, 5 + T), **TWO_BANDS[name])
        ref, _ = reference(q, k, v, torch.arange(5, 5 + T), **TWO_BANDS[name])
        assert (shifted - ref).abs().max().item() < tol, (name, dtype)
    assert len(fused_calls) == 4  # two dtypes, two position sets: all through the fused path
    monkeypatch.setattr(ra, "_CPU_FLASH", None)  # the blocked path instead
    assert (attend(q, k, v, **TWO_BANDS[name]) - fast).abs().max().item() < 1e-5


def test_the_fused_path_applies_only_to_a_whole_prefill_on_consecutive_positions():
    q = torch.zeros(1, 2, 6, 4)
    assert ra._two_band_flash_applies(q, q, None)
    assert ra._two_band_flash_applies(q, q, torch.arange(3, 9))
    assert not ra._two_band_flash_applies(q, q, torch.tensor([0, 1, 2, 4, 5, 6]))
    assert not ra._two_band_flash_applies(q[..., 4:, :], q, None)  # decoding
    assert not ra._two_band_flash_applies(q[0], q[0], None)  # (H, T, d_h)
    assert not ra._two_band_flash_applies(q.half(), q.half(), None)
    assert not ra._two_band_flash_applies(q, q.double(), None)  # mixed dtypes
    assert not ra._two_band_flash_applies(q, q, None, torch.zeros(1, 2, 6, 8))  # d_v ≠ d_h
    assert not ra._two_band_flash_applies(q, q[0], None, q[0])  # 3-D keys
    assert not ra._two_band_flash_applies(q, q.expand(2, 2, 6, 4), None)  # batch mismatch
    assert not ra._two_band_flash_applies(q[..., :0, :], q[..., :0, :], torch.arange(0))


@pytest.mark.parametrize("name", TWO_BANDS)
def test_gradients_through_a_two_band_method_are_the_reference_ones(name):
    """The fused kernel's backward ignores its log-sum-exp output, so with a gradient
    (through q, k, v or a learned inv_freq) the blocked path runs: the gradients are
    the naive reference's."""
    attend = getattr(ra, f"{name.removeprefix('leaky_')}_attention")
    reference = getattr(ra, f"{name.removeprefix('leaky_')}_attention_reference")
    g = torch.Generator().manual_seed(5)
    base = [torch.randn(1, 2, T, 8, generator=g, dtype=torch.float64) for _ in range(3)]
    grads = []
    for fn in (attend, lambda *a, **kw: reference(*a, **kw)[0]):
        qkv = [x.clone().requires_grad_() for x in base]
        (fn(*qkv, **TWO_BANDS[name]) * base[0]).sum().backward()
        grads.append(torch.cat([x.grad.flatten() for x in qkv]))
    assert (grads[0] - grads[1]).abs().max().item() < 1e-10
    inv_freq = (1.0 / 10000 ** (torch.arange(0, 8, 2) / 8)).double().requires_grad_()
    grads = []
    for fn in (attend, lambda *a, **kw: reference(*a, **kw)[0]):
        inv_freq.grad = None
        (fn(*base, **TWO_BANDS[name], inv_freq=inv_freq) * base[0]).sum().backward()
        grads.append(inv_freq.grad.clone())
    assert (grads[0] - grads[1]).abs().max().item() < 1e-10


# --------------------------------------------------------------------------------------
# Inside a transformers Llama (tiny, random weights; grouped-query attention)
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llama():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        rope_parameters={"rope_type": "default", "rope_theta": 500.0},
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    model.config._attn_implementation = "eager"
    return model


def _method(name, settings):
    return build_scheme(
        name, namespace="attention", d_model=64, num_heads=4, base=500.0, **settings
    )


@pytest.mark.parametrize("name", METHODS)
def test_in_a_llama_whole_windows_give_transformers_own_logits(llama, name):
    ids = torch.randint(0, 97, (1, 40), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        own = llama(ids).logits
        with swap_rope(llama, attention=_method(name, WHOLE[name])):
            swapped = llama(ids).logits
        with swap_rope(llama, attention=_method(name, METHODS[name])):
            remapped = llama(ids).logits
    assert (swapped - own).abs().max().item() < 1e-4
    assert (remapped - own).abs().max().item() > 1e-3  # the remapping does act


@pytest.mark.parametrize("name", METHODS)
def test_in_a_llama_a_cache_of_unrotated_keys_decodes_like_the_full_pass(llama, name):
    from transformers import DynamicCache

    ids = torch.randint(0, 97, (1, 30), generator=torch.Generator().manual_seed(5))
    with torch.no_grad(), swap_rope(llama, attention=_method(name, METHODS[name])):
        full = llama(ids).logits[0]
        cache = DynamicCache(config=llama.config)
        first = llama(ids[:, :20], past_key_values=cache, use_cache=True).logits[0]
        rest = [
            llama(ids[:, t : t + 1], past_key_values=cache, use_cache=True).logits[0]
            for t in range(20, 30)
        ]
    assert (torch.cat([first, *rest]) - full).abs().max().item() < 1e-4


def test_swap_rope_refuses_a_book_scheme_as_attention(llama):
    with pytest.raises(TypeError, match="'attention' namespace"):
        with swap_rope(llama, attention=build_scheme("rope", d_model=64, num_heads=4)):
            pass
