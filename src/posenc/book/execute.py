"""Execute the book's chapters in parallel into Jupyter Book's execution cache.

``python -m posenc.book.execute`` (run by ``make book`` and ``make test`` just before
``jupyter-book build``) executes every chapter of ``_toc.yml`` whose outputs are not
in the cache that ``_config.yml`` names (``execute.cache``), one chapter per core at
a time, longest first as far as earlier builds timed them, and stores each executed
notebook there as myst-nb itself would (same kernel, working directory, timeout and
``allow_errors``). The cache is keyed by the notebook's code, so the build then finds
every chapter there and executes none: this step only moves the execution from
myst-nb's one-after-the-other loop onto every core. A chapter that fails is reported
with its traceback, after the others have run, and the command fails.

:func:`store` is also how ``make test`` lets the strict build reuse the executions of
the clean-environment tests (tests/test_clean_env.py): a chapter already executed
there, through its own install cell against the installed package, is not executed
a third time.

Usage::

    python -m posenc.book.execute [--workers N] [--list] [NOTEBOOK ...]

With notebooks named, only those (of ``_toc.yml``) are executed: how a writer runs the
pages they are editing without executing the others.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from ..utils import usable_cpus

ROOT = Path.cwd()


def book_config(root: Path = ROOT) -> dict:
    """``_config.yml``'s ``execute`` settings: cache folder (absolute), timeout and
    allow_errors, with Jupyter Book's defaults."""
    import yaml

    execute = yaml.safe_load((root / "_config.yml").read_text()).get("execute", {})
    cache = Path(execute.get("cache") or "_build/.jupyter_cache")
    return {
        "cache": cache if cache.is_absolute() else root / cache,
        "timeout": execute.get("timeout", 30),
        "allow_errors": bool(execute.get("allow_errors", False)),
    }


def chapters(root: Path = ROOT) -> list[Path]:
    """The notebooks of ``_toc.yml``, in book order, as Jupyter Book parses it."""
    from sphinx_external_toc.parsing import parse_toc_yaml

    docs = parse_toc_yaml(str(root / "_toc.yml")).keys()
    return [root / f"{d}.ipynb" for d in docs if (root / f"{d}.ipynb").exists()]


def _read(path: Path):
    import nbformat

    return nbformat.read(path, as_version=4)


def is_cached(cache, path: Path) -> bool:
    """Whether the cache holds ``path``'s outputs for its current code."""
    try:
        cache.match_cache_notebook(_read(path))
    except KeyError:
        return False
    return True


def _lock(cache_path: Path):
    from filelock import FileLock

    cache_path.mkdir(parents=True, exist_ok=True)
    return FileLock(str(cache_path) + ".lock")  # one writer of the sqlite index


def store(nb, path: Path, seconds: float, cache_path: Path | None = None) -> bool:
    """Put the executed notebook ``nb`` of the chapter ``path`` into the book's cache,
    unless outputs for its code are already there.

    Returns:
        Whether it was stored.
    """
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    cache_path = cache_path or book_config()["cache"]
    with _lock(cache_path):
        cache = get_cache(str(cache_path))
        try:
            cache.match_cache_notebook(nb)
            return False
        except KeyError:
            pass
        bundle = CacheBundleIn(
            nb, str(Path(path).resolve()), data={"execution_seconds": seconds}
        )
        cache.cache_notebook_bundle(bundle, check_validity=False, overwrite=True)
    return True


def _execute(path: str, timeout: int, allow_errors: bool):
    """Run in a worker: execute as myst-nb's cache mode does
    (myst_nb.core.execute.cache)."""
    import nbformat
    from jupyter_cache.executors.utils import single_nb_execution

    nb = _read(Path(path))
    result = single_nb_execution(
        nb,
        cwd=str(Path(path).parent),
        timeout=timeout,
        allow_errors=allow_errors,
        meta_override=True,
    )
    error = result.exc_string if result.err is not None else None
    return path, nbformat.writes(result.nb), result.time, error


def _previous_seconds(cache) -> dict[str, float]:
    """Execution seconds of each notebook's latest cached run (any version)."""
    seconds = {}
    for record in sorted(cache.list_cache_records(), key=lambda r: r.created):
        if record.data and "execution_seconds" in record.data:
            seconds[record.uri] = float(record.data["execution_seconds"])
    return seconds


def execute(
    *,
    workers: int | None = None,
    root: Path = ROOT,
    progress: bool = True,
    only: list[Path] | None = None,
) -> dict[str, float | None]:
    """Execute the chapters missing from the cache, ``workers`` at a time (default: one
    per usable core), and cache each one that succeeds; with ``only``, just those of
    them.

    Returns:
        ``{chapter path: seconds}`` for the chapters executed now; ``None`` for
        one that failed (its traceback is printed).
    """
    import nbformat
    from jupyter_cache import get_cache

    config = book_config(root)
    with _lock(config["cache"]):
        cache = get_cache(str(config["cache"]))
        wanted = {Path(p).resolve() for p in only} if only else None
        todo = [
            p
            for p in chapters(root)
            if (wanted is None or p.resolve() in wanted) and not is_cached(cache, p)
        ]
        before = _previous_seconds(cache)
    if not todo:
        return {}
    # longest first packs the workers best; never-timed chapters first of all
    todo.sort(key=lambda p: -before.get(str(p), float("inf")))
    workers = workers or usable_cpus()
    outcome: dict[str, float | None] = {}
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = [
            pool.submit(_execute, str(p), config["timeout"], config["allow_errors"])
            for p in todo
        ]
        for future in as_completed(futures):
            path, text, seconds, error = future.result()
            name = Path(path).relative_to(root)
            if error is None:
                store(
                    nbformat.reads(text, as_version=4),
                    Path(path),
                    seconds,
                    config["cache"],
                )
                outcome[path] = seconds
                status = f"executed in {seconds:.0f} s"
            else:
                outcome[path] = None
                print(error, file=sys.stderr)
                status = "FAILED (traceback above)"
            if progress:
                print(f"[{len(outcome)}/{len(todo)}] {name}: {status}", flush=True)
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m posenc.book.execute", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--workers", type=int, default=None, help="notebooks at once (default: cores)"
    )
    parser.add_argument(
        "--list",
        action="store_true",
        help="list the chapters and whether each is cached",
    )
    parser.add_argument(
        "notebooks", nargs="*", type=Path, help="only these chapters (default: all)"
    )
    args = parser.parse_args(argv)
    known = {p.resolve() for p in chapters()}
    unknown = [str(p) for p in args.notebooks if p.resolve() not in known]
    if unknown:
        parser.error(f"not a notebook of _toc.yml: {', '.join(unknown)}")
    if args.workers is not None and args.workers < 1:
        parser.error(f"--workers must be >= 1, got {args.workers}")
    if args.list:
        from jupyter_cache import get_cache

        cache = get_cache(str(book_config()["cache"]))
        for path in chapters():
            state = "cached " if is_cached(cache, path) else "missing"
            print(f"{state} {path.relative_to(ROOT)}")
        return 0
    start = time.perf_counter()
    outcome = execute(workers=args.workers, only=args.notebooks or None)
    failed = [p for p, s in outcome.items() if s is None]
    wall = time.perf_counter() - start
    if failed:
        print(f"{len(failed)} chapter(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    if outcome:
        print(
            f"executed {len(outcome)} chapters in {wall:.0f} s wall "
            f"({sum(outcome.values()):.0f} s of notebook time); outputs in "
            f"{book_config()['cache']}"
        )
    else:
        print(f"every chapter's outputs are cached in {book_config()['cache']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
