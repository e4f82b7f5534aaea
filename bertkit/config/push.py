"""`bertkit push`'s config (its own module, registered in `registry.py`)."""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.config.fields import MODEL, OUTPUT, option
from bertkit.errors import raise_if_problems


@dataclass(frozen=True)
class PushConfig:
    """`bertkit push`: upload a saved model folder (with its model card) to the Hugging Face hub."""

    model: str | None = option(None, "The saved model folder to upload: a run's best/ or final/, a distilled student, "
                               "a sweep's OUT/best, or an export folder.", panel=MODEL)
    repo_id: str | None = option(None, "The hub repository to upload to: NAME or OWNER/NAME (created if missing).",
                                 panel=OUTPUT)
    private: bool = option(False, "Create the repository as private (an existing repository keeps its visibility).",
                           panel=OUTPUT)

    def __post_init__(self) -> None:
        problems = []
        if not self.model:
            problems.append("--model is required: the saved model folder to upload (e.g. runs/sst2/best).")
        if not self.repo_id:
            problems.append("--repo-id is required: the hub repository, e.g. --repo-id my-name/sst2-minilm.")
        raise_if_problems(problems)
