"""posenc: positional encodings for transformers — derived, implemented, tested.

The package behind the posenc book. Every scheme is registered by name; see
:func:`available_schemes`.
"""

# importing the scheme modules registers the schemes
from . import (  # noqa: F401
    alibi,
    layout,
    learned,
    relative,
    rope,
    scaling,
    schemes,
    sinusoidal,
    xpos,
)
from .schemes import PositionalScheme, available_schemes, build_scheme, register_scheme
from .utils import get_device, seed_everything

__version__ = "0.1.0"

__all__ = [
    "PositionalScheme",
    "available_schemes",
    "build_scheme",
    "get_device",
    "register_scheme",
    "seed_everything",
    "__version__",
]
