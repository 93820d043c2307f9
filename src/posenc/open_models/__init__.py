"""Positional settings of open models from 2024–2026, read from transformers' configs.

:func:`positional_settings` builds one row per model family by instantiating the
family's config class from Hugging Face transformers (``Cls()``) and reading its
attributes at call time: RoPE base θ (``rope_theta``, per layer type where the class
keeps one per type), RoPE type, scale factor and original context, rotary fraction,
head dimension, context length, the layer pattern (computed from the instantiated
``layer_types`` and ``no_rope_layers`` lists), the attention window or chunk, and
the family's other positional specials. :func:`settings_table` renders the rows as a
Markdown table for the book.

**These are the class defaults of transformers 5.23.0, not necessarily a released
checkpoint's values.** A config class's defaults are one size of the family, and
sometimes not even a current one. The class docstring says which checkpoint they are
"similar to" (the row's ``docstring_checkpoint``):

* ``LlamaConfig`` — meta-llama/Llama-2-7b-hf (θ 10 000, 2 048 positions): the class
  that runs Llama 3.1 holds Llama 2's defaults. The ``llama3`` RoPE parameters
  appear only as comments in transformers' ``_compute_llama3_parameters`` ("llama
  3.1"); the "Llama 3.1" row is read from those comments and has no θ.
* ``Llama4TextConfig`` — Llama-4-Scout-17B-16E; ``Gemma3TextConfig`` —
  gemma-3-4b-it (its example calls the defaults "gemma3_text-7b style");
  ``Gemma4TextConfig`` — gemma-4-e2b-it; ``SmolLM3Config`` — SmolLM3-3B;
  ``Phi3Config`` — Phi-3-mini-4k-instruct (no Phi-4-mini values in the class);
  ``Qwen2VLTextConfig`` and ``Qwen2_5_VLTextConfig`` — both Qwen2-VL-7B-Instruct;
  ``Qwen3Config`` — Qwen3-8B; ``GptOssConfig`` — gpt-oss-20b; ``MinistralConfig`` —
  Ministral-8B-Instruct-2410; ``Ministral3Config`` — Ministral-3-8B-Base-2512;
  ``Olmo2Config`` — OLMo-2-1124-7B; ``Olmo3Config`` — Olmo-3-7B-Instruct.
* ``Cohere2Config`` (Command R7B's class) names c4ai-command-r-v01, the checkpoint
  ``CohereConfig`` names too; ``DeepseekV3Config`` names bzantium/tiny-deepseek-v3,
  yet its defaults are full-size (61 layers, width 7168) with plain RoPE, no YaRN.

A value that is neither in the class nor in its docstring is ``None`` (the table
shows "—"): for instance the YaRN/llama3 scaling of released Llama 4, Gemma 3,
DeepSeek-V3 or Phi-4-mini checkpoints. For a real checkpoint, read its own config::

    cfg = transformers.AutoConfig.from_pretrained("Qwen/Qwen3-8B")
    cfg.rope_parameters, cfg.layer_types, cfg.sliding_window

(``rope_parameters`` is keyed by layer type for Gemma 3/4 and Olmo 3.)

Source: transformers 5.23.0, ``models/<name>/configuration_<name>.py`` for each class,
``modeling_rope_utils.py`` (llama3 and proportional RoPE), and the modeling files
cited in the rows' ``specials`` where a behaviour lives in the model, not the config.

The package's modules: :mod:`~posenc.open_models.config` (reading one config class:
the row's keys, the layer pattern, the generic row), :mod:`~posenc.open_models.families`
(one row function per family, :data:`FAMILIES`, :func:`positional_settings`) and
:mod:`~posenc.open_models.table` (:func:`settings_table`).
"""

from .config import (
    FIELDS,
    TRANSFORMERS_VERSION,
    TransformersUnavailableError,
    layer_pattern,
)
from .families import FAMILIES, positional_settings
from .released_configs import ReleasedConfig, released_configs
from .table import settings_table

__all__ = [
    "FAMILIES",
    "FIELDS",
    "ReleasedConfig",
    "TRANSFORMERS_VERSION",
    "TransformersUnavailableError",
    "layer_pattern",
    "positional_settings",
    "released_configs",
    "settings_table",
]
