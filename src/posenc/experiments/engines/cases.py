"""The engines tier's case matrix (issue 42), stated up front: each row a RoPE setting
taken from a released model's configuration (:mod:`posenc.open_models.released_configs`,
read by the position card's parser, :func:`posenc.card.parse.rope_parameters_by_type`),
each run on three position schedules, and its reference computed by posenc.

Rows (:data:`CASES`): default; dynamic; YaRN plain (Qwen3's documented setting),
with DeepSeek-V3's ``mscale``/``mscale_all_dim``, with gpt-oss's ``truncate: false``;
Llama 3.1's llama3; LongRoPE (Phi-3.5-mini); partial rotary (GLM-4); the interleaved
layout; M-RoPE (Qwen2-VL) and interleaved M-RoPE (Qwen3-VL); Gemma 3's two layer
types, the full layers being the matrix's linear row.

Schedules (:data:`SCHEDULES`), each a list of forward calls of :data:`TOKENS`
consecutive positions, L the original context (``original_max_position_embeddings``,
else ``max_position_embeddings``):

* ``"inside"``: one call at positions L/2 … L/2 + 15;
* ``"far"``: one call at 4L … 4L + 15, far past the original context;
* ``"kv"``: a KV cache crossing L: the prefill's last 16 positions (L − 17 … L − 2;
  every earlier position turns the same way, each call being keyed on its last
  position), then three decode steps at L − 1, L and L + 1.

The reference is transformers' semantics, which posenc follows (its parity tests hold
it to transformers 5.23): each forward call computes its frequencies from its own
length ℓ = (last position + 1) — dynamic NTK past L, LongRoPE's long factors past L
— and the keys a call writes to the cache keep the rotation of that call.

Tolerance (:func:`tolerance`): the float32 rounding of the angle m·θ, 4·2⁻²⁴·m·θ_max·‖x‖
(issue 42), plus 4·2⁻²⁴·‖x‖ for the rounding of the products themselves (the whole of
it at m = 0).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json

import torch

from ...card.parse import head_dim_of, rope_parameters_by_type
from ...card.read import text_part
from ...open_models.config import model_rotary_embedding
from ...open_models.released_configs import released_configs
from ...rope import apply_rope, rope_cos_sin
from ...rope_nd import apply_mrope, mrope_axis_of_pair, mrope_positions
from ...rope_config import rope_inv_freq_from_config
from ...utils import cpu_float64

#: Tokens per forward call, and query heads per token.
TOKENS = 16
HEADS = 2
#: The seed of the inputs (standard normal, float32, one draw per case and call).
SEED = 0
#: One float32 unit in the last place, relative: 2⁻²⁴.
EPS32 = 2.0**-24
SCHEDULES = ("inside", "far", "kv")
#: M-RoPE rows' fourth schedule, "image": a prompt of 4 text tokens, an image of
#: 3 × 4 merged patches and 4 text tokens (:func:`posenc.rope_nd.mrope_positions`), its
#: ids from 0, then two text tokens decoded at the next ids (largest id + 1, + 2).
IMAGE = (4, (1, 3, 4), 4)
#: M-RoPE's keys: how the pairs are split between the position axes, which text
#: positions (equal on every axis) do not exercise.
MROPE_KEYS = ("mrope_section", "mrope_interleaved")


@dataclasses.dataclass(frozen=True)
class Case:
    """One row of the matrix.

    Attributes:
        name: its key, e.g. ``"yarn-deepseek"``.
        setting: the row in words, as the page's table shows it.
        model: the released configuration's slug (``released_configs()``).
        layer_type: the layer type whose parameters are used (``"*"`` when one set
            serves every layer).
        layout: ``"half"`` (GPT-NeoX / transformers' ``rotate_half``) or
            ``"interleaved"`` (GPT-J / Meta's original code), as the model runs it.
        overrides: keys set over the released parameters (a documented deployment
            setting, e.g. Qwen3's YaRN), else empty.
        config_overrides: keys set over the released config's top level (the
            ``max_position_embeddings`` that setting serves), else empty.
        note: where the layout or the override comes from.
    """

    name: str
    setting: str
    model: str
    layer_type: str = "*"
    layout: str = "half"
    overrides: tuple = ()
    config_overrides: tuple = ()
    note: str = ""

    @functools.cached_property
    def config(self) -> dict:
        config = text_part(dict(released_configs()[self.model].config))
        return {**config, **dict(self.config_overrides)}

    @functools.cached_property
    def rope_parameters(self) -> dict:
        """The standardized transformers v5 parameters of the layer type, overrides
        applied (``rope_type``, ``rope_theta``, every key of the rule)."""
        by_type, _ = rope_parameters_by_type(self.config)
        params = {k: v for k, v in by_type[self.layer_type].items() if k != "type"}
        params.update(dict(self.overrides))
        return params

    @property
    def head_dim(self) -> int:
        return head_dim_of(self.config, self.layer_type)

    @property
    def max_position_embeddings(self) -> int | None:
        return self.config.get("max_position_embeddings")

    @property
    def original_length(self) -> int:
        """L: the original context the schedules are placed against."""
        params = self.rope_parameters
        length = params.get("original_max_position_embeddings")
        length = length or self.max_position_embeddings
        if length is None:
            raise ValueError(f"case {self.name!r}: no original_max_position_embeddings "
                             "and no max_position_embeddings to place the schedules")
        return int(length)

    @property
    def rotary_dim(self) -> int:
        fraction = self.rope_parameters.get("partial_rotary_factor", 1.0)
        return int(self.head_dim * fraction)

    @property
    def mrope_section(self) -> list | None:
        return self.rope_parameters.get("mrope_section")

    def key(self) -> str:
        """A hash of everything the case computes from (its parameters, head_dim,
        layout, schedules, tokens, heads, seed): a stored record of another key is
        stale."""
        text = json.dumps(
            [self.name, self.rope_parameters, self.head_dim, self.layout,
             self.max_position_embeddings, calls(self), HEADS, SEED],
            sort_keys=True, default=str,
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _qwen3_yarn() -> tuple:
    # Qwen3's model card: "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
    # "original_max_position_embeddings": 32768} to serve 131,072 tokens
    return (("rope_type", "yarn"), ("factor", 4.0),
            ("original_max_position_embeddings", 32768))


#: Gemma3TextConfig's default max_position_embeddings, which the released text config
#: leaves out (transformers 5.23).
GEMMA3_LENGTH = (("max_position_embeddings", 131072),)

#: The matrix's rows (issue 42's list, in its order).
CASES: tuple[Case, ...] = (
    Case("default", "default", "qwen3-8b"),
    Case("dynamic", "dynamic NTK (InternLM2.5)", "internlm2.5-7b"),
    Case("yarn", "YaRN, Qwen3's documented setting", "qwen3-8b",
         overrides=_qwen3_yarn(),
         config_overrides=(("max_position_embeddings", 131072),),
         note="Qwen3-8B's model card: rope_scaling for 131,072 tokens"),
    Case("yarn-deepseek", "YaRN with DeepSeek-V3's mscale and mscale_all_dim",
         "deepseek-v3", layout="interleaved",
         note="DeepseekV3Config's rope_interleave (True): the rope slice interleaved"),
    Case("yarn-gpt-oss", "YaRN with gpt-oss's truncate: false", "gpt-oss-20b"),
    Case("llama3", "Llama 3.1's llama3 rule", "llama-3.1-8b"),
    Case("longrope", "LongRoPE (Phi-3.5-mini)", "phi-3.5-mini-instruct"),
    Case("partial", "partial rotary, half of each head (GLM-4)", "glm-4-9b-chat",
         layout="interleaved",
         note="GLM's apply_rotary_pos_emb pairs adjacent features (transformers' glm)"),
    Case("interleaved", "default, interleaved layout (Llama 2 in Meta's code)",
         "llama-2-7b", layout="interleaved",
         note="Meta's llama reference code, and GGUF's permuted q/k weights"),
    Case("mrope", "M-RoPE (Qwen2-VL)", "qwen2-vl-7b-instruct"),
    Case("mrope-interleaved", "interleaved M-RoPE (Qwen3-VL)", "qwen3-vl-32b-instruct"),
    Case("gemma3-sliding", "Gemma 3's sliding layers (local base, unscaled)",
         "gemma-3-4b", "sliding_attention",
         config_overrides=GEMMA3_LENGTH),
    Case("gemma3-full", "linear: Gemma 3's full layers (factor 8)", "gemma-3-4b",
         "full_attention",
         config_overrides=GEMMA3_LENGTH),
)


def case(name: str) -> Case:
    """The row called ``name``.

    Raises:
        KeyError: no such row (the message lists them).
    """
    for c in CASES:
        if c.name == name:
            return c
    raise KeyError(f"no case {name!r}; the matrix has {[c.name for c in CASES]}")


def calls(c: Case) -> list[tuple[str, int, int]]:
    """The forward calls of the schedules, in order, as ``[(schedule, offset, tokens),
    ...]``: a call covers positions offset … offset + tokens − 1 (:data:`TOKENS`, one
    for a decode step), except the M-RoPE rows' image prefill, whose (3, T) ids start
    at offset (:func:`positions`)."""
    length = c.original_length
    plan = {
        "inside": [length // 2],
        "far": [4 * length],
        "kv": [length - TOKENS - 1, length - 1, length, length + 1],
    }
    out = []
    for name in SCHEDULES:
        for k, offset in enumerate(plan[name]):
            out.append((name, offset, TOKENS if name != "kv" or k == 0 else 1))
    if c.mrope_section:
        ids = mrope_positions(IMAGE)
        start = 0  # a prompt that opens with text, then the image
        after = start + int(ids.max()) + 1
        out += [("image", start, ids.shape[-1]), ("image", after, 1),
                ("image", after + 1, 1)]
    return out


def positions(c: Case, offset: int, tokens: int) -> torch.Tensor:
    """The ids of the call at ``offset``: (tokens,) int64 offset … offset + tokens − 1;
    for an M-RoPE row (3, tokens), rows (temporal, height, width), equal for text and
    :data:`IMAGE`'s ids from offset for the image prefill."""
    if not c.mrope_section:
        return torch.arange(offset, offset + tokens)
    if ("image", offset, tokens) in calls(c) and tokens > 1:
        return mrope_positions(IMAGE) + offset
    return torch.arange(offset, offset + tokens).expand(3, tokens).clone()


def _last(c: Case, x: torch.Tensor, offset: int) -> int:
    """The largest id of the call (its length ℓ is this + 1)."""
    return int(positions(c, offset, x.shape[-2]).max())


def inputs(c: Case) -> list[torch.Tensor]:
    """One input per call of :func:`calls`: (1, :data:`HEADS`, T, head_dim) float32,
    standard normal from :data:`SEED` and the call's index."""
    out = []
    for k, (_, _, tokens) in enumerate(calls(c)):
        generator = torch.Generator().manual_seed(SEED * 1000 + k)
        out.append(torch.randn(1, HEADS, tokens, c.head_dim, generator=generator))
    return out


def _frequencies(c: Case, seq_len: int) -> tuple[torch.Tensor, float]:
    """posenc's (inv_freq, attention_factor) of a call of length ``seq_len`` (M-RoPE's
    sections aside: text positions are equal on its three axes)."""
    params = {k: v for k, v in c.rope_parameters.items() if k not in MROPE_KEYS}
    return rope_inv_freq_from_config(
        params, c.head_dim, max_position_embeddings=c.max_position_embeddings,
        seq_len=seq_len,
    )


def _angles(c: Case, ids: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """(T, r/2) float32 angles: each pair's id (M-RoPE: the id of the axis the pair
    reads, :func:`posenc.rope_nd.mrope_axis_of_pair`) times its frequency."""
    if ids.dim() == 1:
        return ids.float()[:, None] * inv_freq
    axis = mrope_axis_of_pair(c.mrope_section, c.head_dim,
                              mrope_interleaved=bool(c.rope_parameters.get(
                                  "mrope_interleaved", False)))
    return ids.float()[torch.tensor(axis)].T * inv_freq


def reference(c: Case, x: torch.Tensor, offset: int) -> torch.Tensor:
    """posenc's rotation of one call: x (1, H, T, head_dim) at the call's ids
    (:func:`positions`), its frequencies from the call's length ℓ = largest id + 1
    (dynamic and LongRoPE as transformers computes them per forward call), float32.
    An M-RoPE image call is :func:`posenc.rope_nd.apply_mrope` (the M-RoPE rows use
    the default frequencies)."""
    ids = positions(c, offset, x.shape[-2])
    inv_freq, attention_factor = _frequencies(c, _last(c, x, offset) + 1)
    if ids.dim() == 2 and not torch.equal(ids[0], ids[1]):
        assert c.rope_parameters["rope_type"] == "default", c.name
        return apply_mrope(x, ids, c.mrope_section,
                           base=float(c.rope_parameters["rope_theta"]),
                           mrope_interleaved=bool(c.rope_parameters.get(
                               "mrope_interleaved", False)))
    return apply_rope(x, ids[0] if ids.dim() == 2 else ids, inv_freq=inv_freq,
                      layout=c.layout, attention_factor=attention_factor)


def _angle_rounding(c: Case, x: torch.Tensor, offset: int) -> tuple[float, float]:
    """(4·2⁻²⁴·(m·θ_max + 1), attention factor) of one call: m its last position,
    θ_max the largest frequency it uses."""
    m = _last(c, x, offset)
    inv_freq, attention_factor = _frequencies(c, m + 1)
    return 4 * EPS32 * (m * float(inv_freq.max()) + 1), attention_factor


def tolerance(c: Case, x: torch.Tensor, offset: int) -> float:
    """4·2⁻²⁴·‖x‖·(m·θ_max + 1): m the call's last position, θ_max the largest
    frequency the call uses, ‖x‖ the largest norm of one head's vector."""
    norm = float(cpu_float64(x).norm(dim=-1).max())
    return norm * _angle_rounding(c, x, offset)[0]



def pair_tolerance(c: Case, x: torch.Tensor, offset: int) -> torch.Tensor:
    """The per-pair bound, (r/2,) float64: 4·2⁻²⁴·‖x‖·((i + 1)·m·θ_i + 1) for pair i,
    times the attention factor (at least 1). The whole-head :func:`tolerance` is set by
    the fastest pair, so it cannot see an error confined to the slow pairs, where the
    scaling rules act; this bound is each pair's own float32 rounding of its angle,
    (i + 1) units of it allowing an engine that builds pair i's angle by i float32
    multiplications (llama.cpp's ``ggml_rope_cache_init``)."""
    m = _last(c, x, offset)
    inv_freq, attention_factor = _frequencies(c, m + 1)
    norm = float(cpu_float64(x).norm(dim=-1).max())
    index = torch.arange(1, len(inv_freq) + 1, dtype=torch.float64)
    bound = 4 * EPS32 * norm * (index * m * cpu_float64(inv_freq) + 1)
    return bound * max(attention_factor, 1.0)


def pair_errors(
    c: Case, a: torch.Tensor, b: torch.Tensor, layout: str
) -> torch.Tensor:
    """(r/2,) float64: the largest |a − b| on each rotated pair's two features
    (``"half"``: features i and i + r/2, as transformers' cos and sin tables;
    ``"interleaved"``: 2i and 2i + 1), over every other axis."""
    r = c.rotary_dim
    err = (cpu_float64(a) - cpu_float64(b)).abs()[..., :r].reshape(-1, r)
    if layout == "half":
        pairs = torch.maximum(err[:, : r // 2], err[:, r // 2:])
    else:
        pairs = torch.maximum(err[:, 0::2], err[:, 1::2])
    return pairs.max(dim=0).values


# --- what an engine that differs computes instead ---------------------------------


def _rotate(c: Case, x: torch.Tensor, offset: int, params: dict, *,
            head_dim: int | None = None, seq_len: int | None = None) -> torch.Tensor:
    """posenc's rotation of one call under ``params`` (a rope_parameters dict) in place
    of the row's own, over ``head_dim`` features (the row's by default), with the
    frequencies of a call of length ``seq_len`` (the call's own by default)."""
    positions = torch.arange(offset, offset + x.shape[-2])
    inv_freq, attention_factor = rope_inv_freq_from_config(
        params, head_dim or c.head_dim,
        max_position_embeddings=c.max_position_embeddings,
        seq_len=seq_len or offset + x.shape[-2],
    )
    return apply_rope(x, positions, inv_freq=inv_freq, layout=c.layout,
                      attention_factor=attention_factor)


#: The base a model file falls back to when it finds no ``rope_theta`` (the RoPE
#: paper's, the dataclass default of mlx-lm's llama, internlm2 and glm ModelArgs).
FALLBACK_THETA = 10000.0


def _sequence_end(c: Case, offset: int) -> int:
    """The length the schedule of the call at ``offset`` reaches (its last call's last
    position + 1)."""
    schedule = next(name for name, start, _ in calls(c) if start == offset)
    return max(start + tokens for name, start, tokens in calls(c) if name == schedule)


def _leftover_pairs(c: Case) -> list[int]:
    """Interleaved M-RoPE's pairs that no axis claims by llama.cpp's rule (pair i is
    the height's if i ≡ 1 mod 3 and i < 3·s_h, the width's if i ≡ 2 and i < 3·s_w, the
    time's if i ≡ 0 and i < 3·s_t): with Qwen3-VL's [24, 20, 20], pairs 61 and 62,
    which transformers gives the temporal id."""
    t, h, w = c.mrope_section
    return [i for i in range(c.rotary_dim // 2)
            if not ((i % 3 == 1 and i < 3 * h) or (i % 3 == 2 and i < 3 * w)
                    or (i % 3 == 0 and i < 3 * t))]


def _rotate_still(c: Case, x: torch.Tensor, offset: int, still: list) -> torch.Tensor:
    """:func:`reference` (an M-RoPE row, half layout, default frequencies) with the
    pairs ``still`` left unrotated (their angle 0)."""
    ids = positions(c, offset, x.shape[-2])
    inv_freq, _ = _frequencies(c, _last(c, x, offset) + 1)
    angles = _angles(c, ids, inv_freq)
    angles[:, still] = 0.0
    cos, sin = angles.cos(), angles.sin()
    half = c.rotary_dim // 2
    x1, x2, rest = x[..., :half], x[..., half:2 * half], x[..., 2 * half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest), dim=-1)


def _plain(c: Case, *, whole_head: bool = False, theta: float | None = None) -> dict:
    params = {"rope_type": "default",
              "rope_theta": theta or c.rope_parameters["rope_theta"]}
    fraction = c.rope_parameters.get("partial_rotary_factor", 1.0)
    if fraction != 1.0 and not whole_head:
        params["partial_rotary_factor"] = fraction
    return params


def hypotheses(c: Case) -> dict:
    """What an engine that differs from the row might compute instead, each a function
    ``(x, offset) -> rotated x`` like :func:`reference`, for the rows it applies to:

    * ``"unscaled"``: plain RoPE at the row's ``rope_theta`` and rotated width, the
      scaling rule dropped (an engine that does not read the row's ``rope_type``);
    * ``"whole head, unscaled"``: plain RoPE over the whole head, where the row
      rotates a fraction (``partial_rotary_factor`` ignored);
    * ``"long factors throughout"``: LongRoPE's long factors at every position (MLX's
      ``SuScaledRoPE``), where transformers uses the short ones inside L;
    * ``"one factor set per sequence"``: LongRoPE's factors chosen once for the whole
      sequence (its schedule), by the length it reaches (llama.cpp chooses them by the
      context size), where transformers chooses them per forward call;
    * ``"truncated"``: YaRN with ``truncate: true`` (the correction range rounded to
      whole pairs), where the row says ``false`` (gpt-oss);
    * ``"leftover pairs unrotated"``: interleaved M-RoPE with the pairs no axis
      claims by llama.cpp's rule left still (:func:`_leftover_pairs`);
    * ``"unscaled, base 10,000"`` and ``"whole head, base 10,000"``: the same at
      :data:`FALLBACK_THETA`, where the row's ``rope_theta`` differs (a model file
      that finds neither the scaling nor the base where it looks).

    The tier stores each one's worst ratio for a row an engine does not match, so the
    page can say what the engine computes rather than only that it differs."""
    params, out = c.rope_parameters, {}
    if params["rope_type"] != "default":
        out["unscaled"] = lambda x, m: _rotate(c, x, m, _plain(c))
    if c.rotary_dim != c.head_dim:
        out["whole head, unscaled"] = lambda x, m: _rotate(
            c, x, m, _plain(c, whole_head=True))
    if params["rope_type"] == "longrope":
        rule = {k: v for k, v in params.items() if k not in MROPE_KEYS}
        out["long factors throughout"] = lambda x, m: _rotate(
            c, x, m, rule, seq_len=max(m + x.shape[-2], c.original_length + 1))
        out["one factor set per sequence"] = lambda x, m: _rotate(
            c, x, m, rule, seq_len=_sequence_end(c, m))
    if params.get("truncate") is False:
        out["truncated"] = lambda x, m: _rotate(c, x, m, {**params, "truncate": True})
    if params.get("mrope_interleaved"):
        out["leftover pairs unrotated"] = lambda x, m: _rotate_still(
            c, x, m, _leftover_pairs(c))
    if float(params["rope_theta"]) != FALLBACK_THETA:
        out["unscaled, base 10,000"] = lambda x, m: _rotate(
            c, x, m, _plain(c, theta=FALLBACK_THETA))
        if c.rotary_dim != c.head_dim:
            out["whole head, base 10,000"] = lambda x, m: _rotate(
                c, x, m, _plain(c, whole_head=True, theta=FALLBACK_THETA))
    return out

# --- transformers, as the model runs it -----------------------------------------------


def transformers_config(c: Case):
    """The case's configuration read by the model's config class (transformers 5.23;
    the record's ``parse_as`` class where the model's own is not in transformers), the
    case's overrides applied: its text config."""
    from transformers import CONFIG_MAPPING

    record = released_configs()[c.model]
    text = dict(c.config)
    if c.overrides:
        text.pop("rope_scaling", None)
        text["rope_parameters"] = c.rope_parameters
    model_type = record.parse_as or text["model_type"]
    return CONFIG_MAPPING[model_type](**text).get_text_config()


def transformers_rotary(c: Case):
    """The model's own rotary embedding module, built from
    :func:`transformers_config`."""
    return model_rotary_embedding(transformers_config(c))


def saved_config(c: Case) -> dict:
    """The case's config.json as transformers 5.23 saves it (``save_pretrained``
    writes ``to_json_string``): RoPE settings under ``rope_parameters`` only."""
    return json.loads(transformers_config(c).to_json_string())


def released_config(c: Case) -> dict:
    """The case's config.json as its authors released it (transformers 4's keys:
    top-level ``rope_theta``, ``rope_scaling``), the row's overrides set under
    ``rope_scaling`` as its model card says to. A record transcribed in transformers
    5's keys (Gemma 3's, from transformers' conversion script) is written in
    transformers 4's, the form of the checkpoints released before transformers 5:
    the full-attention layers' rule under ``rope_scaling`` (Gemma 3's config.json:
    ``{"rope_type": "linear", "factor": 8.0}``), the bases at the top level."""
    config = dict(c.config)
    params = config.pop("rope_parameters", None)
    if params is not None:
        if all(isinstance(v, dict) for v in params.values()):  # one rule per type
            params = params.get("full_attention", {})
        params = {k: v for k, v in params.items() if k != "rope_theta"}
        plain = params.get("rope_type") == "default"
        config["rope_scaling"] = None if plain else params
    if c.overrides:
        config["rope_scaling"] = {**(config.get("rope_scaling") or {}),
                                  **dict(c.overrides)}
    return config


def layer_index(c: Case, config: dict) -> int:
    """The first layer of the case's layer type in ``config`` (its
    :func:`saved_config`; 0 when one type serves all)."""
    types = config.get("layer_types") or []
    return types.index(c.layer_type) if c.layer_type in types else 0


def transformers_cos_sin(rotary, c: Case, x: torch.Tensor, offset: int):
    """(cos, sin), float32 (T, rotary_dim), of one forward call of ``rotary``
    (:func:`transformers_rotary`; called in the schedule's order, so its dynamic and
    LongRoPE state carries over as in generation), at the call's ids
    (:func:`positions`: M-RoPE's (3, 1, T), its module recomposing the axes' tables)."""
    ids = positions(c, offset, x.shape[-2])
    position_ids = ids[:, None] if ids.dim() == 2 else ids[None]
    kwargs = {} if c.layer_type == "*" else {"layer_type": c.layer_type}
    cos, sin = rotary(x, position_ids, **kwargs)
    if cos.dim() == 4:  # (3, B, T, r): one table per axis (older M-RoPE modules)
        raise ValueError(f"case {c.name!r}: the rotary module returned one table per "
                         "axis; the tier compares the recomposed (B, T, r) table")
    cos, sin = cos[0].float(), sin[0].float()
    if cos.shape[-1] == c.rotary_dim // 2:  # gpt-oss keeps one angle per pair
        cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
    return cos, sin


def reference_cos_sin(c: Case, x: torch.Tensor, offset: int):
    """posenc's (cos, sin), float32 (T, rotary_dim), in transformers' half layout, of
    the call :func:`reference` rotates with (M-RoPE: each pair at its axis's id)."""
    inv_freq, attention_factor = _frequencies(c, _last(c, x, offset) + 1)
    ids = positions(c, offset, x.shape[-2])
    if ids.dim() == 1:
        return rope_cos_sin(ids, inv_freq, attention_factor=attention_factor)
    angles = _angles(c, ids, inv_freq)
    cos, sin = angles.cos() * attention_factor, angles.sin() * attention_factor
    return torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)


def cos_sin_tolerance(c: Case, x: torch.Tensor, offset: int) -> float:
    """:func:`tolerance` for the (cos, sin) tables: 4·2⁻²⁴·(m·θ_max + 1) times the
    attention factor (at least 1) that scales them."""
    bound, attention_factor = _angle_rounding(c, x, offset)
    return bound * max(attention_factor, 1.0)
