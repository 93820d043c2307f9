"""Run mlx-lm's rotary code on the engines tier's inputs (issue 42). Executed by the MLX
engine's own Python (``.venv-engines/mlx``); imports mlx, numpy and mlx-lm's
``rope_utils.py`` only (loaded by its path: ``import mlx_lm`` would import
transformers), never posenc or torch.

Usage: ``python mlx_runner.py REQUEST.json`` where the request is
``{"cases": [{"name", "dims", "base", "traditional", "scaling_config",
"max_position_embeddings", "calls": [[offset, "in.npy", "out.npy"], ...]}, ...]}``.
Each case builds one rope module with ``initialize_rope(dims, base, traditional,
scaling_config, max_position_embeddings)`` — as mlx-lm's llama, qwen3 and gemma3_text
models build theirs — or, with ``"model": {"model_type", "config", "layer_idx"}``, takes
the rope of that layer's attention as mlx-lm's model file builds it from the config
(:func:`model_rope`), and runs its calls in order on that module (a KV cache: the
prefill, then each decode step at ``offset`` = the cache's length), each input
(1, H, T, head_dim) float32. Prints the versions it ran as JSON.

Source: mlx-lm 0.32.2, ``mlx_lm/models/rope_utils.py`` (``initialize_rope``,
``DynamicNTKScalingRoPE``, ``YarnRoPE``, ``Llama3RoPE``, ``SuScaledRoPE``); mlx 0.32.4,
``mx.fast.rope``.
"""

import importlib
import importlib.metadata
import importlib.util
import json
import platform
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np


def rope_utils():
    spec = importlib.util.find_spec("mlx_lm")
    path = Path(spec.submodule_search_locations[0]) / "models" / "rope_utils.py"
    module_spec = importlib.util.spec_from_file_location("mlx_lm_rope_utils", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def model_rope(model_type, config, layer_idx):
    """The rope module of layer ``layer_idx``'s attention, as mlx-lm's model file
    ``mlx_lm/models/<model_type>.py`` builds it from a config.json dict (its
    ``ModelArgs.from_dict``): the route a user's checkpoint takes."""
    module = importlib.import_module(f"mlx_lm.models.{model_type}")
    args = module.ModelArgs.from_dict(config)
    classes = sorted(name for name in vars(module) if "Attention" in name)
    for name in classes:  # Attention, or the model's own (DeepseekV3Attention)
        for call in ((args, layer_idx), (args,)):
            try:
                attention = getattr(module, name)(*call)
            except TypeError:
                continue
            if hasattr(attention, "rope"):
                return attention.rope
    raise LookupError(f"no attention with a rope in mlx_lm.models.{model_type}: "
                      f"{classes}")


def main(request_path):
    request = json.loads(Path(request_path).read_text())
    utils = rope_utils()
    for case in request["cases"]:
        if case.get("model") is not None:
            rope = model_rope(**case["model"])
        else:
            rope = utils.initialize_rope(
                case["dims"], case["base"], case["traditional"],
                case["scaling_config"], case["max_position_embeddings"],
            )
        for offset, source, target, *_ in case["calls"]:
            x = mx.array(np.load(source))
            y = rope(x, offset=offset)
            np.save(target, np.asarray(y.astype(mx.float32)))
    versions = {name: importlib.metadata.version(name)
                for name in ("mlx", "mlx-cpu", "mlx-lm", "numpy")}
    print(json.dumps({"engine": "mlx-lm", "versions": versions,
                      "device": str(mx.default_device()),
                      "python": platform.python_version()}))


if __name__ == "__main__":
    main(sys.argv[1])
