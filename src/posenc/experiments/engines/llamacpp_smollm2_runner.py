"""Score a token sequence with SmolLM2 in llama.cpp, token by token (issue 42, "On a
real model"). Executed by the llama.cpp engine's Python (``.venv-engines/llamacpp``,
llama-cpp-python 0.3.36); imports llama_cpp and numpy only, never posenc.

Usage: ``python llamacpp_smollm2_runner.py REQUEST.json``. The request:
``model_path`` (the GGUF file), ``tokens`` (an .npy of int64 token ids, (T,)),
``out`` (where the per-token losses go: float64 (T − 1,), entry t = −log p(token t + 1
| tokens ≤ t)), ``n_ctx``, ``n_threads``, ``n_batch`` (= n_ubatch: tokens per
``llama_decode`` call), ``flags`` (keyword arguments of ``llama_cpp.Llama``: the rope
flags of the setting). The last stdout line is JSON: ``engine``, ``versions``,
``device``, ``python``, ``flags``, ``gguf`` (the file's rope and context keys),
``context`` (what llama.cpp's loader and context report about the rope they use:
the ``print_info`` and ``llama_context`` log lines) and ``seconds``.

How the logits are read: ``Llama(logits_all=True)`` would hold a (n_ctx, n_vocab)
float32 array (16,384 × 49,152: 3 GB) and llama.cpp an output buffer as large; the
runner does what ``Llama.eval`` does with ``logits_all`` (llama_cpp/llama.py 666-700:
every token of a batch asks for its logits, ``llama_decode``, ``llama_get_logits``)
one batch at a time, and turns each batch's (n, n_vocab) logits into losses with a
stable log-softmax in float64 before the next (llama.cpp's output buffer holds one
batch: ``n_outputs_max`` = n_batch). The KV cache is llama.cpp's default float16
(``type_k``/``type_v`` GGML_TYPE_F16, llama-context.cpp 3780-3781), the attention
not flash (llama-cpp-python's ``flash_attn=False``), as a user meets them.
"""

import ctypes
import importlib.metadata
import json
import platform
import sys
import time

import numpy as np

import llama_cpp

#: The context and loader lines that say which rope llama.cpp runs
#: (llama-context.cpp 308-328, llama-model.cpp 2100-2115).
LOGGED = ("n_ctx", "n_ctx_seq", "n_batch", "n_ubatch", "flash_attn", "freq_base",
          "freq_scale", "n_ctx_train", "n_rot", "rope type", "rope scaling",
          "freq_base_train", "freq_scale_train", "n_ctx_orig_yarn", "causal_attn",
          "n_outputs_max", "file type")

_LINES = []


@llama_cpp.llama_log_callback
def _log(level, text, user_data):
    _LINES.append(text.decode("utf-8", errors="replace"))


def reported(lines):
    """The log's ``name = value`` lines whose name is in :data:`LOGGED`."""
    out = {}
    for line in "".join(lines).splitlines():
        if "=" not in line or ":" not in line:
            continue
        name, _, value = line.split(":", 1)[1].partition("=")
        if name.strip() in LOGGED:
            out.setdefault(name.strip(), value.strip())
    return out


def log_softmax_losses(logits, targets):
    """−log softmax(logits)[target] per row, float64, (n,) from (n, vocab) float32
    logits, the maximum subtracted first (stable)."""
    z = logits.astype(np.float64)
    z -= z.max(axis=1, keepdims=True)
    log_norm = np.log(np.exp(z).sum(axis=1))
    return log_norm - z[np.arange(len(targets)), targets]


def score(llm, ids, n_batch, rows=256):
    """Per-token losses (T − 1,) float64 of ``ids`` through ``llm``'s context from
    position 0, in batches of ``n_batch`` tokens, every token's logits requested."""
    n_vocab = llm.n_vocab()
    batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
    losses = np.empty(len(ids) - 1, dtype=np.float64)
    try:
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(llm.ctx), True)
        for start in range(0, len(ids), n_batch):
            chunk = ids[start:start + n_batch]
            batch.n_tokens = len(chunk)
            for i, token in enumerate(chunk):
                batch.token[i] = int(token)
                batch.pos[i] = start + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = True
            code = llama_cpp.llama_decode(llm.ctx, batch)
            if code != 0:
                raise RuntimeError(f"llama_decode returned {code} at token {start}")
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits(llm.ctx),
                                           shape=(len(chunk), n_vocab))
            for r in range(0, len(chunk), rows):
                t = np.arange(start + r, min(start + r + rows, start + len(chunk)))
                t = t[t + 1 < len(ids)]  # the last token predicts nothing
                if len(t):
                    losses[t] = log_softmax_losses(logits[t - start], ids[t + 1])
    finally:
        llama_cpp.llama_batch_free(batch)
    return losses


def main(path):
    with open(path) as f:
        request = json.load(f)
    llama_cpp.llama_log_set(_log, ctypes.c_void_p(0))
    ids = np.load(request["tokens"]).astype(np.int64)
    if len(ids) > request["n_ctx"]:
        raise ValueError(f"{len(ids)} tokens do not fit n_ctx {request['n_ctx']}")
    n_batch = request["n_batch"]
    llm = llama_cpp.Llama(request["model_path"], n_ctx=request["n_ctx"],
                          n_batch=n_batch, n_ubatch=n_batch,
                          n_threads=request["n_threads"],
                          n_threads_batch=request["n_threads"], logits_all=False,
                          verbose=True, **request["flags"])
    start = time.perf_counter()
    losses = score(llm, ids, n_batch)
    seconds = time.perf_counter() - start
    np.save(request["out"], losses)
    keys = {k: v for k, v in llm.metadata.items()
            if "rope" in k or "context_length" in k or k == "general.architecture"}
    about = {
        "engine": "llama.cpp",
        "versions": {"llama-cpp-python": importlib.metadata.version("llama-cpp-python"),
                     "numpy": np.__version__},
        "device": "cpu",
        "python": platform.python_version(),
        "flags": request["flags"],
        "gguf": keys,
        "context": reported(_LINES),
        "seconds": round(seconds, 1),
    }
    print(json.dumps(about))


if __name__ == "__main__":
    main(sys.argv[1])
