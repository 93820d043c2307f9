"""Relative-position biases inside FlexAttention, with no (H, T_q, T_k) tensor.

T5, Shaw's key term and DeBERTa give a ``score_mod`` that looks the bias up from
O(T)-sized tables; Transformer-XL folds its bias into q and k (``augment_qk``); ALiBi
keeps its ``score_mod``. Each must equal the reference attention with ``score_bias``.

Compiling a flex kernel on a CPU costs seconds per shape and ``score_mod``, so the
parity matrix runs the *uncompiled* ``flex_attention``, which evaluates the
``score_mod`` on every pair exactly as the kernel does; the compiled path
(``attention_flex``, ``MultiHeadAttention(impl="flex")``) is checked at one shape per
scheme.
"""

import math

import pytest
import torch
from torch.nn.attention.flex_attention import flex_attention

from posenc.layers.attention import (
    MultiHeadAttention,
    attention_flex,
    attention_reference,
)
from posenc.relative import clipped_relative_position, shaw_key_bias, shaw_key_score_mod
from posenc.schemes import build_scheme

D_MODEL, HEADS, T = 32, 4, 10
HEAD_DIM = D_MODEL // HEADS

pytestmark = pytest.mark.filterwarnings(
    "ignore:flex_attention called without torch.compile"
)

SCHEMES = [
    pytest.param("t5", {}, id="t5"),
    pytest.param("t5", {"bidirectional": True}, id="t5-bidirectional"),
    pytest.param("shaw", {"max_relative_position": 3}, id="shaw-keys"),
    pytest.param("deberta", {"bucket_size": 4, "max_position": 12}, id="deberta"),
    pytest.param("transformer_xl", {}, id="transformer_xl"),
    pytest.param("alibi", {}, id="alibi"),
    pytest.param("alibi", {"symmetric": True}, id="alibi-symmetric"),
]


@pytest.fixture(autouse=True, scope="module")
def compile_every_flex_shape():
    """Past dynamo's recompile limit (8 kernels of flex_attention in one process) the
    compiled calls would fall back to the eager FlexAttention, untested here; a limit
    once hit stays hit, so start from a fresh dynamo, and leave one behind for the
    modules after this one."""
    import torch._dynamo

    torch._dynamo.reset()
    with torch._dynamo.config.patch(recompile_limit=64):
        yield
    torch._dynamo.reset()


def make_scheme(name, options):
    torch.manual_seed(0)
    scheme = build_scheme(name, d_model=D_MODEL, num_heads=HEADS, **options)
    with torch.no_grad():  # larger than the init, so that the bias matters
        for p in scheme.parameters():
            p.normal_(std=0.5)
    return scheme


def positions(kind):
    """(q_positions, k_positions) as the attention hands them to a scheme."""
    keys = torch.arange(T) + 5
    if kind == "1d":
        return keys, keys
    if kind == "kv-cache":  # the queries are the last 3 keys
        return keys[-3:], keys
    rows = torch.stack([torch.arange(T), torch.arange(T) + 37, 2 * torch.arange(T) + 3])
    rows = rows[:, None, :]  # (B, 1, T): offsets 0 and 37, and a strided row
    return rows[..., -4:], rows


def qkv(q_len, k_len, batch=3, seed=1):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, HEADS, q_len, HEAD_DIM, generator=g)
    k = torch.randn(batch, HEADS, k_len, HEAD_DIM, generator=g)
    v = torch.randn(batch, HEADS, k_len, HEAD_DIM, generator=g)
    return q, k, v


def scale_of(scheme):
    return 1.0 / math.sqrt(scheme.score_scale_factor * HEAD_DIM)


def flex_inputs(scheme, q, k, q_pos, k_pos):
    """What the flex path hands to the kernel: (q, k, score_mod)."""
    folded = scheme.augment_qk(q, k, q_pos, k_pos)
    if folded is not None:
        return (*folded, None)
    return q, k, scheme.score_mod(q_pos, k_pos, q=q, k=k)


def eager_flex(q, k, v, score_mod, *, causal, scale):
    """Uncompiled FlexAttention; the bottom-right causal mask is folded into the
    score_mod (the eager path evaluates every pair anyway)."""
    offset = k.shape[-2] - q.shape[-2]

    def mod(score, b, h, q_idx, kv_idx):
        if score_mod is not None:
            score = score_mod(score, b, h, q_idx, kv_idx)
        if causal:
            score = torch.where(q_idx + offset >= kv_idx, score, -float("inf"))
        return score

    return flex_attention(q, k, v, score_mod=mod, scale=scale)


def reference(scheme, q, k, v, q_pos, k_pos, causal):
    bias = scheme.score_bias(q, k, q_pos, k_pos)
    scale = scale_of(scheme)
    return attention_reference(q, k, v, bias=bias, causal=causal, scale=scale)[0]


@torch.no_grad()
@pytest.mark.parametrize("kind", ["1d", "kv-cache", "per-row"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("name, options", SCHEMES)
def test_flex_equals_reference(name, options, causal, kind):
    scheme = make_scheme(name, options)
    q_pos, k_pos = positions(kind)
    q, k, v = qkv(q_pos.shape[-1], k_pos.shape[-1])
    expected = reference(scheme, q, k, v, q_pos, k_pos, causal)
    q_in, k_in, mod = flex_inputs(scheme, q, k, q_pos, k_pos)
    out = eager_flex(q_in, k_in, v, mod, causal=causal, scale=scale_of(scheme))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


@torch.no_grad()
@pytest.mark.parametrize("name, options", SCHEMES)
def test_the_check_can_fail(name, options):
    """The parity above has teeth: without the bias, or with the keys' positions
    reversed (a wrong offset for almost every pair), the output is far from the
    reference. (A shift of the query positions would not do: for ALiBi it adds a
    constant to each row, which the softmax ignores.)"""
    scheme = make_scheme(name, options)
    q_pos, k_pos = positions("1d")
    q, k, v = qkv(T, T)
    expected = reference(scheme, q, k, v, q_pos, k_pos, causal=False)
    plain = eager_flex(q, k, v, None, causal=False, scale=scale_of(scheme))
    assert (plain - expected).abs().max() > 1e-2
    q_in, k_in, mod = flex_inputs(scheme, q, k, q_pos, k_pos.flip(0))
    wrong = eager_flex(q_in, k_in, v, mod, causal=False, scale=scale_of(scheme))
    assert (wrong - expected).abs().max() > 1e-3


def captured_tensors(fn, seen=None):
    """Every tensor a score_mod holds, through nested closures (e.g. flex_pair's)."""
    seen = set() if seen is None else seen
    if id(fn) in seen:
        return []
    seen.add(id(fn))
    found = []
    for cell in fn.__closure__ or ():
        value = cell.cell_contents
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif callable(value) and hasattr(value, "__closure__"):
            found += captured_tensors(value, seen)
    return found


@torch.no_grad()
@pytest.mark.parametrize("name, options", SCHEMES)
def test_no_tensor_of_size_t_q_by_t_k(name, options):
    """What the flex path builds is O(T · something small): no tensor has both a T_q
    axis and a T_k axis (T_q = 50, T_k = 70 to tell them apart)."""
    scheme = make_scheme(name, options)
    q_pos, k_pos = torch.arange(20, 70), torch.arange(70)
    q, k, _ = qkv(50, 70, batch=2)
    q_in, k_in, mod = flex_inputs(scheme, q, k, q_pos, k_pos)
    built = [q_in, k_in] if mod is None else captured_tensors(mod)
    assert built
    for tensor in built:
        assert not {50, 70} <= set(tensor.shape), (name, tuple(tensor.shape))


@torch.no_grad()
@pytest.mark.parametrize("name", ["t5", "deberta", "transformer_xl"])
def test_compiled_layer_flex_equals_reference(name):
    """The model's flex path (the compiled kernel), at one shape per scheme: that of
    tests/test_positions_contract.py's batch of 3 with shared positions, whose kernel
    the on-disk inductor cache then holds for both files."""
    scheme = make_scheme(name, {})
    torch.manual_seed(2)
    layer = MultiHeadAttention(D_MODEL, HEADS, scheme, causal=True)
    x, pos = torch.randn(3, T, D_MODEL), torch.arange(T) + 5
    flex, _ = layer(x, pos, impl="flex")
    ref, _ = layer(x, pos, impl="reference")
    torch.testing.assert_close(flex, ref, atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_compiled_shaw_key_term():
    """Shaw's key term through the compiled kernel, with the module-level score_mod;
    the model path refuses flex for Shaw, whose value term no score_mod can add."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, HEADS, 12, HEAD_DIM, generator=g) for _ in range(3))
    a_k = torch.randn(7, HEAD_DIM, generator=g)  # clipping distance 3
    pos = torch.arange(12)
    bias = shaw_key_bias(q, a_k, clipped_relative_position(pos, pos, 3))
    expected, _ = attention_reference(q, k, v, bias=bias / math.sqrt(HEAD_DIM))
    out = attention_flex(q, k, v, score_mod=shaw_key_score_mod(q, a_k, pos, pos))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)

    layer = MultiHeadAttention(D_MODEL, HEADS, make_scheme("shaw", {}))
    with pytest.raises(ValueError, match="impl='flex'.*'shaw' adds a value term"):
        layer(torch.randn(1, 5, D_MODEL), torch.arange(5), impl="flex")


def test_content_biases_need_q_and_k():
    pos = torch.arange(5)
    q, k, _ = qkv(5, 5, batch=1)
    deberta, shaw = make_scheme("deberta", {}), make_scheme("shaw", {})
    with pytest.raises(ValueError, match="deberta score_mod .* pass q= and k="):
        deberta.score_mod(pos, pos)
    with pytest.raises(ValueError, match="deberta score_mod .* pass k= "):
        deberta.score_mod(pos, pos, q=q)
    with pytest.raises(ValueError, match="shaw score_mod .* pass q= "):
        shaw.score_mod(pos, pos, k=k)
    assert shaw.score_mod(pos, pos, q=q) is not None  # the key term needs q only


@pytest.mark.parametrize("name", ["t5", "shaw", "deberta"])
def test_table_lookups_refuse_float_positions(name):
    scheme = make_scheme(name, {})
    q, k, _ = qkv(5, 5, batch=1)
    with pytest.raises(TypeError, match="positions must be integers"):
        scheme.score_mod(torch.arange(5.0), torch.arange(5), q=q, k=k)


def test_shaw_key_score_mod_checks_the_table():
    q, _, _ = qkv(5, 5, batch=1)
    pos = torch.arange(5)
    with pytest.raises(ValueError, match=r"a_k must have shape \(2k \+ 1, d_h\)"):
        shaw_key_score_mod(q, torch.zeros(6, HEAD_DIM), pos, pos)


@torch.no_grad()
def test_alibi_ignores_q_and_k():
    scheme = make_scheme("alibi", {})
    q, k, v = qkv(T, T)
    pos = torch.arange(T)
    plain = eager_flex(q, k, v, scheme.score_mod(pos, pos), causal=True, scale=None)
    given = scheme.score_mod(pos, pos, q=q, k=k)
    with_qk = eager_flex(q, k, v, given, causal=True, scale=None)
    torch.testing.assert_close(with_qk, plain)
