"""Every public function that takes positions keeps the per-sequence contract (issue 40,
item 4): positions with one row per sequence — (B, T), as transformers' position_ids,
or the function's own per-sequence form — give exactly what running each sequence
alone with its own row gives, also for 4-D input with B = H, the case that used to
broadcast (B, T) against the heads silently.

The functions are found by introspection: every callable reachable from
``posenc.__all__``, from the modules of ``posenc.layers`` (their ``__all__``, or the
public names they define) and from ``posenc.tools`` when it exists, whose signature
has a parameter ``positions``, ``position_ids`` or ``*_positions``. Each needs an entry
in ``CASES`` saying how to call it; a new one without an entry fails
``test_every_public_function_with_positions_has_an_entry``. The registered schemes
inside the layers are tests/test_positions_contract.py's.

The mask case: a function that also takes an ``attention_mask`` needs an entry in
``MASK_CASES`` too, and a left-padded batch with its mask and ``padded_positions(mask)``
must give, on each row's real tokens, exactly what that row alone without its pads gives
(the pads' own rows are zeros)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types

import pytest
import torch

import posenc
import posenc.layers
from posenc.layers.masks import padded_positions

T = 7
POSITION_PARAMETERS = ("positions", "position_ids")
# (B, H): B = H is the case that used to broadcast silently; B ≠ H a raw RuntimeError
SHAPES = [(3, 3), (2, 4)]


def _takes_positions(obj) -> bool:
    try:
        parameters = inspect.signature(obj).parameters
    except (TypeError, ValueError):
        return False
    return any(p in POSITION_PARAMETERS or p.endswith("_positions") for p in parameters)


def _public(module: types.ModuleType) -> dict:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [
            name for name, obj in vars(module).items()
            if not name.startswith("_") and getattr(obj, "__module__", None) == module.__name__
        ]
    return {name: getattr(module, name) for name in names}


def _modules():
    yield posenc, posenc.__all__
    for info in pkgutil.iter_modules(posenc.layers.__path__):
        module = importlib.import_module(f"posenc.layers.{info.name}")
        yield module, list(_public(module))
    try:
        tools = importlib.import_module("posenc.tools")
    except ModuleNotFoundError:  # another part of issue 40; absent before it lands
        return
    yield tools, list(_public(tools))


def public_functions_with_positions() -> dict[str, object]:
    """'module.qualname' → callable, each object once however many places export it."""
    found = {}
    for module, names in _modules():
        for name in names:
            obj = getattr(module, name)
            if isinstance(obj, types.ModuleType) or not callable(obj):
                continue
            if _takes_positions(obj):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


# ---------------------------------------------------------------- per-sequence positions


def rows(batch: int) -> torch.Tensor:
    """(batch, T) int64 rows with different offsets: from 0, left-padded by 3 (the pads
    at 0, as padded_positions gives them), from 5, from 2."""
    mask = torch.ones(4, T, dtype=torch.long)
    mask[1, :3] = 0
    positions = padded_positions(mask) + torch.tensor([0, 0, 5, 2])[:, None]
    return positions[:batch]


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _call_rope(fn, batch, heads):
    x, p = randn(batch, heads, T, 8), rows(batch)
    return fn(x, p), [fn(x[b : b + 1], p[b]) for b in range(batch)]


def _call_xpos(fn, batch, heads):
    q, k, p = randn(batch, heads, T, 8), randn(batch, heads, T, 8, seed=1), rows(batch)
    return fn(q, k, p, p), [fn(q[b : b + 1], k[b : b + 1], p[b], p[b]) for b in range(batch)]


def _call_axes(axes, **options):
    """M-RoPE's (3, B, T) and 2-D RoPE's (2, B, T): one row of ids per sequence."""
    def call(fn, batch, heads):
        x = randn(batch, heads, T, 12 if axes == 3 else 8)
        p = torch.stack([rows(batch) + shift for shift in range(axes)])  # (A, B, T)
        return fn(x, p, **options), [fn(x[b : b + 1], p[:, b], **options) for b in range(batch)]

    return call


def _call_alibi(fn, batch, heads):
    slopes, p = posenc.alibi_slopes(heads), rows(batch)
    return fn(p, p, slopes), [fn(p[b], p[b], slopes)[None] for b in range(batch)]


def _call_elementwise(fn, **options):
    def call(_fn, batch, heads):
        p = rows(batch)
        return fn(p, **options), [fn(p[b], **options)[None] for b in range(batch)]

    return call


def _call_head_positions(fn, batch, heads):
    p = rows(batch)
    return fn(p, batch, T), [fn(p[b], 1, T) for b in range(batch)]


def _call_remapped(**settings):
    """q (B, H, T, d_h) with grouped-query keys of H / H_kv heads where H allows it."""
    def call(fn, batch, heads):
        kv_heads = heads // 2 if heads % 2 == 0 else heads
        q = randn(batch, heads, T, 8)
        k, v = randn(batch, kv_heads, T, 8, seed=1), randn(batch, kv_heads, T, 8, seed=2)
        p = rows(batch)
        alone = [fn(q[b : b + 1], k[b : b + 1], v[b : b + 1], p[b], **settings) for b in range(batch)]
        return fn(q, k, v, p, **settings), alone

    return call


SELF_EXTEND = dict(group_size=2, window_size=3)
RERoPE = dict(window=3)
DCA = dict(chunk_size=4, pretraining_length=6)

#: How to call each public function that takes positions: a function (fn, B, H) →
#: (batched result, [each sequence's result alone]); or a string saying why the
#: contract does not apply.
CASES = {
    "posenc.rope.apply_rope": _call_rope,
    "posenc.xpos.apply_xpos": _call_xpos,
    "posenc.rope_nd.apply_mrope": _call_axes(3, mrope_section=[2, 2, 2]),
    "posenc.rope_nd.apply_rope_2d": _call_axes(2),
    "posenc.alibi.alibi_bias": _call_alibi,
    "posenc.sinusoidal.sinusoidal_encoding": _call_elementwise(posenc.sinusoidal_encoding, dim=8),
    "posenc.temperature.llama4_query_scale": _call_elementwise(
        posenc.temperature.llama4_query_scale, floor_scale=4.0, attn_scale=0.1),
    "posenc.layers.attention.head_positions": _call_head_positions,
    "posenc.layers.remapped_attention.self_extend_attention": _call_remapped(**SELF_EXTEND),
    "posenc.layers.remapped_attention.self_extend_attention_reference": _call_remapped(**SELF_EXTEND),
    "posenc.layers.remapped_attention.rerope_attention": _call_remapped(**RERoPE),
    "posenc.layers.remapped_attention.rerope_attention_reference": _call_remapped(**RERoPE),
    "posenc.layers.remapped_attention.dual_chunk_attention": _call_remapped(**DCA),
    "posenc.layers.remapped_attention.dual_chunk_attention_reference": _call_remapped(**DCA),
    "posenc.layers.train.TrainConfig": "random_positions is a training flag (bool), not positions",
}


def test_every_public_function_with_positions_has_an_entry():
    found = set(public_functions_with_positions())
    assert found - set(CASES) == set(), "add an entry to CASES saying how to call these"
    assert set(CASES) - found == set(), "CASES names functions that are no longer public"


def _as_list(result):
    return list(result) if isinstance(result, tuple) else [result]


def assert_each_row_alone(batched, alone, batch):
    for b, row in enumerate(alone):
        for got, expected in zip(_as_list(batched), _as_list(row), strict=True):
            got = got[b : b + 1]
            assert got.shape == expected.shape, (got.shape, expected.shape)
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("batch, heads", SHAPES)
@pytest.mark.parametrize("name", [n for n, case in CASES.items() if callable(case)])
def test_per_sequence_positions_give_each_sequence_alone(name, batch, heads):
    fn = public_functions_with_positions()[name]
    with torch.no_grad():
        batched, alone = CASES[name](fn, batch, heads)
    assert_each_row_alone(batched, alone, batch)


# ------------------------------------------------------------------- the mask case

MASK_PARAMETER = "attention_mask"


def padded(batch: int) -> torch.Tensor:
    """(batch, T) masks: no pad, 3 left pads, 5 left pads, and a right-padded row."""
    mask = torch.ones(4, T, dtype=torch.long)
    mask[1, :3], mask[2, :5], mask[3, -2:] = 0, 0, 0
    return mask[:batch]


def _call_remapped_masked(**settings):
    """A padded batch with its mask: (the batched outputs, and weights, on each row's
    real tokens, [each row alone without its pads], the pads' rows of the outputs and
    the pads' rows and columns of the weights, which must be zeros)."""
    def call(fn, batch, heads):
        kv_heads = heads // 2 if heads % 2 == 0 else heads
        q = randn(batch, heads, T, 8)
        k, v = randn(batch, kv_heads, T, 8, seed=1), randn(batch, kv_heads, T, 8, seed=2)
        mask = padded(batch)
        out = fn(q, k, v, padded_positions(mask), attention_mask=mask, **settings)
        batched, alone, pads = [], [], []
        for b, real in enumerate(mask.bool()):
            row = [x[b : b + 1, :, real] for x in (q, k, v)]
            alone.append(fn(*row, **settings))
            parts = [part[b : b + 1] for part in _as_list(out)]  # (out, weights)
            batched.append((parts[0][:, :, real], *(w[:, :, real][..., real] for w in parts[1:])))
            pads += [part[:, :, ~real] for part in parts] + [w[..., ~real] for w in parts[1:]]
        return batched, alone, pads

    return call


#: How to call each public function that takes positions and an attention_mask.
MASK_CASES = {
    "posenc.layers.remapped_attention.self_extend_attention": _call_remapped_masked(**SELF_EXTEND),
    "posenc.layers.remapped_attention.self_extend_attention_reference": _call_remapped_masked(**SELF_EXTEND),
    "posenc.layers.remapped_attention.rerope_attention": _call_remapped_masked(**RERoPE),
    "posenc.layers.remapped_attention.rerope_attention_reference": _call_remapped_masked(**RERoPE),
    "posenc.layers.remapped_attention.dual_chunk_attention": _call_remapped_masked(**DCA),
    "posenc.layers.remapped_attention.dual_chunk_attention_reference": _call_remapped_masked(**DCA),
}


def test_every_public_function_with_positions_and_a_mask_has_a_mask_entry():
    found = {
        name for name, fn in public_functions_with_positions().items()
        if MASK_PARAMETER in inspect.signature(fn).parameters
    }
    assert found == set(MASK_CASES), "add or drop MASK_CASES entries for these"


@pytest.mark.parametrize("batch, heads", [(4, 4), (3, 2)])
@pytest.mark.parametrize("name", MASK_CASES)
def test_a_padded_batch_with_its_mask_gives_each_sequence_alone_without_its_pads(
    name, batch, heads
):
    fn = public_functions_with_positions()[name]
    with torch.no_grad():
        batched, alone, pads = MASK_CASES[name](fn, batch, heads)
    for got, expected in zip(batched, alone, strict=True):
        for part, exp in zip(got, _as_list(expected), strict=True):
            assert part.shape == exp.shape, (part.shape, exp.shape)
            torch.testing.assert_close(part, exp, rtol=0, atol=1e-12)
    assert all(bool((pad == 0).all()) for pad in pads)


def test_the_mask_check_catches_pads_attended_as_keys():
    """The mask case can fail: the same call with the mask ignored (the remapped
    attentions before it existed) attends the pads at position 0 and is caught."""
    def ignoring_the_mask(q, k, v, positions=None, attention_mask=None, **settings):
        return posenc.layers.remapped_attention.self_extend_attention(q, k, v, positions, **settings)

    batched, alone, _ = _call_remapped_masked(**SELF_EXTEND)(ignoring_the_mask, 3, 2)
    with pytest.raises(AssertionError):
        for got, expected in zip(batched, alone, strict=True):
            torch.testing.assert_close(got[0], expected, rtol=0, atol=1e-12)


def test_the_check_catches_positions_broadcast_over_the_heads():
    """The property can fail: rotating by (B, T) positions matched against the heads,
    as apply_rope did before issue 40 (x (B, H, T, d_h) with B = H), is caught."""
    def broadcast_over_heads(x, positions):
        if positions.dim() == 2:  # the old behaviour: (B, T) read as (H, T)
            positions = positions[None]
        return posenc.apply_rope(x, positions)

    batched, alone = _call_rope(broadcast_over_heads, 3, 3)
    with pytest.raises(AssertionError):
        assert_each_row_alone(batched, alone, 3)


@pytest.mark.parametrize("shape", [(4, T), (4, 1, T), (2, 3, T), (T, 1), (3, 3, T, 1)])
def test_other_position_shapes_are_refused_naming_the_shape_and_the_rule(shape):
    x = randn(3, 3, T, 8)
    with pytest.raises(ValueError) as error:
        posenc.apply_rope(x, torch.zeros(shape, dtype=torch.long))
    message = str(error.value)
    assert f"got {tuple(shape)}" in message and "(T,) or (B, T) or (B or 1, H or 1, T)" in message
    assert f"T={T}, B=3, H=3" in message and "one row per sequence" in message
