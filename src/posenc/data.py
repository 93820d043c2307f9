"""Byte-level corpora that need no download: the Python standard library's own source,
or any text file or folder you point at.

Bytes are the tokens (vocabulary 256), so there is no tokenizer to install and a
sequence length is a number of bytes. Splits are by *file*, so validation text is never
seen in training.
"""

from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch

from ._checks import check_int


@dataclass(frozen=True)
class Corpus:
    """A train/validation split of a byte stream.

    Attributes:
        name: a human-readable name.
        train, val: uint8 tensors (N,) of bytes.
        train_files, val_files: where the bytes came from, in order.
    """

    name: str
    train: torch.Tensor
    val: torch.Tensor
    train_files: tuple[str, ...] = ()
    val_files: tuple[str, ...] = ()
    val_lengths: tuple[int, ...] = ()

    def val_documents(self) -> list[torch.Tensor]:
        """The validation split cut at its file boundaries: one uint8 tensor per file
        (the whole split as one document when the lengths are unknown)."""
        if not self.val_lengths:
            return [self.val]
        return list(torch.split(self.val, list(self.val_lengths)))

    @property
    def fingerprint(self) -> str:
        """SHA-256 of both splits: what a cache key needs to know about the data."""
        h = hashlib.sha256()
        for part in (self.train, self.val):
            h.update(part.numpy().tobytes())
            h.update(b"\x00|split|\x00")
        return h.hexdigest()[:16]

    def __repr__(self) -> str:
        return (
            f"Corpus({self.name!r}, train={self.train.numel():,} bytes from "
            f"{len(self.train_files)} files, "
            f"val={self.val.numel():,} bytes from {len(self.val_files)} files)"
        )


def _bytes_tensor(chunks: list[bytes]) -> torch.Tensor:
    return torch.frombuffer(bytearray(b"".join(chunks)), dtype=torch.uint8).clone()


def _split_files(name: str, files: list[Path], root: Path, val_every: int) -> Corpus:
    val_every = check_int("val_every", val_every, minimum=2)
    train, val, train_names, val_names = [], [], [], []
    if not all(path.stat().st_size for path in files):
        files = [path for path in files if path.stat().st_size]
    for i, path in enumerate(files):
        data, names = (
            (val, val_names) if i % val_every == val_every - 1 else (train, train_names)
        )
        data.append(path.read_bytes())
        names.append(path.relative_to(root).as_posix())
    if not train or not val:
        raise ValueError(
            f"need at least {val_every} files to split train/validation by file, got "
            f"{len(files)}"
        )
    return Corpus(
        name,
        _bytes_tensor(train),
        _bytes_tensor(val),
        tuple(train_names),
        tuple(val_names),
        tuple(len(chunk) for chunk in val),
    )


#: Folders left out of the recursive standard-library corpus: test suites (full of
#: generated and deliberately odd code) and installed third-party packages.
EXCLUDED_FOLDERS = frozenset(
    {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}
)


def stdlib_source_files(*, recursive: bool = False) -> list[Path]:
    """The ``*.py`` files of this Python's standard library, sorted by path: the
    top-level modules, or with ``recursive`` every package too except the folders in
    :data:`EXCLUDED_FOLDERS`."""
    root = Path(sysconfig.get_path("stdlib"))
    if not recursive:
        return sorted(p for p in root.glob("*.py") if p.is_file())
    return sorted(
        p
        for p in root.rglob("*.py")
        if p.is_file() and not EXCLUDED_FOLDERS & set(p.relative_to(root).parts[:-1])
    )


def load_stdlib_corpus(val_every: int = 10, *, recursive: bool = False) -> Corpus:
    """The Python standard library's source files as a byte corpus.

    Files are sorted by path; every ``val_every``-th file (the 10th, 20th, ...) goes to
    validation, the rest to training. The top-level modules are about 4.7 MB on CPython
    3.11; with ``recursive`` (every package, without test suites; see
    :func:`stdlib_source_files`) about 12 MB, so that the validation split exceeds
    1 MB. The exact bytes depend on the Python version, so compare numbers only within
    one version. Empty files are skipped.

    Raises:
        ValueError: if fewer than ``val_every`` files are found.
    """
    files = stdlib_source_files(recursive=recursive)
    name = "python-stdlib" + ("-recursive" if recursive else "")
    return _split_files(name, files, Path(sysconfig.get_path("stdlib")), val_every)


def load_text_corpus(
    path: str | Path,
    *,
    pattern: str = "*.txt",
    val_every: int = 10,
    val_fraction: float = 0.1,
) -> Corpus:
    """Any text as a byte corpus.

    Args:
        path: a file — its last ``val_fraction`` of bytes is the validation split — or a
            folder — the files matching ``pattern`` below it (recursively, sorted),
            split by file as in :func:`load_stdlib_corpus`.
        pattern: glob for files in a folder. val_every: every n-th file is validation.
        val_fraction: for a single file, in (0, 1).

    Raises:
        FileNotFoundError: if ``path`` does not exist. ValueError: an empty file, a
        folder with too few matching files, or ``val_fraction`` outside (0, 1).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file or folder: {path}")
    if path.is_dir():
        files = sorted(p for p in path.rglob(pattern) if p.is_file())
        return _split_files(path.name, files, path, val_every)
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must lie in (0, 1), got {val_fraction}")
    data = _bytes_tensor([path.read_bytes()])
    cut = int(round(data.numel() * (1.0 - val_fraction)))
    if cut < 2 or data.numel() - cut < 2:
        raise ValueError(
            f"{path} has {data.numel()} bytes: too few to split with "
            f"val_fraction={val_fraction}"
        )
    return Corpus(path.name, data[:cut], data[cut:], (path.name,), (path.name,))


def get_batch(
    data: torch.Tensor,
    batch_size: int,
    seq_len: int,
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random training windows: inputs and next-byte targets.

    Args:
        data: uint8 (N,) byte stream. batch_size: B. seq_len: T (any length up to N −
            1).
        generator: CPU generator for the window offsets (reproducible batches).
        device: where to put the batch.

    Returns:
        ``(x, y)``, both int64 (B, T); ``y[:, t] = x[:, t + 1]`` in the stream.

    Raises:
        ValueError: if ``seq_len`` is not below the stream length.
    """
    batch_size = check_int("batch_size", batch_size, minimum=1)
    seq_len = check_int("seq_len", seq_len, minimum=1)
    if seq_len >= data.numel():
        raise ValueError(
            f"seq_len must be < the stream length {data.numel()}, got {seq_len}"
        )
    starts = torch.randint(
        0, data.numel() - seq_len, (batch_size,), generator=generator
    )
    idx = starts[:, None] + torch.arange(seq_len + 1)
    windows = data[idx].long()
    return windows[:, :-1].to(device), windows[:, 1:].to(device)


def eval_windows(
    data: torch.Tensor, seq_len: int, max_tokens: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Non-overlapping evaluation windows from the start of ``data``.

    The same first ``max_tokens`` bytes are cut into ``max_tokens // seq_len`` windows
    of length ``seq_len``, so that every length is scored on (nearly) the same text.

    Returns:
        ``(x, y)`` int64 (N, T) inputs and next-byte targets on the CPU.

    Raises:
        ValueError: if not even one window fits in ``max_tokens`` or in the data.
    """
    seq_len = check_int("seq_len", seq_len, minimum=1)
    max_tokens = check_int("max_tokens", max_tokens, minimum=1)
    usable = min(max_tokens, data.numel() - 1)
    n = usable // seq_len
    if n < 1:
        raise ValueError(
            f"no evaluation window of length {seq_len} fits in {usable} tokens "
            f"(max_tokens={max_tokens}, data has {data.numel()} bytes)"
        )
    stream = data[: n * seq_len + 1].long()
    return stream[:-1].view(n, seq_len), stream[1:].view(n, seq_len)
