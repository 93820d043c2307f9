"""Device choice and seeding: the two helpers every notebook calls first."""

from __future__ import annotations

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
