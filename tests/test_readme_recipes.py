"""README.md's "Use the package" section: six recipes for practitioners (issue 40, item
5). Each fenced block is executed as it stands, what it prints must be what its comments
say, and the values it leaves behind are compared with transformers 5.23 doing the same
job. A recipe that breaks, or drifts from transformers, fails here."""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
TITLE = "## Use the package"


def section() -> str:
    start = README.index(TITLE)
    end = README.index("\n## ", start + len(TITLE))
    return README[start:end]


BLOCKS = re.findall(r"```python\n(.*?)```", section(), flags=re.S)


def posenc_lines(block: str) -> list[str]:
    """The lines that use posenc: its imports and every line naming what they import."""
    names = {"posenc"}
    for match in re.finditer(r"^from posenc(?:\.\w+)* import (.+)$", block, flags=re.M):
        names |= {name.strip() for name in match.group(1).split(",")}
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    return [line for line in block.splitlines() if pattern.search(line.split("#")[0])]


def run(number: int) -> dict:
    """Execute recipe ``number`` (1-based); its printed lines must each appear in the
    block's own comments. Returns the block's variables."""
    block = BLOCKS[number - 1]
    namespace: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(block, f"README recipe {number}", "exec"), namespace)
    comments = " ".join(line.split("#", 1)[1] for line in block.splitlines() if "#" in line)
    for line in out.getvalue().splitlines():
        assert line.strip() in comments, f"recipe {number} printed {line!r}, its comment says otherwise"
    return namespace


def test_six_short_recipes_near_the_top():
    assert README.index(TITLE) < README.index("## Read it") < README.index("## Build and test")
    assert len(BLOCKS) == 6
    for number, block in enumerate(BLOCKS, 1):
        used = posenc_lines(block)
        assert 1 < len(used) <= 5, f"recipe {number} has {len(used)} lines of posenc: {used}"
        assert "assert " in block or "print(" in block, f"recipe {number} checks nothing"
    assert "posenc.tools" in section() and "help(posenc.tools)" in section()


def test_recipe_1_llama31_frequencies_are_transformers():
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    ns = run(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.LlamaConfig(**ns["config"], max_position_embeddings=131072)
    inv_freq, attention_factor = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    torch.testing.assert_close(ns["inv_freq"], inv_freq)
    assert ns["attention_factor"] == attention_factor == 1.0
    # the fast pairs are kept, the slow ones 8 times slower (Llama 3's rule)
    plain = 500000.0 ** (-torch.arange(0, 128, 2, dtype=torch.float32) / 128)
    assert ns["inv_freq"][0] == plain[0]
    torch.testing.assert_close(ns["inv_freq"][-1], plain[-1] / 8)


def test_recipe_2_positions_are_those_generate_passes():
    ns = run(2)
    mask = ns["attention_mask"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.LlamaConfig(
            vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
            num_attention_heads=4, num_key_value_heads=2, pad_token_id=0, bos_token_id=1,
            eos_token_id=2)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    seen = []
    model.model.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs["position_ids"]), with_kwargs=True)
    ids = torch.randint(3, 32, mask.shape, generator=torch.Generator().manual_seed(0))
    model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=3, min_new_tokens=3,
                   do_sample=False)
    assert ns["position_ids"].equal(seen[0])
    assert ns["next_position_ids"].equal(torch.cat(seen[1:], dim=1))


def test_recipe_3_layout_is_transformers_gguf_conversion():
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    ns = run(3)
    processor = LlamaTensorProcessor.__new__(LlamaTensorProcessor)
    expected = processor._reverse_permute_weights(ns["wk"].numpy(), 32, 8)  # 32 heads, 8 KV
    assert ns["k_proj"].equal(torch.as_tensor(expected))


def test_recipe_4_self_extend_runs_four_times_the_context():
    ns = run(4)
    model, L, logits = ns["model"], ns["L"], ns["logits"]
    assert logits.shape == (1, 4 * L, 100) and torch.isfinite(logits).all()
    assert ns["self_extend"].inv_freq.equal(model.model.rotary_emb.inv_freq.float())
    with torch.no_grad():
        plain = model(ns["ids"]).logits
    window = L // 4  # inside the window SelfExtend is the model itself
    torch.testing.assert_close(logits[:, :window], plain[:, :window], atol=1e-4, rtol=1e-4)
    assert (logits[:, L:] - plain[:, L:]).abs().max() > 1e-3


def test_recipe_5_biases_are_transformers():
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor
    from transformers.models.t5.modeling_t5 import T5Attention

    ns = run(5)
    positions, heads, alibi = ns["positions"], ns["heads"], ns["alibi"]
    T = len(positions)
    bloom = build_alibi_tensor(torch.ones(1, T), heads, torch.float32)  # (H, 1, T): m_h·n
    slopes = bloom[:, 0, 1]
    # ALiBi's −m_h(m − n) is BLOOM's m_h·n minus m_h·m, a constant per query row that
    # the softmax ignores
    torch.testing.assert_close(alibi + slopes[:, None, None] * positions[None, :, None], bloom.expand(heads, T, T))
    buckets = T5Attention._relative_position_bucket(ns["offsets"], bidirectional=False, num_buckets=32, max_distance=128)
    assert ns["buckets"].equal(buckets)
    expected = ns["t5_table"].weight[buckets].permute(2, 0, 1)
    assert ns["t5_bias"].equal(expected) and ns["t5_bias"].shape == (heads, T, T)


def test_recipe_6_yarn_card_is_transformers():
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    ns = run(6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.Qwen2Config(**{k: v for k, v in ns["config"].items() if k != "model_type"})
    inv_freq, attention_factor = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    full = ns["full"]
    assert full.rope_type == "yarn" and full.attention_factor == pytest.approx(attention_factor)
    scaled = torch.tensor([pair.theta_scaled for pair in full.pairs], dtype=torch.float32)
    torch.testing.assert_close(scaled, inv_freq)
    assert full.score_multiplier == pytest.approx(attention_factor**2)
    assert "static-scaling" in [lint.id for lint in ns["card"].warnings]
