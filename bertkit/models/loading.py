"""The only module that calls `from_pretrained`: tokenizer, encoder and classifier loading, device and dtype.

Safe by default: weights load from safetensors only (`use_safetensors=True`, so a pickle-only checkpoint is
refused, never unpickled) and `trust_remote_code` is off unless the user passes --trust-remote-code.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
from pathlib import Path
from typing import Any

import torch

from bertkit.errors import UserError
from bertkit.io.digests import file_digest
from bertkit.models import folders, metadata
from bertkit.models.folders import (  # noqa: F401 - the names' one owner is folders (light: no torch); used as loading.X
    OFFLINE_HINT,
    OFFLINE_NAME,
    check_model_folder,
    offline_model_dir,
    resolve_model_name,
)
from bertkit.models.limits import accepted_length, check_length_accepted
from bertkit.models.quantize import is_int8

log = logging.getLogger(__name__)

DTYPE_NAMES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
INT8 = "int8"
"""The inference-only precision: dynamic int8 linear layers on the CPU (`quantize.quantized_int8`)."""
PICKLE_WEIGHTS = ("pytorch_model.bin", "tf_model.h5", "model.ckpt.index", "flax_model.msgpack")


# ---------------------------------------------------------------- names and folders


def _check_weights(path: str) -> None:
    """A local folder must hold safetensors weights; pickle-only checkpoints are refused, not unpickled."""
    folder = Path(path)
    if not folder.is_dir():
        return
    if any(folder.glob("*.safetensors")):
        return
    pickled = [p.name for p in folder.iterdir() if p.name in PICKLE_WEIGHTS or p.suffix in {".bin", ".pt", ".pth"}]
    if pickled:
        raise UserError(
            f"Model folder {folder} has only pickle weights ({', '.join(sorted(pickled))}); bertkit loads safetensors "
            "only, because unpickling runs arbitrary code. Convert it once where you trust the file: "
            "`AutoModel.from_pretrained(folder).save_pretrained(folder, safe_serialization=True)`."
        )
    if any(folder.glob("*.onnx")):  # an export: its graph is not a PyTorch model for training or benchmarking
        section = metadata.read_model_info(folder).get("onnx")
        source = section.get("source_model") if isinstance(section, dict) else None
        origin = f" Pass the folder it was exported from ({source})" if isinstance(source, str) else \
            " Pass the PyTorch folder it was exported from"
        raise UserError(f"Model folder {folder} is an ONNX export (its weights are in the ONNX graph, not PyTorch "
                        f"weights): predict, evaluate and embed run it; this command needs the PyTorch model."
                        f"{origin}, or run `bertkit predict --model {folder}`.")
    raise UserError(f"Model folder {folder} has no weights (no *.safetensors file). {OFFLINE_HINT}")


def _load_error(name: str, exc: Exception) -> UserError:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    if "trust_remote_code" in str(exc) or "contains custom code" in str(exc):
        return UserError(
            f"Model {name} needs custom code from its repository (auto_map in config.json), and bertkit does not run "
            "downloaded code by default. Pass --trust-remote-code only if you have read and trust that code, or use "
            f"a standard BERT-family model. {OFFLINE_HINT}"
        )
    if Path(name).exists():
        return UserError(f"Could not load model folder {name}: {first}. {OFFLINE_HINT}")
    return UserError(
        f"Could not load model {name!r} from the hub: {first}. The name may be wrong or the hub unreachable "
        f"(offline?). {OFFLINE_HINT}"
    )


@contextlib.contextmanager
def _loading(name: str):
    """Turn every loading failure into one readable UserError, and keep transformers' load bars quiet."""
    try:
        yield
    except UserError:
        raise
    except (OSError, ValueError, KeyError, RuntimeError, ImportError) as exc:
        raise _load_error(name, exc) from None
    except Exception as exc:
        if type(exc).__name__ != "SafetensorError":  # a damaged/truncated weights file; anything else is a bug
            raise
        raise UserError(
            f"The weights in model folder {name} are damaged ({str(exc).splitlines()[0][:200]}); the "
            "*.safetensors file is probably truncated by an interrupted copy or download. Copy or download the "
            "folder again, or re-save it with save_pretrained; then pass it with --model."
        ) from None


# ---------------------------------------------------------------- loading


def load_tokenizer(name: str, trust_remote_code: bool = False) -> Any:
    """The fast tokenizer for `name` (hub id, folder or `minilm-offline`)."""
    from transformers import AutoTokenizer

    path = check_model_folder(name)
    with _loading(path):
        tokenizer = AutoTokenizer.from_pretrained(path, use_fast=True, trust_remote_code=trust_remote_code)
    folders.check_vocabulary(tokenizer, name)
    if not getattr(tokenizer, "is_fast", False):
        log.warning("Tokenizer for %s is not a fast (Rust) tokenizer; tokenization will be slower.", name)
    return tokenizer


def load_config(name: str, trust_remote_code: bool = False) -> Any:
    from transformers import AutoConfig

    path = check_model_folder(name)
    with _loading(path):
        return AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)


def load_encoder(name: str, trust_remote_code: bool = False, random_init: bool = False, **config_overrides: Any) -> Any:
    """The bare encoder (`AutoModel`) in eval mode; `random_init` builds it from its config with fresh weights."""
    from transformers import AutoModel

    path = check_model_folder(name)
    if random_init:
        config = load_config(name, trust_remote_code)
        for key, value in config_overrides.items():
            setattr(config, key, value)
        with _loading(path):
            return AutoModel.from_config(config, trust_remote_code=trust_remote_code).eval()
    _check_weights(path)
    with _loading(path):
        model = AutoModel.from_pretrained(
            path, use_safetensors=True, trust_remote_code=trust_remote_code, **config_overrides
        )
    return model.eval()


def build_encoder(config: Any) -> Any:
    """A bare encoder with fresh random weights from a transformers config object (no weights read, no network).

    Used for exact-shape speed/size comparisons (e.g. `BertConfig()` vs `DistilBertConfig()`); label such
    results as random-init: their quality means nothing.
    """
    from transformers import AutoModel

    return AutoModel.from_config(config).eval()


def load_classifier(
    name: str, id2label: dict[int, str] | None = None, trust_remote_code: bool = False, *, require_head: bool = False,
    head_fix: str | None = None, tokens: bool = False, questions: bool = False, **overrides: Any,
) -> Any:
    """`AutoModelForSequenceClassification` (BertForSequenceClassification for BERT checkpoints); `tokens`: the
    token-classification model instead (`AutoModelForTokenClassification`: one output per word piece, tagging);
    `questions`: the question-answering model (`AutoModelForQuestionAnswering`: a start and an end score per token).

    With `id2label`, the head is sized and named for those labels (a new head if the checkpoint's differs).
    `require_head` (predict, evaluate, distill's teacher): the folder must hold a trained classification head; a base
    encoder would get a random one and give random labels, so it is refused. `head_fix`: the end of that message,
    naming the calling command's own options (default: predict's and evaluate's, --model or --probe).
    """
    import transformers

    path = check_model_folder(name)
    _check_weights(path)
    if require_head and not (tokens or questions) and metadata.is_tagger(path):  # its head tags words: no sentence head to read
        raise UserError(f"{name} is a tagging model (one tag per word): this command reads sentence classifiers "
                        f"so far. `bertkit predict` and `bertkit evaluate` read it as a tagger; pass a model "
                        f"fine-tuned on rows of text here.")
    auto = getattr(transformers, "AutoModelForQuestionAnswering" if questions else "AutoModelForTokenClassification"
                   if tokens else "AutoModelForSequenceClassification")
    kwargs: dict[str, Any] = dict(overrides)
    if id2label is not None:
        kwargs.update(
            num_labels=len(id2label),
            id2label={int(k): v for k, v in id2label.items()},
            label2id={v: int(k) for k, v in id2label.items()},
            ignore_mismatched_sizes=True,
        )
    with _loading(path):
        model, info = auto.from_pretrained(
            path, use_safetensors=True, trust_remote_code=trust_remote_code, output_loading_info=True, **kwargs
        )
    untrained = sorted(k for k in info.get("missing_keys", ()) if k.split(".")[0] in HEAD_MODULES)
    if require_head and untrained:
        raise UserError(
            f"No fine-tuned classification head found in {name}: its weights lack {', '.join(untrained[:4])}, so "
            f"the head would be random and so would the labels. "
            + (head_fix or f"Fine-tune it first with `bertkit finetune --model {name} ...` and pass its best/ folder, "
                           f"or use a saved probe with --probe.")
        )
    return model


HEAD_MODULES = {"classifier", "pre_classifier", "score", "qa_outputs"}
"""Top-level names of task heads (BERT: classifier; DistilBERT: pre_classifier + classifier; question answering:
qa_outputs)."""


def model_max_length(tokenizer: Any, config: Any) -> int:
    """The longest input the model accepts: position embeddings bound it, the tokenizer may say less (unless bertkit
    wrote its recorded reading there: a model trained at 16 tokens may still be read at 64 when asked)."""
    declared = getattr(tokenizer, "model_max_length", None)
    if metadata.declares_reading(getattr(tokenizer, "name_or_path", "") or ""):
        declared = None  # the window the model was trained at, not a limit of the model
    return accepted_length(getattr(config, "max_position_embeddings", None), declared)


def min_max_length(tokenizer: Any, pair: bool = False) -> int:
    """The smallest --max-length that holds the tokenizer's special tokens plus one token of each text (BERT: 3 for
    one text, [CLS] x [SEP]; 5 for a pair, [CLS] a [SEP] b [SEP])."""
    return int(tokenizer.num_special_tokens_to_add(pair=pair)) + (2 if pair else 1)


def check_max_length(max_length: int, tokenizer: Any, config: Any, model_name: str, *, pair: bool = False) -> None:
    """--max-length above what the model's position embeddings allow is an error, not a crash mid-run; one too
    small to hold the special tokens and a token of each text is an error, not rows that all read the same."""
    smallest = min_max_length(tokenizer, pair)
    if max_length < smallest:
        what = "a sentence pair" if pair else "a text"
        raise UserError(
            f"--max-length {max_length} cannot hold {what}: model {model_name}'s tokenizer adds "
            f"{smallest - (2 if pair else 1)} special tokens to {what}, which leaves no room for "
            f"{'a token of each text' if pair else 'a single token of the text'}, so every row would read the same. "
            f"The smallest valid value is {smallest}; pass --max-length {smallest} or more (128 is typical)."
        )
    check_length_accepted(max_length, model_max_length(tokenizer, config), model_name)


def model_revision(name: str) -> str:
    """A short identifier of the exact weights: the hub commit, or a hash of the local weights file."""
    import hashlib

    path = Path(resolve_model_name(name))
    weights = sorted([*path.glob("*.safetensors"), *path.glob("*.onnx")]) if path.is_dir() else []
    if weights:
        digest = hashlib.sha256()
        for file in weights:
            digest.update(file.name.encode())
            digest.update(str(file.stat().st_size).encode())
            with open(file, "rb") as handle:  # first and last MiB: cheap, and changes with any re-save
                digest.update(handle.read(1 << 20))
                handle.seek(max(0, file.stat().st_size - (1 << 20)))
                digest.update(handle.read())
        return "local-sha256:" + digest.hexdigest()[:16]
    return "hub:" + str(getattr(load_config(name), "_commit_hash", None) or "unknown")


def weights_digest(name: str) -> str | None:
    """The sha256 of a local model folder's whole weights (each weight file's name and full-content digest): what a
    saved probe or a store records beside `model_revision`, so an encoder changed anywhere in its weights is noticed
    (the revision reads the first and last MiB only; it stays the identity older records compare). Hashed once per
    process and file (`io.digests.file_digest`). None for a hub name."""
    import hashlib

    path = Path(resolve_model_name(name))
    weights = sorted([*path.glob("*.safetensors"), *path.glob("*.onnx")]) if path.is_dir() else []
    if not weights:
        return None
    digest = hashlib.sha256()
    for file in weights:
        digest.update(f"{file.name}:{file_digest(file)[1]};".encode())
    return digest.hexdigest()


# ---------------------------------------------------------------- device and precision


DEVICE_NAMES = "cpu, cuda, cuda:N (N = GPU index), mps, or auto"


DEVICE_ENV = "BERTKIT_DEVICE"
"""What `auto` means when set (e.g. BERTKIT_DEVICE=cpu keeps every run of a GPU machine on the CPU; training's
Accelerator reads it too, `finetune.force_cpu`). An explicit --device still wins."""


def choose_device(requested: str | None = None) -> torch.device:
    """The explicitly requested device, which must exist here; for `auto` (or none): $BERTKIT_DEVICE when set, else
    cuda if available, else mps, else cpu."""
    if requested and requested.strip().lower() != "auto":
        problem = device_problem(requested)
        if problem:
            raise UserError(problem)
        return torch.device(requested.strip().lower())
    pinned = os.environ.get(DEVICE_ENV, "").strip().lower()
    if pinned and pinned != "auto":
        problem = device_problem(pinned)
        if problem:
            raise UserError(f"The environment variable {DEVICE_ENV}={pinned} names no usable device: "
                            f"{problem.replace(f'--device {pinned}', pinned, 1)} Or unset {DEVICE_ENV}.")
        return torch.device(pinned)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if _mps_available():
        return torch.device("mps")
    return torch.device("cpu")


def device_problem(requested: str, check_available: bool = True) -> str | None:
    """Why --device `requested` cannot be used (not a device name, or not on this machine); None when it can."""
    name = requested.strip().lower()
    if name in ("auto", "cpu"):
        return None
    match = re.fullmatch(r"(cuda|mps)(?::(\d+))?", name)
    if match is None or (match[1] == "mps" and match[2] not in (None, "0")):
        hint = " (for an NVIDIA GPU: --device cuda)" if name.startswith(("gpu", "nvidia")) else ""
        return (f"--device {requested!r} is not a device name{hint}. Valid: {DEVICE_NAMES}. "
                f"Pass --device auto (the best device found here) or --device cpu.")
    if not check_available:
        return None
    if match[1] == "mps":
        return None if _mps_available() else (
            f"--device {requested}: Apple's MPS backend is not available on this machine. "
            f"Pass --device cpu, or --device auto (uses {_auto_name()} here).")
    if not torch.cuda.is_available():
        why = "this torch build has no CUDA support" if torch.version.cuda is None else "no CUDA GPU is visible"
        return (f"--device {requested}: CUDA is not available on this machine ({why}). "
                f"Pass --device cpu, or --device auto (uses {_auto_name()} here).")
    count = torch.cuda.device_count()
    if match[2] is not None and int(match[2]) >= count:
        return (f"--device {requested}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}. "
                f"Pass one of those, or --device cuda (the first).")
    return None


def _mps_available() -> bool:
    return getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()


def _auto_name() -> str:
    return "cuda" if torch.cuda.is_available() else "mps" if _mps_available() else "cpu"


@functools.cache
def cpu_supports_bf16() -> bool:
    """True when the CPU has native bf16 matmul (AVX512-BF16 or AMX), where bf16 autocast is a real speed-up.

    Without it, oneDNN emulates bf16 and it is several times *slower* than fp32 (measured: 6x on an AVX2 EPYC).
    """
    if os.environ.get("BERTKIT_ASSUME_BF16") in {"0", "1"}:
        return os.environ["BERTKIT_ASSUME_BF16"] == "1"
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()) and _cpu_flags_have_bf16()
    except (AttributeError, RuntimeError):
        return False


def _cpu_flags_have_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return True  # not Linux: trust oneDNN's answer
    return any(f in flags for f in ("avx512_bf16", "amx_bf16"))


def choose_dtype(requested: str, device: torch.device) -> torch.dtype:
    """The compute dtype for `--precision`: `auto` is bf16 where the hardware runs it fast, else fp32. `int8`
    computes in fp32 around int8 matrix products (`quantize.quantized_int8` converts the model), on the CPU only."""
    if requested == INT8:
        if device.type != "cpu":
            raise UserError(
                f"--precision int8 is a CPU precision here (dynamic int8 linear layers), and the model is on "
                f"{device}. On a GPU the valid choices are auto, fp32, bf16 and fp16. Pass --precision bf16 (or fp16) "
                f"to stay on the GPU, or --device cpu to run int8.")
        return torch.float32
    if requested != "auto":
        if requested not in DTYPE_NAMES:
            raise UserError(f"Unknown dtype {requested!r}; use one of auto, fp32, bf16, fp16, int8.")
        if requested == "fp16" and device.type == "cpu":
            raise UserError("fp16 is a GPU precision; on the CPU use --precision bf16 (or fp32).")
        return DTYPE_NAMES[requested]
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "cpu" and cpu_supports_bf16():
        return torch.bfloat16
    return torch.float32


def runs_natively(precision: str, device: torch.device) -> bool:
    """Whether `device` runs `precision` at full speed: fp32 anywhere, bf16 on a GPU that has it or a CPU with
    AVX512-BF16/AMX, fp16 on a GPU, int8 (dynamic) on the CPU. Anything else (an ONNX backend's name): no."""
    if precision == "fp32":
        return True
    if precision == INT8:
        return device.type == "cpu"
    if device.type == "cuda":
        return precision == "fp16" or (precision == "bf16" and torch.cuda.is_bf16_supported())
    return precision == "bf16" and device.type == "cpu" and cpu_supports_bf16()


def dtype_name(dtype: torch.dtype) -> str:
    return {v: k for k, v in DTYPE_NAMES.items()}[dtype]


def precision_name(model: Any, dtype: torch.dtype) -> str:
    """What a run records as its precision: `int8` for a model `quantize.quantized_int8` converted, else the dtype's name."""
    return INT8 if is_int8(model) else dtype_name(dtype)


def inference_device(requested: str | None, precision: str) -> torch.device:
    """The device for an inference command: `choose_device`, except that `--device auto` with `--precision int8`
    is the CPU (int8 runs there only; an explicit GPU is refused by `choose_dtype`)."""
    if precision == INT8 and (requested or "auto").strip().lower() == "auto":
        return torch.device("cpu")
    return choose_device(requested)


def cast_for_inference(model: Any, device: torch.device, dtype: torch.dtype) -> Any:
    """An inference-only model on `device`; on a GPU in bf16/fp16 its weights are cast to that dtype (the kernels
    read half the bytes, and small batches replay as CUDA graphs without autocast's weight casts). On the CPU the
    weights stay fp32 and bf16 runs under autocast, as there it is measured faster."""
    model = model.to(device)
    if device.type == "cuda" and dtype in (torch.bfloat16, torch.float16):
        model = model.to(dtype)
    return model


def autocast(device: torch.device, dtype: torch.dtype) -> contextlib.AbstractContextManager:
    """Mixed-precision autocast for bf16/fp16 (weights stay fp32); a no-op context for fp32."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def parameter_count(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())
