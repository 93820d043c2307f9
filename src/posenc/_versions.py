"""The versions of torch and numpy that posenc needs, checked when it is imported, so
that an older install fails at once with what to do rather than deep inside a call.

torch 2.7: FlexAttention on the CPU (2.6; 2.5 on CUDA), scaled_dot_product_attention's
``enable_gqa`` (2.5), and ``torch._dynamo.config.recompile_limit`` (2.7, used by the
benchmarks). transformers 5 (``posenc[pretrained]``, the reference implementation of the
tests and the loader of the real models) needs torch 2.6 itself and is checked by
:mod:`posenc.layers.pretrained` when a real model is loaded.
"""

from __future__ import annotations

import re

#: The oldest versions posenc runs on, and why (see the module's docstring).
MINIMUM = {"torch": "2.7", "numpy": "1.24"}
#: Needed only by the real pretrained models and the parity tests (posenc[pretrained]).
MINIMUM_OPTIONAL = {"transformers": "5.0"}


def parse(version: str) -> tuple[int, ...]:
    """The leading numeric release of a version string: ``"2.13.0+cpu"`` → ``(2, 13,
    0)``, ``"2.7.0a0"`` → ``(2, 7, 0)``."""
    match = re.match(r"\d+(\.\d+)*", str(version))
    if match is None:
        raise ValueError(f"not a version: {version!r}")
    return tuple(int(part) for part in match.group(0).split("."))


def too_old(package: str, installed: str, needed: str) -> str | None:
    """The error message when ``installed`` is older than ``needed``, else None."""
    if parse(installed) >= parse(needed):
        return None
    colab = " (Colab's own torch is recent enough)" if package == "torch" else ""
    fix = f'python -m pip install --upgrade "{package}>={needed}"'
    return (
        f"posenc needs {package} >= {needed}, but this Python has {package} "
        f"{installed}. Fix: {fix}{colab}"
    )


def check(installed: dict[str, str] | None = None) -> None:
    """Raise ImportError naming the package, the installed and the needed version, and
    the command that fixes it, when torch or numpy is older than :data:`MINIMUM`.

    Args:
        installed: ``{package: version}`` to check (default: the imported modules').

    Raises:
        ImportError: a package is too old.
    """
    if installed is None:
        import numpy
        import torch

        installed = {"torch": torch.__version__, "numpy": numpy.__version__}
    problems = [
        message
        for package, needed in MINIMUM.items()
        if (message := too_old(package, installed[package], needed))
    ]
    if problems:
        raise ImportError("\n".join(problems))


#: The versions of the optional packages the book's chapters were checked with (the
#: pins of requirements.txt): a chapter installs exactly these when it needs them
#: (:func:`ensure_installed`), so that Colab, a laptop and CI run the same code.
BOOK_PINS = {
    "transformers": "5.23.0",
    "gguf": "0.19.0",
    "accelerate": "1.15.0",
    "rotary-embedding-torch": "0.9.1",
}


def installed_version(distribution: str) -> str | None:
    """The installed version of a distribution, or None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def ensure_installed(*distributions: str, quiet: bool = True) -> list[str]:
    """Install the book's pinned version (:data:`BOOK_PINS`) of each distribution
    that is missing or at another version, with pip, in this Python: how every chapter
    installs transformers, gguf and accelerate (by version, never by presence).

    Args:
        distributions: names of :data:`BOOK_PINS`. quiet: pass ``--quiet`` to pip.

    Returns:
        The requirements installed now (empty when every pin was already there).

    Raises:
        ValueError: a name that has no pin. subprocess.CalledProcessError: pip failed.
    """
    import importlib
    import subprocess
    import sys

    unknown = [d for d in distributions if d not in BOOK_PINS]
    if unknown:
        raise ValueError(
            f"no pinned version for {unknown}: choose from {sorted(BOOK_PINS)}"
        )
    wanted = [
        f"{d}=={BOOK_PINS[d]}"
        for d in distributions
        if installed_version(d) != BOOK_PINS[d]
    ]
    if wanted:
        command = [sys.executable, "-m", "pip", "install", *wanted]
        subprocess.check_call(command + (["--quiet"] if quiet else []))
        importlib.invalidate_caches()
    return wanted
