"""Measuring memory, for the book's benchmarks (never inside tests' assertions about speed).

:func:`peak_memory` reports the peak bytes of tensor memory that a function holds at once: on CUDA
from the caching allocator's own statistics, elsewhere by following every tensor storage that the
function's operations create (a ``TorchDispatchMode``) until it is freed. Kernels' private
workspaces are invisible to the second method, which is what we want when asking whether a
T×T tensor is ever stored.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


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
    """Peak bytes of tensor memory allocated while ``fn()`` runs, above what existed before.

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
