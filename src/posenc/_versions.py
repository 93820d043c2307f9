"""The versions of torch and numpy that posenc needs, checked when it is imported, so
that an older install fails at once with what to do rather than deep inside a call.

torch 2.7: FlexAttention on the CPU (2.6; 2.5 on CUDA), scaled_dot_product_attention's
``enable_gqa`` (2.5), and ``torch._dynamo.config.recompile_limit`` (2.7, used by the
benchmarks). transformers 5 (``posenc[pretrained]``, the reference implementation of the
tests and the loader of the real models) needs torch 2.6 itself and is checked by
:mod:`posenc.layers.pretrained` when a real model is loaded.

The optional packages, by extra of pyproject.toml (:data:`EXTRAS`): ``pip install
posenc`` brings torch and numpy only. When a posenc module imports a package of an
extra that is not installed, :class:`MissingExtraFinder` (installed at ``import
posenc``) turns Python's "No module named ..." into a ModuleNotFoundError that names
the extra to install (:func:`missing_extra_message`); :func:`ensure_installed` installs
the book's pins of the packages a chapter needs beyond its extra.
"""

from __future__ import annotations

import re
import sys

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


#: What each extra of pyproject.toml installs, as ``{import name: distribution}``:
#: ``pip install posenc`` brings only torch and numpy (the encodings, posenc.layers,
#: the tools and the position card); a module that imports one of these names without
#: its extra fails with :func:`missing_extra_message`. tests/test_lean_install.py keeps
#: this table equal to pyproject.toml's ``[project.optional-dependencies]``.
_RUNS = {  # the stored runs, their statistics and the weight cache: book and study
    "pandas": "pandas",
    "scipy": "scipy",
    "tqdm": "tqdm",
    "platformdirs": "platformdirs",
    "filelock": "filelock",
    "safetensors": "safetensors",
}
EXTRAS = {
    "study": {**_RUNS, "sklearn": "scikit-learn"},
    "book": {
        "sympy": "sympy", "matplotlib": "matplotlib", "IPython": "ipython", **_RUNS
    },
    "pretrained": {
        "transformers": "transformers",
        "gguf": "gguf",
        "accelerate": "accelerate",
    },
    "cluster": {"submitit": "submitit"},
}
#: What each extra is for, in the messages.
EXTRA_PURPOSE = {
    "study": "python -m posenc.experiments.study and the stored studies",
    "book": "the book's chapters",
    "pretrained": "the real pretrained models and transformers' config classes",
    "cluster": "the studies' runs on SLURM",
}
#: The extra named first for an import from a subpackage (else EXTRAS' order).
_PREFERRED = {"posenc.book": "book", "posenc.symbolic": "book"}


def missing_extra_message(module: str, importer: str = "posenc") -> str | None:
    """What to install when ``importer`` (a posenc module) imports ``module`` (a
    top-level import name) and it is not installed: the extras that have it, the one
    that fits the importer first; None when no extra has it. For example scipy from
    posenc.experiments.stats: '... Install the extra that has it: pip install
    "posenc[study]" (python -m posenc.experiments.study and the stored studies), or
    "posenc[book]" (the book's chapters), which has it too.'
    """
    extras = [extra for extra, names in EXTRAS.items() if module in names]
    if not extras:
        return None
    preferred = next(
        (e for prefix, e in _PREFERRED.items() if importer.startswith(prefix)), None
    )
    if preferred in extras:
        extras.remove(preferred)
        extras.insert(0, preferred)
    first, *others = extras
    also = "".join(
        f', or "posenc[{e}]" ({EXTRA_PURPOSE[e]}), which has it too' for e in others
    )
    return (
        f"{importer} needs {module}, which is not installed: `pip install posenc` "
        "brings only torch and numpy (the encodings, posenc.layers, posenc.tools and "
        "the position card). Install the extra that has it: "
        f'pip install "posenc[{first}]" ({EXTRA_PURPOSE[first]}){also}.'
    )


#: The modules of Python's import system, between an import statement and a finder.
_IMPORT_MACHINERY = (
    "importlib",
    "importlib._bootstrap",
    "importlib._bootstrap_external",
)


def _importer() -> str | None:
    """The module whose import statement (or ``importlib.import_module`` call) asks
    for the module being looked up now, from the call stack; None for a lookup that
    only probes (``importlib.util.find_spec``) or on a Python without frames."""
    getframe = getattr(sys, "_getframe", None)
    frame = getframe(2) if getframe else None
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name == "importlib.util":
            return None  # find_spec: the caller asks whether it is there
        if name not in _IMPORT_MACHINERY:
            if name == "__main__":  # python -m posenc....
                spec = frame.f_globals.get("__spec__")
                name = getattr(spec, "name", name)
            return name
        frame = frame.f_back
    return None


class MissingExtraFinder:
    """The last finder of ``sys.meta_path`` (installed by :func:`install_finder`, when
    posenc is imported): asked only for a module no other finder found. When the
    module is one of :data:`EXTRAS` and the import comes from a posenc module, it raises
    ModuleNotFoundError with :func:`missing_extra_message` instead of Python's bare
    "No module named ..."; every other lookup (another package's import, a
    ``find_spec`` probe) it leaves alone."""

    def find_spec(self, fullname, path=None, target=None):
        if path is not None or not any(fullname in n for n in EXTRAS.values()):
            return None  # a submodule, or no extra has it
        importer = _importer()
        if importer is None or importer.split(".")[0] != "posenc":
            return None
        later = sys.meta_path[sys.meta_path.index(self) + 1 :]  # finders added since
        for finder in later:
            spec = getattr(finder, "find_spec", lambda *a: None)(fullname, path, target)
            if spec is not None:
                return spec
        raise ModuleNotFoundError(
            missing_extra_message(fullname, importer), name=fullname
        )


def install_finder() -> None:
    """Append one :class:`MissingExtraFinder` to ``sys.meta_path`` (once)."""
    if not any(isinstance(f, MissingExtraFinder) for f in sys.meta_path):
        sys.meta_path.append(MissingExtraFinder())


install_finder()
