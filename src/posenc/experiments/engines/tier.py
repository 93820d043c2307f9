"""Run, store and verify the engines tier (issue 42; the package docstring describes
it): ``python -m posenc.experiments.engines.tier [--engine NAME] [--case NAME]``
computes the missing records, ``--verify`` fails when the stored records do not cover
the case matrix, ``--check`` reruns :data:`CHECK_CASES` from scratch in the engine's
environment and requires the stored numbers back.

A record (``src/posenc/results/engines/<engine>-<case>.json``): ``engine``, ``case``,
``key`` (:meth:`~posenc.experiments.engines.cases.Case.key`), ``status``
("compared" or "unsupported"), for "compared" one entry per forward call —
``schedule``, ``offset``, ``tokens``, ``max_abs`` (the largest |engine − posenc| over
the call's rotated queries), ``tolerance`` (:func:`.cases.tolerance`), ``ratio`` — and
``worst_ratio`` (None when the engine refused every call); a call the engine refuses
(a position past the table it serves) has ``status`` "refused" and ``why`` instead of
the numbers; ``engine_report``, what the runner says the engine made of the row (the
GGUF keys and rope parameters of llama.cpp, vLLM's rope class, table rows and
max_model_len); where the worst ratio passes 1, ``hypotheses``: the worst ratio to each
of :func:`.cases.hypotheses` (what the engine might compute instead), by the measure
that saw the difference; ``worst_pair_ratio``, the largest per-pair ratio
(``pair_ratio`` in each call, :func:`.cases.pair_tolerance`); for "unsupported" the
engine's code that shows it (``code``) and why; ``engine_versions`` and ``device`` as
the runner reports them; ``provenance``.
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
import torch

from ..._versions import BOOK_PINS
from ...utils import cpu_float64
from .. import store
from . import cases as C

NAME = "engines"
HERE = Path(__file__).parent
#: The repository's engine environments (``make engines`` creates them).
VENVS = Path(".venv-engines")
COMMAND = "python -m posenc.experiments.engines.tier"
#: The rows ``--check`` recomputes from scratch, and how close it must come.
CHECK_CASES = ("default", "dynamic", "longrope")
CHECK_RTOL = 1e-6


@dataclasses.dataclass(frozen=True)
class Engine:
    """An engine of the tier: its environment and runner (None: transformers, run
    here, in the book's environment, on the model's own rotary module), and the rows
    it cannot run (``{case: (code, why)}``, the code that shows it)."""

    name: str
    runner: str | None
    requirements: str | None
    unsupported: dict
    #: "rope": the engine's rotary code called with the case's parameters; "model":
    #: the rope the engine's model file builds from the case's config.json as
    #: transformers 5.23 saves it (:func:`.cases.saved_config`); "released": the same
    #: from the config.json as released (:func:`.cases.released_config`).
    route: str = "rope"
    venv: str | None = None

    def python(self, root: Path | None = None) -> Path:
        venv = self.venv or self.name
        return (root or Path.cwd()) / VENVS / venv / "bin" / "python"

    def pins(self) -> str:
        """What the engine's results depend on besides the case: the sha256 of its
        requirements file (every package pinned), or for transformers the book's pin
        (:data:`posenc._versions.BOOK_PINS`). A record of other pins is stale."""
        if self.requirements is None:
            return f"transformers=={BOOK_PINS['transformers']}"
        text = (HERE / self.requirements).read_bytes()
        return "sha256:" + hashlib.sha256(text).hexdigest()


_MLX_MROPE = (
    "mlx_lm/models/rope_utils.py: initialize_rope, rope_type 'mrope' -> "
    "nn.RoPE(dims, traditional, base); mlx/fast.cpp: rope(a, dims, traditional, base, "
    "scale, offset) rotates positions offset + arange(T), no position ids",
    "one position per token: M-RoPE's separate time, height and width positions "
    "cannot be passed, so an image cannot be placed (text alone, where the three "
    "are equal, is plain RoPE, which mlx-lm serves)",
)

_HF_LAYOUT = (
    "transformers/models/llama/convert_llama_weights_to_hf.py: permute (q/k rows "
    "to the half layout); mlx_lm/models/llama.py: ModelArgs.rope_traditional = False",
    "a transformers-format checkpoint is in the half layout: this route reads that, "
    "not Meta's interleaved one (the 'mlx' column compares the interleaved layout)",
)

_VLLM_GLM = (
    "vllm/model_executor/models/registry.py 714: GlmForCausalLM -> (transformers, "
    "TransformersForCausalLM)",
    "no code of its own: vLLM serves transformers' GLM through its Transformers "
    "backend, i.e. transformers' own rotary code, which the transformers column "
    "compares (vLLM's chatglm.py serves THUDM's original checkpoints)",
)

ENGINES = {
    "transformers": Engine("transformers", None, None, {}),
    "vllm": Engine("vllm", "vllm_runner.py", "requirements-vllm.txt",
                   {"partial": _VLLM_GLM}),
    "llamacpp": Engine("llamacpp", "llamacpp_runner.py", "requirements-llamacpp.txt",
                       {}),
    "mlx": Engine("mlx", "mlx_runner.py", "requirements-mlx.txt",
                  {"mrope": _MLX_MROPE, "mrope-interleaved": _MLX_MROPE}),
    "mlx-model": Engine("mlx-model", "mlx_runner.py", "requirements-mlx.txt",
                        {"mrope": _MLX_MROPE, "mrope-interleaved": _MLX_MROPE,
                         "interleaved": _HF_LAYOUT},
                        route="model", venv="mlx"),
    "mlx-released": Engine("mlx-released", "mlx_runner.py", "requirements-mlx.txt",
                           {"mrope": _MLX_MROPE, "mrope-interleaved": _MLX_MROPE,
                            "interleaved": _HF_LAYOUT},
                           route="released", venv="mlx"),
}


def record_path(engine: str, case: str) -> Path:
    return store.results_dir(NAME) / f"{engine}-{case}.json"


def _scaling_config(c: C.Case) -> dict | None:
    """The case's parameters as mlx-lm's models pass them (their ``rope_scaling``):
    the rule's keys, without the base and the rotated fraction they pass apart."""
    params = {k: v for k, v in c.rope_parameters.items()
              if k not in ("rope_theta", "partial_rotary_factor", *C.MROPE_KEYS)}
    return None if params.get("rope_type") == "default" else params


def _request(engine: Engine, rows: list[C.Case], folder: Path) -> dict:
    out = []
    for c in rows:
        calls = []
        for k, ((_, offset, tokens), x) in enumerate(zip(C.calls(c), C.inputs(c))):
            source = folder / f"{c.name}-{k}-in.npy"
            target = folder / f"{c.name}-{k}-out.npy"
            np.save(source, x.numpy())
            ids = C.positions(c, offset, tokens)
            where = None
            if ids.dim() == 2:  # M-RoPE: (3, T) ids, rows temporal, height, width
                where = folder / f"{c.name}-{k}-positions.npy"
                np.save(where, ids.numpy())
            calls.append([offset, str(source), str(target), where and str(where)])
        config = C.saved_config(c)
        model = {"model_type": config["model_type"], "config": config,
                 "layer_idx": C.layer_index(c, config)}
        if engine.route == "released":
            model = {**model, "config": C.released_config(c)}
        out.append({"name": c.name, "model": None if engine.route == "rope" else model,
                    "saved": model, "layer_type": c.layer_type,
                    "dims": c.rotary_dim, "head_dim": c.head_dim,
                    "base": float(c.rope_parameters["rope_theta"]),
                    "traditional": c.layout == "interleaved",
                    "rope_parameters": c.rope_parameters,
                    "scaling_config": _scaling_config(c),
                    "max_position_embeddings": c.max_position_embeddings,
                    "original_length": c.original_length,
                    "calls": calls})
    return {"cases": out}


def run_engine(
    engine: Engine, rows: list[C.Case], root: Path | None = None
) -> list[dict]:
    """Run ``rows`` in the engine's environment and compare each call with posenc.

    Raises:
        FileNotFoundError: the engine's environment is missing (``make engines``).
        RuntimeError: the runner failed (the message ends with its stderr).
    """
    if engine.runner is None:
        return [_transformers_record(engine, c) for c in rows]
    python = engine.python(root)
    if not python.exists():
        raise FileNotFoundError(
            f"no environment for engine {engine.name!r} at {python}: "
            "run `make engines`")
    rows = [c for c in rows if c.name not in engine.unsupported]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        request = folder / "request.json"
        request.write_text(json.dumps(_request(engine, rows, folder)))
        done = subprocess.run([str(python), str(HERE / engine.runner), str(request)],
                              capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(
                f"the {engine.name} runner failed:\n{done.stderr[-3000:]}")
        about = json.loads(done.stdout.strip().splitlines()[-1])
        refused = about.get("refused", {})
        records = []
        for c in rows:
            entries, outputs = [], []
            for k, ((schedule, offset, tokens), x) in enumerate(zip(C.calls(c),
                                                                    C.inputs(c))):
                if f"{c.name}/{k}" in refused:
                    entries.append({"schedule": schedule, "offset": offset,
                                    "tokens": tokens, "status": "refused",
                                    "why": refused[f"{c.name}/{k}"]})
                    continue
                theirs = torch.from_numpy(np.load(folder / f"{c.name}-{k}-out.npy"))
                ours = C.reference(c, x, offset)
                entries.append(_entry(schedule, offset, tokens, [(theirs, ours)],
                                      C.tolerance(c, x, offset), c, x, c.layout))
                outputs.append((x, offset, theirs))
            record = _compared(engine, c, about, "rotated q", entries)
            report = {**about.get("cases", {}), **about.get("gguf", {})}.get(c.name)
            if report is not None:  # what the engine made of the row (GGUF keys, table)
                record["engine_report"] = report
            if differs(record):
                record["hypotheses"] = _hypotheses(c, outputs,
                                                   per_pair=record["worst_ratio"] <= 1)
            records.append(record)
    return records


def _hypotheses(c: C.Case, outputs: list, per_pair: bool) -> dict:
    """The worst ratio of the engine's outputs to each of :func:`.cases.hypotheses`
    (≤ 1: the engine computes that instead of the row's rotation), by the measure that
    saw the difference: the whole-head tolerance, or with ``per_pair`` (the cell passes
    that and fails only the per-pair bound) :func:`.cases.pair_tolerance`."""
    out = {}
    for name, rotate in C.hypotheses(c).items():
        ratios = []
        for x, m, theirs in outputs:
            alternative = rotate(x, m)
            if per_pair:
                pairs = C.pair_errors(c, theirs, alternative, c.layout)
                ratios.append(float((pairs / C.pair_tolerance(c, x, m)).max()))
            else:
                whole = (cpu_float64(theirs) - cpu_float64(alternative)).abs().max()
                ratios.append(float(whole) / C.tolerance(c, x, m))
        out[name] = max(ratios)
    return out


def _entry(schedule, offset, tokens, pairs, tol, c, x, layout) -> dict:
    """One call's entry: the largest |theirs − ours| over ``pairs`` of tensors, its
    ratio to the tolerance ``tol``, and ``pair_ratio``: the largest ratio of a rotated
    pair's error to its own bound (:func:`.cases.pair_tolerance`; the pairs of each
    tensor in ``layout``)."""
    pairs = list(pairs)
    max_abs = max(float((cpu_float64(a) - cpu_float64(b)).abs().max())
                  for a, b in pairs)
    bound = C.pair_tolerance(c, x, offset)
    pair_ratio = max(float((C.pair_errors(c, a, b, layout) / bound).max())
                     for a, b in pairs)
    return {"schedule": schedule, "offset": offset, "tokens": tokens,
            "max_abs": max_abs, "tolerance": tol, "ratio": max_abs / tol,
            "pair_ratio": pair_ratio}


def differs(record: dict) -> bool:
    """A compared record differs when a call passes the tolerance or a pair its own
    bound (``worst_ratio`` or ``worst_pair_ratio`` above 1)."""
    return record["status"] == "compared" and max(
        record["worst_ratio"] or 0, record.get("worst_pair_ratio") or 0) > 1


def _compared(engine, c, about, compares, entries) -> dict:
    ratios = [e["ratio"] for e in entries if "ratio" in e]
    pair_ratios = [e["pair_ratio"] for e in entries if "pair_ratio" in e]
    return _record(engine, c, "compared", about, compares=compares, calls=entries,
                   worst_ratio=max(ratios, default=None),
                   worst_pair_ratio=max(pair_ratios, default=None))


def _transformers_record(engine: Engine, c: C.Case) -> dict:
    """transformers' (cos, sin) of each call, from the model's own rotary module run
    in the schedule's order, against posenc's (:func:`.cases.reference_cos_sin`)."""
    import transformers

    rotary, entries = C.transformers_rotary(c), []
    for (schedule, offset, tokens), x in zip(C.calls(c), C.inputs(c)):
        theirs = C.transformers_cos_sin(rotary, c, x, offset)
        ours = C.reference_cos_sin(c, x, offset)
        entries.append(_entry(schedule, offset, tokens, zip(theirs, ours),
                              C.cos_sin_tolerance(c, x, offset), c, x, "half"))
    about = {"versions": {"transformers": transformers.__version__},
             "device": "cpu"}
    return _compared(engine, c, about, "cos/sin", entries)


def _record(engine: Engine, c: C.Case, status: str, about: dict, **fields) -> dict:
    return {"engine": engine.name, "case": c.name, "key": c.key(), "setting": c.setting,
            "pins": engine.pins(), "status": status, **fields,
            "engine_versions": about.get("versions", {}),
            "device": about.get("device"), "provenance": store.provenance()}


def unsupported_records(engine: Engine) -> list[dict]:
    """The records of the rows the engine cannot run (no computation)."""
    return [_record(engine, C.case(name), "unsupported", {}, code=code, why=why)
            for name, (code, why) in engine.unsupported.items()]


def stored(engine: str | None = None, *, strict: bool = True) -> list[dict]:
    """The stored record of every (engine, case), in the matrix's order.

    Raises:
        StaleResultsError: with ``strict``, a row has no record, or one computed for
            other settings (its key differs) or other pins (:meth:`Engine.pins`): the
            message names them.
    """
    names = [engine] if engine else list(ENGINES)
    # a record is current when its settings (the case's key) and pins are
    held = {f"{r['engine']}/{r['case']}/{r.get('key')}/{r.get('pins')}": r
            for r in store.read_records(store.results_dir(NAME)).values()}
    return store.grid_records(
        [(name, c) for name in names for c in C.CASES], held,
        key=lambda run: f"{run[0]}/{run[1].name}/{run[1].key()}/"
                        f"{ENGINES[run[0]].pins()}",
        label=lambda run: f"{run[0]}/{run[1].name}", strict=strict,
        study=f"engines tier ({NAME})", command=COMMAND,
        where=store.results_dir(NAME), target="make engines")


def compute(engine: Engine, only: list[str] | None = None) -> list[Path]:
    """Compute and store the missing records of ``engine`` (all of ``only``'s)."""
    rows = [c for c in C.CASES if only is None or c.name in only]
    if only is None:
        have = {r["case"] for r in stored(engine.name, strict=False)}
        rows = [c for c in rows if c.name not in have]
    records = run_engine(engine, rows)
    records += [r for r in unsupported_records(engine)
                if r["case"] in {c.name for c in rows}]
    return [store.write_json(record_path(r["engine"], r["case"]), r, indent=1)
            for r in records]


def check(engine: Engine) -> int:
    """Recompute :data:`CHECK_CASES` and require each call's stored ``max_abs`` back
    within :data:`CHECK_RTOL` (the engines run deterministically on a CPU)."""
    old = {r["case"]: r for r in stored(engine.name)}
    rows = [C.case(name) for name in CHECK_CASES if name not in engine.unsupported]
    bad = []
    for record in run_engine(engine, rows):
        for new, was in zip(record["calls"], old[record["case"]]["calls"]):
            if "max_abs" not in new or "max_abs" not in was:
                if new.get("status") != was.get("status"):
                    bad.append(f"{engine.name}/{record['case']} {new['schedule']}@"
                               f"{new['offset']}: {new.get('status')} != "
                               f"{was.get('status')}")
            elif not np.isclose(new["max_abs"], was["max_abs"], rtol=CHECK_RTOL,
                              atol=1e-12):
                bad.append(f"{engine.name}/{record['case']} {new['schedule']}@"
                           f"{new['offset']}: {new['max_abs']} != {was['max_abs']}")
    print("\n".join(bad) or f"{engine.name}: {len(rows)} rows reproduced")
    return 1 if bad else 0


def summary(records: list[dict]) -> str:
    lines = []
    for r in records:
        if r["status"] == "unsupported":
            lines.append(f"{r['engine']:>12} {r['case']:<18} unsupported")
        else:
            worst = r["worst_ratio"]
            shown = ("(every call refused)" if worst is None else
                     f"{worst:.3g}, per pair {r['worst_pair_ratio']:.3g}")
            verdict = "differs" if differs(r) else "agrees"
            lines.append(f"{r['engine']:>12} {r['case']:<18} {verdict}: worst ratio "
                         f"{shown}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=sorted(ENGINES), default=None)
    parser.add_argument("--case", action="append", default=None,
                        choices=[c.name for c in C.CASES])
    parser.add_argument("--verify", action="store_true")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    engines = [ENGINES[args.engine]] if args.engine else list(ENGINES.values())
    if args.verify or args.check:
        try:
            records = stored(args.engine)
        except store.StaleResultsError as err:
            print(err, file=sys.stderr)
            return 1
        print(summary(records))
        return max((check(e) for e in engines), default=0) if args.check else 0
    for engine in engines:
        for path in compute(engine, args.case):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
