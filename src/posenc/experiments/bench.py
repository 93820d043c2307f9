"""The benchmarks behind book/cost.ipynb (RoPE) and book/cost_attention.ipynb
(relative biases, decoding), and their command line: ``python -m
posenc.experiments.bench [--quick] [--parts rope bias decode] [--save [PATH]]``.

One module per benchmark (:mod:`.bench_rope`, :mod:`.bench_bias`,
:mod:`.bench_decode`), the measuring tools in :mod:`.measure`; every name the chapters
use is importable from here. This module holds the configurations, the stored runs
(``results/bench/<device type>.json``) and the command.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from . import store
from .bench_bias import (
    BIAS_PATHS,
    BIAS_SCHEMES,
    add_bias_ratios,
    bias_attention,
    bias_benchmark,
    bias_inputs,
    bias_memory_model,
)
from .bench_decode import _decode_step, decode_benchmark, decode_model
from .bench_rope import add_rope_ratios, rope_benchmark, rope_bytes, rope_candidates
from .measure import copy_bandwidth, peak_memory, peak_rss, time_it
from .store import results_dir

# ======================================================================================
# The benchmarks behind book/cost.ipynb (RoPE) and book/cost_attention.ipynb (relative
# biases, decoding): python -m posenc.experiments.bench
# ======================================================================================
#
# Timings use torch.utils.benchmark (blocked_autorange: as many runs per block as fill
# the block, medians over blocks); ratios are taken between candidates measured in the
# same process, one after another. Every table carries the physical limit: the bytes a
# candidate must move at least, the bandwidth it achieved, and the floor.
def results_file(device: torch.device | str = "cpu") -> Path:
    """Where the stored run of a kind of device lives: ``results/bench/<type>.json``
    (``cpu.json``, ``cuda.json``, ``mps.json``), so that a run on a GPU never replaces
    the CPU run the book reads."""
    kind = torch.device(device).type
    return results_dir("bench") / f"{kind}.json"


#: The stored CPU run, which the chapter "The cost of positions" reads.
RESULTS_FILE = results_file("cpu")

#: The configuration of the stored run (``make bench``); tests fail when the stored
#: results were made with another one.
BENCH_CONFIG = {
    "rope": {"batch": 1, "num_heads": 32, "seq_len": 4096, "head_dim": 128},
    "bias": {
        "batch": 1,
        "num_heads": 8,
        "head_dim": 64,
        "seq_lens": [256, 512, 1024, 2048, 4096],
    },
    "decode": {"prompt_lens": [64, 256, 1024]},
    "min_run_time": 1.0,
    # One thread: on a shared 2-core machine a second OpenMP thread waits for a core
    # that another process holds, and every operation's barrier stalls (the same
    # RoPE call measured 20 ms on one thread and 80–900 ms on two).
    "threads": 1,
}

#: Smaller sizes for a live measurement in the chapter and for ``--quick``.
QUICK_CONFIG = {
    "rope": {"batch": 1, "num_heads": 8, "seq_len": 1024, "head_dim": 128},
    "bias": {"batch": 1, "num_heads": 4, "head_dim": 32, "seq_lens": [128, 256]},
    "decode": {"prompt_lens": [32, 128]},
    "min_run_time": 0.2,
    "threads": None,  # the caller's setting
}


def provenance(device) -> dict:
    """Machine, versions and date of a benchmark run:
    :func:`posenc.experiments.store.provenance` with transformers' version, the device's
    name, the cores, the platform and the checkout's commit
    (:func:`posenc.experiments.store.git_commit`)."""
    import platform

    record = store.provenance()
    try:
        import transformers

        record["transformers"] = transformers.__version__
    except ImportError:
        record["transformers"] = None
    device = torch.device(device)
    record["device"] = (
        torch.cuda.get_device_name(device) if device.type == "cuda" else record["cpu"]
    )
    record["cores"] = os.cpu_count()
    record["platform"] = platform.platform()
    record["commit"] = store.git_commit()
    return record


def run_all(config: dict, *, device="cpu", parts=("rope", "bias", "decode")) -> dict:
    """Run the benchmarks of ``config`` (:data:`BENCH_CONFIG` or
    :data:`QUICK_CONFIG`) and return ``{"config", "provenance", "copy_GB_per_s",
    part: rows}``."""
    device = torch.device(device)
    t = config["min_run_time"]
    results = {"config": config, "provenance": provenance(device)}
    results["copy_GB_per_s"] = copy_bandwidth(device=device) / 1e9
    if "rope" in parts:
        results["rope"] = rope_benchmark(
            **config["rope"], device=device, min_run_time=t
        )
    if "bias" in parts:
        results["bias"] = bias_benchmark(
            **config["bias"], device=device, min_run_time=t
        )
    if "decode" in parts:
        results["decode"] = decode_benchmark(
            **config["decode"],
            device=device,
            min_run_time=t,
            bandwidth=results["copy_GB_per_s"] * 1e9,
        )
    return results


def load_bench_results(path: Path | str = RESULTS_FILE) -> dict:
    """The stored benchmark run (``make bench``), as :func:`run_all` returns it."""
    return json.loads(Path(path).read_text())


def tables(results: dict) -> dict:
    """The printed tables of a run, as pandas DataFrames keyed by part."""
    import pandas as pd

    out = {}
    if "rope" in results:
        out["rope"] = pd.DataFrame(results["rope"]).set_index("name")
    if "bias" in results:
        out["bias"] = pd.DataFrame(results["bias"]).set_index(
            ["seq_len", "scheme", "path"]
        )
    if "decode" in results:
        out["decode"] = pd.DataFrame(results["decode"]).set_index(
            ["scheme", "prompt_len", "cached"]
        )
    return out


def main(argv=None) -> int:
    """``python -m posenc.experiments.bench [--quick] [--parts rope bias decode] [--save
    PATH]``: run the benchmarks, print one table per part, optionally store the run."""
    import argparse

    import pandas as pd

    from ..utils import get_device

    parser = argparse.ArgumentParser(prog="python -m posenc.experiments.bench")
    parser.add_argument("--quick", action="store_true", help="small sizes, seconds")
    parser.add_argument("--parts", nargs="+", default=["rope", "bias", "decode"])
    parser.add_argument("--device", default=None, help="default: posenc.get_device()")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (default: the configuration's, else torch's)",
    )
    parser.add_argument(
        "--save",
        nargs="?",
        const="",
        default=None,
        help="store the run (default path: results/bench/<device type>.json)",
    )
    args = parser.parse_args(argv)
    config = QUICK_CONFIG if args.quick else BENCH_CONFIG
    torch.set_num_threads(
        args.threads or config.get("threads") or torch.get_num_threads()
    )
    device = torch.device(args.device) if args.device else get_device()
    results = run_all(config, device=device, parts=tuple(args.parts))
    prov = results["provenance"]
    print(
        f"{prov['device']} · {prov['threads']} threads · torch {prov['torch']} · "
        f"transformers {prov['transformers']} · {prov['date']} · copy bandwidth "
        f"{results['copy_GB_per_s']:.1f} GB/s"
    )
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        for part, frame in tables(results).items():
            print(f"\n== {part} ==")
            print(frame.to_string(float_format=lambda x: f"{x:.3g}"))
    if args.save is not None:
        path = Path(args.save) if args.save else results_file(device)
        store.write_json(path, results, indent=1)
        print(f"\nstored in {path}")
    return 0


__all__ = [
    "BENCH_CONFIG",
    "BIAS_PATHS",
    "BIAS_SCHEMES",
    "QUICK_CONFIG",
    "RESULTS_FILE",
    "add_bias_ratios",
    "add_rope_ratios",
    "bias_attention",
    "bias_benchmark",
    "bias_inputs",
    "bias_memory_model",
    "copy_bandwidth",
    "decode_benchmark",
    "decode_model",
    "load_bench_results",
    "main",
    "peak_memory",
    "peak_rss",
    "provenance",
    "results_file",
    "rope_benchmark",
    "rope_bytes",
    "rope_candidates",
    "run_all",
    "tables",
    "time_it",
]


if __name__ == "__main__":
    sys.exit(main())
