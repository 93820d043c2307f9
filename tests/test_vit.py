"""The tiny ViT (posenc.layers.vit), its 2-D position schemes (posenc.schemes_2d), the digits
experiment (posenc.experiments.vit_digits) and its stored study (posenc.experiments.vit_study)."""

import json
import math

import pytest
import torch

import posenc
from posenc.experiments import vit_digits, vit_study
from posenc.layers.attention import MultiHeadAttention, head_positions
from posenc.layers.model import Block
from posenc.schemes import (
    HOOKS,
    PositionalScheme,
    available_schemes,
    build_scheme,
    get_scheme_class,
    register_scheme,
)
from posenc.schemes_2d import (
    GridScheme,
    grid_positions,
    learned_2d_embedding,
    resize_learned_table,
    sinusoidal_2d_encoding,
)
from posenc.sinusoidal import sinusoidal_encoding
from posenc.experiments.store import StaleResultsError
from posenc.layers.train import TrainConfig
from posenc.layers.vit import VIT_SCHEMES, TinyViT, ViTConfig, patchify
from posenc.experiments.vit_digits import (
    accuracy,
    digits_experiment,
    digits_table,
    load_digits_split,
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


def _scores(block, x, pos):
    """The attention logits q·kᵀ/√d_h of a block's attention before the softmax, q
    and k through the scheme's plug-in point, which gets the positions in the
    attention's inside shape (B′, 1, T, 2): float32 (B, H, T, T)."""
    attn = block.attn
    batch, seq_len, _ = x.shape
    qkv = attn.qkv(x).view(batch, seq_len, 3, attn.num_heads, attn.head_dim)
    q, k, _ = qkv.permute(2, 0, 3, 1, 4)
    pos = head_positions(pos, batch, seq_len, axes=2)  # (2, T) → (1, 1, T, 2)
    q, k = attn.scheme.transform_qk(q, k, pos, pos)
    return (q @ k.transpose(-2, -1)).float() / math.sqrt(attn.head_dim)


@pytest.mark.parametrize("shift", [(3, 5), (-2, 7), (0.5, 1.25)])
def test_rope_2d_logits_depend_only_on_offsets(shift):
    torch.manual_seed(0)
    model = TinyViT(ViTConfig(scheme="rope_2d", **SMALL))
    block = model.blocks[0]
    x = torch.randn(2, 16, 16)
    pos = grid_positions(4, 4)
    moved = pos + torch.tensor(shift)[:, None]
    scores = _scores(block, x, pos)
    assert scores.shape == (2, 2, 16, 16)
    torch.testing.assert_close(_scores(block, x, moved), scores, atol=1e-5, rtol=0)
    # and positions do matter: swapping rows and columns changes the scores
    assert not torch.allclose(_scores(block, x, pos.flip(0)), scores, atol=1e-3)
    # the block's attention (softmax of these scores) sees the same invariance
    _, weights = block.attn(x, pos, need_weights=True)
    _, moved_weights = block.attn(x, moved, need_weights=True)
    torch.testing.assert_close(weights, scores.softmax(-1), atol=1e-5, rtol=0)
    torch.testing.assert_close(moved_weights, weights, atol=1e-5, rtol=0)


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


# --- the 2-D schemes in the registry -----------------------------------------------------


def test_the_2d_schemes_live_in_their_own_namespace():
    assert available_schemes("2d") == VIT_SCHEMES
    # the 1-D namespace (the book's runs, the study grid, the contract tests) is apart
    assert posenc.available_schemes() == available_schemes("1d")
    assert not {"sinusoidal_2d", "rope_2d"} & set(posenc.available_schemes())
    assert get_scheme_class("learned", "2d") is not get_scheme_class("learned")
    with pytest.raises(ValueError, match="unknown positional scheme 'rope_2d'; known"):
        get_scheme_class("rope_2d")
    with pytest.raises(ValueError, match="'rope' in namespace '2d'"):
        build_scheme("rope", d_model=16, num_heads=2, namespace="2d")
    with pytest.raises(ValueError, match="namespace must be one of"):
        available_schemes("3d")
    for name in VIT_SCHEMES:
        cls = get_scheme_class(name, "2d")
        assert issubclass(cls, GridScheme) and cls.position_axes == 2

    class Grid(GridScheme):
        name = "grid_test_only"

    class Line(PositionalScheme):
        name = "line_test_only"

    with pytest.raises(ValueError, match="'1d' holds schemes of 1-axis positions"):
        register_scheme(Grid)
    with pytest.raises(ValueError, match="'2d' holds schemes of 2-axis positions"):
        register_scheme(Line, namespace="2d")
    with pytest.raises(ValueError, match="already registered"):

        @register_scheme(namespace="2d")
        class Clash(GridScheme):
            name = "rope_2d"

    assert "grid_test_only" not in available_schemes("2d") + available_schemes()


@pytest.mark.parametrize("name", VIT_SCHEMES)
def test_declared_hooks_of_the_2d_schemes_are_the_overridden_methods(name):
    cls = get_scheme_class(name, "2d")
    overridden = {
        m for m in HOOKS if getattr(cls, m) is not getattr(PositionalScheme, m)
    }
    assert cls.hooks == overridden
    assert cls.hooks == {
        "none": set(),
        "learned": {"embed"},
        "sinusoidal_2d": {"embed"},
        "rope_2d": {"transform_qk"},
    }[name]


def test_the_2d_schemes_check_their_options():
    with pytest.raises(ValueError, match="multiple of 4"):
        build_scheme("sinusoidal_2d", d_model=18, num_heads=2, namespace="2d")
    with pytest.raises(ValueError, match="head_dim = d_model / num_heads"):
        build_scheme("rope_2d", d_model=24, num_heads=4, namespace="2d")
    with pytest.raises(ValueError, match="grid must be"):
        build_scheme("learned", d_model=8, num_heads=2, namespace="2d", grid=4)
    with pytest.raises(ValueError, match="init_std must be > 0"):
        build_scheme("learned", d_model=8, num_heads=2, namespace="2d", init_std=0)
    with pytest.raises(ValueError, match="base must be finite"):
        build_scheme("rope_2d", d_model=16, num_heads=2, namespace="2d", base=0)
    # the learned table reads its own grid unless told the image's
    torch.manual_seed(0)
    learned = build_scheme("learned", d_model=8, num_heads=2, namespace="2d", grid=(2, 3))
    x, pos = torch.zeros(1, 6, 8), grid_positions(2, 3)
    assert torch.equal(learned.embed(x, pos)[0], learned.table.reshape(6, 8))
    assert torch.equal(learned.embed(x, pos, (2, 3)), learned.embed(x, pos))


def test_tiny_vit_uses_the_package_attention():
    model = _model("rope_2d")
    assert model.scheme.name == "rope_2d" and model.scheme.position_axes == 2
    for block in model.blocks:
        assert type(block) is Block and type(block.attn) is MultiHeadAttention
        assert block.attn.causal is False and block.attn.scheme is model.scheme
    assert not hasattr(posenc.layers.vit, "ViTAttention") and not hasattr(posenc.layers.vit, "ViTBlock")
    # the attention takes (2, T) positions from a "2d" scheme and checks their shape
    with pytest.raises(ValueError, match=r"\(2, T\) or \(2, B, T\)"):
        model.blocks[0].attn(torch.randn(1, 16, 16), torch.arange(16))


def test_a_state_dict_with_the_old_table_name_loads():
    """Before the schemes moved into the registry, the learned table was TinyViT's
    ``pos_table``: such a state_dict still loads (strictly) to the same model."""
    model = _model("learned")
    old = {k: v for k, v in model.state_dict().items() if "scheme.table" not in k}
    old["pos_table"] = model.scheme.table.detach().clone()
    fresh = TinyViT(ViTConfig(scheme="learned", **SMALL)).eval()
    assert not torch.equal(fresh.scheme.table, model.scheme.table)
    fresh.load_state_dict(old)
    images = torch.rand(2, 1, 8, 8)
    assert torch.equal(fresh(images), model(images))
    assert all(b.attn.scheme.table is fresh.scheme.table for b in fresh.blocks)


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
    table = digits_table(rows)
    assert "rope_2d" in table and "—" in table and "16x16 scaled" in table


def test_a_missing_run_is_refused_when_the_build_requires_the_cache(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("POSENC_REQUIRE_CACHED", "1")
    with pytest.raises(vit_digits.NotCachedError, match="load_digits_results"):
        vit_digits.digits_experiment(schemes=("none",), seeds=(0,), steps=2, device="cpu")
    assert not (tmp_path / "vit").exists() or not any((tmp_path / "vit").iterdir())


# --- the stored study (the study tier) ------------------------------------------------


def test_the_stored_study_covers_the_grid_with_its_provenance():
    records = vit_study.load_digits_records()
    runs = vit_study.digits_study_runs()
    assert len(records) == len(runs) == 12
    files = {p.name for p in vit_study.digits_results_dir().glob("*.json")}
    assert files == {vit_study._file_name(r) for r in runs}  # nothing stale left beside
    for run, record in zip(runs, records, strict=True):
        # the key is the hash of the stored configuration, and the current code's
        assert record["key"] == vit_digits._run_key(record["config"]) == run.key()
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
    rows = vit_study.load_digits_results()
    assert rows == [row for record in records for row in record["rows"]]
    assert {(r["scheme"], r["seed"]) for r in rows} == {
        (s, seed) for s in vit_study.VIT_DIGITS["schemes"] for seed in vit_study.VIT_DIGITS["seeds"]
    }
    assert {r["grid"] for r in rows} == {8, 16}  # patch_size 1: one pixel per token


def test_the_chapter_reads_the_stored_study_and_not_the_cache(tmp_path, monkeypatch):
    """What the book build does: an empty run cache, training refused."""
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("POSENC_REQUIRE_CACHED", "1")

    def no_training(*args, **kwargs):
        raise AssertionError("the chapter's results must not be trained")

    monkeypatch.setattr(vit_digits, "train_and_score", no_training)
    monkeypatch.setattr(vit_study, "train_and_score", no_training)
    rows = vit_study.load_digits_results()
    assert len(rows) == 30 and not any(tmp_path.iterdir())
    # the cache-backed experiment, by contrast, would need a cached run here
    with pytest.raises(vit_digits.NotCachedError):
        digits_experiment(**vit_study.VIT_DIGITS, device="cpu")


@pytest.mark.parametrize(
    "change, missing",
    [
        ((vit_study, "VIT_DIGITS", {**vit_study.VIT_DIGITS, "steps": 401}), "12 of 12 runs"),
        (
            (vit_study, "VIT_DIGITS", {**vit_study.VIT_DIGITS, "seeds": (0, 1, 2, 3)}),
            "4 of 16 runs",
        ),
        ((vit_digits, "VIT_CACHE_VERSION", vit_digits.VIT_CACHE_VERSION + 1), "12 of 12 runs"),
    ],
)
def test_a_changed_configuration_makes_the_stored_study_stale(
    change, missing, monkeypatch, capsys
):
    monkeypatch.setattr(*change)
    with pytest.raises(StaleResultsError, match=rf"{missing}.*make study"):
        vit_study.load_digits_results()
    assert vit_study.main(["--verify"]) == 1
    assert "python -m posenc.experiments.vit_study" in capsys.readouterr().err
    assert len(vit_study.load_digits_records(strict=False)) == (12 if "16" in missing else 0)


@pytest.fixture
def tiny_study(tmp_path, monkeypatch):
    """A two-run study of a tiny model in a private folder: seconds to compute."""
    folder = tmp_path / "vit_digits"
    monkeypatch.setattr(vit_study, "digits_results_dir", lambda: folder)
    monkeypatch.setattr(
        vit_study,
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
        vit_study.load_digits_records()
    assert vit_study.run_digits_study(workers=0, progress=False)["computed"] == 2
    first = vit_study.load_digits_records()
    assert [r["run"]["scheme"] for r in first] == ["none", "rope_2d"]
    assert first[1]["provenance"]["threads"] == 1
    assert vit_study.run_digits_study(workers=0, progress=False)["computed"] == 0
    # a run lost (or made stale) is recomputed alone, to the same accuracies; a file
    # that left the grid is deleted
    (path,) = tiny_study.glob("rope_2d-*.json")
    path.unlink()
    (tiny_study / "none-s9-0123456789abcdef0123.json").write_text('{"key": "old"}')
    with pytest.raises(StaleResultsError, match=r"1 of 2 runs.*rope_2d seed 0"):
        vit_study.load_digits_records()
    assert vit_study.run_digits_study(workers=0, progress=False)["computed"] == 1
    again = vit_study.load_digits_records()
    assert sorted(p.name for p in tiny_study.glob("*.json")) == sorted(
        vit_study._file_name(r) for r in vit_study.digits_study_runs()
    )
    accuracies = [[row["accuracy"] for row in r["rows"]] for r in first]
    assert [[row["accuracy"] for row in r["rows"]] for r in again] == accuracies
    assert [r["grid"] for r in vit_study.load_digits_results()] == [4, 8, 4, 8, 8]


def test_the_check_retrains_a_run_and_catches_a_changed_value(
    tiny_study, one_thread, capsys
):
    vit_study.run_digits_study(workers=0, progress=False)
    rows = vit_study.reproduce_digits()  # CHECK_RUNS: rope_2d seed 0
    assert [r["resolution"] for r in rows] == ["8x8", "16x16", "16x16 scaled"]
    assert all(r["ok"] and r["difference"] == 0 for r in rows)
    with pytest.raises(ValueError, match="not a"):
        vit_study.reproduce_digits(sample=[("learned", 0)])
    (path,) = tiny_study.glob("rope_2d-*.json")
    record = json.loads(path.read_text())
    record["rows"][1]["accuracy"] += 2 * vit_study.CHECK_TOLERANCE
    path.write_text(json.dumps(record))
    assert vit_study.main(["--check"]) == 1
    assert "NOT REPRODUCED" in capsys.readouterr().out
