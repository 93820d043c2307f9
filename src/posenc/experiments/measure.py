"""Measuring time, memory and bandwidth, for the book's benchmarks (never inside
tests' assertions about speed).

:func:`peak_memory` reports the peak bytes of tensor memory that a function holds at
once: on CUDA from the caching allocator's own statistics, elsewhere by following every
tensor storage that the function's operations create (a ``TorchDispatchMode``) until it
is freed. Kernels' private workspaces are invisible to the second method, which is what
we want when asking whether a T×T tensor is ever stored.

:func:`peak_rss` answers the same question for code that runs outside the dispatcher,
such as a ``torch.compile``-d kernel on the CPU: it reads the process's peak resident
memory (Linux only).

:func:`time_it` times a call with ``torch.utils.benchmark`` (blocked_autorange: as many
runs per block as fill the block, medians over blocks); :func:`copy_bandwidth` measures
the copy bandwidth that every benchmark's floor is drawn from.
"""

from __future__ import annotations

import ctypes
import gc
import re
import sys
import weakref
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ..utils import synchronize


class _StorageTracker(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._seen: set[int] = set()

    def _free(self, key: int, nbytes: int) -> None:
        self._seen.discard(key)
        self.live -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                storage = t.untyped_storage()
                key, nbytes = storage.data_ptr(), storage.nbytes()
                if nbytes == 0 or key in self._seen:
                    continue  # a view of something already counted
                self._seen.add(key)
                self.live += nbytes
                self.peak = max(self.peak, self.live)
                weakref.finalize(t, self._free, key, nbytes)
        return out


def peak_memory(fn: Callable[[], object], device: torch.device | str = "cpu") -> int:
    """Peak bytes of tensor memory allocated while ``fn()`` runs, above what existed
    before.

    Args:
        fn: a function of no arguments; its result is discarded.
        device: where ``fn`` computes; CUDA uses ``torch.cuda.max_memory_allocated``.

    Returns:
        Bytes (int).
    """
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    tracker = _StorageTracker()
    with tracker:
        fn()
    return tracker.peak


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters


def _proc_status_bytes(key: str) -> int:
    with open("/proc/self/status") as f:
        return (
            int(re.search(rf"^{key}:\s+(\d+) kB", f.read(), re.MULTILINE).group(1))
            * 1024
        )


def peak_rss(fn: Callable[[], object]) -> int:
    """Peak resident memory of the process while ``fn()`` runs, above the resident
    memory before it.

    Sees every allocation, including those of compiled kernels that :func:`peak_memory`
    cannot follow, and also everything else the process does meanwhile: use it on one
    thing at a time, after a warm-up call (compilation itself allocates). While ``fn``
    runs, glibc's ``M_MMAP_THRESHOLD`` is 64 KiB and ``M_TRIM_THRESHOLD`` 0, so that
    every large block is mapped when allocated and returned when freed (otherwise malloc
    keeps freed memory and the resident size reflects history rather than ``fn``). That
    mode is slow — every large tensor costs page faults — so afterwards the thresholds
    are set to 32 MiB and 64 MiB, glibc's own upper limits on 64-bit (its adaptive mode
    cannot be switched back on). The peak is reset through ``/proc/self/clear_refs``
    (Linux ≥ 4.0). Resolution: a few hundred KiB, since the kernel updates its
    per-thread page counts in batches.

    Args:
        fn: a function of no arguments; its result is discarded.

    Returns:
        Bytes (int).

    Raises:
        RuntimeError: when not on Linux with glibc.
    """
    if not sys.platform.startswith("linux"):
        raise RuntimeError(
            f"peak_rss needs Linux's /proc (this is {sys.platform!r}); use peak_memory"
        )
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError as error:
        raise RuntimeError(
            "peak_rss needs glibc (libc.so.6) to control when memory is returned"
        ) from error
    libc.mallopt(_M_MMAP_THRESHOLD, 64 * 1024)
    libc.mallopt(_M_TRIM_THRESHOLD, 0)
    try:
        gc.collect()
        libc.malloc_trim(0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current resident size
        before = _proc_status_bytes("VmRSS")
        fn()
        return max(0, _proc_status_bytes("VmHWM") - before)
    finally:
        libc.mallopt(_M_MMAP_THRESHOLD, 32 * 2**20)
        libc.mallopt(_M_TRIM_THRESHOLD, 64 * 2**20)


def time_it(fn: Callable[[], object], *, min_run_time: float = 1.0, threads=None):
    """Median and interquartile range of ``fn()``'s wall time, in seconds, from
    ``torch.utils.benchmark.Timer.blocked_autorange`` (a warm-up call first).

    Args:
        fn: a function of no arguments. min_run_time: seconds of measurement.
        threads: torch's intra-op threads during the measurement (default: the
            current ``torch.get_num_threads()``).

    Returns:
        ``{"median_s", "iqr_s", "runs"}``.
    """
    from torch.utils import benchmark

    threads = torch.get_num_threads() if threads is None else int(threads)
    fn()
    timer = benchmark.Timer("fn()", globals={"fn": fn}, num_threads=threads)
    m = timer.blocked_autorange(min_run_time=min_run_time)
    return {"median_s": m.median, "iqr_s": m.iqr, "runs": len(m.times)}


def _synchronized(fn: Callable, device: torch.device) -> Callable:
    """``fn`` followed by waiting for ``device`` (CUDA, MPS, ...), so that a timer
    measures the kernels and not only their launch."""
    if device.type == "cpu":
        return fn

    def run():
        fn()
        synchronize(device)

    return run


def copy_bandwidth(
    nbytes: int = 64 * 2**20, device="cpu", min_run_time: float = 0.5
) -> float:
    """Bytes per second of copying a float32 tensor of ``nbytes`` into a preallocated
    one (each byte read once and written once: 2·nbytes moved), the floor the decoding
    table divides by."""
    device = torch.device(device)
    src = torch.ones(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    t = time_it(
        _synchronized(lambda: dst.copy_(src), device), min_run_time=min_run_time
    )
    return 2 * nbytes / t["median_s"]


# --- decoding: tokens per second with and without the KV cache ---------------------
