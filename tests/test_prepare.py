"""The build's training step: every run a chapter loads is listed, and the step's idea of which runs
are cached agrees with what training writes (so `make` trains each run once, before the notebooks)."""

import pytest
import torch

import posenc
from posenc import experiments
from posenc.book import prepare
from posenc.layers.data import Corpus
from posenc.experiments import BookRun, book_runs
from posenc.layers.train import REQUIRE_CACHED_ENV


@pytest.fixture()
def tiny(monkeypatch, tmp_path):
    """A 'tiny' experiment scale and a private cache, so the real runs' code path runs in seconds."""
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(REQUIRE_CACHED_ENV, raising=False)
    monkeypatch.setitem(experiments.SCALES, "tiny", {
        "model": {"d_model": 16, "num_heads": 2, "num_layers": 1},
        "train": {"seq_len": 16, "batch_size": 4, "steps": 6, "warmup_steps": 2}})
    monkeypatch.setitem(experiments.FINE_TUNE_STEPS, "tiny", 3)
    g = torch.Generator().manual_seed(0)
    text = torch.randint(97, 101, (8_000,), generator=g, dtype=torch.uint8)
    return Corpus("toy", text[:6_000], text[6_000:])


def test_every_chapter_scheme_is_a_book_run():
    trained = {r.scheme for r in book_runs() if r.fine_tune_multiple is None and r.options == "{}"}
    assert trained == set(posenc.chapter_schemes())
    # the study-only schemes (FIRE, Kerple) are registered but not trained for the book
    assert trained < set(posenc.available_schemes())
    labels = [r.label for r in book_runs()]
    assert len(labels) == len(set(labels)), "labels name runs uniquely"


def test_a_fine_tune_starts_from_its_base_run():
    tuned = [r for r in book_runs() if r.fine_tune_multiple]
    assert tuned and all(r.base in book_runs() for r in tuned)
    (base_model, base_train), (model_cfg, train_cfg) = tuned[0].configs()
    assert train_cfg.seq_len == tuned[0].fine_tune_multiple * base_train.seq_len
    assert model_cfg.d_model == base_model.d_model


def test_untrained_runs_agree_with_what_training_caches(tiny):
    base = BookRun.of("rope")
    tuned = BookRun.of("rope", fine_tune_multiple=2, fine_tune_options={"scaling": None}, label="tuned")
    assert prepare.untrained_runs([base, tuned], tiny, "tiny") == [base, tuned]
    tuned.run(tiny, scale="tiny", device="cpu", progress=False)  # trains the base run on the way
    assert prepare.untrained_runs([base, tuned], tiny, "tiny") == []
    assert prepare.run_key(base, tiny, "tiny") != prepare.run_key(tuned, tiny, "tiny")


def test_bad_arguments():
    with pytest.raises(ValueError, match="scale"):
        prepare.prepare(scale="huge")
    with pytest.raises(ValueError, match="workers"):
        prepare.prepare(workers=0)


def test_the_training_step_leaves_the_vit_runs_to_the_study_tier(
    monkeypatch, tmp_path, capsys
):
    """`make prepare` trains the chapters' models only: the tiny ViT's multi-seed
    digits runs are stored in the repository (python -m posenc.experiments.vit_study,
    `make
    study`)."""
    from posenc.experiments import vit_digits, vit_study

    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(prepare, "prepare", lambda **kwargs: {})  # all cached

    def no_vit(*args, **kwargs):
        raise AssertionError("python -m posenc.book.prepare must not run the ViT")

    monkeypatch.setattr(vit_digits, "train_and_score", no_vit)
    monkeypatch.setattr(vit_study, "train_and_score", no_vit)
    monkeypatch.setattr(vit_digits, "digits_experiment", no_vit)
    assert prepare.main([]) == 0
    assert "vit" not in capsys.readouterr().out.lower()
    assert not (tmp_path / "vit").exists()
    assert not hasattr(prepare, "vit_digits") and not hasattr(prepare, "prepare_vit")


def test_every_run_a_chapter_loads_ships_its_weights():
    """A run added to book_runs() must ship its weights too (python -m posenc.book.prepare --ship), so
    that a chapter on a fresh Colab runtime trains nothing."""
    from posenc.layers.data import load_stdlib_corpus
    from posenc.layers.train import SHIPPED_DIR, shipped_path

    corpus = load_stdlib_corpus()
    keys = {prepare.run_key(r, corpus, "small") for r in book_runs()}
    missing = sorted(k for k in keys if not shipped_path(k).exists())
    assert missing == [], f"book runs without shipped weights (run `python -m posenc.book.prepare --ship`): {missing}"
    assert {p.stem for p in SHIPPED_DIR.glob("*.safetensors")} == keys, "shipped weights no run uses"
    total = sum(p.stat().st_size for p in SHIPPED_DIR.iterdir())
    assert total < 40 * 2**20


def test_training_loads_the_shipped_weights_when_nothing_is_cached(monkeypatch, tmp_path):
    from safetensors import safe_open

    from posenc.layers.data import load_stdlib_corpus
    from posenc.experiments import train_scheme
    from posenc.layers.train import shipped_path

    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(REQUIRE_CACHED_ENV, "1")  # training would raise
    result = train_scheme("learned", load_stdlib_corpus(), device="cpu")
    assert result.from_cache and list(tmp_path.iterdir()) == []
    with safe_open(str(shipped_path(result.key)), "pt") as handle:
        meta = handle.metadata()
        stored = {name: handle.get_tensor(name) for name in handle.keys()}
    state = result.model.state_dict()
    assert all(torch.equal(state[name], tensor) for name, tensor in stored.items())
    # the learned table is shared by the blocks: stored once, loaded under every name
    aliases = __import__("json").loads(meta["aliases"])
    assert aliases and all(torch.equal(state[a], state[b]) for a, b in aliases.items())
    assert len(result.losses) == result.train_config.steps
    assert "torch" in __import__("json").loads(meta["provenance"])
