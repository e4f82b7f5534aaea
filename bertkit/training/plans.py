"""How a problem family's fine-tuning runs train (`Training`): how a run's config reads its texts, a new `Task` for
each run (a sweep's trials get one each: a task holds its run's windows), and what a sweep checks of each trial before
any runs. This class is the sentence family's: each run reads its data options itself (`Task.training_data`). A
family whose runs read data of their own brings a subclass (`bertkit.families`: a tagger's reads its tagged corpora
once, before torch is imported)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bertkit.encoding.reading import Reading
from bertkit.errors import raise_if_problems


class Training:
    """A family's fine-tuning runs: `reading`, `task`, and a sweep's checks (`check_sweep`, `check_trial`)."""

    data: Any = None
    """What every run reads, read once by the command (None: each run reads its data options)."""

    def __init__(self, option_problems: Callable[[Any], list[str]] | None = None) -> None:
        self.option_problems = option_problems or (lambda cfg: [])
        """A trial config's options this family does not read (the family's refusals), checked per trial."""

    def reading(self, cfg: Any) -> Reading:
        """How a run with config `cfg` reads its texts (the command resolved `cfg`'s reading options already)."""
        return Reading.from_options(cfg.reading)

    def task(self) -> Any:
        """A new `Task` for one run (`training.finetune.Task`: fine-tuning a sequence classifier)."""
        from bertkit.training.finetune import Task

        return Task()

    def check_sweep(self, cfg: Any) -> None:
        """What a sweep's own options must satisfy before its trials are checked (a UserError otherwise)."""

    def check_trial(self, checker: Any, trial: Any) -> None:
        """A trial's checks before it trains (`training.trial_checks.TrialCheck`): its options, then its data and
        problem shape and one optimizer step's rows."""
        raise_if_problems(self.option_problems(trial))
        checker.check_rows(trial)
