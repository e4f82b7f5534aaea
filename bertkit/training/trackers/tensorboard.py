"""--report-to tensorboard: event files in the run directory's tensorboard/ folder, recorded as bertkit's as the
writer makes them. A resumed run's writer purges the events after the restored step, so no step is logged twice."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bertkit.io import library_files, record
from bertkit.training.trackers.base import RunStart, Tracker, TrackerRun

FOLDER = "tensorboard"
"""The run directory's folder of TensorBoard event files."""


class TensorBoard(Tracker):
    name = "tensorboard"
    choice = "tensorboard (OUT/tensorboard)"  # type: ignore[assignment]

    def start(self, run: RunStart) -> TrackerRun:
        from accelerate.tracking import TensorBoardTracker

        folder = run.folder / FOLDER
        earlier = folder.is_dir() and any(folder.glob("events.out.tfevents.*"))
        record.make_dirs(folder)
        before = library_files.listing(folder)
        handle = TensorBoardTracker(FOLDER, run.folder, **({"purge_step": run.step + 1} if earlier else {}))
        handle.start()
        if not run.saved:
            handle.store_init_configuration(dict(run.hparams))
        library_files.note_new(folder, before)  # the writer names its event files itself: recorded once it made them
        return TrackerRun(self, handle, {"logdir": str(run.out / FOLDER), "run": run.name}, folder=folder)

    def summary_line(self, where: Mapping[str, Any]) -> str:
        return f"tensorboard: {where['logdir']}  (view: tensorboard --logdir {where['logdir']})"


TRACKER = TensorBoard()
