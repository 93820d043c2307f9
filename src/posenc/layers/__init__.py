"""The neural-network layers the encodings plug into, generic modules first:
attention and its backends (:mod:`.attention`), masks and query temperature
(:mod:`.masks`), KV caches (:mod:`.kv_cache`), multi-head latent attention
(:mod:`.mla`), streaming evaluation (:mod:`.streaming`), attention with remapped
positions: SelfExtend, ReRoPE and DCA (:mod:`.remapped_attention`; as the registry's
``"attention"`` namespace, :mod:`.remapped_schemes`, registered on import), data
(:mod:`.data`) and the training loop (:mod:`.train`); then the model-specific ones:
the tiny language model and its layer patterns (:mod:`.model`), model surgery on it
(:mod:`.surgery`), the real pretrained models (:mod:`.pretrained`) and the tiny
vision transformer (:mod:`.vit`).

Layers import the encodings (:mod:`posenc`), never the experiments or the book's
tooling.
"""

from . import remapped_schemes  # noqa: E402,F401  (fills the "attention" namespace)
