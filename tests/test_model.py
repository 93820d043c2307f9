import pytest
import torch

import posenc
from posenc.layers.model import ModelConfig, TinyLM


def options(name):
    return {"max_len": 64} if name == "learned" else {}


@pytest.mark.parametrize("name", posenc.available_schemes())
def test_forward_shapes_and_paths_agree(device, name):
    torch.manual_seed(0)
    ref = TinyLM(ModelConfig(scheme=name, scheme_options=options(name), attn_impl="reference")).to(device)
    fast_impl = "auto" if ref.scheme.needs_attention_weights else "sdpa"
    fast = TinyLM(ModelConfig(scheme=name, scheme_options=options(name), attn_impl=fast_impl)).to(device)
    fast.load_state_dict(ref.state_dict())
    tokens = torch.randint(0, 256, (3, 20), device=device)
    logits, weights = ref(tokens, need_weights=True)
    assert logits.shape == (3, 20, 256) and len(weights) == ref.config.num_layers
    assert weights[0].shape == (3, ref.config.num_heads, 20, 20)
    torch.testing.assert_close(fast(tokens), logits, atol=1e-4, rtol=1e-4)


def test_output_follows_input_dtype_and_device(device):
    model = TinyLM(ModelConfig(scheme="sinusoidal")).to(device=device, dtype=torch.float64)
    assert model(torch.randint(0, 256, (1, 5), device=device)).dtype == torch.float64


def test_explicit_positions_equal_default():
    model = TinyLM(ModelConfig(scheme="sinusoidal"))
    tokens = torch.randint(0, 256, (2, 9))
    torch.testing.assert_close(model(tokens), model(tokens, torch.arange(9)))
    assert not torch.allclose(model(tokens), model(tokens, torch.arange(9) + 50))


def test_learned_model_refuses_lengths_past_its_table():
    model = TinyLM(ModelConfig(scheme="learned", scheme_options={"max_len": 16}))
    model(torch.zeros(1, 16, dtype=torch.long))
    with pytest.raises(ValueError, match=r"position 16 is outside the learned table"):
        model(torch.zeros(1, 17, dtype=torch.long))


@pytest.mark.parametrize(
    "tokens, error, text",
    [
        (torch.zeros(1, 4), TypeError, "tokens must be an integer tensor"),
        (torch.zeros(4, dtype=torch.long), ValueError, r"tokens must have shape \(B, T\)"),
        (torch.tensor([[0, 256]]), ValueError, r"token ids must lie in 0\.\.255, got range 0\.\.256"),
    ],
)
def test_bad_tokens(tokens, error, text):
    with pytest.raises(error, match=text):
        TinyLM(ModelConfig(scheme="none"))(tokens)


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        ({"scheme": "nope"}, ValueError, "unknown positional scheme 'nope'"),
        ({"d_model": 30, "num_heads": 4}, ValueError, "d_model must be divisible by num_heads"),
        ({"num_layers": 0}, ValueError, "num_layers must be >= 1"),
        ({"attn_impl": "flash"}, ValueError, "attn_impl must be one of"),
        ({"scheme_options": [1]}, TypeError, "scheme_options must be a dict"),
        ({"scheme": "shaw", "attn_impl": "sdpa"}, ValueError, "cannot serve scheme 'shaw'"),
    ],
)
def test_bad_config(kwargs, error, text):
    with pytest.raises(error, match=text):
        ModelConfig(**kwargs)
