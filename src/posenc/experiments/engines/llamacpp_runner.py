"""Run llama.cpp's rotary code on the engines tier's inputs (issue 42), the way a user
meets it: the case's config.json goes through llama.cpp's own converter into GGUF
keys, the keys become the engine's rope parameters as llama.cpp's loader and context
set them, and ggml's own rope kernel rotates the inputs. Executed by the llama.cpp
engine's Python (``.venv-engines/llamacpp``); imports numpy, torch (the converter's)
and llama.cpp's converter and ggml libraries only, never posenc.

Usage: ``python llamacpp_runner.py REQUEST.json``, the tier's request (``tier.py``,
``_request``); per case it reads ``saved`` (``model_type``, ``config``: the config.json
transformers 5.23 saves; ``layer_idx``), ``traditional`` (True: the input is in pair
order) and ``calls`` (``[offset, in.npy, out.npy]``, each input (1, H, T, head_dim)
float32 at positions offset … offset + T − 1). The last stdout line is JSON: engine,
versions, device, python, ``refused`` (empty: ggml computes every angle from the
integer position, so no position is past a table) and ``gguf``: per case the rope
keys the converter wrote, the extra rope tensors, and the parameters used.

Three steps per case, all at llama.cpp commit 0c1e570 (vendored in the
llama-cpp-python 0.3.36 sdist, ``vendor/llama.cpp``):

1. GGUF keys (:func:`gguf_keys`): the converter's model class
   (``conversion/__init__.py`` ``get_model_class``, chosen by the config's
   ``architectures`` as ``convert_hf_to_gguf.py`` main does) is built on a folder that
   holds only config.json — its hparams read by ``ModelBase.load_hparams``
   (``AutoConfig.from_pretrained(...).to_dict()``) — and runs its own
   ``set_gguf_parameters()`` into its ``gguf.GGUFWriter`` and its
   ``generate_extra_tensors()`` (llama3's ``rope_freqs``, LongRoPE's
   ``rope_factors_long/short``). The one stub: ``index_tensors`` returns no weights
   (a subclass overrides it; nothing else is replaced), and ``ftype`` is ALL_F32, so
   the converter does not look at tensors to guess a dtype. A config without
   ``architectures`` (transformers saves the text part of Gemma 3 and the Qwen-VLs,
   and GLM, without it) gets the class transformers names for the full model
   (:data:`ARCHITECTURES`).
2. Engine parameters (:func:`engine_parameters`), from the keys as
   ``src/llama-model.cpp`` ``load_hparams`` (1406-1491), the arch's
   ``load_arch_hparams`` (``src/models/<arch>.cpp``) and ``src/llama-context.cpp``
   (cparams, 130-214) set them under default context parameters, with n_ctx = the
   smallest context that holds the positions a cache sequence reaches (a run of
   calls each starting where the last ended), padded to 256 (llama-context.cpp 290):
   the setting a user serving those positions makes; it decides LongRoPE's factors
   (``llama_model::get_rope_factors``, llama-model.cpp 2337-2350).
3. ggml's kernel (:class:`Ggml`): ``ggml_rope_ext`` (``ggml_rope_multi`` for M-RoPE,
   position rows t, h, w = p and e = 0 as ``llm_graph_input_pos::set_input`` fills
   them for text, llama-graph.cpp 131-141) on the bundled ``libggml-base.so`` and
   ``libggml-cpu.so`` through ctypes (signatures: ``ggml/include/ggml.h`` 677-682,
   842-866, 884, 1892-1951, 2873, 2889; ``ggml-cpu.h`` 74, 126), one thread.

Layout: the arches that rotate adjacent pairs (mode NORMAL: llama, internlm2,
deepseek2, chatglm) get q/k rows the converter permuted into pair order
(``conversion/llama.py`` ``LlamaModel.permute``: feature 2j + s of a head comes from
feature s·(D/2) + j). An input in transformers' half layout (``traditional`` False) is
therefore permuted the same way before ggml, and the output permuted back; an
interleaved input (``traditional`` True: DeepSeek's rope slice, GLM, Meta's Llama) is
already in pair order and goes to ggml as it is.
"""

import ctypes
import importlib.metadata
import json
import logging
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np

SDIST = "llama_cpp_python-0.3.36"
#: Where ``make engines`` unpacks the converter from the sdist (it is not in the wheel).
SOURCE = Path(sys.prefix) / "sdist" / SDIST / "vendor" / "llama.cpp"

#: The class transformers 5.23 names for the full model, for a saved text config
#: that carries no ``architectures`` (its ``model_type`` → the converter's key).
ARCHITECTURES = {
    "glm": "GlmForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
    "qwen2_vl_text": "Qwen2VLForConditionalGeneration",
    "qwen3_vl_text": "Qwen3VLForConditionalGeneration",
}

NORMAL, NEOX, MROPE, IMROPE = 0, 2, 8, 40  # ggml.h 250-254
#: GGUF arch → (rope mode, where llama.cpp says so, does its graph pass freq factors
#: (``model.get_rope_factors``), its sliding-window rule): ``llama_model_rope_type``
#: (llama-model.cpp 3023-3211) and the arch's ``src/models/<arch>.cpp``.
ARCHES = {
    "llama": (NORMAL, "llama-model.cpp:3052,3095; models/llama.cpp:140-155", True,
              None),
    "internlm2": (NORMAL, "llama-model.cpp:3058,3095; models/internlm2.cpp:74-83",
                  False, None),
    "deepseek2": (NORMAL, "llama-model.cpp:3067,3095; models/deepseek2.cpp:316-323",
                  False, None),
    "chatglm": (NORMAL, "llama-model.cpp:3073,3095; models/chatglm.cpp:90-99",
                False, None),
    "qwen3": (NEOX, "llama-model.cpp:3120,3177; models/qwen3.cpp:91-103", False, None),
    "phi3": (NEOX, "llama-model.cpp:3127,3177; models/phi3.cpp:97-116", True,
             None),  # phi3.cpp 13-24: 'Phi SWA is currently disabled'
    # gemma3.cpp 3-12: pattern 6, freq_base_swa read, freq_scale_swa left at 1.0
    "gemma3": (NEOX, "llama-model.cpp:3134,3177; models/gemma3.cpp:110-145", False,
               (6, False)),
    # openai-moe.cpp 3-13: pattern 2, the swa layers copy base and scale
    "gpt-oss": (NEOX, "llama-model.cpp:3153,3177; models/openai-moe.cpp:78-104",
                False, (2, True)),
    "qwen2vl": (MROPE, "llama-model.cpp:3187-3189; models/qwen2vl.cpp:59-87", False,
                None),
    "qwen3vl": (IMROPE, "llama-model.cpp:3190-3196; models/qwen3vl.cpp:75-114",
                False, None),
}


# --- 1. the converter ----------------------------------------------------------------


def converter():
    """llama.cpp's converter package, importing its own gguf-py first as
    ``convert_hf_to_gguf.py`` does (lines 14-15)."""
    if not (SOURCE / "conversion").is_dir():
        raise FileNotFoundError(f"llama.cpp's converter is not at {SOURCE}: unpack "
                                f"{SDIST}.tar.gz there (make engines)")
    for k, path in enumerate((SOURCE, SOURCE / "gguf-py")):
        if str(path) not in sys.path:
            sys.path.insert(k, str(path))
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    import conversion

    return conversion


def gguf_keys(config: dict) -> tuple[str, dict, dict]:
    """(GGUF arch, {key: value} as the converter writes them, {tensor name: list of
    float32}) for a config.json dict, without weights or a vocabulary."""
    conversion = converter()  # first: its gguf-py, not PyPI's gguf (no DFLASH)
    import gguf
    import torch

    base = conversion.base
    config = dict(config)
    if not config.get("architectures"):
        config["architectures"] = [ARCHITECTURES[config["model_type"]]]
    with tempfile.TemporaryDirectory() as tmp, torch.inference_mode():
        folder = Path(tmp)
        (folder / "config.json").write_text(json.dumps(config))
        hparams = base.ModelBase.load_hparams(folder, False)
        cls = conversion.get_model_class(
            base.get_model_architecture(hparams, base.ModelType.TEXT))
        stub = type(cls.__name__, (cls,), {"model_arch": cls.model_arch,
                                           "index_tensors": _no_tensors})
        model = stub(folder, gguf.LlamaFileType.ALL_F32, folder / "out.gguf",
                     eager=True)
        model.set_gguf_parameters()
        tensors = {name: [float(v) for v in t.float().flatten()]
                   for name, t in model.generate_extra_tensors()}
        arch = model.gguf_writer.arch
        keys = {k: _plain(v.value) for k, v in model.gguf_writer.kv_data[0].items()}
    return arch, keys, tensors


def _no_tensors(self, remote_hf_model_id=None):
    return {}


def _plain(value):
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return value.decode()
    return value.item() if hasattr(value, "item") else value


def rope_keys(arch: str, keys: dict) -> dict:
    """The keys llama.cpp's rope reads: ``<arch>.rope.*``, the context length, the
    head sizes and the sliding-window keys."""
    wanted = ("context_length", "embedding_length", "attention.head_count",
              "attention.key_length", "attention.sliding_window")
    return {k: v for k, v in keys.items()
            if k.startswith(f"{arch}.rope.") or k.split(".", 1)[-1] in wanted
            or k.startswith(f"{arch}.attention.sliding_window")}


# --- 2. the engine's parameters ------------------------------------------------------


def _f32(x) -> np.float32:
    return np.float32(x)


def engine_parameters(arch: str, keys: dict, tensors: dict, layer_idx: int,
                      n_ctx: int) -> dict:
    """The arguments of the ``ggml_rope_ext`` call llama.cpp makes for layer
    ``layer_idx``'s q under default context parameters and context ``n_ctx``."""
    if arch not in ARCHES:
        raise KeyError(f"no rope rule here for GGUF arch {arch!r}; known: "
                       f"{sorted(ARCHES)}")
    mode, where, uses_factors, swa = ARCHES[arch]
    get = lambda name, default=None: keys.get(f"{arch}.{name}", default)  # noqa: E731
    # llama-model.cpp load_hparams
    n_ctx_train = get("context_length")
    n_ctx_orig = get("rope.scaling.original_context_length", n_ctx_train)  # 1410-1411
    freq_base = _f32(get("rope.freq_base", 10000.0))  # 1414-1415
    scaling = get("rope.scaling.type", "linear")  # 1417-1420
    if scaling not in ("none", "linear", "yarn", "longrope"):  # 1034-1039
        raise ValueError(f"llama.cpp refuses rope.scaling.type {scaling!r}")
    factor = get("rope.scaling.factor", get("rope.scale_linear", 0.0))  # 1424-1428
    freq_scale = _f32(1.0) if not factor else _f32(1.0) / _f32(factor)  # 1429
    rope_attn_factor = _f32(get("rope.scaling.attn_factor", 1.0))  # 1431
    head_k = get("attention.key_length",
                 get("embedding_length", 0) // max(1, get("attention.head_count", 1)))
    n_rot = get("rope.dimension_count", head_k)  # 1440-1449
    if arch == "llama" and n_rot != head_k:  # 1450-1454
        raise ValueError(f"invalid n_rot: {n_rot}, expected {head_k}")
    yarn_log_mul = _f32(0.0)
    if arch == "deepseek2" and get("rope.scaling.yarn_log_multiplier") is not None:
        yarn_log_mul = _f32(get("rope.scaling.yarn_log_multiplier")) / _f32(0.1)
    # llama-context.cpp cparams (default llama_context_params: 3766-3776)
    if scaling == "none":
        freq_scale = _f32(1.0)  # 169-171
    ext_factor = _f32(1.0 if scaling == "yarn" else 0.0)  # 173-175
    attn_factor = _f32(1.0)  # hparams.yarn_attn_factor (llama-hparams.h 160)
    if ext_factor != 0:  # 177-212
        f = _f32(1.0) / freq_scale

        def mscale_of(scale, m):
            return _f32(1.0) if scale <= 1 else _f32(0.1) * _f32(m) * np.log(
                _f32(scale)) + _f32(1.0)

        if yarn_log_mul != 0:
            # 'here we assume `mscale == 1.0f`' except DEEPSEEK2 (185-197)
            m = yarn_log_mul if arch == "deepseek2" and yarn_log_mul != 1 else 1.0
            attn_factor = mscale_of(f, m) / mscale_of(f, yarn_log_mul)
        else:
            attn_factor = mscale_of(f, 1.0)
        attn_factor = attn_factor * (_f32(1.0) / (_f32(1.0) + _f32(0.1) * np.log(f)))
    attn_factor = attn_factor * rope_attn_factor  # 214
    # sliding-window layers (llama_model::get_rope_freq_base/scale, 2329-2335)
    is_swa = False
    if swa is not None and get("attention.sliding_window", 0):
        pattern, copies_scale = swa
        pattern = get("attention.sliding_window_pattern", pattern)
        if isinstance(pattern, list):
            is_swa = bool(pattern[layer_idx])
        else:  # llama-hparams.cpp set_swa_pattern 14-16
            is_swa = pattern == 0 or layer_idx % pattern < pattern - 1
    if is_swa:
        base_swa = get("rope.freq_base_swa", freq_base if copies_scale else 10000.0)
        freq_base = _f32(base_swa)
        freq_scale = freq_scale if copies_scale else _f32(1.0)
    # freq factors (get_rope_factors, 2337-2350), passed by the graphs that ask
    factors, which = None, None
    if uses_factors:
        if "rope_freqs.weight" in tensors:
            which = "rope_freqs.weight"
        elif "rope_factors_long.weight" in tensors:
            n_ctx_seq = (n_ctx + 255) // 256 * 256  # llama-context.cpp 290-296
            which = ("rope_factors_long.weight" if n_ctx_seq > n_ctx_orig
                     else "rope_factors_short.weight")
        factors = tensors.get(which)
    sections = get("rope.dimension_sections")
    return {"mode": int(mode), "mode_source": where, "n_dims": int(n_rot),
            "n_ctx_orig": int(n_ctx_orig), "freq_base": float(freq_base),
            "freq_scale": float(freq_scale), "ext_factor": float(ext_factor),
            "attn_factor": float(attn_factor), "beta_fast": 32.0, "beta_slow": 1.0,
            "sections": None if sections is None else [int(s) for s in sections],
            "freq_factors": which, "factors": factors, "is_swa": is_swa,
            "n_ctx": int(n_ctx)}


# --- 3. ggml's kernel ----------------------------------------------------------------


class _InitParams(ctypes.Structure):  # ggml.h 677-682
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p),
                ("no_alloc", ctypes.c_bool)]


class Ggml:
    """ggml's rope through ctypes on llama-cpp-python's bundled libraries."""

    F32, I32 = 0, 26  # ggml.h enum ggml_type

    def __init__(self):
        import llama_cpp

        folder = Path(llama_cpp.__file__).parent / "lib"
        mode = getattr(ctypes, "RTLD_GLOBAL", 0)
        self.base = ctypes.CDLL(str(folder / "libggml-base.so"), mode=mode)
        self.cpu = ctypes.CDLL(str(folder / "libggml-cpu.so"), mode=mode)
        b, p, i64, c_int, c_float = (self.base, ctypes.c_void_p, ctypes.c_int64,
                                     ctypes.c_int, ctypes.c_float)
        b.ggml_init.argtypes, b.ggml_init.restype = [_InitParams], p
        b.ggml_free.argtypes, b.ggml_free.restype = [p], None
        b.ggml_new_tensor_1d.argtypes, b.ggml_new_tensor_1d.restype = [p, c_int, i64], p
        b.ggml_new_tensor_3d.argtypes = [p, c_int, i64, i64, i64]
        b.ggml_new_tensor_3d.restype = p
        b.ggml_get_data.argtypes, b.ggml_get_data.restype = [p], p
        tail = [c_int, c_int, c_float, c_float, c_float, c_float, c_float, c_float]
        b.ggml_rope_ext.argtypes = [p, p, p, p, c_int, *tail]
        b.ggml_rope_ext.restype = p
        b.ggml_rope_multi.argtypes = [p, p, p, p, c_int, ctypes.POINTER(c_int), *tail]
        b.ggml_rope_multi.restype = p
        b.ggml_new_graph.argtypes, b.ggml_new_graph.restype = [p], p
        b.ggml_build_forward_expand.argtypes = [p, p]
        b.ggml_build_forward_expand.restype = None
        self.cpu.ggml_cpu_init.argtypes, self.cpu.ggml_cpu_init.restype = [], None
        self.cpu.ggml_graph_compute_with_ctx.argtypes = [p, p, c_int]
        self.cpu.ggml_graph_compute_with_ctx.restype = c_int
        self.cpu.ggml_cpu_init()

    def _fill(self, tensor, array):
        array = np.ascontiguousarray(array)
        ctypes.memmove(self.base.ggml_get_data(tensor), array.ctypes.data, array.nbytes)

    def rope(self, x: np.ndarray, positions: np.ndarray, p: dict) -> np.ndarray:
        """x (T, H, D) float32 (ne0 = D fastest) at ``positions`` (T,), or for M-RoPE
        (3, T) rows t, h, w (the fourth row, e, is 0) → rotated."""
        tokens, heads, dim = x.shape
        b = self.base
        ctx = b.ggml_init(_InitParams(64 * 2**20, None, False))
        if not ctx:
            raise MemoryError("ggml_init failed")
        try:
            a = b.ggml_new_tensor_3d(ctx, self.F32, dim, heads, tokens)
            self._fill(a, x.astype(np.float32))
            rows = 4 if p["sections"] is not None else 1
            pos = b.ggml_new_tensor_1d(ctx, self.I32, rows * tokens)
            axes = positions.reshape(-1, tokens)  # (1, T) or (3, T)
            pos_rows = (list(axes) * 3)[:3] if rows == 4 else [axes[0]]
            pos_rows += [np.zeros(tokens, dtype=axes.dtype)] * (rows == 4)
            self._fill(pos, np.concatenate(pos_rows).astype(np.int32))
            factors = None
            if p["factors"] is not None:
                factors = b.ggml_new_tensor_1d(ctx, self.F32, len(p["factors"]))
                self._fill(factors, np.asarray(p["factors"], dtype=np.float32))
            tail = (p["mode"], p["n_ctx_orig"], p["freq_base"], p["freq_scale"],
                    p["ext_factor"], p["attn_factor"], p["beta_fast"], p["beta_slow"])
            if p["sections"] is None:
                out = b.ggml_rope_ext(ctx, a, pos, factors, p["n_dims"], *tail)
            else:
                sections = (ctypes.c_int * 4)(*p["sections"])
                out = b.ggml_rope_multi(ctx, a, pos, factors, p["n_dims"], sections,
                                        *tail)
            graph = b.ggml_new_graph(ctx)
            b.ggml_build_forward_expand(graph, out)
            status = self.cpu.ggml_graph_compute_with_ctx(ctx, graph, 1)
            if status != 0:
                raise RuntimeError(f"ggml_graph_compute_with_ctx returned {status}")
            y = np.empty((tokens, heads, dim), dtype=np.float32)
            ctypes.memmove(y.ctypes.data, b.ggml_get_data(out), y.nbytes)
            return y
        finally:
            b.ggml_free(ctx)


def pair_order(dim: int) -> np.ndarray:
    """The converter's q/k permutation (``LlamaModel.permute``) as feature indices:
    ``x[..., pair_order(D)]`` puts a half-layout head in pair order."""
    return np.arange(dim).reshape(2, dim // 2).T.reshape(-1)


def call_positions(call: list) -> np.ndarray:
    """A request call's ids: its (3, T) file for an M-RoPE call, else offset … offset
    + T − 1."""
    offset, source = call[0], call[1]
    if len(call) > 3 and call[3] is not None:
        return np.load(call[3])
    return np.arange(offset, offset + np.load(source, mmap_mode="r").shape[-2])


def contexts(calls: list) -> list[int]:
    """n_ctx per call: one cache sequence is a run of calls, each starting where the
    last ended; its context holds the last position it reaches."""
    out, start = [], 0
    ends = [int(call_positions(call).max()) + 1 for call in calls]
    for k in range(1, len(calls) + 1):
        if k == len(calls) or calls[k][0] != ends[k - 1]:
            out += [ends[k - 1]] * (k - start)
            start = k
    return out


def main(request_path):
    request = json.loads(Path(request_path).read_text())
    ggml, record = Ggml(), {}
    for case in request["cases"]:
        saved = case["saved"]
        arch, keys, tensors = gguf_keys(saved["config"])
        seen = []
        for call, n_ctx in zip(case["calls"], contexts(case["calls"])):
            offset, source, target = call[:3]
            p = engine_parameters(arch, keys, tensors, saved["layer_idx"], n_ctx)
            x = np.load(source)[0].transpose(1, 0, 2)  # (T, H, D)
            dim = x.shape[-1]
            permute = p["mode"] == NORMAL and not case["traditional"]
            order = pair_order(dim)
            if permute:
                x = x[..., order]
            y = ggml.rope(x, call_positions(call), p)
            if permute:
                y = y[..., np.argsort(order)]
            np.save(target, y.transpose(1, 0, 2)[None])
            p = {k: v for k, v in p.items() if k != "factors"}
            if p not in seen:
                seen.append(p)
        record[case["name"]] = {
            "arch": arch, "keys": rope_keys(arch, keys), "tensors": tensors,
            "parameters": seen, "permuted": seen[0]["mode"] == NORMAL
            and not case["traditional"]}
    names = ("llama_cpp_python", "gguf", "numpy", "torch", "transformers")
    versions = {name: importlib.metadata.version(name) for name in names}
    versions["llama.cpp"] = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
    print(json.dumps({"engine": "llama.cpp", "versions": versions, "device": "cpu",
                      "python": platform.python_version(), "refused": {},
                      "gguf": record}))


if __name__ == "__main__":
    main(sys.argv[1])
