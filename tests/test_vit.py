"""The tiny ViT and its 2-D position schemes (posenc.layers.vit)."""

import json

import pytest
import torch

from posenc.layers import vit
from posenc.sinusoidal import sinusoidal_encoding
from posenc.experiments.store import StaleResultsError
from posenc.layers.train import TrainConfig
from posenc.layers.vit import (
    VIT_SCHEMES,
    TinyViT,
    ViTBlock,
    ViTConfig,
    accuracy,
    digits_experiment,
    grid_positions,
    learned_2d_embedding,
    load_digits_split,
    patchify,
    resize_learned_table,
    results_table,
    sinusoidal_2d_encoding,
    train_vit,
    upsample,
)

SMALL = dict(d_model=16, num_heads=2, num_layers=1, mlp_ratio=2)


def _model(scheme, **kw):
    torch.manual_seed(0)
    return TinyViT(ViTConfig(scheme=scheme, **{**SMALL, **kw})).eval()


# --- functional core ------------------------------------------------------------------


def test_patchify_is_row_major_and_keeps_pixels():
    images = torch.randn(3, 1, 8, 6)
    patches, grid = patchify(images, 2)
    assert patches.shape == (3, 12, 4) and grid == (4, 3)
    for r in range(4):
        for c in range(3):
            block = images[:, :, 2 * r : 2 * r + 2, 2 * c : 2 * c + 2].flatten(1)
            torch.testing.assert_close(patches[:, r * 3 + c], block)
    # (B, H, W) is one channel
    torch.testing.assert_close(patchify(images[:, 0], 2)[0], patches)


def test_grid_positions_are_row_column():
    pos = grid_positions(2, 3)
    assert pos.shape == (2, 6) and pos.dtype == torch.int64
    assert pos.tolist() == [[0, 0, 0, 1, 1, 1], [0, 1, 2, 0, 1, 2]]


def test_sinusoidal_2d_is_row_half_then_column_half():
    pos = grid_positions(4, 4)
    enc = sinusoidal_2d_encoding(pos, 16)
    assert enc.shape == (16, 16) and enc.dtype == torch.float32
    torch.testing.assert_close(
        enc[:, :8], sinusoidal_encoding(pos[0], 8, layout="concatenated")
    )
    torch.testing.assert_close(
        enc[:, 8:], sinusoidal_encoding(pos[1], 8, layout="concatenated")
    )
    batched = sinusoidal_2d_encoding(pos[:, None].expand(2, 3, 16), 16)
    assert batched.shape == (3, 16, 16)
    torch.testing.assert_close(batched[1], enc)
    with pytest.raises(ValueError, match="multiple of 4"):
        sinusoidal_2d_encoding(pos, 6)


def test_learned_resize_at_training_size_returns_the_table_exactly():
    table = torch.randn(4, 4, 8)
    assert resize_learned_table(table, 4, 4) is table
    pos = grid_positions(4, 4)
    assert torch.equal(learned_2d_embedding(table, pos, (4, 4)), table.reshape(16, 8))


def test_learned_resize_to_a_larger_grid_interpolates():
    table = torch.randn(4, 4, 8)
    big = resize_learned_table(table, 8, 8)
    assert big.shape == (8, 8, 8)
    # a constant table stays constant; bilinear weights are convex
    const = torch.full((4, 4, 2), 3.0)
    torch.testing.assert_close(
        resize_learned_table(const, 8, 8), torch.full((8, 8, 2), 3.0)
    )
    assert big.min() >= table.min() - 1e-6 and big.max() <= table.max() + 1e-6
    # the corner cell's centre lies outside the old centres: clamped to the old corner
    torch.testing.assert_close(big[0, 0], table[0, 0])


def test_upsample_nearest_repeats_pixels():
    images = torch.arange(4.0).reshape(1, 1, 2, 2)
    up = upsample(images, 2)
    assert up.shape == (1, 1, 4, 4)
    assert up[0, 0].tolist() == [[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 3, 3], [2, 2, 3, 3]]
    assert upsample(images, 2, "bilinear").shape == (1, 1, 4, 4)


# --- the model ------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", VIT_SCHEMES)
@pytest.mark.parametrize("size", [8, 16])
def test_every_scheme_runs_at_the_training_and_a_larger_grid(scheme, size, device):
    model = _model(scheme).to(device)
    images = torch.rand(5, 1, size, size, device=device)
    logits = model(images)
    assert logits.shape == (5, 10) and logits.dtype == torch.float32
    assert torch.isfinite(logits).all()
    # (2, B, T) positions with equal rows give the (2, T) result
    pos = grid_positions(size // 2, size // 2, device=device)
    torch.testing.assert_close(model(images, pos[:, None].expand(2, 5, -1)), logits)
    out, weights = model(images, need_weights=True)
    torch.testing.assert_close(out, logits, atol=1e-5, rtol=1e-5)
    t = (size // 2) ** 2
    assert len(weights) == 1 and weights[0].shape == (5, 2, t, t)


@pytest.mark.parametrize("shift", [(3, 5), (-2, 7), (0.5, 1.25)])
def test_rope_2d_logits_depend_only_on_offsets(shift):
    torch.manual_seed(0)
    block = ViTBlock(ViTConfig(scheme="rope_2d", **SMALL))
    x = torch.randn(2, 16, 16)
    pos = grid_positions(4, 4)
    moved = pos + torch.tensor(shift)[:, None]
    scores = block.attn.scores(x, pos)
    assert scores.shape == (2, 2, 16, 16)
    torch.testing.assert_close(block.attn.scores(x, moved), scores, atol=1e-5, rtol=0)
    # and positions do matter: swapping rows and columns changes the scores
    assert not torch.allclose(block.attn.scores(x, pos.flip(0)), scores, atol=1e-3)


def test_none_is_a_bag_of_patches():
    images = torch.rand(4, 1, 8, 8)
    patches, grid = patchify(images, 2)
    pos = grid_positions(*grid)
    perm = torch.randperm(16, generator=torch.Generator().manual_seed(1))
    for scheme in VIT_SCHEMES:
        model = _model(scheme)
        ref = model.forward_patches(patches, pos, grid)
        # patches and their positions shuffled together: the same image, any scheme
        torch.testing.assert_close(
            model.forward_patches(patches[:, perm], pos[:, perm], grid), ref
        )
        # patches shuffled, positions kept: only "none" cannot tell
        shuffled = model.forward_patches(patches[:, perm], pos, grid)
        if scheme == "none":
            torch.testing.assert_close(shuffled, ref)
        else:
            assert not torch.allclose(shuffled, ref, atol=1e-4)


def test_scaled_positions_work_for_continuous_schemes_only():
    images = torch.rand(2, 1, 16, 16)
    scaled = grid_positions(8, 8) * 0.5
    for scheme in ("sinusoidal_2d", "rope_2d", "none"):
        assert torch.isfinite(_model(scheme)(images, scaled)).all()
    with pytest.raises(TypeError, match="integer positions"):
        _model("learned")(images, scaled)


# --- errors ---------------------------------------------------------------------------


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="divisible by patch_size"):
        patchify(torch.rand(1, 1, 9, 8), 2)
    with pytest.raises(ValueError, match="divisible by patch_size"):
        _model("none")(torch.rand(1, 1, 7, 7))
    with pytest.raises(ValueError, match="scheme must be one of"):
        ViTConfig(scheme="alibi")
    with pytest.raises(ValueError, match="divisible by patch_size"):
        ViTConfig(image_size=9, patch_size=2)
    with pytest.raises(ValueError, match="multiple of 4"):
        ViTConfig(scheme="rope_2d", d_model=24, num_heads=4)
    with pytest.raises(TypeError, match="floating"):
        _model("none")(torch.zeros(1, 1, 8, 8, dtype=torch.long))
    with pytest.raises(ValueError, match="channel"):
        _model("none")(torch.rand(1, 3, 8, 8))
    with pytest.raises(ValueError, match=r"\(2, T\)"):
        _model("rope_2d")(torch.rand(1, 1, 8, 8), torch.arange(16))
    with pytest.raises(ValueError, match="row positions must lie in 0..3"):
        _model("learned")(torch.rand(1, 1, 8, 8), grid_positions(4, 4) + 1)
    with pytest.raises(ValueError, match="scheme must be one of"):
        digits_experiment(["bogus"], use_cache=False)


# --- training and the experiment ------------------------------------------------------


@pytest.fixture
def one_thread():
    """A model this small trains fastest on one thread (and a loaded machine's second
    core would slow it several-fold)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_training_is_deterministic_and_learns(one_thread):
    x_train, y_train, x_test, y_test = load_digits_split()
    assert x_train.shape == (1437, 1, 8, 8) and x_test.shape == (360, 1, 8, 8)
    assert 0.0 <= float(x_train.min()) and float(x_train.max()) <= 1.0
    config = ViTConfig(scheme="rope_2d", **SMALL)
    cfg = TrainConfig(steps=40, batch_size=32, warmup_steps=4, lr=1e-2, seed=1)
    runs = [
        train_vit(config, cfg, x_train, y_train, device="cpu", progress=False)
        for _ in range(2)
    ]
    (m1, l1, _), (m2, l2, _) = runs
    assert l1 == l2
    assert accuracy(m1, x_test, y_test) == accuracy(m2, x_test, y_test)
    assert sum(l1[-10:]) / 10 < l1[0] - 0.05  # the loss falls from ~ln 10


def test_digits_experiment_rows_and_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path))
    # the Makefile sets it for the build, where a missing run must not train
    monkeypatch.delenv("POSENC_REQUIRE_CACHED", raising=False)
    kw = dict(steps=5, batch_size=16, d_model=16, num_heads=2, num_layers=1)
    rows = digits_experiment(("none", "rope_2d"), (0,), device="cpu", **kw)
    assert [(r["scheme"], r["resolution"]) for r in rows] == [
        ("none", "8x8"),
        ("none", "16x16"),
        ("rope_2d", "8x8"),
        ("rope_2d", "16x16"),
        ("rope_2d", "16x16 scaled"),
    ]
    assert [r["grid"] for r in rows] == [4, 8, 4, 8, 8]
    assert rows[-1]["position_scale"] == 0.5
    assert all(0.0 <= r["accuracy"] <= 1.0 and r["n_test"] == 360 for r in rows)
    assert len(list((tmp_path / "vit").glob("*.json"))) == 2
    again = digits_experiment(("none", "rope_2d"), (0,), device="cpu", **kw)
    assert again == rows  # read back from the cache, train_seconds included
    fresh = digits_experiment(("rope_2d",), (0,), device="cpu", use_cache=False, **kw)
    assert [r["accuracy"] for r in fresh] == [r["accuracy"] for r in rows[2:]]
    table = results_table(rows)
    assert "rope_2d" in table and "—" in table and "16x16 scaled" in table


def test_a_missing_run_is_refused_when_the_build_requires_the_cache(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("POSENC_REQUIRE_CACHED", "1")
    with pytest.raises(vit.NotCachedError, match="load_digits_results"):
        vit.digits_experiment(schemes=("none",), seeds=(0,), steps=2, device="cpu")
    assert not (tmp_path / "vit").exists() or not any((tmp_path / "vit").iterdir())


# --- the stored study (the study tier) ------------------------------------------------


def test_the_stored_study_covers_the_grid_with_its_provenance():
    records = vit.load_digits_records()
    runs = vit.digits_study_runs()
    assert len(records) == len(runs) == 12
    files = {p.name for p in vit.digits_results_dir().glob("*.json")}
    assert files == {vit._file_name(r) for r in runs}  # nothing stale left beside
    for run, record in zip(runs, records, strict=True):
        # the key is the hash of the stored configuration, and the current code's
        assert record["key"] == vit._run_key(record["config"]) == run.key()
        assert record["run"] == {
            "scheme": run.config.scheme,
            "seed": run.train_config.seed,
        }
        assert {(r["scheme"], r["seed"]) for r in record["rows"]} == {
            (run.config.scheme, run.train_config.seed)
        }
        assert record["provenance"].keys() >= {
            "posenc", "torch", "python", "cpu", "threads", "date", "train_seconds"
        }
    rows = vit.load_digits_results()
    assert rows == [row for record in records for row in record["rows"]]
    assert {(r["scheme"], r["seed"]) for r in rows} == {
        (s, seed) for s in vit.VIT_DIGITS["schemes"] for seed in vit.VIT_DIGITS["seeds"]
    }
    assert {r["grid"] for r in rows} == {8, 16}  # patch_size 1: one pixel per token


def test_the_chapter_reads_the_stored_study_and_not_the_cache(tmp_path, monkeypatch):
    """What the book build does: an empty run cache, training refused."""
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("POSENC_REQUIRE_CACHED", "1")

    def no_training(*args, **kwargs):
        raise AssertionError("the chapter's results must not be trained")

    monkeypatch.setattr(vit, "_run_one", no_training)
    rows = vit.load_digits_results()
    assert len(rows) == 30 and not any(tmp_path.iterdir())
    # the cache-backed experiment, by contrast, would need a cached run here
    with pytest.raises(vit.NotCachedError):
        digits_experiment(**vit.VIT_DIGITS, device="cpu")


@pytest.mark.parametrize(
    "change, missing",
    [
        (("VIT_DIGITS", {**vit.VIT_DIGITS, "steps": 401}), "12 of 12 runs"),
        (("VIT_DIGITS", {**vit.VIT_DIGITS, "seeds": (0, 1, 2, 3)}), "4 of 16 runs"),
        (("VIT_CACHE_VERSION", vit.VIT_CACHE_VERSION + 1), "12 of 12 runs"),
    ],
)
def test_a_changed_configuration_makes_the_stored_study_stale(
    change, missing, monkeypatch, capsys
):
    monkeypatch.setattr(vit, *change)
    with pytest.raises(StaleResultsError, match=rf"{missing}.*make study"):
        vit.load_digits_results()
    assert vit.main(["--verify"]) == 1
    assert "python -m posenc.vit" in capsys.readouterr().err  # vit.py keeps its text until the ViT part lands
    assert len(vit.load_digits_records(strict=False)) == (12 if "16" in missing else 0)


@pytest.fixture
def tiny_study(tmp_path, monkeypatch):
    """A two-run study of a tiny model in a private folder: seconds to compute."""
    folder = tmp_path / "vit_digits"
    monkeypatch.setattr(vit, "digits_results_dir", lambda: folder)
    monkeypatch.setattr(
        vit,
        "VIT_DIGITS",
        {
            "schemes": ("none", "rope_2d"),
            "seeds": (0,),
            "patch_size": 2,
            "steps": 5,
            "batch_size": 16,
            "d_model": 16,
            "num_heads": 2,
            "num_layers": 1,
        },
    )
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path / "cache"))
    # the Makefile sets it for the build; the study trains anyway (it never reads it)
    monkeypatch.delenv("POSENC_REQUIRE_CACHED", raising=False)
    return folder


def test_the_study_computes_what_is_missing_and_resumes(tiny_study, one_thread):
    with pytest.raises(StaleResultsError, match="2 of 2 runs"):
        vit.load_digits_records()
    assert vit.run_digits_study(workers=0, progress=False)["computed"] == 2
    first = vit.load_digits_records()
    assert [r["run"]["scheme"] for r in first] == ["none", "rope_2d"]
    assert first[1]["provenance"]["threads"] == 1
    assert vit.run_digits_study(workers=0, progress=False)["computed"] == 0
    # a run lost (or made stale) is recomputed alone, to the same accuracies; a file
    # that left the grid is deleted
    (path,) = tiny_study.glob("rope_2d-*.json")
    path.unlink()
    (tiny_study / "none-s9-0123456789abcdef0123.json").write_text('{"key": "old"}')
    with pytest.raises(StaleResultsError, match=r"1 of 2 runs.*rope_2d seed 0"):
        vit.load_digits_records()
    assert vit.run_digits_study(workers=0, progress=False)["computed"] == 1
    again = vit.load_digits_records()
    assert sorted(p.name for p in tiny_study.glob("*.json")) == sorted(
        vit._file_name(r) for r in vit.digits_study_runs()
    )
    accuracies = [[row["accuracy"] for row in r["rows"]] for r in first]
    assert [[row["accuracy"] for row in r["rows"]] for r in again] == accuracies
    assert [r["grid"] for r in vit.load_digits_results()] == [4, 8, 4, 8, 8]


def test_the_check_retrains_a_run_and_catches_a_changed_value(
    tiny_study, one_thread, capsys
):
    vit.run_digits_study(workers=0, progress=False)
    rows = vit.reproduce_digits()  # CHECK_RUNS: rope_2d seed 0
    assert [r["resolution"] for r in rows] == ["8x8", "16x16", "16x16 scaled"]
    assert all(r["ok"] and r["difference"] == 0 for r in rows)
    with pytest.raises(ValueError, match="not a"):
        vit.reproduce_digits(sample=[("learned", 0)])
    (path,) = tiny_study.glob("rope_2d-*.json")
    record = json.loads(path.read_text())
    record["rows"][1]["accuracy"] += 2 * vit.CHECK_TOLERANCE
    path.write_text(json.dumps(record))
    assert vit.main(["--check"]) == 1
    assert "NOT REPRODUCED" in capsys.readouterr().out
