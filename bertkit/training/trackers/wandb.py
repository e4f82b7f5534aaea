"""--report-to wandb: a W&B run in --project named after the run directory; a resumed run continues the recorded id
(resume="allow") and skips the steps it already has."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

from bertkit.training.trackers.base import RunStart, Tracker, TrackerRun


class WandB(Tracker):
    name = "wandb"
    start_hint = " (log in with `wandb login`, or set WANDB_MODE=offline to log locally)"

    def start(self, run: RunStart) -> TrackerRun:
        from accelerate.tracking import WandBTracker

        run_id = run.saved.get("id") or secrets.token_hex(4)  # W&B run ids: short lowercase letters and digits
        handle = WandBTracker(run.plan.project, name=run.name, id=run_id, resume="allow", config=dict(run.hparams))
        handle.start()
        where = {"project": run.plan.project, "id": run_id, "run": run.name, "url": getattr(handle.run, "url", None)}
        return TrackerRun(self, handle, where, done_before=max(int(getattr(handle.run, "step", 0) or 0) - 1, 0))

    def finish(self, run: TrackerRun, ok: bool) -> None:
        run.handle.run.finish(exit_code=0 if ok else 1)

    def summary_line(self, where: Mapping[str, Any]) -> str:
        return f"wandb: run {where['id']} in project {where['project']}" + (f"  ({where['url']})" if where.get("url")
                                                                             else "")


TRACKER = WandB()
