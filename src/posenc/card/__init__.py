"""The position card: what a model's config does to positions.

``position_card(config)`` takes a ``config.json`` path, a config dict (transformers
v4 or v5), a transformers config object, GGUF metadata or a ``.gguf`` path, and
returns a :class:`PositionCard`: per layer group (full, sliding, chunked, NoPE) the
layers, rope_type, rotary_dim, base, the per-pair table, the attention factor and the
multiplier every score gets, the contexts, window or chunk, sinks, and lints.
``python -m posenc card PATH [--json]`` prints it.

Modules: :mod:`~posenc.card.read` (inputs), :mod:`~posenc.card.parse` (the config
classes' rules), :mod:`~posenc.card.card` (the dataclasses and the per-group
computation), :mod:`~posenc.card.build` (:func:`position_card`),
:mod:`~posenc.card.lints`, :mod:`~posenc.card.render`.
"""

from .build import position_card
from .card import LayerGroup, Lint, PairRow, PositionCard
from .lints import LINTS

__all__ = ["LINTS", "LayerGroup", "Lint", "PairRow", "PositionCard", "position_card"]
