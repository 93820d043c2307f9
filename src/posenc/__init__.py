"""posenc: positional encodings for transformers — derived, implemented, tested.

The package behind the posenc book. Every scheme is registered by name; see
:func:`available_schemes`. The encodings live at the top (``from posenc import
apply_rope, rope_inv_freq, build_scheme``); the layers they plug into in
:mod:`posenc.layers`, the experiments in :mod:`posenc.experiments`, the book's tooling
in :mod:`posenc.book`. Imports run one way: encodings ← layers ← experiments ← book.

The practitioner's tools (positions of padded batches, RoPE layout conversion, RoPE
swapped into a transformers model, SelfExtend / DCA / ReRoPE) are in one place,
:mod:`posenc.tools`; it and the position card (:func:`position_card`,
:class:`PositionCard`) load on first use, so ``import posenc`` stays light.
"""

from . import _versions

_versions.check()  # an older torch or numpy fails here, saying what to install

# importing the scheme modules registers the schemes
from . import (  # noqa: E402, F401
    alibi,
    frequencies,
    layout,
    learned,
    relative,
    relative_buckets,
    rope,
    rope_config,
    rope_nd,
    scaling,
    schemes,
    schemes_2d,
    sinusoidal,
    xpos,
)
# study conditions only (PositionalScheme.study_only), registered after the chapters'
from . import fire, kernels  # noqa: E402, F401
from .schemes import (  # noqa: E402
    PositionalScheme,
    available_schemes,
    build_scheme,
    chapter_schemes,
    register_scheme,
)
from ._versions import ensure_installed  # noqa: E402
from .alibi import alibi_bias, alibi_slopes  # noqa: E402
from .frequencies import DEFAULT_BASE, compute_inv_freq  # noqa: E402
from .layout import pair_permutation  # noqa: E402
from .rope import apply_rope, rope_matrix  # noqa: E402
from .rope_nd import apply_mrope, apply_rope_2d, mrope_positions  # noqa: E402
from .rope_config import rope_inv_freq_from_config  # noqa: E402
from .scaling import ROPE_INIT_FUNCTIONS, check_scaling, rope_inv_freq  # noqa: E402
from .sinusoidal import sinusoidal_encoding  # noqa: E402
from .xpos import apply_xpos  # noqa: E402
from .utils import get_device, seed_everything  # noqa: E402

__version__ = "0.1.0"

#: Served on first use by :func:`__getattr__`: the name → (module, attribute or None).
_LAZY = {
    "tools": ("tools", None),
    "position_card": ("card", "position_card"),
    "PositionCard": ("card", "PositionCard"),
}


def __getattr__(name: str):
    """``posenc.tools`` (the practitioner's tools, :mod:`posenc.tools`) and
    ``posenc.position_card`` / ``posenc.PositionCard`` (:mod:`posenc.card`), imported
    when first asked for.

    Raises:
        ImportError: this version of posenc has no :mod:`posenc.card`.
        AttributeError: any other unknown name.
    """
    if name not in _LAZY:
        raise AttributeError(f"module 'posenc' has no attribute {name!r}")
    module, attribute = _LAZY[name]
    if module == "tools":
        # not ``from . import tools``: its fromlist would ask this function again
        import posenc.tools

        return posenc.tools
    try:
        from . import card
    except ModuleNotFoundError as error:
        if error.name != "posenc.card":
            raise
        raise ImportError(
            f"posenc.{name} comes from posenc.card, which this version of posenc does "
            "not have; posenc.rope_inv_freq_from_config gives a config's frequencies "
            "and attention factor meanwhile"
        ) from None
    return getattr(card, attribute)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "DEFAULT_BASE",
    "PositionalScheme",
    "ROPE_INIT_FUNCTIONS",
    "alibi_bias",
    "alibi_slopes",
    "apply_mrope",
    "apply_rope",
    "apply_rope_2d",
    "apply_xpos",
    "available_schemes",
    "build_scheme",
    "chapter_schemes",
    "check_scaling",
    "compute_inv_freq",
    "ensure_installed",
    "get_device",
    "mrope_positions",
    "pair_permutation",
    "register_scheme",
    "rope_inv_freq",
    "rope_inv_freq_from_config",
    "rope_matrix",
    "seed_everything",
    "sinusoidal_encoding",
    "__version__",
]
