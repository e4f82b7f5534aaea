"""A saved model folder to the Hugging Face hub over HTTP (`bertkit push`, `bertkit.commands.push`). Offline (HF_HUB_OFFLINE /
TRANSFORMERS_OFFLINE, or the hub endpoint unreachable) is one error before the folder is read; a folder that is not a
complete saved model (config, weights, tokenizer, a card that passes `check_model_card`, no leftovers of an
interrupted save) is refused; the card passes the hub's own validation before anything is created; only the files
bertkit wrote there are uploaded (the folder's file list, or an export's FOLDER_FILES), never hidden files."""

from __future__ import annotations

import os
from pathlib import Path

from bertkit.errors import UserError
from bertkit.io import atomic, ownership, record
from bertkit.models.card import CARD_FILE, check_model_card, read_model_card
from bertkit.models.folders import CONNECT_SECONDS, endpoint_reachable, offline_variables
from bertkit.models.metadata import MODEL_INFO, record_problems

SAFETENSORS = ("model.safetensors", "model.safetensors.index.json")
TOKENIZER = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model")


def push_folder(folder: Path, repo_id: str, private: bool) -> tuple[list[str], str, str]:
    """Upload the saved model `folder` to the hub repository `repo_id`: (files uploaded, repository url, commit)."""
    from huggingface_hub import create_repo, upload_folder
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    check_online()  # before the folder is read
    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise UserError(f"--repo-id {repo_id!r} is not a hub repository id ({exc}). A valid one is NAME or "
                        f"OWNER/NAME of letters, digits, '-', '_' and '.'; pass e.g. --repo-id my-name/sst2-minilm.") from None
    files = model_files(folder)
    _validate_card(folder)
    url = create_repo(repo_id, private=private, exist_ok=True)
    commit = upload_folder(repo_id=repo_id, folder_path=str(folder), allow_patterns=files,
                           commit_message=f"bertkit push {folder.name}")
    return files, str(url), str(getattr(commit, "commit_url", commit))


def check_online() -> None:
    """A UserError when the hub cannot be reached: offline mode is set, or its endpoint does not answer."""
    from huggingface_hub import constants

    set_offline = offline_variables()
    if set_offline:
        raise UserError(f"bertkit push uploads to the Hugging Face hub, but offline mode is set "
                        f"({', '.join(f'{n}={os.environ[n]}' for n in set_offline)}). Unset it (e.g. `unset "
                        f"{set_offline[0]}`) on a machine with network access, and re-run the same command.")
    if not endpoint_reachable(constants.ENDPOINT):
        raise UserError(f"bertkit push cannot reach the Hugging Face hub at {constants.ENDPOINT} (no connection "
                        f"within {CONNECT_SECONDS:g} s). Run it on a machine with network access (or set HF_ENDPOINT "
                        f"to a reachable hub mirror) and re-run the same command.")


def model_files(folder: Path) -> list[str]:
    """The files to upload (bertkit's own, relative paths), after checking `folder` is a complete saved model whose
    file list names only files inside it."""
    check_file_list_confined(folder)
    problems = saved_model_problems(folder)
    if problems:
        raise UserError(f"{folder} is not a complete saved model: {'; '.join(problems)}. Push a folder bertkit saved "
                        f"whole (a run's best/ or final/, a sweep's OUT/best, an export folder); re-run the command "
                        f"that wrote it to finish or rewrite it.")
    listed = atomic.read_json_or_none(folder / ownership.FILE_LIST)
    if isinstance(listed, dict) and isinstance(listed.get("files"), list):
        names = [str(n) for n in listed["files"]]
    else:  # an export folder: the format's names
        from bertkit.models import onnx  # torch: only for a folder that is there to upload

        names = sorted(n for n in onnx.FOLDER_FILES if (folder / n).is_file())
    return [n for n in names if not any(part.startswith(".") for part in n.split("/")) and (folder / n).is_file()]


def check_file_list_confined(folder: Path) -> None:
    """A UserError naming the folder's file list and the paths in it that are not inside the folder (absolute, with
    `..`, or leading out through a link): the folder is damaged, and nothing of it is uploaded."""
    listed = atomic.read_json_or_none(folder / ownership.FILE_LIST)
    files = listed.get("files") if isinstance(listed, dict) else None
    outside = record.outside_of(folder, files) if isinstance(files, list) else []
    if outside:
        shown = ", ".join(repr(p) for p in outside[:5]) + (f", and {len(outside) - 5} more" if len(outside) > 5 else "")
        raise UserError(f"{folder} is damaged: its file list {folder / ownership.FILE_LIST} names paths outside the "
                        f"folder ({shown}); bertkit uploads only files inside the folder it pushes, so it uploaded "
                        f"nothing. Re-save the folder (re-run the command that wrote it) and push it again.")


def weight_files() -> tuple[str, ...]:
    """The names a saved model's weights go by: safetensors, or an export's ONNX graph."""
    from bertkit.models import onnx  # its format names; imported (with torch) once a folder is there to check

    return (*SAFETENSORS, onnx.MODEL_FILE)


def saved_model_problems(folder: Path) -> list[str]:
    """Why `folder` is not a complete saved model (empty: it is one)."""
    if not folder.is_dir():
        return [f"no such folder ({folder})"]
    problems = []
    if not (folder / "config.json").is_file():
        problems.append("config.json is missing")
    weights = weight_files()
    if not any((folder / n).is_file() for n in weights):
        problems.append(f"no weights ({' or '.join(weights)})")
    if not any((folder / n).is_file() for n in TOKENIZER):
        problems.append("no tokenizer files (tokenizer.json / vocab.txt)")
    leftovers = interrupted_saves(folder)
    if leftovers:
        problems.append(f"leftovers of an interrupted save: {', '.join(leftovers)}")
    problems += [p.replace(str(folder / CARD_FILE), CARD_FILE) for p in check_model_card(folder)]
    problems += [f"not as saved ({problem}; {MODEL_INFO} records each file's size and sha256)"
                 for problem in record_problems(folder)]
    listed = atomic.read_json_or_none(folder / ownership.FILE_LIST)
    if isinstance(listed, dict):
        missing = [n for n in listed.get("files", []) if not (folder / n).is_file()]
        if missing:
            problems.append(f"listed files missing: {', '.join(missing[:5])}")
    return problems


def interrupted_saves(folder: Path) -> list[str]:
    """The temp folders and files a killed save of `folder` left, as the run's record lists them (a temp entry in
    the folder, or next to it in its parent); a folder outside any run has no record, so none are claimed."""
    found = ownership.record_of(folder)
    if found is None:
        return []
    rec, rel = found
    parent = rel.rpartition("/")[0]
    return sorted(Path(path).name for path, entry in rec.entries().items()
                  if entry.kind == record.TEMP and (rec.root / path).exists()
                  and (path.startswith(rel + "/") or path.rpartition("/")[0] == parent))


def _validate_card(folder: Path) -> None:
    """The hub's own validation of the card's metadata (an HTTP call)."""
    try:
        read_model_card(folder).validate()
    except Exception as exc:  # ValueError (rejected) or an HTTP error: the hub's words are the message
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise UserError(f"The hub rejected the model card {folder / CARD_FILE} ({reason}). Fix the metadata it names "
                        f"(or re-save the folder with this bertkit) and re-run the same command.") from None

