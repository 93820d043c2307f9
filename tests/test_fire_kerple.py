"""FIRE and Kerple (posenc.fire, posenc.kernels): the bias against naive loops of the
papers' equations and of the authors' code, the FlexAttention ``score_mod`` against
``score_bias``, gradients, option errors, a few training steps of the tiny LM, KV-cache
decoding, and their place in the registry (study conditions only)."""

import math

import pytest
import sympy as sp
import torch
from torch.nn.attention.flex_attention import flex_attention

import posenc
from posenc.experiments import book_runs
from posenc.fire import FIRE_EPS, FireScheme
from posenc.kernels import KERPLE_EPS, KerpleScheme
from posenc.layers.attention import attention_reference
from posenc.layers.model import ModelConfig, TinyLM
from posenc.schemes import build_scheme, chapter_schemes

D_MODEL, HEADS = 32, 4
HEAD_DIM = D_MODEL // HEADS

pytestmark = pytest.mark.filterwarnings(
    "ignore:flex_attention called without torch.compile"
)

SCHEMES = [
    pytest.param("kerple", {"kernel": "log"}, id="kerple-log"),
    pytest.param("kerple", {"kernel": "power"}, id="kerple-power"),
    pytest.param("fire", {}, id="fire"),
    pytest.param("fire", {"init_threshold": 6.0, "mlp_width": 8}, id="fire-short-L"),
]


def make(name, options, seed=0):
    torch.manual_seed(seed)
    return build_scheme(name, d_model=D_MODEL, num_heads=HEADS, **options)


# -- the papers' equations, one pair at a time ------------------------------------------


def kerple_naive(scheme, m, n, h):
    """Chi et al. 2022, §4: −r₁ log(1 + r₂|m − n|) or −r₁|m − n|^{r₂}, for n ≤ m."""
    r1, r2 = scheme.r1[h].item(), scheme.r2[h].item()
    d = abs(m - n)
    return -r1 * math.log(1 + r2 * d) if scheme.kernel == "log" else -r1 * d**r2


def fire_naive(scheme, i, j, h):
    """Li et al. 2024, §3: f_θ(ψ(i − j) / ψ(max(L, i))), ψ(x) = log(c x + 1), the
    MLP written out unit by unit."""
    c = abs(scheme.c.item())
    L = abs(scheme.threshold_scale.item() * scheme.init_threshold)

    def psi(x):
        return math.log(c * x + 1)

    x = psi(i - j) / (psi(max(L, i)) + FIRE_EPS)
    first, last = scheme.mlp[0], scheme.mlp[2]
    out = last.bias[h].item()
    for u in range(scheme.mlp_width):
        hidden = max(0.0, first.weight[u, 0].item() * x + first.bias[u].item())
        out += last.weight[h, u].item() * hidden
    return out


def causal_pairs(q_pos, k_pos):
    return [(a, m, b, n) for a, m in enumerate(q_pos) for b, n in enumerate(k_pos) if n <= m]


@torch.no_grad()
@pytest.mark.parametrize("name, options", SCHEMES)
def test_bias_equals_the_papers_equation(name, options):
    scheme = make(name, options).double()
    naive = kerple_naive if name == "kerple" else fire_naive
    q_pos, k_pos = list(range(7, 12)), list(range(12))  # a KV cache: queries 7..11
    q = torch.zeros(1, HEADS, 5, HEAD_DIM, dtype=torch.float64)
    bias = scheme.score_bias(q, q, torch.tensor(q_pos), torch.tensor(k_pos))
    assert bias.shape == (HEADS, 5, 12)
    for a, m, b, n in causal_pairs(q_pos, k_pos):
        for h in range(HEADS):
            assert bias[h, a, b].item() == pytest.approx(naive(scheme, m, n, h), abs=1e-12)


@torch.no_grad()
@pytest.mark.parametrize("kernel", ["log", "power"])
def test_kerple_equals_the_authors_code(kernel):
    """github.com/chijames/KERPLE, megatron/mpu/layers.py, ParallelKerpleLog.forward and
    ParallelKerplePower.forward (pos_emb 'kerple_power_ap_'), re-expressed: diff =
    tril(row − column) of a (T, T) grid; log: −bias_p·log(1 + bias_a·diff); power:
    −bias_a·diff^bias_p; parameters clamped to ≥ eps = 0.01 (bias_p of the power
    kernel also ≤ 2) in place before use. Our r₁ is the log kernel's bias_p and the
    power kernel's bias_a. Every entry is compared, the upper triangle included."""
    scheme = make("kerple", {"kernel": kernel}).double()
    with torch.no_grad():  # values outside the ranges, to exercise the projection
        scheme.r1[0], scheme.r2[1] = -0.5, 3.0 if kernel == "power" else -1.0
    r1 = scheme.r1.detach().clone().clamp(min=0.01)
    r2 = scheme.r2.detach().clone().clamp(min=0.01, max=2 if kernel == "power" else None)
    T = 9
    expected = torch.empty(HEADS, T, T, dtype=torch.float64)
    for h in range(HEADS):
        for row in range(T):
            for col in range(T):
                diff = row - col if col <= row else 0  # torch.tril of row − col
                if kernel == "log":
                    expected[h, row, col] = -r1[h] * math.log(1 + r2[h] * diff)
                else:
                    expected[h, row, col] = -r1[h] * diff ** r2[h].item()
    q = torch.zeros(1, HEADS, T, HEAD_DIM, dtype=torch.float64)
    bias = scheme.score_bias(q, q, torch.arange(T), torch.arange(T))
    assert (bias - expected).abs().max().item() < 1e-12
    assert scheme.r1.min().item() == KERPLE_EPS  # projected in place, as the authors do


def test_kerple_initialisation_follows_the_authors_code():
    """log: r₁ = bias_p ~ 2·U(0, 1), r₂ = bias_a ~ U(0, 1); power: r₁ = bias_a ~ U(0,
    1), r₂ = bias_p ~ 2·U(0, 1) (then clamped to ≥ 0.01)."""
    for kernel, (s1, s2) in {"log": (2.0, 1.0), "power": (1.0, 2.0)}.items():
        torch.manual_seed(5)
        scheme = KerpleScheme(d_model=128, num_heads=64, kernel=kernel)
        torch.manual_seed(5)
        u1, u2 = torch.rand(64) * s1, torch.rand(64) * s2
        torch.testing.assert_close(scheme.r1.detach(), u1.clamp(min=KERPLE_EPS))
        torch.testing.assert_close(scheme.r2.detach(), u2.clamp(min=KERPLE_EPS))


@torch.no_grad()
def test_fire_normalised_input_lies_in_unit_interval_past_the_threshold():
    scheme = make("fire", {"init_threshold": 8.0})
    i, j = torch.arange(200), torch.arange(200)
    x = posenc.fire.fire_inputs(i, j, scheme.c, scheme.threshold())
    causal = j[None, :] <= i[:, None]
    past = causal & (i[:, None] >= 8)
    assert x[past].min() >= 0 and x[past].max() <= 1
    assert x[past].max() > 0.999  # the farthest key of each query reaches 1
    assert x[causal & (i[:, None] < 8)].max() < 1  # short queries are not stretched


# -- FlexAttention ------------------------------------------------------------------------


def eager_flex(q, k, v, score_mod, scale):
    offset = k.shape[-2] - q.shape[-2]

    def mod(score, b, h, q_idx, kv_idx):
        score = score_mod(score, b, h, q_idx, kv_idx)
        return torch.where(q_idx + offset >= kv_idx, score, -float("inf"))

    return flex_attention(q, k, v, score_mod=mod, scale=scale)


@torch.no_grad()
@pytest.mark.parametrize("kind", ["1d", "kv-cache", "per-row", "float"])
@pytest.mark.parametrize("name, options", SCHEMES)
def test_score_mod_equals_score_bias(name, options, kind):
    scheme = make(name, options)
    with torch.no_grad():  # larger than the init, so that the bias matters
        for p in scheme.parameters():
            p.mul_(3.0)
    keys = torch.arange(10) + 5
    if kind == "per-row":
        keys = torch.stack([torch.arange(10), torch.arange(10) + 37, 2 * torch.arange(10)])
        keys = keys[:, None, :]
    elif kind == "float":
        keys = keys * 0.5  # interpolated positions
    queries = keys[..., -3:] if kind == "kv-cache" else keys
    g = torch.Generator().manual_seed(1)
    q = torch.randn(3, HEADS, queries.shape[-1], HEAD_DIM, generator=g)
    k, v = (torch.randn(3, HEADS, 10, HEAD_DIM, generator=g) for _ in range(2))
    scale = 1 / math.sqrt(HEAD_DIM)
    bias = scheme.score_bias(q, k, queries, keys)
    expected = attention_reference(q, k, v, bias=bias, causal=True, scale=scale)[0]
    out = eager_flex(q, k, v, scheme.score_mod(queries, keys, q=q, k=k), scale)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    plain = attention_reference(q, k, v, bias=None, causal=True, scale=scale)[0]
    assert (plain - expected).abs().max() > 1e-3  # the check can fail


# -- gradients, options ---------------------------------------------------------------------


@pytest.mark.parametrize("name, options", SCHEMES)
def test_gradients_reach_every_parameter(name, options):
    scheme = make(name, options)
    q = torch.randn(2, HEADS, 12, HEAD_DIM)
    pos = torch.arange(12)
    bias = scheme.score_bias(q, q, pos, pos)
    weights = torch.softmax(bias + torch.randn_like(bias), dim=-1)
    (weights * torch.randn_like(weights)).sum().backward()
    for label, p in scheme.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), label
        assert p.grad.abs().sum() > 0, label


@pytest.mark.parametrize(
    "name, options, error, text",
    [
        ("kerple", {"kernel": "cubic"}, ValueError, "kernel must be one of 'log', 'power'; got 'cubic'"),
        ("kerple", {"r1": 1.0}, TypeError, "unexpected keyword argument 'r1'"),
        ("fire", {"mlp_width": 0}, ValueError, "mlp_width must be >= 1, got 0"),
        ("fire", {"mlp_width": 2.5}, TypeError, "mlp_width must be an integer"),
        ("fire", {"init_c": -0.1}, ValueError, r"init_c must be finite and > 0, got -0.1"),
        ("fire", {"init_threshold": float("inf")}, ValueError, "init_threshold must be finite and > 0"),
        ("fire", {"init_threshold": "512"}, TypeError, "init_threshold must be a real number"),
    ],
)
def test_bad_options_are_refused(name, options, error, text):
    with pytest.raises(error, match=text):
        build_scheme(name, d_model=D_MODEL, num_heads=HEADS, **options)


# -- in the tiny LM ---------------------------------------------------------------------------


@pytest.mark.parametrize("name, options", SCHEMES)
def test_trains_a_few_steps_and_decodes_with_a_cache(name, options):
    torch.manual_seed(0)
    model = TinyLM(ModelConfig(scheme=name, scheme_options=options))
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3)
    tokens = torch.randint(0, 256, (4, 17))
    losses = []
    for _ in range(4):
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]
    model.eval()
    with torch.no_grad():
        full = model(tokens)
        cache = model.new_cache()
        steps = [model(tokens[:, :9], cache=cache)]
        steps += [model(tokens[:, t : t + 1], cache=cache) for t in range(9, 17)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


# -- the registry --------------------------------------------------------------------------


def test_study_only_schemes_are_registered_but_not_chapter_runs():
    assert {"fire", "kerple"} <= set(posenc.available_schemes())
    assert FireScheme.study_only and KerpleScheme.study_only
    assert not {"fire", "kerple"} & set(chapter_schemes())
    assert chapter_schemes() == tuple(
        n for n in posenc.available_schemes() if n not in ("fire", "kerple")
    )
    assert not {"fire", "kerple"} & {run.scheme for run in book_runs()}


# -- the derivations (posenc.symbolic.kernels) ------------------------------------------


@pytest.mark.parametrize("proof", ["kerple_log_kernel", "kerple_power_kernel", "fire_interpolation"])
def test_symbolic_claims_hold(proof):
    from posenc.symbolic import kernels as symbolic

    claims = getattr(symbolic, proof)()
    assert claims and all(v is sp.true or v is True for v in claims.values()), claims


def test_symbolic_statements_on_numbers():
    """The derived shapes, on the package's own biases: Kerple's log bias 0 at
    distance 0, decreasing and convex (second differences > 0); the power bias convex
    for r₂ < 1 and concave for r₂ > 1."""
    pos = torch.arange(40, dtype=torch.float64)
    for kernel, r2, sign in [("log", 0.7, 1), ("power", 0.5, 1), ("power", 1.5, -1)]:
        r1 = torch.tensor([0.8], dtype=torch.float64)
        b = posenc.kernels.kerple_bias(pos[-1:], pos, r1, torch.tensor([r2], dtype=torch.float64), kernel=kernel)
        row = b[0, 0].flip(0)  # by distance 0, 1, …, 39
        assert row[0] == 0 and (row.diff() < 0).all()
        assert (sign * row.diff().diff() > 0).all()
