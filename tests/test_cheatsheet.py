"""book/cheatsheet.md states real values; each is checked here against the package, the config
classes of transformers 5 and the stored SmolLM2 runs, so that the page cannot drift.

Every test names the exact text it checks on the page (``on_page``) and then verifies the fact
behind it: change the page's value or the code's behaviour, and a test fails.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "book" / "cheatsheet.md").read_text()
TEXT = re.sub(r"\s+", " ", PAGE)

transformers = pytest.importorskip("transformers")


def on_page(*snippets: str) -> None:
    for snippet in snippets:
        assert re.sub(r"\s+", " ", snippet) in TEXT, f"the cheat-sheet no longer says: {snippet!r}"


def config(cls, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return getattr(transformers, cls)(**kwargs)


def test_every_row_links_a_section_and_is_in_the_index():
    rows = re.findall(r"^\((cs-[\w-]+)\)=\n## ", PAGE, flags=re.M)
    assert len(rows) >= 9
    for label in rows:
        assert f"{{ref}}`{label}`" in PAGE, f"{label} is missing from the list of symptoms"
    sections = re.split(r"^\(cs-[\w-]+\)=\n", PAGE, flags=re.M)[1:]
    for section in sections:
        assert re.search(r"\{ref\}`(?!cs-)[\w-]+`", section), f"a row links no section: {section[:60]!r}"
        for part in ("**Symptom.**", "**Cause.**", "**Fix.**"):
            assert part in section, f"{part} missing in {section[:60]!r}"


def test_past_the_context_smollm2_values_are_the_stored_runs():
    from posenc.experiments.pretrained_study import load_real_model_results, range_perplexity

    df = load_real_model_results()
    L = 8192

    def ppl(text, method, start, stop):
        return range_perplexity(df, text=text, method=method, start=start, stop=stop)

    values = {
        "10.27": ppl("prose", "none", 0, L), "75.94": ppl("prose", "none", L, 2 * L),
        "9.66": ppl("prose", "yarn", L, 2 * L), "31.26": ppl("prose", "linear", L, 2 * L),
        "61.69": ppl("code", "none", L, 2 * L), "5.56": ppl("code", "yarn", L, 2 * L),
        "20.52": ppl("code", "linear", L, 2 * L),
    }
    for shown, value in values.items():
        assert f"{value:.2f}" == shown
    on_page("perplexity 10.27 on its first 8,192 positions and 75.94 on the next 8,192",
            "the same positions score 9.66, and linear interpolation (`\"rope_type\": \"linear\"`, PI) 31.26",
            "On Python code the next 8,192 positions score 61.69 unscaled, 5.56 with YaRN and 20.52 with PI")
    # the model of those runs: SmolLM2-135M-Instruct, read from a Q4_1 GGUF file
    from posenc.layers.pretrained.wheels import MODELS

    assert MODELS["smollm2"].gguf_file == "SmolLM2-135M-Instruct.Q4_1.gguf"
    on_page("SmolLM2-135M-Instruct (a 4-bit Q4_1 GGUF file, a context of 8,192 tokens)")
    # the remapping alternative: SelfExtend's stored runs and settings (posenc.experiments.remap_study)
    from posenc.experiments import remap_study

    remapped = remap_study.extension_table()
    assert f"{remapped.loc['self_extend', ('prose', '[L, 2L)')]:.2f}" == "9.45"
    assert f"{remapped.loc['self_extend', ('code', '[L, 2L)')]:.2f}" == "5.37"
    settings = remap_study.attention_methods(L)["self_extend"]
    assert (settings["group_size"], settings["window_size"]) == (4, 2048)
    # the stored seconds time a whole forward pass of the model with its losses
    # (remap_study.execute around pretrained.token_losses), on the device each record names
    relative, devices = remap_study.relative_time()
    assert f"{relative['self_extend']:.1f}" == "1.6"
    assert devices == {next(iter(devices))} and "NVIDIA H200" in next(iter(devices))
    on_page("SelfExtend (`group_size` 4, `window_size` 2048, no training) scores 9.45 on prose and 5.37 on code",
            "A whole forward pass with its losses then took about 1.6 times as long as the unscaled model's, "
            "timed on one NVIDIA H200")
    # inside the context: PI triples perplexity, the others cost at most 9 %
    inside = {m: ppl("prose", m, 0, L) / ppl("prose", "none", 0, L) for m in ("linear", "yarn", "ntk", "dynamic", "llama3")}
    assert f"{inside['linear']:.1f}" == "3.0"
    assert max(abs(v - 1) for m, v in inside.items() if m != "linear") <= 0.09
    on_page("multiplies perplexity by 3.0 on prose", "cost at most 9 %")
    # the factors they ran at: the static rules at s = 2; dynamic, in one pass of 2L tokens, at s' = 3
    from posenc.experiments.pretrained_study import FACTOR, methods
    from posenc.scaling import rope_inv_freq

    dynamic = methods(L)["dynamic"]
    s_eff = FACTOR * (2 * L) / L - (FACTOR - 1)
    assert FACTOR == 2 and s_eff == 3
    torch.testing.assert_close(rope_inv_freq(64, 1e5, dynamic, seq_len=2 * L)[0],
                               rope_inv_freq(64, 1e5, {"rope_type": "ntk", "factor": s_eff})[0])
    on_page("The static rules ran at $s = 2$; dynamic scaling, read in one pass of 16,384 tokens, "
            "ran at its larger effective factor $s' = 3$")


def test_rope_types_are_transformers_and_ntk_is_posencs_own():
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from posenc.rope_config import TRANSFORMERS_ROPE_TYPES
    from posenc.scaling import ROPE_TYPES

    assert set(ROPE_INIT_FUNCTIONS) == {"linear", "dynamic", "yarn", "llama3", "longrope", "proportional"}
    assert "ntk" in ROPE_TYPES and "ntk" not in ROPE_INIT_FUNCTIONS and "ntk" not in TRANSFORMERS_ROPE_TYPES
    on_page('transformers 5 knows `"linear"` (position interpolation), `"dynamic"`', '`"yarn"`, `"llama3"`, `"longrope"` and `"proportional"`',
            'The static `"ntk"` type used in this book is `posenc`\'s own name')


def test_original_max_position_embeddings(caplog):
    from transformers.utils import logging as hf_logging

    c = config("LlamaConfig", max_position_embeddings=131072, rope_parameters={
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
    p = c.rope_parameters
    assert p["factor"] == 8.0 and p["original_max_position_embeddings"] == 8192
    # Llama 3.1's factor is not the ratio of the contexts: 131072 / 8192 = 16
    assert c.max_position_embeddings // p["original_max_position_embeddings"] == 16
    on_page("Llama 3.1: `factor` 8.0, `original_max_position_embeddings` 8192, `max_position_embeddings` 131072",
            "its `factor` is not the ratio of the two contexts (16)")
    # YaRN warns when factor and the two contexts disagree
    hf_logging.enable_propagation()
    try:
        with caplog.at_level("WARNING"):
            config("LlamaConfig", max_position_embeddings=2048, rope_parameters={
                "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192, "rope_theta": 1e4})
    finally:
        hf_logging.disable_propagation()
    assert "does not match the ratio" in caplog.text
    on_page("transformers warns that the explicit `factor` of `\"yarn\"` does not match")
    # transformers' _compute_yarn_parameters: the ramp from original_max_position_embeddings, the
    # attention factor from factor (max_position_embeddings changes neither)
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    def yarn(factor, original, longest):
        c = config("LlamaConfig", head_dim=64, hidden_size=256, num_attention_heads=4, max_position_embeddings=longest,
                   rope_parameters={"rope_type": "yarn", "factor": factor, "rope_theta": 1e4,
                                    "original_max_position_embeddings": original})
        return ROPE_INIT_FUNCTIONS["yarn"](c, "cpu")

    (inv, att), (inv_long, att_long) = yarn(4.0, 2048, 8192), yarn(4.0, 2048, 65536)
    assert inv.equal(inv_long) and att == att_long  # max_position_embeddings: neither
    inv_orig, att_orig = yarn(4.0, 4096, 8192)
    assert not inv_orig.equal(inv) and att_orig == att  # original: the ramp only
    assert yarn(8.0, 2048, 8192)[1] != att  # factor: the attention factor
    on_page("YaRN sets its ramp from `original_max_position_embeddings` and its attention factor from\n`factor` "
            "(transformers 5.23.0, `_compute_yarn_parameters` in `modeling_rope_utils.py`)")


def test_llama3_low_and_high_freq_factors_select_by_wavelength():
    import math

    from posenc.scaling import rope_inv_freq

    head_dim, base = 128, 500000.0
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
    plain, _ = rope_inv_freq(head_dim, base)
    scaled, _ = rope_inv_freq(head_dim, base, scaling)
    wavelength = 2 * math.pi / plain
    kept, slowed = wavelength < 8192 / 4, wavelength > 8192 / 1
    assert kept.any() and slowed.any() and (~(kept | slowed)).any()
    torch.testing.assert_close(scaled[kept], plain[kept])
    torch.testing.assert_close(scaled[slowed], plain[slowed] / 8)
    between = ~(kept | slowed)
    assert ((scaled[between] < plain[between]) & (scaled[between] > plain[between] / 8)).all()
    on_page("pairs with $\\lambda_i < 8192 / 4 = 2048$ keep their frequency",
            "pairs with $\\lambda_i > 8192 / 1 = 8192$ are slowed 8 times")


def test_layouts_and_the_gguf_permutation():
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    from posenc.layout import pair_permutation

    num_heads, head_dim, d = 2, 8, 16
    w = torch.randn(num_heads * head_dim, d)
    # posenc: half-layout rows are the interleaved rows permuted within each head
    perm = pair_permutation(head_dim)
    interleaved = torch.cat([w[h * head_dim:(h + 1) * head_dim][perm.argsort()] for h in range(num_heads)])
    hf = LlamaTensorProcessor.__new__(LlamaTensorProcessor)
    back = torch.as_tensor(hf._reverse_permute_weights(interleaved.numpy(), num_heads, num_heads))
    torch.testing.assert_close(back, w)  # transformers' GGUF loader undoes exactly that permutation
    on_page('pair features $(2i, 2i + 1)$ ("interleaved")', 'pair $(i, i + d/2)$ ("half", `rotate_half`)',
            "transformers' GGUF loader permutes them back")


def test_bf16_rounds_positions():
    assert torch.tensor(1081.0).bfloat16().item() == 1080.0
    assert torch.tensor(257.0).bfloat16().item() != 257.0 and torch.tensor(256.0).bfloat16().item() == 256.0
    spacing = {torch.tensor(float(p)).bfloat16().item() for p in range(1024, 2048)}
    assert all(v % 8 == 0 for v in spacing)
    assert torch.finfo(torch.bfloat16).bits - torch.finfo(torch.bfloat16).bits + 8 == 8
    on_page("between 1024 and 2048 positions are rounded to multiples of 8 (1081 becomes 1080)",
            "above 256 not every integer is representable")


def test_partial_rotary_factor_two_meanings():
    from posenc.rope_config import rope_inv_freq_from_config

    neox = config("GPTNeoXConfig")
    # Phi-2's values, from the config.json of microsoft/phi-2 on the Hugging Face Hub; transformers'
    # PhiConfig documents microsoft/phi-1 and defaults to its 0.5
    assert config("PhiConfig").rope_parameters["partial_rotary_factor"] == 0.5
    phi = config("PhiConfig", hidden_size=2560, num_attention_heads=32, partial_rotary_factor=0.4)
    assert neox.rope_parameters["partial_rotary_factor"] == 0.25
    assert phi.rope_parameters["partial_rotary_factor"] == 0.4
    assert phi.hidden_size // phi.num_attention_heads == 80 and int(80 * 0.4) == 32
    for cfg, head_dim in ((neox, 64), (phi, 80)):
        p = cfg.rope_parameters["partial_rotary_factor"]
        inv, _ = rope_inv_freq_from_config(cfg.rope_parameters, head_dim)
        rotary_dim = int(head_dim * p)
        theta = cfg.rope_parameters["rope_theta"]
        expected = theta ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
        torch.testing.assert_close(inv.double(), expected, rtol=1e-6, atol=0)  # exponents over rotary_dim
    head_dim = 64
    gemma4 = config("Gemma4TextConfig").rope_parameters["full_attention"]
    assert gemma4["rope_type"] == "proportional" and gemma4["partial_rotary_factor"] == 0.25
    inv, _ = rope_inv_freq_from_config(gemma4, head_dim)
    rotated = int(head_dim * 0.25) // 2
    expected = gemma4["rope_theta"] ** (-torch.arange(0, 2 * rotated, 2, dtype=torch.float64) / head_dim)
    torch.testing.assert_close(inv[:rotated].double(), expected, rtol=1e-6, atol=0)  # exponents over head_dim
    assert (inv[rotated:] == 0).all() and len(inv) == head_dim // 2
    on_page("GPT-NeoX (factor 0.25; older checkpoints call it `rotary_pct`) and Phi-2 (0.4, 32 of its 80 features",
            "transformers' `PhiConfig` defaults to Phi-1's 0.5",
            "Gemma 4's `\"proportional\"` type (factor 0.25 on its full-attention layers) keeps the exponents over `head_dim`")


def test_rope_scaling_becomes_rope_parameters_and_per_layer_dicts():
    from posenc.rope_config import rope_inv_freq_from_config

    v4 = config("LlamaConfig", rope_theta=500000.0, max_position_embeddings=32768,
                rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192})
    v5 = config("LlamaConfig", max_position_embeddings=32768, rope_parameters={
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192, "rope_theta": 500000.0})
    assert v4.rope_parameters == v5.rope_parameters
    assert v4.rope_parameters["rope_theta"] == 500000.0
    a = rope_inv_freq_from_config(v4.rope_parameters, 128, max_position_embeddings=32768)
    b = rope_inv_freq_from_config(v5.rope_parameters, 128, max_position_embeddings=32768)
    torch.testing.assert_close(a[0], b[0])
    gemma3 = config("Gemma3TextConfig").rope_parameters
    assert gemma3["sliding_attention"]["rope_theta"] == 10000.0 and gemma3["full_attention"]["rope_theta"] == 1000000.0
    on_page('Gemma 3 has `"sliding_attention"` with `rope_theta` 10000 and `"full_attention"` with 1000000',
            'Gemma 4 adds `"proportional"` with `partial_rotary_factor` 0.25')


def test_dynamic_and_longrope_switch_frequencies_past_the_context():
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    L = 64
    dynamic = config("LlamaConfig", head_dim=16, hidden_size=64, num_attention_heads=4,
                     max_position_embeddings=L, rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4})
    at = lambda c, kind, n: ROPE_INIT_FUNCTIONS[kind](c, "cpu", seq_len=n)[0]  # noqa: E731
    assert at(dynamic, "dynamic", L).equal(at(dynamic, "dynamic", 1)) and not at(dynamic, "dynamic", L + 1).equal(at(dynamic, "dynamic", L))
    phi3 = config("Phi3Config")
    assert phi3.original_max_position_embeddings == 4096
    short, long = [1.0] * 8, [4.0] * 8
    longrope = config("LlamaConfig", head_dim=16, hidden_size=64, num_attention_heads=4, max_position_embeddings=4 * 4096,
                      rope_parameters={"rope_type": "longrope", "rope_theta": 1e4, "short_factor": short, "long_factor": long,
                                       "original_max_position_embeddings": 4096})
    assert at(longrope, "longrope", 4096).equal(at(longrope, "longrope", 1))
    torch.testing.assert_close(at(longrope, "longrope", 4097), at(longrope, "longrope", 4096) / 4)
    on_page("`\"dynamic\"` once it\nexceeds `max_position_embeddings`",
            "`\"longrope\"` from `short_factor` to `long_factor` once it\nexceeds `original_max_position_embeddings` (4096 in Phi-3)")


def test_positions_of_padded_and_packed_batches():
    from transformers import DataCollatorWithFlattening

    from posenc.layers.masks import document_mask, packed_positions, padded_positions

    mask = torch.tensor([[0, 0, 1, 1, 1]])
    assert padded_positions(mask).tolist() == [[0, 0, 0, 1, 2]]
    assert ((mask.cumsum(-1) - 1) * mask).equal(padded_positions(mask))
    batch = DataCollatorWithFlattening(return_tensors="pt")([{"input_ids": [5, 6, 7]}, {"input_ids": [8, 9]}])
    doc_ids = torch.tensor([0, 0, 0, 1, 1])
    assert packed_positions(doc_ids).equal(batch["position_ids"][0])
    assert not document_mask(doc_ids)[3, :3].any()  # the second document sees none of the first
    on_page("Positions `attention_mask.cumsum(-1) - 1` (`posenc.tools.padded_positions`",
            "positions that restart at 0\n(`packed_positions`, as `DataCollatorWithFlattening` writes them)")


def test_mrope_deltas_example():
    from posenc.rope_nd import mrope_next_positions, mrope_positions

    ids = mrope_positions([5, (1, 8, 8), 6])
    assert ids.shape[1] == 75 and int(ids.max()) == 18
    assert int(ids.max()) + 1 - ids.shape[1] == -56
    assert mrope_next_positions(ids)[:, 0].tolist() == [19, 19, 19]
    on_page("5 text tokens, an 8 × 8 grid of merged patches and 6 text tokens make 75\ntokens whose largest id is 18, so `rope_deltas` = 19 − 75 = −56",
            "puts every new token 56 positions too far")


def test_rotating_a_rotated_key_adds_the_angles():
    from posenc.rope import apply_rope

    k = torch.randn(1, 1, 6, 16)
    n, n2 = torch.arange(6), torch.arange(6) + 3
    torch.testing.assert_close(apply_rope(apply_rope(k, n), n), apply_rope(k, 2 * n), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(apply_rope(apply_rope(k, n), n2), apply_rope(k, n + n2), atol=1e-5, rtol=1e-5)
    on_page("carries $2n\\theta_i$ while it stays there, $(n +\nn')\\theta_i$ once it moves to slot $n'$")


# ---- the code at the end of every entry -------------------------------------------------


def snippets() -> dict[str, str]:
    """Each entry's closing code block, by the entry's label."""
    found = {}
    for section in re.split(r"(?m)^(?=\(cs-[\w-]+\)=\n)", PAGE)[1:]:
        label = re.match(r"\((cs-[\w-]+)\)=", section).group(1)
        match = re.search(r"```python\n(.*?)```\s*\Z", section, flags=re.S)
        assert match, f"{label} does not end with a code block"
        found[label] = match.group(1)
    return found


def rope_config(rope_parameters, head_dim=64, **kwargs):
    """A transformers LlamaConfig whose heads are ``head_dim`` wide."""
    return config("LlamaConfig", head_dim=head_dim, hidden_size=4 * head_dim, num_attention_heads=4,
                  rope_parameters=rope_parameters, **kwargs)


def hf_inv_freq(rope_parameters, head_dim=64, seq_len=None, **kwargs):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    c = rope_config(rope_parameters, head_dim, **kwargs)
    return ROPE_INIT_FUNCTIONS[rope_parameters["rope_type"]](c, "cpu", seq_len=seq_len)[0]


#: The entries whose code check_snippet compares with transformers (or the card's lint);
#: every other entry's code asserts its own result.
CHECKED = ("cs-rope-type", "cs-original", "cs-fine-tune", "cs-layout", "cs-partial", "cs-v4-v5",
           "cs-llama3", "cs-dynamic-cache")


def check_snippet(label: str, ns: dict) -> None:
    """What each entry's code leaves behind, against transformers where it does the same."""
    if label == "cs-rope-type":
        torch.testing.assert_close(ns["pi"], hf_inv_freq({"rope_type": "linear", "factor": 2.0, "rope_theta": 1e5}))
    elif label == "cs-original":
        assert "factor-ratio" in [lint.id for lint in ns["card"].warnings]
    elif label == "cs-fine-tune":
        yarn = {**ns["yarn"], "rope_theta": 1e5}
        torch.testing.assert_close(__import__("posenc").rope_inv_freq(64, 1e5, ns["yarn"])[0],
                                   hf_inv_freq(yarn, max_position_embeddings=16384))
    elif label == "cs-layout":
        from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

        processor = LlamaTensorProcessor.__new__(LlamaTensorProcessor)
        expected = processor._reverse_permute_weights(ns["wk"].numpy(), 9, 3)  # SmolLM2: 9 heads, 3 KV
        assert ns["k_proj"].equal(torch.as_tensor(expected))
    elif label == "cs-partial":
        expected = 1e4 ** (-torch.arange(0, 32, 2, dtype=torch.float64) / 32)
        torch.testing.assert_close(ns["inv_freq"].double(), expected, rtol=1e-6, atol=0)
    elif label == "cs-v4-v5":
        v4 = config("LlamaConfig", head_dim=128, hidden_size=512, num_attention_heads=4, **ns["v4"])
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        torch.testing.assert_close(ns["inv_freq"], ROPE_INIT_FUNCTIONS["linear"](v4, "cpu")[0])
    elif label == "cs-llama3":
        ratio = ns["ratio"]
        assert ratio[0] == 1 and ratio[-1] == 1 / 8 and ((ratio > 1 / 8) & (ratio < 1)).any()
        expected = hf_inv_freq({**ns["llama3"], "rope_theta": 5e5}, 128, max_position_embeddings=131072)
        torch.testing.assert_close(ratio * __import__("posenc").rope_inv_freq(128, 5e5)[0], expected)
    elif label == "cs-dynamic-cache":
        dynamic = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4}
        expected = hf_inv_freq(dynamic, seq_len=16384, max_position_embeddings=4096)
        torch.testing.assert_close(ns["inv_freq"], expected)


def test_every_entry_ends_with_two_or_three_lines_that_run():
    found = snippets()
    assert set(CHECKED) <= set(found)
    assert len(found) == len(re.findall(r"^\(cs-[\w-]+\)=\n## ", PAGE, flags=re.M))
    for label, code in found.items():
        lines = code.strip().splitlines()
        assert 2 <= len(lines) <= 3, f"{label}: {len(lines)} lines"
        assert label in CHECKED or "assert" in code, f"{label}: its code checks nothing"
        assert "posenc" in code, f"{label} uses no posenc"
        ns: dict = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(code, f"cheat-sheet {label}", "exec"), ns)
        check_snippet(label, ns)
    on_page("Each entry ends with two or three lines of\n`posenc` that the tests run")


def test_self_extend_at_four_times_the_context():
    from posenc import tools
    from posenc.layers.pretrained import ROPE_CONFIGS

    L = ROPE_CONFIGS["smollm2"]["max_position_embeddings"]
    reach = tools.self_extend_max_length(L, group_size=8, window_size=L // 4)
    assert reach / L == 6.25 and reach > 4 * L
    on_page("For four times the context, group size 8 and a window of $L/4$ keep every distance "
            "below $L$ up to $6.25L$ tokens (`posenc.tools.self_extend_max_length`)")


def test_layout_fix_names_the_tools_that_do_it():
    from posenc import tools

    assert callable(tools.convert_qk_layout) and callable(tools.convert_rope_layout)
    on_page("`posenc.tools.convert_qk_layout` converts one\nweight or bias of a checkpoint",
            "`posenc.tools.convert_rope_layout` converts a whole transformers Llama")


def decode_errors() -> dict[str, float]:
    """The cheat-sheet's measurement: a transformers Llama of 2 layers with random weights
    (initializer_range 0.2); a batch of a row of 8 tokens and a row of 3 left-padded to 8;
    the prompt run with padded_positions into a KV cache, then one new token decoded at
    three kinds of position. Returns the largest difference of the padded row's
    next-token logits from the row run alone, per kind, and the span of those logits."""
    from posenc import tools

    c = config("LlamaConfig", vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, initializer_range=0.2)
    c._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(c).eval()
    T, n = 8, 3
    g = torch.Generator().manual_seed(0)
    ids, new = torch.randint(64, (2, T), generator=g), torch.randint(64, (2, 1), generator=g)
    mask = torch.ones(2, T, dtype=torch.long)
    mask[1, : T - n] = 0
    grown = torch.cat([mask, torch.ones(2, 1, dtype=torch.long)], dim=1)
    decode = {"continue": tools.decode_positions(mask), "T": torch.full((2, 1), T),
              "restart": torch.zeros(2, 1, dtype=torch.long)}
    errors = {}
    with torch.no_grad():
        alone = model(torch.cat([ids[1:, T - n:], new[1:]], dim=1)).logits[0, -1]
        errors["span"] = (alone.max() - alone.min()).item()
        for name, positions in decode.items():
            prompt = model(ids, attention_mask=mask, position_ids=tools.padded_positions(mask), use_cache=True)
            step = model(new, attention_mask=grown, position_ids=positions,
                         past_key_values=prompt.past_key_values).logits[1, -1]
            errors[name] = (step - alone).abs().max().item()
    return errors


def test_decode_positions_must_continue_the_prompt():
    errors = decode_errors()
    assert errors["continue"] < 1e-5
    assert f"{errors['span']:.1f}" == "7.0"
    assert f"{errors['T']:.1f}" == "3.9" and f"{errors['restart']:.1f}" == "3.7"
    on_page("in a batch of a row of 8 tokens and a row of 3 tokens left-padded to 8: the padded row's "
            "next-token logits span 7.0",
            "Decoding at positions that continue the prompt gives them within 1e-5 of the row run alone",
            "Decoding at $T = 8$ changes them by up to 3.9, and decoding at positions that restart at 0 "
            "by up to 3.7",
            "Decode at `posenc.tools.decode_positions(attention_mask, steps)`, the count of real tokens "
            "so far, as transformers' `generate` does")
    # the rule is generate's: its position_ids for the decoding steps are decode_positions
    from posenc import tools

    model = transformers.LlamaForCausalLM(config(
        "LlamaConfig", vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, pad_token_id=0, bos_token_id=1, eos_token_id=2)).eval()
    seen = []
    model.model.register_forward_pre_hook(lambda m, a, kw: seen.append(kw["position_ids"]), with_kwargs=True)
    mask = torch.tensor([[0, 0, 0, 0, 0, 1, 1, 1], [1] * 8])
    model.generate(input_ids=torch.full((2, 8), 5), attention_mask=mask, max_new_tokens=3,
                   min_new_tokens=3, do_sample=False)
    assert torch.cat(seen[1:], dim=1).equal(tools.decode_positions(mask, steps=2))
