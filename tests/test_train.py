import math

import pytest
import torch

from posenc.layers.data import Corpus
from posenc.layers.model import ModelConfig
from posenc.layers.train import (
    REQUIRE_CACHED_ENV,
    TrainConfig,
    cache_key,
    evaluate,
    perplexity_by_length,
    train,
)

SMALL = ModelConfig(scheme="sinusoidal", d_model=16, num_heads=2, num_layers=1)
QUICK = TrainConfig(seq_len=16, batch_size=4, steps=30, warmup_steps=5)


@pytest.fixture()
def corpus():
    g = torch.Generator().manual_seed(0)
    text = torch.randint(97, 101, (20_000,), generator=g, dtype=torch.uint8)  # a 4-letter alphabet
    return Corpus("toy", text[:16_000], text[16_000:])


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(REQUIRE_CACHED_ENV, raising=False)  # the Makefile sets it for the build


def test_training_learns_and_is_deterministic_on_cpu(corpus):
    a = train(SMALL, QUICK, corpus, device="cpu", use_cache=False, progress=False)
    b = train(SMALL, QUICK, corpus, device="cpu", use_cache=False, progress=False)
    assert a.losses == b.losses
    assert sum(a.losses[-5:]) / 5 < a.losses[0] - 1.0  # from ~ln 256 towards ln 4
    for (na, pa), (nb, pb) in zip(a.model.state_dict().items(), b.model.state_dict().items()):
        assert na == nb and torch.equal(pa, pb)


def test_cache_round_trip(corpus, tmp_path):
    first = train(SMALL, QUICK, corpus, device="cpu", progress=False)
    second = train(SMALL, QUICK, corpus, device="cpu", progress=False)
    assert not first.from_cache and second.from_cache and first.key == second.key
    assert second.losses == first.losses and second.seconds == first.seconds
    assert not second.model.training
    for p, q in zip(first.model.parameters(), second.model.parameters()):
        assert torch.equal(p, q)
    assert (tmp_path / "cache" / f"{first.key}.pt").exists()


def test_cache_key_sees_every_part_of_the_config(corpus):
    key = cache_key(SMALL, QUICK, corpus)
    assert key == cache_key(ModelConfig(**SMALL.to_dict()), TrainConfig(**vars(QUICK)), corpus)
    assert key != cache_key(ModelConfig(**{**SMALL.to_dict(), "scheme_options": {"base": 100.0}}), QUICK, corpus)
    assert key != cache_key(SMALL, TrainConfig(**{**vars(QUICK), "seed": 1}), corpus)
    other = Corpus("toy", corpus.train.flip(0), corpus.val)
    assert key != cache_key(SMALL, QUICK, other)


def test_evaluate_reports_perplexity_at_any_length(corpus):
    model = train(SMALL, QUICK, corpus, device="cpu", use_cache=False, progress=False).model
    result = evaluate(model, corpus.val, 32, max_tokens=1024)
    assert result.tokens == 1024 and math.isclose(result.perplexity, math.exp(result.loss))
    by_len = perplexity_by_length(model, corpus.val, [16, 32, 64], max_tokens=1024)
    assert set(by_len) == {16, 32, 64} and all(1.0 < v < 256.0 for v in by_len.values())


def test_bad_train_config():
    with pytest.raises(ValueError, match="steps must be >= 1"):
        TrainConfig(steps=0)
    with pytest.raises(ValueError, match="lr must be finite and > 0"):
        TrainConfig(lr=-1.0)


def test_loss_by_position_averages_token_losses(corpus):
    from posenc.layers.train import loss_by_position, token_losses

    model = train(SMALL, QUICK, corpus, device="cpu", use_cache=False, progress=False).model
    per_token = token_losses(model, corpus.val, 32, max_tokens=1024)
    assert per_token.shape == (32, 32)
    by_pos = loss_by_position(model, corpus.val, 32, max_tokens=1024)
    torch.testing.assert_close(by_pos, per_token.mean(0))
    assert math.isclose(evaluate(model, corpus.val, 32, max_tokens=1024).loss, float(per_token.double().mean()), rel_tol=1e-6)


def test_perplexity_table_marks_lengths_a_scheme_cannot_run():
    from posenc.experiments import perplexity_table

    text = perplexity_table({"a": {64: 7.0, 128: 8.5}, "b": {64: 6.0}}, train_len=64, extra={"time": {"a": "3 s"}})
    assert text.splitlines() == [
        "| scheme | T = 64 (1×) | T = 128 (2×) | time |",
        "|---|---|---|---|",
        "| a | 7.00 | 8.50 | 3 s |",
        "| b | 6.00 | cannot run |  |",
    ]


def test_fine_tune_starts_from_the_given_weights_and_has_its_own_key(corpus):
    rope = ModelConfig(scheme="rope", d_model=16, num_heads=2, num_layers=1)
    base = train(rope, QUICK, corpus, device="cpu", progress=False)
    scaled = ModelConfig(scheme="rope", d_model=16, num_heads=2, num_layers=1,
                         scheme_options={"scaling": {"rope_type": "linear", "factor": 2.0}})
    one_step = TrainConfig(**{**vars(QUICK), "seq_len": 32, "batch_size": 2, "steps": 1, "warmup_steps": 1,
                              "lr": 1e-9})
    tuned = train(scaled, one_step, corpus, device="cpu", progress=False, init=base)
    fresh = train(scaled, one_step, corpus, device="cpu", progress=False)
    for p, q, r in zip(base.model.parameters(), tuned.model.parameters(), fresh.model.parameters()):
        torch.testing.assert_close(q, p, atol=1e-6, rtol=0)  # one tiny step away from the initial weights
        assert not torch.allclose(r, p)  # a fresh model is not
    assert tuned.key != fresh.key == cache_key(scaled, one_step, corpus)
    assert tuned.key == cache_key(scaled, one_step, corpus, init_key=base.key)
    assert tuned.model.scheme.scaling == {"rope_type": "linear", "factor": 2.0}


def test_with_scheme_options_keeps_the_weights():
    from posenc.layers.model import TinyLM

    model = TinyLM(ModelConfig(scheme="rope", d_model=16, num_heads=2, num_layers=1))
    other = model.with_scheme_options(layout="interleaved", scaling={"rope_type": "ntk", "factor": 4.0})
    assert other.scheme.layout == "interleaved" and other.scheme.scaling["rope_type"] == "ntk"
    assert model.scheme.layout == "half"
    for p, q in zip(model.parameters(), other.parameters()):
        assert torch.equal(p, q)
    with pytest.raises(ValueError, match="layout"):
        model.with_scheme_options(layout="sideways")


def test_cache_key_resolves_scheme_defaults(corpus, monkeypatch):
    """An option spelled out at its default shares the cached run; a changed default does not load
    weights trained under the old one."""
    from posenc.learned import LearnedScheme

    learned = ModelConfig(scheme="learned", d_model=16, num_heads=2, num_layers=1)
    key = cache_key(learned, QUICK, corpus)
    explicit = ModelConfig(scheme="learned", d_model=16, num_heads=2, num_layers=1,
                           scheme_options={"max_len": 1024, "init_std": 0.02})
    assert cache_key(explicit, QUICK, corpus) == key
    monkeypatch.setattr(LearnedScheme.__init__, "__kwdefaults__", {**LearnedScheme.__init__.__kwdefaults__, "init_std": 1.0})
    assert cache_key(learned, QUICK, corpus) != key


def test_require_cached_loads_or_refuses_to_train(corpus, monkeypatch):
    monkeypatch.setenv(REQUIRE_CACHED_ENV, "1")
    with pytest.raises(RuntimeError, match="book_runs"):
        train(SMALL, QUICK, corpus, device="cpu", progress=False)
    monkeypatch.delenv(REQUIRE_CACHED_ENV)
    first = train(SMALL, QUICK, corpus, device="cpu", progress=False)
    monkeypatch.setenv(REQUIRE_CACHED_ENV, "1")
    again = train(SMALL, QUICK, corpus, device="cpu", progress=False)
    assert again.from_cache and again.key == first.key


# --- randomized positions (Ruoss et al., 2023) ----------------------------------------


def test_random_positions_are_a_sorted_uniform_subset_of_the_range():
    from posenc.layers.data import random_positions

    g = torch.Generator().manual_seed(0)
    T, N, draws = 8, 40, 4000
    counts = torch.zeros(N)
    for _ in range(draws):
        p = random_positions(T, N, generator=g)
        assert p.dtype == torch.int64 and p.shape == (T,)
        assert bool((p[1:] > p[:-1]).all()), "strictly increasing: sorted and distinct"
        assert 0 <= int(p.min()) and int(p.max()) < N
        counts[p] += 1
    # a uniform T-subset holds each position with probability T/N: every count is
    # Binomial(draws, T/N), mean 800, sd 25.3; 5 sd either side
    expected, sd = draws * T / N, math.sqrt(draws * T / N * (1 - T / N))
    assert (counts - expected).abs().max() < 5 * sd, counts
    # the range's ends are reached, and a full range gives 0 … T − 1
    assert counts[0] > 0 and counts[-1] > 0
    assert random_positions(5, 5, generator=g).tolist() == [0, 1, 2, 3, 4]


def test_random_positions_hold_every_pair_equally_often():
    """A uniform T-subset holds two given positions together with probability
    T(T − 1)/(N(N − 1)); a sampler of evenly spaced positions at a random offset has
    the right single counts (above) and fails here."""
    from posenc.layers.data import random_positions

    g = torch.Generator().manual_seed(1)
    T, N, draws = 8, 40, 4000
    together = torch.zeros(N, N)
    for _ in range(draws):
        p = random_positions(T, N, generator=g)
        together[p[:, None], p[None, :]] += 1
    pairs = together[torch.triu_indices(N, N, offset=1).unbind()]
    rate = T * (T - 1) / (N * (N - 1))
    expected, sd = draws * rate, math.sqrt(draws * rate * (1 - rate))
    assert (pairs - expected).abs().max() < 5.5 * sd, (pairs.min(), pairs.max(), expected)


def test_random_positions_reject_bad_sizes():
    from posenc.layers.data import random_positions

    with pytest.raises(ValueError, match=r"max_position must lie in seq_len \(9\) … 16777216 .*got 8"):
        random_positions(9, 8)
    with pytest.raises(ValueError, match=r"max_position must lie in .*got 16777217"):
        random_positions(9, 2**24 + 1)
    with pytest.raises(TypeError, match="seq_len must be an integer"):
        random_positions(2.0, 8)
    with pytest.raises(ValueError, match="seq_len must be >= 1"):
        random_positions(0, 8)
    with pytest.raises(ValueError, match=r"random_positions must be None or lie in seq_len \(16\) … 16777216, got 8"):
        TrainConfig(seq_len=16, random_positions=8)
    with pytest.raises(ValueError, match=r"random_positions must be None or lie in seq_len \(16\) .*got 0"):
        TrainConfig(seq_len=16, random_positions=0)
    with pytest.raises(TypeError, match="random_positions must be an integer"):
        TrainConfig(seq_len=16, random_positions=32.0)


def test_random_positions_leave_existing_keys_alone_and_enter_the_key_when_set(corpus):
    from dataclasses import replace

    assert "random_positions" not in QUICK.to_dict()
    base = cache_key(SMALL, QUICK, corpus)
    # the key this configuration had before the option existed (commit f0d9175)
    assert base == "sinusoidal-51958830b4bc38394631"
    randomized = replace(QUICK, random_positions=64)
    assert randomized.to_dict()["random_positions"] == 64
    assert cache_key(SMALL, randomized, corpus) not in (base, cache_key(SMALL, replace(QUICK, random_positions=128), corpus))


def test_training_feeds_the_drawn_positions_to_the_model(corpus, monkeypatch):
    """With random_positions set, every step's forward pass gets a fresh sorted draw from
    the range (not 0 … T − 1); without it, the model is called without positions."""
    from dataclasses import replace

    from posenc.layers.model import TinyLM

    seen = []
    forward = TinyLM.forward

    def recording(self, tokens, positions=None, **kw):
        seen.append(positions)
        return forward(self, tokens, positions, **kw)

    monkeypatch.setattr(TinyLM, "forward", recording)
    cfg = replace(QUICK, steps=6, random_positions=200)
    model_cfg = ModelConfig(scheme="rope", d_model=16, num_heads=2, num_layers=1)
    train(model_cfg, cfg, corpus, device="cpu", progress=False, use_cache=False)
    assert len(seen) == 6
    for p in seen:
        assert p.shape == (16,) and bool((p[1:] > p[:-1]).all()) and int(p.max()) < 200
    assert int(max(p.max() for p in seen)) >= 16, "positions beyond the training length"
    assert len({tuple(p.tolist()) for p in seen}) == 6, "a new draw every step"
    batches = []
    monkeypatch.setattr(TinyLM, "forward", lambda self, tokens, positions=None, **kw: (
        batches.append(tokens.clone()), forward(self, tokens, positions, **kw))[1])
    for option in (None, 200):
        train(model_cfg, replace(QUICK, steps=3, random_positions=option), corpus, device="cpu",
              progress=False, use_cache=False)
    assert all(torch.equal(a, b) for a, b in zip(batches[:3], batches[3:])), \
        "the positions' own generator leaves the batches of the seed unchanged"


def test_random_positions_fail_early_where_they_cannot_run(corpus):
    from dataclasses import replace

    from posenc.layers.train import fit

    learned = ModelConfig(scheme="learned", d_model=16, num_heads=2, num_layers=1, scheme_options={"max_len": 64})
    with pytest.raises(ValueError, match=r"random_positions \(200\) exceeds the 64 positions scheme 'learned' can take"):
        train(learned, replace(QUICK, random_positions=200), corpus, device="cpu", progress=False)
    model = torch.nn.Linear(1, 1)
    with pytest.raises(ValueError, match="random_positions=200 is set but next_batch returned no positions"):
        fit(model, replace(QUICK, random_positions=200), lambda: (torch.zeros(1, 1), torch.zeros(1, 1)), progress=False)


# --- DroPE (Gelberg et al., 2026) -----------------------------------------------------


def test_drope_drops_rope_as_the_authors_code_does_and_recalibrates(corpus):
    """The authors' NoPEAttention runs RoPE with cos = 1 and sin = 0: RoPE at angle 0,
    which a RoPE model computes when every position is 0. posenc's "none" scheme with
    the RoPE model's weights gives those logits; drope starts from them and its
    recalibration lowers the validation loss of the dropped model."""
    from dataclasses import replace

    from posenc.layers.model import TinyLM
    from posenc.layers.drope import drope

    rope_cfg = ModelConfig(scheme="rope", d_model=16, num_heads=2, num_layers=1)
    source = train(rope_cfg, QUICK, corpus, device="cpu", progress=False)
    x = corpus.val[:32].long()[None]
    dropped = TinyLM(replace(rope_cfg, scheme="none")).eval()
    dropped.load_state_dict(source.model.state_dict())
    with torch.no_grad():
        identity_rotation = source.model(x, torch.zeros(32, dtype=torch.long))
        torch.testing.assert_close(dropped(x), identity_rotation, rtol=0, atol=1e-5)
        assert not torch.allclose(source.model(x), identity_rotation, atol=1e-3), "RoPE acted"
    recalibration = replace(QUICK, steps=40, seed=1)
    result = drope(source, recalibration, corpus, device="cpu", progress=False)
    assert result.model.config.scheme == "none" and result.model.config.d_model == 16
    assert result.key not in (source.key, cache_key(replace(rope_cfg, scheme="none"), recalibration, corpus))
    before = evaluate(dropped, corpus.val, 16, max_tokens=2048).loss
    after = evaluate(result.model, corpus.val, 16, max_tokens=2048).loss
    assert after < before, (before, after)
    # it starts from the source's weights: a recalibration that barely moves them
    # leaves them where the RoPE model had them
    still = drope(source, replace(QUICK, steps=1, warmup_steps=1, lr=1e-12), corpus,
                  device="cpu", progress=False, use_cache=False)
    for name, weight in source.model.state_dict().items():
        torch.testing.assert_close(still.model.state_dict()[name], weight, rtol=0, atol=1e-6)


def test_drope_refuses_an_encoding_with_weights_or_a_layer_pattern(corpus):
    from posenc.layers.drope import drope

    learned = train(ModelConfig(scheme="learned", d_model=16, num_heads=2, num_layers=1,
                                scheme_options={"max_len": 64}), replace_steps(QUICK, 2), corpus,
                    device="cpu", progress=False)
    with pytest.raises(ValueError, match="scheme 'learned' has its own parameters"):
        drope(learned, QUICK, corpus, device="cpu", progress=False)
    pattern = ModelConfig(scheme="rope", d_model=16, num_heads=2, num_layers=2,
                          layers=[{}, {"scheme": "none"}])
    patterned = train(pattern, replace_steps(QUICK, 2), corpus, device="cpu", progress=False)
    with pytest.raises(ValueError, match=r"drope takes a model without ModelConfig.layers; got layers=\[\{\}, \{'scheme': 'none'\}\]"):
        drope(patterned, QUICK, corpus, device="cpu", progress=False)
    nope = train(ModelConfig(scheme="none", d_model=16, num_heads=2, num_layers=1), replace_steps(QUICK, 2),
                 corpus, device="cpu", progress=False)
    with pytest.raises(ValueError, match="no positional encoding to drop"):
        drope(nope, QUICK, corpus, device="cpu", progress=False)


def replace_steps(cfg, steps):
    from dataclasses import replace

    return replace(cfg, steps=steps, warmup_steps=1)
