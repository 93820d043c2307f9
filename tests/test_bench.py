import torch

import sys

import pytest

from posenc.experiments.bench import peak_memory, peak_rss


def test_counts_a_known_allocation():
    assert peak_memory(lambda: torch.zeros(1024, 1024)) == 4 * 1024 * 1024


def test_counts_temporaries_alive_together_and_ignores_views():
    x = torch.ones(256, 256)  # exists before: not counted

    def fn():
        a = x * 2          # 256 KiB
        b = a + 1          # another 256 KiB while a is alive
        return (a.T, b.view(-1))  # views add nothing

    assert peak_memory(fn) == 2 * 256 * 256 * 4


def test_freed_temporaries_do_not_accumulate():
    def fn():
        for _ in range(10):
            torch.zeros(128, 128).sum()

    assert peak_memory(fn) < 2 * 128 * 128 * 4


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak_rss reads Linux's /proc")
def test_peak_rss_sees_a_temporary_allocation():
    """A 64 MiB temporary that is written and freed inside fn shows up (within the measure's batching);
    an allocation-free fn does not."""
    size = 64 * 2**20
    peak = peak_rss(lambda: torch.ones(size // 4).sum())
    assert size - 2 * 2**20 <= peak < size + 8 * 2**20  # page counts are updated in batches
    assert peak_rss(lambda: None) < 4 * 2**20


# ---- the benchmarks of "The cost of positions" (python -m posenc.experiments.bench) ---------------------------
# No test here asserts a speed: timings are measured by the command, stored, and only their
# arithmetic (bytes, ratios) and their configuration are checked.

import copy  # noqa: E402
import json  # noqa: E402

from posenc.experiments import bench  # noqa: E402


def test_rope_bytes_counts_one_read_and_one_write_of_q_and_k_plus_the_table():
    b = bench.rope_bytes(1, 32, 4096, 128)
    assert b["qk"] == 2 * 2 * 32 * 4096 * 128 * 4  # q and k, read and written, float32
    assert b["table"] == 2 * 4096 * 64 * 4  # cos and sin, one angle per pair
    assert b["total"] == b["qk"] + b["table"]
    assert bench.rope_bytes(1, 32, 4096, 128, element_size=2)["qk"] == b["qk"] // 2


def test_rope_benchmark_rows_and_ratios():
    rows = bench.rope_benchmark(batch=1, num_heads=2, seq_len=16, head_dim=8, min_run_time=0.01,
                                only=("apply_rope_qk, out=", "transformers (eager)"))
    names = [r["name"] for r in rows]
    assert names == ["copy q, k (floor)", "transformers (eager)", "apply_rope_qk, out="]
    floor = rows[0]
    assert floor["x_floor"] == 1.0 and floor["bytes"] == bench.rope_bytes(1, 2, 16, 8)["total"]
    for r in rows:
        assert r["median_ms"] > 0 and r["runs"] >= 1
        assert r["GB_per_s"] == pytest.approx(r["bytes"] / (r["median_ms"] * 1e-3) / 1e9)
        assert r["x_faster_than_transformers"] == pytest.approx(rows[1]["median_ms"] / r["median_ms"])


def test_every_rope_candidate_rotates_like_apply_rope():
    from posenc.rope import apply_rope

    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 2, 8, 16, generator=g), torch.randn(1, 2, 8, 16, generator=g)
    expected = apply_rope(q, torch.arange(8)), apply_rope(k, torch.arange(8))
    for name, fn in bench.rope_candidates(q, k).items():
        if "floor" in name:
            continue
        got = fn()
        for g_, e in zip(got, expected):
            torch.testing.assert_close(g_, e, atol=1e-6, rtol=1e-6, msg=name)


@pytest.mark.parametrize("scheme", ["rope", "alibi", "learned", "transformer_xl"])
def test_decode_step_equals_the_full_forward(scheme):
    model = bench.decode_model(scheme, max_len=40)
    prompt = torch.randint(0, 256, (1, 12))
    with torch.no_grad():
        step = bench._decode_step(model, prompt, cached=True)
        first, second = step(), step()  # the cache is put back after each step
        full = bench._decode_step(model, prompt, cached=False)()
    torch.testing.assert_close(first[:, -1], full[:, -1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(second, first)


def test_decode_benchmark_rows():
    rows = bench.decode_benchmark(prompt_lens=(8,), schemes=("none", "rope"), min_run_time=0.01,
                                  bandwidth=1e10)
    assert [(r["scheme"], r["cached"]) for r in rows] == [("none", True), ("none", False),
                                                         ("rope", True), ("rope", False)]
    model = bench.decode_model("rope", max_len=9)
    weights = sum(p.numel() * 4 for p in model.parameters())
    kv = 2 * model.config.num_layers * 8 * model.config.d_model * 4
    assert rows[2]["bytes_per_token"] == weights + kv and rows[3]["bytes_per_token"] == weights
    for r in rows:
        assert r["tokens_per_s"] == pytest.approx(1e3 / r["ms_per_token"])
        assert r["floor_ms"] == pytest.approx(r["bytes_per_token"] / 1e10 * 1e3)


@pytest.mark.parametrize("scheme", bench.BIAS_SCHEMES)
def test_bias_paths_agree(scheme, monkeypatch):
    # FlexAttention uncompiled: the same score_mod evaluated exactly; the compiled kernels
    # are compared with the reference in tests/test_flex_bias.py (compiling costs seconds each).
    import posenc.layers.attention
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    monkeypatch.setattr(posenc.layers.flex, "_compiled_flex_functions", lambda: (flex_attention, create_block_mask))
    posenc.layers.attention.flex_block_mask.cache_clear()
    module, q, k, v, pos = bench.bias_inputs(scheme, batch=1, num_heads=2, seq_len=24, head_dim=8)
    plain_module = bench.bias_inputs("none", batch=1, num_heads=2, seq_len=24, head_dim=8)[0]
    with torch.no_grad():  # FlexAttention has no backward pass on the CPU
        ref = bench.bias_attention("reference", module, q, k, v, pos)
        for path in ("sdpa + mask", "flex"):
            torch.testing.assert_close(bench.bias_attention(path, module, q, k, v, pos), ref,
                                       atol=2e-5, rtol=2e-5, msg=f"{scheme} {path}")
        plain = bench.bias_attention("reference", plain_module, q, k, v, pos)
    if scheme != "none":  # the bias changes the output: the comparison above can fail
        assert (plain - ref).abs().max() > 1e-4


def test_bias_memory_model():
    sizes = dict(batch=2, num_heads=4, seq_len=8)
    per = 4 * 8 * 8 * 4
    assert bench.bias_memory_model("alibi", "sdpa + mask", **sizes) == per  # (H, T, T)
    assert bench.bias_memory_model("deberta", "sdpa + mask", **sizes) == 2 * per  # (B, H, T, T)
    assert bench.bias_memory_model("t5", "reference", **sizes) == 2 * 2 * per + per
    assert bench.bias_memory_model("shaw", "flex", **sizes) == 0
    assert bench.bias_memory_model("none", "sdpa + mask", **sizes) == 0


def test_command_prints_the_tables(monkeypatch, capsys, tmp_path):
    config = copy.deepcopy(bench.QUICK_CONFIG)
    config["rope"] = {"batch": 1, "num_heads": 2, "seq_len": 16, "head_dim": 8}
    config["min_run_time"] = 0.01
    monkeypatch.setattr(bench, "QUICK_CONFIG", config)
    out = tmp_path / "run.json"
    assert bench.main(["--quick", "--parts", "rope", "--device", "cpu", "--threads", "1",
                       "--save", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "== rope ==" in printed and "copy q, k (floor)" in printed and "GB_per_s" in printed
    stored = json.loads(out.read_text())
    assert stored["config"] == config and stored["provenance"]["threads"] == 1
    assert {"torch", "transformers", "cpu", "date", "commit"} <= set(stored["provenance"])


# ---- the stored run (make bench) -------------------------------------------------------------------

STORED = bench.load_bench_results() if bench.RESULTS_FILE.exists() else None
needs_stored = pytest.mark.skipif(STORED is None, reason="no stored benchmark run")


def test_the_stored_run_exists_and_matches_the_configuration():
    assert STORED is not None, f"run `make bench` to store {bench.RESULTS_FILE}"
    assert STORED["config"] == bench.BENCH_CONFIG, "stale: the benchmark configuration changed"
    assert {"rope", "bias", "decode"} <= set(STORED)


@needs_stored
def test_the_stored_ratios_follow_from_the_stored_times():
    for part, add in (("rope", bench.add_rope_ratios), ("bias", bench.add_bias_ratios)):
        recomputed = add(copy.deepcopy(STORED[part]))
        for r, s in zip(recomputed, STORED[part]):
            for key in r:
                if isinstance(r[key], float):
                    assert r[key] == pytest.approx(s[key], rel=1e-9), (part, key)
    c = STORED["config"]["rope"]
    assert {r["bytes"] for r in STORED["rope"]} == {bench.rope_bytes(**c)["total"]}
    b = STORED["config"]["bias"]
    for r in STORED["bias"]:
        assert r["model_bytes"] == bench.bias_memory_model(
            r["scheme"], r["path"], batch=b["batch"], num_heads=b["num_heads"], seq_len=r["seq_len"])


@needs_stored
def test_stored_memory_reproduces_at_one_length():
    """Peak memory, unlike time, does not depend on the machine's load: the reference path
    with ALiBi at T = 1024 is measured again and must come back within 20 %."""
    stored = next(r for r in STORED["bias"] if (r["scheme"], r["path"], r["seq_len"]) == ("alibi", "reference", 1024))
    c = STORED["config"]["bias"]
    module, q, k, v, pos = bench.bias_inputs("alibi", batch=c["batch"], num_heads=c["num_heads"], seq_len=1024,
                                             head_dim=c["head_dim"])

    def forward():
        with torch.no_grad():
            return bench.bias_attention("reference", module, q, k, v, pos)

    forward()
    assert peak_rss(forward) == pytest.approx(stored["peak_bytes"], rel=0.2)
