"""The texts the real models are scored on, read from the shipped snapshot of the
standard library, and their token ids."""

from __future__ import annotations

import hashlib
import sys

import torch

from ..._checks import check_int


def prose_text() -> str:
    """English prose from the standard library: every entry of ``pydoc_data.topics``
    (the help texts of the language reference), sorted by name and joined by blank
    lines, read from the shipped snapshot of CPython 3.11.7's library
    (:data:`posenc.layers.data.SNAPSHOT`), so that every Python reads the same text."""
    import ast

    from ..data import stdlib_file

    source = stdlib_file("pydoc_data/topics.py").decode("utf-8")
    tree = ast.parse(source)
    assignment = next(
        node
        for node in tree.body
        if isinstance(node, ast.Assign) and node.targets[0].id == "topics"
    )
    topics = ast.literal_eval(assignment.value)
    return "\n\n".join(topics[name] for name in sorted(topics))


def code_text() -> str:
    """Python code from the standard library: the top-level modules' source
    (:func:`posenc.layers.data.stdlib_sources`, from the shipped snapshot), in sorted
    order, decoded as ``open(..., encoding="utf-8", errors="replace")`` reads a file
    (with universal newlines), joined by blank lines."""
    import io

    from ..data import stdlib_sources

    return "\n\n".join(
        io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="replace").read()
        for _, data in stdlib_sources()
    )


TEXTS = {"prose": prose_text, "code": code_text}


def text_tokens(tokenizer, text: str, *, max_tokens: int | None = None) -> torch.Tensor:
    """Token ids (int64, (T,)) of ``text``, without special tokens, optionally cut to
    the first ``max_tokens``."""
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids[0]
    if max_tokens is not None:
        ids = ids[: check_int("max_tokens", max_tokens, minimum=1)]
    return ids


def fingerprint(ids: torch.Tensor) -> str:
    """A short hash of a token sequence (which text a stored result was measured
    on)."""
    return hashlib.sha256(ids.to(torch.int64).cpu().numpy().tobytes()).hexdigest()[:16]


def python_version() -> str:
    return ".".join(map(str, sys.version_info[:3]))
