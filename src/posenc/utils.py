"""Device choice and seeding (the two helpers every notebook calls first), and what
code needs to run the same on CUDA, Apple's MPS and the CPU: the usable cores,
synchronising a device before a clock is read, and float64 (which MPS lacks) on the CPU.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

from ._checks import check_int


def get_device() -> torch.device:
    """The best available device: ``cuda``, else ``mps``, else ``cpu``.

    Notebooks call this once and pass the device on; no code path in posenc forces the
    CPU.

    Returns:
        A ``torch.device``.
    """
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python's, NumPy's and torch's random number generators (all devices).

    Args:
        seed: a non-negative integer.

    Returns:
        A fresh CPU ``torch.Generator`` seeded with ``seed``, for code that wants its
        own stream (batch sampling uses one, so that model initialisation does not shift
        the data order).

    Raises:
        TypeError: if ``seed`` is not an integer. ValueError: if it is negative.
    """
    seed = check_int("seed", seed, minimum=0)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device
    return torch.Generator().manual_seed(seed)


def usable_cpus() -> int:
    """The number of CPU cores this process may run on: the scheduler's affinity mask
    where the platform has one (Linux), else ``os.cpu_count()`` (macOS, Windows), and
    at least 1."""
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:
        return max(1, len(affinity(0)))
    return max(1, os.cpu_count() or 1)


def synchronize(device: torch.device | str) -> None:
    """Wait until every kernel queued on ``device`` has finished, so that a clock read
    next measures them: CUDA, MPS and any other accelerator torch knows; nothing to do
    on the CPU."""
    device = torch.device(device)
    if device.type == "cpu":
        return
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
    else:
        torch.accelerator.synchronize(device)


def cpu_float64(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` as float64 on the CPU, detached: how to take exact statistics of a
    tensor that may live on MPS, which has no float64 (``.double()`` there raises).
    Moves to the CPU first, then converts."""
    return tensor.detach().cpu().double()
