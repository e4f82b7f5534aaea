"""--report-to trackio: a Trackio run in --project named after the run directory (local by default); a resumed run
continues the recorded one (resume="allow") and skips the steps it already has."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bertkit.training.trackers.base import RunStart, Tracker, TrackerRun


class Trackio(Tracker):
    name = "trackio"
    start_hint = " (Trackio logs locally by default; check TRACKIO_DIR and the space/server settings)"

    def start(self, run: RunStart) -> TrackerRun:
        from accelerate.tracking import TrackioTracker

        project, run_name = run.saved.get("project", run.plan.project), run.saved.get("name", run.name)
        handle = TrackioTracker(project, name=run_name, resume="allow" if run.saved else "never",
                                config=dict(run.hparams))
        handle.start()
        next_step = int(getattr(handle.run, "_next_step", 0) or 0)  # trackio: the resumed run's last step + 1
        return TrackerRun(self, handle, {"project": project, "name": run_name}, done_before=max(next_step - 1, 0))

    def summary_line(self, where: Mapping[str, Any]) -> str:
        return f"trackio: run {where.get('name')} in project {where.get('project')}  (view: trackio show)"


TRACKER = Trackio()
