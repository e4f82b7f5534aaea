"""`bertkit push`: upload a saved model folder, with its model card, to the Hugging Face hub
(`bertkit.models.hub` checks the folder and uploads bertkit's files)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bertkit.errors import raise_if_problems
from bertkit.options import MODEL, OUTPUT, Config, option


@dataclass(frozen=True)
class PushConfig(Config):
    """`bertkit push`: upload a saved model folder (with its model card) to the Hugging Face hub."""

    REQUIRED_OPTIONS = ("model", "repo_id")

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


@dataclass
class PushResult:
    """What was uploaded, where."""

    repo_id: str
    url: str
    model: str
    files: list[str] = field(default_factory=list)
    private: bool = False
    commit: str = ""


def run(cfg: PushConfig) -> PushResult:
    """Upload --model to --repo-id (offline: one error before the folder is read)."""
    from bertkit.models import hub

    assert cfg.model and cfg.repo_id
    folder = Path(cfg.model).expanduser()
    files, url, commit = hub.push_folder(folder, cfg.repo_id, cfg.private)
    return PushResult(cfg.repo_id, url, str(folder), files, cfg.private, commit)
