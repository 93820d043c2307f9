"""Byte-level corpora that need no download: the Python standard library's own source,
or any text file or folder you point at.

Bytes are the tokens (vocabulary 256), so there is no tokenizer to install and a
sequence length is a number of bytes. Splits are by *file*, so validation text is never
seen in training.

The standard library's text differs from one Python to the next, so the book does not
read the running Python's: posenc ships a snapshot of CPython 3.11.7's standard library
(:data:`SNAPSHOT`, xz-compressed, with the PSF licence and a provenance record), the
Python every stored result and trained model was made with. A chapter on Colab's Python
trains and scores on the same bytes, so every cache key, shipped weight and stored
result stays valid there. ``source="running"`` reads this Python's own files instead.

Shapes:
    N bytes in a split, a uint8 tensor (N,); a batch is inputs x and next-byte targets
    y, both (B, T) int64, with y[:, t] = x[:, t + 1] in the stream.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import sysconfig
import tarfile
from dataclasses import dataclass
from pathlib import Path

import torch

from .._checks import check_int


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

    @functools.cached_property
    def fingerprint(self) -> str:
        """SHA-256 of both splits: what a cache key needs to know about the data
        (computed once per corpus: its splits are not modified after loading)."""
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


def _split_files(
    name: str, files: list[tuple[str, bytes]], val_every: int
) -> Corpus:
    """Split ``(file name, bytes)`` pairs by file: every ``val_every``-th non-empty file
    to validation."""
    val_every = check_int("val_every", val_every, minimum=2)
    train, val, train_names, val_names = [], [], [], []
    files = [(file, data) for file, data in files if data]
    for i, (file, data) in enumerate(files):
        chunks, names = (
            (val, val_names) if i % val_every == val_every - 1 else (train, train_names)
        )
        chunks.append(data)
        names.append(file)
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


#: The snapshot of CPython's standard library that posenc ships (see the module's
#: docstring), and the Python it was taken from.
SNAPSHOT = Path(__file__).parents[1] / "texts" / "cpython-3.11.7-stdlib.tar.xz"
SNAPSHOT_PYTHON = "3.11.7"
SOURCES = ("snapshot", "running")


def _running_root() -> Path:
    return Path(sysconfig.get_path("stdlib"))


def _selected(relative: str, recursive: bool) -> bool:
    parts = relative.split("/")
    if not relative.endswith(".py"):
        return False
    if not recursive:
        return len(parts) == 1
    return not EXCLUDED_FOLDERS & set(parts[:-1])


def stdlib_source_files(*, recursive: bool = False) -> list[Path]:
    """The ``*.py`` files of the RUNNING Python's standard library, sorted by path: the
    top-level modules, or with ``recursive`` every package too except the folders in
    :data:`EXCLUDED_FOLDERS`. (The book reads :func:`stdlib_sources`, the snapshot.)"""
    root = _running_root()
    files = root.rglob("*.py") if recursive else root.glob("*.py")
    return sorted(
        p
        for p in files
        if p.is_file() and _selected(p.relative_to(root).as_posix(), recursive)
    )


@functools.lru_cache(maxsize=1)
def _snapshot() -> dict[str, bytes]:
    """Every member of :data:`SNAPSHOT`, by its path (``stdlib/...``, ``LICENSE.txt``,
    ``PROVENANCE.json``)."""
    if not SNAPSHOT.exists():
        raise FileNotFoundError(
            f"the standard-library snapshot {SNAPSHOT} is missing: reinstall "
            "posenc, or run `python -m posenc.layers.data --snapshot` with CPython "
            "3.11.7"
        )
    with tarfile.open(SNAPSHOT, "r:xz") as archive:
        members = [m for m in archive.getmembers() if m.isfile()]
        return {m.name: archive.extractfile(m).read() for m in members}


def snapshot_provenance() -> dict:
    """Where the snapshot came from: the Python version, the number of files and the
    SHA-256 of their bytes in order, the date it was taken."""
    return json.loads(_snapshot()["PROVENANCE.json"])


def stdlib_sources(
    *, recursive: bool = False, source: str = "snapshot"
) -> list[tuple[str, bytes]]:
    """The standard library's source files as ``(path relative to the library,
    bytes)``, sorted by path: the top-level modules, or with ``recursive`` every
    package too except the folders in :data:`EXCLUDED_FOLDERS`.

    Args:
        recursive: every package too. source: ``"snapshot"`` (the shipped CPython
            3.11.7 library, the default) or ``"running"`` (this Python's).

    Raises:
        ValueError: an unknown ``source``.
    """
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
    if source == "running":
        root = _running_root()
        return [
            (p.relative_to(root).as_posix(), p.read_bytes())
            for p in stdlib_source_files(recursive=recursive)
        ]
    members = _snapshot()
    return sorted(
        (name.removeprefix("stdlib/"), data)
        for name, data in members.items()
        if name.startswith("stdlib/")
        and _selected(name.removeprefix("stdlib/"), recursive)
    )


def stdlib_file(relative: str, *, source: str = "snapshot") -> bytes:
    """One file of the standard library (``"pydoc_data/topics.py"``), from the snapshot
    or the running Python.

    Raises:
        ValueError: an unknown ``source``. FileNotFoundError: no such file.
    """
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
    if source == "running":
        return (_running_root() / relative).read_bytes()
    try:
        return _snapshot()[f"stdlib/{relative}"]
    except KeyError:
        raise FileNotFoundError(
            f"{relative} is not in the snapshot {SNAPSHOT}"
        ) from None


def load_stdlib_corpus(
    val_every: int = 10, *, recursive: bool = False, source: str = "snapshot"
) -> Corpus:
    """The Python standard library's source files as a byte corpus.

    Files are sorted by path; every ``val_every``-th file (the 10th, 20th, ...) goes to
    validation, the rest to training. The top-level modules are about 4.7 MB; with
    ``recursive`` (every package, without test suites; see :func:`stdlib_sources`)
    about 12 MB, so that the validation split exceeds 1 MB. Empty files are skipped.

    Args:
        val_every: every n-th file is validation. recursive: every package too.
        source: ``"snapshot"`` (default: the shipped CPython 3.11.7 library, the same
            bytes on every Python) or ``"running"`` (this Python's own, which differ
            from one version to the next).

    Raises:
        ValueError: if fewer than ``val_every`` files are found, or ``source`` is
            unknown.
    """
    name = "python-stdlib" + ("-recursive" if recursive else "")
    return _split_files(
        name, stdlib_sources(recursive=recursive, source=source), val_every
    )


def write_stdlib_snapshot(path: Path = SNAPSHOT) -> Path:
    """Write the snapshot from the running Python: every file of ``stdlib_sources(
    recursive=True, source="running")``, the library's LICENSE.txt and a provenance
    record, xz-compressed. Run with CPython :data:`SNAPSHOT_PYTHON` to reproduce the
    shipped one.

    Returns:
        The path written.
    """
    import datetime
    import platform

    files = stdlib_sources(recursive=True, source="running")
    digest = hashlib.sha256()
    for name, data in files:
        digest.update(name.encode() + b"\x00" + data + b"\x00")
    provenance = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "files": len(files),
        "bytes": sum(len(d) for _, d in files),
        "sha256": digest.hexdigest(),
        "source": "the .py files of the standard library, without test suites "
        "(posenc.layers.data.EXCLUDED_FOLDERS), as installed",
        "licence": "Python Software Foundation License (LICENSE.txt)",
        "date": datetime.date.today().isoformat(),
    }
    members = [(f"stdlib/{name}", data) for name, data in files]
    members.append(("LICENSE.txt", (_running_root() / "LICENSE.txt").read_bytes()))
    members.append(("PROVENANCE.json", json.dumps(provenance, indent=1).encode()))
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:xz", preset=9) as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            archive.addfile(info, io.BytesIO(data))
    _snapshot.cache_clear()
    return path


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
        pairs = [(p.relative_to(path).as_posix(), p.read_bytes()) for p in files]
        return _split_files(path.name, pairs, val_every)
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


#: The largest range :func:`random_positions` draws from: each draw costs O(range).
MAX_RANDOM_POSITION = 2**24


def random_positions(
    seq_len: int,
    max_position: int,
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Randomized positions (Ruoss et al., ACL 2023, "Randomized Positional Encodings
    Boost Length Generalization of Transformers", §3): ``seq_len`` distinct positions
    drawn uniformly without replacement from ``0 … max_position − 1`` and sorted, in
    place of ``0 … seq_len − 1``. Over enough training steps a model sees positions
    up to ``max_position − 1`` and gaps between neighbours larger than 1, so that a
    test sequence up to ``max_position`` long asks for no position it never saw.

    One draw per call, shared by the whole batch and, in posenc, by every layer: the
    authors' ``noisy_fixed_positional_encodings`` (google-deepmind/
    randomized_positional_encodings, ``models/positional_encodings.py``) does the
    same for the absolute encodings, while their rotary variant draws anew in each
    attention layer and their ALiBi and relative variants draw sorted distances
    rather than positions. Their evaluation draws too (the model has no training
    flag); posenc's :func:`~posenc.layers.train.evaluate` uses ``0 … T − 1``.

    Args:
        seq_len: T, the number of positions (int ≥ 1). max_position: the size of the
            range they are drawn from (the paper's L; an int from T to
            :data:`MAX_RANDOM_POSITION`).
        generator: CPU generator (reproducible draws). device: where to put them.

    Returns:
        int64 (T,), strictly increasing, in ``0 … max_position − 1``.

    Raises:
        TypeError: a size that is not an integer. ValueError: ``seq_len`` < 1, or
            ``max_position`` below ``seq_len`` (T distinct positions need a range of
            at least T) or above :data:`MAX_RANDOM_POSITION`.
    """
    seq_len = check_int("seq_len", seq_len, minimum=1)
    max_position = check_int("max_position", max_position, minimum=1)
    if not seq_len <= max_position <= MAX_RANDOM_POSITION:
        raise ValueError(
            f"max_position must lie in seq_len ({seq_len}) … {MAX_RANDOM_POSITION} "
            f"(T distinct positions need a range of at least T; a draw costs "
            f"O(max_position)), got {max_position}"
        )
    chosen = torch.randperm(max_position, generator=generator)[:seq_len]
    return chosen.sort().values.to(device)


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
    return stream[:-1].view(n, seq_len), stream[1:].view(n, seq_len)  # (N·T,) → (N, T)


def main(argv: list[str] | None = None) -> int:
    """``python -m posenc.layers.data --snapshot``: write :data:`SNAPSHOT` from this
    Python."""
    import argparse
    import platform

    parser = argparse.ArgumentParser(prog="python -m posenc.layers.data")
    parser.add_argument("--snapshot", action="store_true", help="write the snapshot")
    args = parser.parse_args(argv)
    if not args.snapshot:
        parser.print_help()
        return 0
    if platform.python_version() != SNAPSHOT_PYTHON:
        print(
            f"warning: this is Python {platform.python_version()}, the shipped "
            f"snapshot is of {SNAPSHOT_PYTHON}: cache keys and stored results "
            "will not match"
        )
    path = write_stdlib_snapshot()
    size_mib = path.stat().st_size / 2**20
    print(f"wrote {path} ({size_mib:.1f} MiB): {snapshot_provenance()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
