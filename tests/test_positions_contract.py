"""The positions contract (book/design.md, "Tensor shapes"), for every registered scheme and
every attention path:

* (B, T) positions whose rows are equal give the result of (T,) positions;
* per-sequence positions (row b: offset_b + 0 … T−1, or any other positions) give the
  result of running each row alone with its own 1-D positions — with and without a KV
  cache;
* a score bias built from (B, 1, T) positions is (B, H, T_q, T_k), row b being the bias
  of row b's positions.

The tests loop over ``posenc.available_schemes()``, so a scheme registered later is held
to the contract without new test code. A path a scheme cannot take (``sdpa`` or ``flex``
with a value term, ``flex`` with a score bias but neither a ``score_mod`` nor an
``augment_qk``) must be refused with a ValueError.
"""

import pytest
import torch

import posenc
import posenc.layers.attention
from posenc.layers.attention import MultiHeadAttention
from posenc.layers.model import ModelConfig, TinyLM
from posenc.schemes import PositionalScheme, build_scheme, get_scheme_class

D_MODEL, HEADS, T = 32, 4, 10
IMPLS = ("reference", "sdpa", "flex")

# Options that change how positions are used, on top of every scheme's defaults:
# (id, options, whether it matters only without a causal mask).
VARIANTS = {
    "rope": [("dynamic", {"scaling": {"rope_type": "dynamic", "factor": 2.0,
                                      "original_max_position_embeddings": 8}}, False)],
    "alibi": [("symmetric", {"symmetric": True}, True)],  # |m − n| = m − n if causal
    "t5": [("bidirectional", {"bidirectional": True}, False)],
}
SCHEMES = [(name, {}, name, False) for name in posenc.available_schemes()] + [
    (name, options, f"{name}-{label}", encoder_only)
    for name, variants in VARIANTS.items() if name in posenc.available_schemes()
    for label, options, encoder_only in variants
]


@pytest.fixture(autouse=True, scope="module")
def compile_every_flex_shape():
    """The flex path compiles one kernel per shape and score_mod; past dynamo's
    recompile limit (8) it would fall back to the unfused eager FlexAttention, and the
    tests would no longer test the kernel that a model runs. A limit once hit stays hit
    for the process, whatever the limit later (an earlier test module may have hit it),
    so the module starts from a fresh dynamo and leaves one behind."""
    import torch._dynamo

    torch._dynamo.reset()
    with torch._dynamo.config.patch(recompile_limit=64):
        yield
    torch._dynamo.reset()


#: Schemes whose compiled flex kernels tests/test_flex_bias.py already compiles (one
#: shape each): here they run FlexAttention uncompiled, which evaluates the same
#: score_mod / folded q, k exactly, so the contract is checked without compiling ~20
#: more kernels (about 6 s each on a cold CPU cache).
UNCOMPILED_FLEX = {"t5", "deberta", "transformer_xl"}


@pytest.fixture(autouse=True)
def uncompiled_flex_for_covered_schemes(request, monkeypatch):
    params = getattr(request.node, "callspec", None)
    params = params.params if params is not None else {}
    if params.get("impl") == "flex" and params.get("name") in UNCOMPILED_FLEX:
        import posenc.layers.attention
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        monkeypatch.setattr(posenc.layers.flex, "_compiled_flex_functions",
                            lambda: (flex_attention, create_block_mask))
        posenc.layers.attention.flex_block_mask.cache_clear()
        yield
        posenc.layers.attention.flex_block_mask.cache_clear()
    else:
        yield


def supports(name: str, impl: str) -> bool:
    """Whether the attention path can serve the scheme (MultiHeadAttention.forward)."""
    cls = get_scheme_class(name)
    if impl == "reference":
        return True
    if cls.needs_attention_weights:
        return False
    has_bias = "score_bias" in cls.hooks
    in_kernel = bool(cls.hooks & {"score_mod", "augment_qk"})
    return impl == "sdpa" or not has_bias or in_kernel


# the model is a causal decoder
CASES = [pytest.param(name, options, id=label)
         for name, options, label, encoder_only in SCHEMES if not encoder_only]
BIAS_CASES = [pytest.param(name, options, id=label) for name, options, label, _ in SCHEMES
              if "score_bias" in get_scheme_class(name).hooks]
ENCODER_CASES = [pytest.param(name, options, impl, id=f"{label}-{impl}")
                 for name, options, label, _ in SCHEMES
                 for impl in ("reference", "sdpa") if supports(name, impl)]


def per_row_positions(device):
    """Three rows: offsets 0 and 37, and a strided row (positions 3, 5, 7, …)."""
    base = torch.arange(T, device=device)
    return torch.stack([base, base + 37, 2 * base + 3])


def tolerance(device):
    value = 1e-4 if device.type == "cuda" else 2e-5
    return {"atol": value, "rtol": value}


def make_model(name, options, impl, device):
    torch.manual_seed(0)
    config = ModelConfig(scheme=name, scheme_options=options, d_model=D_MODEL,
                         num_heads=HEADS, num_layers=2, attn_impl=impl)
    model = TinyLM(config)
    with torch.no_grad():  # positional parameters larger than the init: positions matter
        for p in model.scheme.parameters():
            p.normal_(std=0.5)
    return model.to(device).eval()


def unsupported_path_is_refused(name, options, impl, device) -> bool:
    """True (after checking the refusal) when the path cannot serve the scheme."""
    if supports(name, impl):
        return False
    with pytest.raises(ValueError, match=impl):
        model = make_model(name, options, impl, device)
        model(torch.zeros(1, T, dtype=torch.long, device=device))
    return True


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name, options", CASES)
def test_equal_rows_give_the_1d_result(device, name, options, impl):
    if unsupported_path_is_refused(name, options, impl, device):
        return
    model = make_model(name, options, impl, device)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 256, (3, T), generator=g).to(device)
    positions = torch.arange(T, device=device) + 5
    with torch.no_grad():
        for batch in (1, 3):  # B = 1 too: a (1, T) bias once gave wrong logits, silently
            shared = model(tokens[:batch], positions)
            rows = model(tokens[:batch], positions.expand(batch, T))
            assert rows.shape == (batch, T, 256)
            torch.testing.assert_close(rows, shared, **tolerance(device))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name, options", CASES)
def test_per_row_positions_give_each_row_alone(device, name, options, impl):
    if unsupported_path_is_refused(name, options, impl, device):
        return
    model = make_model(name, options, impl, device)
    g = torch.Generator().manual_seed(2)
    tokens = torch.randint(0, 256, (3, T), generator=g).to(device)
    positions = per_row_positions(device)
    with torch.no_grad():
        batched = model(tokens, positions)
        for b in range(3):
            alone = model(tokens[b : b + 1], positions[b])
            torch.testing.assert_close(batched[b : b + 1], alone, **tolerance(device))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name, options", CASES)
def test_per_row_positions_with_a_kv_cache(device, name, options, impl):
    """Feeding (B, T) positions in two pieces through a cache gives, per row, what the row
    gives alone through its own cache."""
    if unsupported_path_is_refused(name, options, impl, device):
        return
    model = make_model(name, options, impl, device)
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, 256, (3, T), generator=g).to(device)
    positions, cut = per_row_positions(device), 6

    def in_two_pieces(tok, pos):
        cache = model.new_cache()
        first = model(tok[:, :cut], pos[..., :cut], cache=cache)
        second = model(tok[:, cut:], pos[..., cut:], cache=cache)
        return torch.cat((first, second), dim=1)

    with torch.no_grad():
        batched = in_two_pieces(tokens, positions)
        for b in range(3):
            alone = in_two_pieces(tokens[b : b + 1], positions[b])
            torch.testing.assert_close(batched[b : b + 1], alone, **tolerance(device))


@pytest.mark.parametrize("name, options", BIAS_CASES)
@pytest.mark.parametrize("q_len", [T, 4])
def test_bias_of_batched_positions_is_per_row(device, name, options, q_len):
    """Plug-in point 3 with the attention's (B, 1, T) positions gives (B, H, T_q, T_k),
    row b equal to the bias of row b's 1-D positions; queries are the last T_q keys (as
    with a KV cache)."""
    scheme = build_scheme(name, d_model=D_MODEL, num_heads=HEADS, **options).to(device)
    with torch.no_grad():
        for p in scheme.parameters():
            p.normal_(std=0.5)
    g = torch.Generator().manual_seed(4)
    head_dim = D_MODEL // HEADS
    q = torch.randn(3, HEADS, q_len, head_dim, generator=g).to(device)
    k = torch.randn(3, HEADS, T, head_dim, generator=g).to(device)
    k_pos = per_row_positions(device)
    q_pos = k_pos[:, T - q_len :]
    with torch.no_grad():
        bias = scheme.score_bias(q, k, q_pos[:, None, :], k_pos[:, None, :])
        assert bias.shape == (3, HEADS, q_len, T)
        for b in range(3):
            alone = scheme.score_bias(q[b : b + 1], k[b : b + 1], q_pos[b], k_pos[b])
            assert alone.dim() <= 4
            alone = alone.expand(1, HEADS, q_len, T)
            torch.testing.assert_close(bias[b : b + 1], alone, **tolerance(device))


@pytest.mark.parametrize("name, options, impl", ENCODER_CASES)
def test_encoder_attention_per_row(device, name, options, impl):
    """The bidirectional attention (causal=False) keeps the contract too."""
    scheme = build_scheme(name, d_model=D_MODEL, num_heads=HEADS, **options)
    torch.manual_seed(5)
    layer = MultiHeadAttention(D_MODEL, HEADS, scheme, causal=False).to(device)
    with torch.no_grad():
        for p in scheme.parameters():
            p.normal_(std=0.5)
    x = torch.randn(3, T, D_MODEL, device=device)
    positions = per_row_positions(device)
    with torch.no_grad():
        batched, _ = layer(scheme.embed(x, positions), positions, impl=impl)
        for b in range(3):
            xb = scheme.embed(x[b : b + 1], positions[b])
            alone, _ = layer(xb, positions[b], impl=impl)
            torch.testing.assert_close(batched[b : b + 1], alone, **tolerance(device))


def test_positions_of_another_batch_size_are_refused():
    model = TinyLM(ModelConfig(scheme="alibi", d_model=D_MODEL, num_heads=HEADS))
    tokens = torch.zeros(3, T, dtype=torch.long)
    with pytest.raises(ValueError, match=r"B = 1 or the batch size 3, got \(2, 10\)"):
        model(tokens, torch.arange(T).expand(2, T))


def test_a_bias_that_does_not_fit_the_scores_is_refused():
    class FiveD(PositionalScheme):
        name = "toy-5d"
        hooks = frozenset({"score_bias"})

        def score_bias(self, q, k, q_positions, k_positions):
            return torch.zeros(1, 1, self.num_heads, q.shape[-2], k.shape[-2])

    layer = MultiHeadAttention(D_MODEL, HEADS, FiveD(d_model=D_MODEL, num_heads=HEADS))
    message = r"'toy-5d' returned a score bias of shape \(1, 1, 4, 10, 10\)"
    with pytest.raises(ValueError, match=message):
        layer(torch.randn(1, T, D_MODEL), torch.arange(T), impl="reference")
