"""posenc: positional encodings for transformers — derived, implemented, tested.

The package behind the posenc book. Every scheme is registered by name; see
:func:`available_schemes`.
"""

from . import _versions

_versions.check()  # an older torch or numpy fails here, saying what to install

# importing the scheme modules registers the schemes
from . import (  # noqa: E402, F401
    alibi,
    layout,
    learned,
    relative,
    rope,
    scaling,
    schemes,
    schemes_2d,
    sinusoidal,
    xpos,
)
from .schemes import (  # noqa: E402
    PositionalScheme,
    available_schemes,
    build_scheme,
    register_scheme,
)
from ._versions import ensure_installed  # noqa: E402
from .utils import get_device, seed_everything  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "PositionalScheme",
    "available_schemes",
    "build_scheme",
    "ensure_installed",
    "get_device",
    "register_scheme",
    "seed_everything",
    "__version__",
]
