"""posenc.tools, the practitioner's front door (issue 40, item 3): every name is there
and documented, ``import posenc`` alone answers every scheme namespace and stays light,
and each tool agrees with transformers 5.23 where transformers does the same job (the
positions ``generate`` passes, the GGUF loader's q/k permutation) and with rotating by
``apply_rope`` where it does not."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest
import torch

import posenc
from posenc import tools
from posenc.layout import pair_permutation
from posenc.rope import apply_rope

transformers = pytest.importorskip("transformers")

from tiny_transformers import tiny  # noqa: E402




# ---- the front door itself ------------------------------------------------------------


def test_every_name_is_there_and_documented():
    for name in tools.__all__:
        value = getattr(tools, name)
        doc = inspect.getdoc(value) or ""
        assert len(doc) > 40, f"posenc.tools.{name} has no real docstring"
    for name in ("decode_positions", "attention_method", "convert_qk_layout",
                 "convert_rope_layout"):
        doc = inspect.getdoc(getattr(tools, name))
        assert "Raises" in doc and "Returns" in doc and "Args" in doc, name
    assert set(tools.__all__) <= set(dir(tools))


def test_tools_re_export_the_implementations():
    from posenc.layers import masks, pretrained, remapped_attention, surgery

    assert tools.padded_positions is masks.padded_positions
    assert tools.swap_rope is pretrained.swap_rope
    assert tools.permute_qk_rows is pretrained.permute_qk_rows
    assert tools.convert_rope_layout is surgery.convert_rope_layout
    for name in ("self_extend_attention", "dual_chunk_attention", "rerope_attention"):
        assert getattr(tools, name) is getattr(remapped_attention, name)
    assert tools.position_card is posenc.card.position_card
    assert tools.PositionCard is posenc.card.PositionCard
    assert posenc.position_card is posenc.card.position_card
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        posenc.tools.nothing  # noqa: B018


def fresh(code: str) -> dict:
    """Run ``code`` in a new interpreter; it prints one JSON object."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"OMP_NUM_THREADS": "1", "PATH": ""})
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_posenc_answers_every_namespace_and_stays_light():
    found = fresh(
        "import json, sys, posenc\n"
        "light = [m for m in ('posenc.layers', 'posenc.tools', 'posenc.card', 'transformers')"
        " if m in sys.modules]\n"
        "names = {n: list(posenc.available_schemes(n)) for n in ('1d', '2d', 'attention')}\n"
        "s = posenc.build_scheme('self_extend', namespace='attention', d_model=32, num_heads=2,"
        " group_size=2, window_size=4)\n"
        "print(json.dumps({'light': light, 'names': names, 'built': type(s).__name__,"
        " 'tools': posenc.tools.__name__, 'card': posenc.position_card.__module__}))"
    )
    assert found["light"] == []  # nothing above the encodings before it is asked for
    assert found["names"]["attention"] == ["self_extend", "rerope", "dual_chunk"]
    assert "rope" in found["names"]["1d"] and found["names"]["2d"]
    assert found["built"] == "SelfExtend"
    assert found["tools"] == "posenc.tools" and found["card"].startswith("posenc.card")
    # the lookup of an unknown name in "attention" lists the registered methods
    listed = fresh(
        "import json, posenc\n"
        "try:\n posenc.build_scheme('nope', namespace='attention', d_model=8, num_heads=1)\n"
        "except ValueError as e:\n print(json.dumps({'message': str(e)}))"
    )
    assert "'self_extend', 'rerope', 'dual_chunk'" in listed["message"]


def test_the_tools_import_with_torch_and_numpy_alone():
    """``import posenc.tools`` loads none of the extras' packages (the lean install has
    torch and numpy only); what needs them loads when it is first used."""
    found = fresh(
        "import json, sys, posenc.tools\n"
        "heavy = ('posenc.layers.train', 'posenc.layers.pretrained', 'posenc.card',"
        " 'platformdirs', 'filelock', 'safetensors', 'transformers', 'pandas', 'matplotlib')\n"
        "print(json.dumps({'loaded': [m for m in heavy if m in sys.modules]}))"
    )
    assert found["loaded"] == []


def test_a_missing_card_is_said_clearly():
    """Without posenc.card (an older posenc), asking for the card names what is missing."""
    found = fresh(
        "import json, sys\n"
        "sys.modules['posenc.card'] = None  # as if the module were not there\n"
        "import posenc, posenc.tools\n"
        "messages = []\n"
        "for get in (lambda: posenc.position_card, lambda: posenc.tools.PositionCard):\n"
        "    try:\n        get()\n"
        "    except ImportError as e:\n        messages.append(str(e))\n"
        "print(json.dumps({'messages': messages}))"
    )
    assert len(found["messages"]) == 2
    for message in found["messages"]:
        assert "comes from posenc.card, which this version of posenc does not have" in message


# ---- positions of a padded batch --------------------------------------------------------


def test_decode_positions_are_those_transformers_generate_passes():
    model = tiny(num_hidden_layers=1)
    seen = []
    model.model.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs["position_ids"].clone()),
        with_kwargs=True,
    )
    ids = torch.randint(3, 64, (3, 6), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(3, 6, dtype=torch.long)
    mask[1, :4] = 0  # two real tokens
    mask[2, :1] = 0
    model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4, min_new_tokens=4,
                   do_sample=False)
    assert seen[0].equal(tools.padded_positions(mask))  # the prompt's
    steps = torch.cat(seen[1:], dim=1)  # (B, 3): one column per decoding step
    assert steps.equal(tools.decode_positions(mask, steps=3))
    assert steps[:, 0].tolist() == [6, 2, 5]  # the count of real tokens, not T = 6


def test_decode_positions_continue_padded_positions():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]])
    grown = torch.cat([mask, torch.ones(3, 4, dtype=torch.long)], dim=1)
    assert tools.decode_positions(mask, 4).equal(tools.padded_positions(grown)[:, 5:])
    assert tools.decode_positions(mask.bool(), 2).tolist() == [[3, 4], [5, 6], [2, 3]]
    assert tools.decode_positions(torch.tensor([0, 1, 1])).tolist() == [2]
    assert tools.decode_positions(mask).dtype == torch.int64


def test_decoding_at_continued_positions_gives_the_row_alone():
    model = tiny()
    T, lengths = 8, (8, 3)
    g = torch.Generator().manual_seed(2)
    ids, new = torch.randint(3, 64, (2, T), generator=g), torch.randint(3, 64, (2, 1), generator=g)
    mask = torch.zeros(2, T, dtype=torch.long)
    for b, n in enumerate(lengths):
        mask[b, T - n:] = 1
    with torch.no_grad():
        prompt = model(ids, attention_mask=mask, position_ids=tools.padded_positions(mask),
                       use_cache=True)
        step = model(new, attention_mask=torch.cat([mask, torch.ones(2, 1, dtype=torch.long)], 1),
                     position_ids=tools.decode_positions(mask),
                     past_key_values=prompt.past_key_values).logits[:, -1]
        for b, n in enumerate(lengths):
            alone = model(torch.cat([ids[b:b + 1, T - n:], new[b:b + 1]], 1)).logits[0, -1]
            torch.testing.assert_close(step[b], alone, atol=1e-4, rtol=1e-4)


def test_decode_positions_refuses_bad_input():
    with pytest.raises(ValueError, match="steps must be >= 1, got 0"):
        tools.decode_positions(torch.ones(2, 3), steps=0)
    with pytest.raises(TypeError, match="steps must be an integer"):
        tools.decode_positions(torch.ones(2, 3), steps=1.5)
    with pytest.raises(ValueError, match="attention_mask"):
        tools.decode_positions(torch.tensor([[1, 2, 1]]))
    with pytest.raises(ValueError, match="attention_mask"):
        tools.decode_positions(torch.ones(1, 2, 3))


# ---- layouts of raw checkpoint tensors --------------------------------------------------


def gguf_to_half(weight: torch.Tensor, num_heads: int) -> torch.Tensor:
    """transformers' own GGUF → transformers conversion of a q/k tensor (5.23,
    ``modeling_gguf_pytorch_utils.LlamaTensorProcessor._reverse_permute_weights``;
    the same view/transpose as ``permute`` in the repository's
    ``models/llama/convert_llama_weights_to_hf.py``, which the wheel does not ship)."""
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    processor = LlamaTensorProcessor.__new__(LlamaTensorProcessor)
    return torch.as_tensor(processor._reverse_permute_weights(weight.numpy(), num_heads))


@pytest.mark.parametrize("num_heads", [1, 4])
def test_convert_qk_layout_is_transformers_gguf_conversion(num_heads):
    head_dim, d_model = 8, 12
    g = torch.Generator().manual_seed(3)
    weight = torch.randn(num_heads * head_dim, d_model, generator=g)
    bias = torch.randn(num_heads * head_dim, generator=g)
    for tensor in (weight, bias):
        half = tools.convert_qk_layout(tensor, num_heads=num_heads, head_dim=head_dim,
                                       source="interleaved", target="half")
        torch.testing.assert_close(half, gguf_to_half(tensor, num_heads), rtol=0, atol=0)
        back = tools.convert_qk_layout(half, num_heads=num_heads, head_dim=head_dim,
                                       source="half", target="interleaved")
        assert back.equal(tensor)
    same = tools.convert_qk_layout(weight, num_heads=num_heads, head_dim=head_dim,
                                   source="half", target="half")
    assert same.equal(weight) and same.data_ptr() != weight.data_ptr()


@pytest.mark.parametrize("rotary_dim", [16, 8])
def test_converted_weights_give_the_same_scores(rotary_dim):
    """Queries and keys projected by interleaved rows and rotated in "interleaved" score
    as the converted rows rotated in "half": GQA keys (2 heads for 4 query heads) and
    partial rotary (only the first rotary_dim rows move)."""
    heads, kv_heads, head_dim, d_model, T = 4, 2, 16, 24, 7
    g = torch.Generator().manual_seed(4)
    w_q = torch.randn(heads * head_dim, d_model, generator=g, dtype=torch.float64)
    w_k = torch.randn(kv_heads * head_dim, d_model, generator=g, dtype=torch.float64)
    x = torch.randn(T, d_model, generator=g, dtype=torch.float64)
    inv_freq = 100.0 ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)

    def scores(w_q, w_k, layout):
        q = (x @ w_q.T).view(T, heads, head_dim).transpose(0, 1)  # (H, T, d_h)
        k = (x @ w_k.T).view(T, kv_heads, head_dim).transpose(0, 1)
        q = apply_rope(q, torch.arange(T), inv_freq=inv_freq, layout=layout)
        k = apply_rope(k, torch.arange(T), inv_freq=inv_freq, layout=layout)
        return q @ k.repeat_interleave(heads // kv_heads, 0).transpose(-1, -2)

    convert = dict(head_dim=head_dim, rotary_dim=rotary_dim, source="interleaved",
                   target="half")
    half_q = tools.convert_qk_layout(w_q, num_heads=heads, **convert)
    half_k = tools.convert_qk_layout(w_k, num_heads=kv_heads, **convert)
    reference = scores(w_q, w_k, "interleaved")
    torch.testing.assert_close(scores(half_q, half_k, "half"), reference)
    assert (scores(w_q, w_k, "half") - reference).abs().max() > 1e-3  # unconverted: wrong
    rows = half_q.view(heads, head_dim, d_model)
    assert rows[:, rotary_dim:].equal(w_q.view(heads, head_dim, d_model)[:, rotary_dim:])


def test_convert_qk_layout_refuses_bad_input():
    w = torch.randn(32, 8)
    kw = dict(head_dim=8, source="interleaved", target="half")
    with pytest.raises(ValueError, match="pass num_heads=num_key_value_heads"):
        tools.convert_qk_layout(w[:16], num_heads=4, **kw)
    with pytest.raises(ValueError, match="rotary_dim must be <= head_dim = 8, got 10"):
        tools.convert_qk_layout(w, num_heads=4, rotary_dim=10, **kw)
    with pytest.raises(ValueError, match="rotary_dim must be even"):
        tools.convert_qk_layout(w, num_heads=4, rotary_dim=5, **kw)
    with pytest.raises(ValueError, match="source must be one of"):
        tools.convert_qk_layout(w, num_heads=4, head_dim=8, source="gguf", target="half")
    with pytest.raises(TypeError, match="floating-point tensor"):
        tools.convert_qk_layout(w.long(), num_heads=4, **kw)
    with pytest.raises(ValueError, match=r"got shape \(4, 8, 8\)"):
        tools.convert_qk_layout(w.view(4, 8, 8), num_heads=4, **kw)


# ---- layouts of whole models -----------------------------------------------------------


def test_convert_rope_layout_of_a_transformers_llama():
    model = tiny()
    ids = torch.randint(3, 64, (2, 10), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        reference = model(ids).logits
        interleaved = tools.convert_rope_layout(model, "interleaved")
        assert (interleaved(ids).logits - reference).abs().max() > 0.1  # wrong in "half"
        with tools.swap_rope(interleaved, layout="interleaved"):
            torch.testing.assert_close(interleaved(ids).logits, reference, atol=1e-4, rtol=1e-4)
        # Meta's or a GGUF file's rows loaded as they are: back to transformers' order
        fixed = tools.convert_rope_layout(interleaved, "half", source="interleaved")
        torch.testing.assert_close(fixed(ids).logits, reference, atol=1e-5, rtol=1e-5)
    for name, p in model.named_parameters():
        assert p.equal(dict(fixed.named_parameters())[name]), name
    # the rows moved as transformers' GGUF loader moves them back
    layer = interleaved.model.layers[0].self_attn
    k = layer.k_proj.weight.detach()
    assert gguf_to_half(k, 2).equal(model.model.layers[0].self_attn.k_proj.weight.detach())


@pytest.mark.parametrize("kind", ["qwen3", "olmo2"])
def test_convert_rope_layout_moves_q_norm_and_k_norm_with_the_rows(kind):
    """Qwen3 normalizes each head (q_norm (d_h,)), OLMo 2 all rows at once (q_norm
    (H·d_h,)) before RoPE: after the conversion the normalized queries and keys are the
    original ones with each head's features in the interleaved order."""
    model = tiny(kind, head_dim=16) if kind == "qwen3" else tiny(kind)
    converted = tools.convert_rope_layout(model, "interleaved")
    order = torch.argsort(pair_permutation(16))
    ids = torch.randint(3, 64, (1, 9), generator=torch.Generator().manual_seed(6))
    outputs = {}
    for label, m in (("before", model), ("after", converted)):
        attn = m.model.layers[0].self_attn  # the same input in both
        hooks = [getattr(attn, norm).register_forward_hook(
            lambda mod, a, out, key=(label, norm): outputs.__setitem__(key, out))
            for norm in ("q_norm", "k_norm")]
        with torch.no_grad():
            m(ids)
        for hook in hooks:
            hook.remove()
    for norm in ("q_norm", "k_norm"):
        before, after = outputs[("before", norm)], outputs[("after", norm)]
        before = before.reshape(*before.shape[:2], -1, 16)
        after = after.reshape(*after.shape[:2], -1, 16)
        assert (after - before).abs().max() > 1e-3
        torch.testing.assert_close(after, before[..., order], atol=1e-5, rtol=1e-5)


def test_convert_rope_layout_says_what_it_takes():
    with pytest.raises(TypeError, match="convert_qk_layout"):
        tools.convert_rope_layout(torch.nn.Linear(4, 4), "half")
    from posenc.layers.model import ModelConfig, TinyLM

    tiny_lm = TinyLM(ModelConfig(scheme="rope", d_model=32, num_heads=4))
    with pytest.raises(ValueError, match="rotates in 'half'; source must be None or 'half'"):
        tools.convert_rope_layout(tiny_lm, "interleaved", source="interleaved")


# ---- remapped attention in a transformers model -----------------------------------------


def test_attention_method_keeps_the_models_own_frequencies():
    """Within its window SelfExtend is the plain model exactly, with the model's own
    (here Llama 3-scaled) frequencies; past the window it remaps."""
    model = tiny(max_position_embeddings=64, rope_parameters={
        "rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 16})
    ids = torch.randint(3, 64, (1, 12), generator=torch.Generator().manual_seed(7))
    inside = tools.attention_method(model, "self_extend", group_size=4, window_size=12)
    assert inside.inv_freq.equal(model.model.rotary_emb.inv_freq.float())
    with torch.no_grad():
        reference = model(ids).logits
        with tools.swap_rope(model, attention=inside):
            torch.testing.assert_close(model(ids).logits, reference, atol=1e-4, rtol=1e-4)
        grouped = tools.attention_method(model, "self_extend", group_size=4, window_size=4)
        with tools.swap_rope(model, attention=grouped):
            assert (model(ids).logits - reference).abs().max() > 1e-3


def test_attention_method_refuses_what_it_cannot_run():
    yarn = tiny(max_position_embeddings=64, rope_parameters={
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
        "original_max_position_embeddings": 16})
    with pytest.raises(ValueError, match="scales cos and sin by 1.13863"):
        tools.attention_method(yarn, "self_extend", group_size=2, window_size=4)
    with pytest.raises(ValueError, match="unknown attention method 'nope'; known: 'self_extend'"):
        tools.attention_method(tiny(), "nope")
    with pytest.raises(TypeError, match="one rotary embedding"):
        tools.attention_method(torch.nn.Linear(2, 2), "self_extend")


def test_self_extend_reach():
    # G = 8, W = L/4 reaches 6.25 L: the 4x recipe's setting, with room to spare
    assert tools.self_extend_max_length(8192, group_size=8, window_size=2048) == 51200
    assert 51200 == 6.25 * 8192
