"""`bertkit sweep`: many fine-tuning runs over a grid or an Optuna search, each an ordinary `finetune` run directory
`OUT/trials/NNN_option=value..._seed=S/` run by `finetune.finetune` itself, so each resumes like one.

Resuming a sweep: the same command walks the same trials in the same order. A finished trial is recognised by
finetune (its metrics.json) and not trained again; the interrupted one resumes from its last checkpoint (finetune's
exact resume); the rest run. A changed space or finetune option is refused with the differences (`OUT/config.json`),
unless --overwrite (the new sweep is built in OUT/.bertkit-next and swapped in when it is complete).

Optuna: the study is not stored. It is replayed: every run creates the same in-memory study (TPE seeded with --seed)
and asks it for trial 0, 1, ... in order; a trial that already ran tells the study the values its run directory
holds (every dev evaluation, then its best or PRUNED), so the next `ask` gets the same parameters an uninterrupted
sweep got. The only state is in the trial folders, which are written atomically - nothing else can disagree with
them. Pruning: after every dev evaluation the loop calls back (`finetune(on_evaluate=...)`); the main process reports
the value at that evaluation's index and asks the pruner; a pruned trial stops like an early stop (`stop_reason`
"pruned" in its metrics.json). With --seeds K, the first seed's run is the one reported and pruned; the study is
told the mean over the seeds.

Processes: under `accelerate launch` every process walks the same trials (the grid order is fixed; for Optuna only
the main process holds the study and the parameters and pruning decisions are broadcast), so all run the same
trial at the same time.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.errors import UserError
from bertkit.io import ownership, rundir, trail
from bertkit.io.ownership import move_aside
from bertkit.models.compute import Compute
from bertkit.options import config_dict, flag
from bertkit.scoring.table import LOWER_IS_BETTER
from bertkit.training import finetune as finetune_core
from bertkit.training import trial_checks, trial_plans, trials_report
from bertkit.training.finetune import finetune
from bertkit.training.loop import on_main
from bertkit.training.plans import Training
from bertkit.training.resume import run_family
from bertkit.training.space import Dimension, SweepOptions, finetune_config
from bertkit.training.trial_plans import Plan
from bertkit.training.trials_report import TrialRow

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class SweepOutcome:
    """What a sweep produced: its folder and (main process) what sweep.json holds; `commands.sweep` makes it the
    command's result."""

    out: Path
    summary: trials_report.SweepSummary | None
    is_main_process: bool = True


ComputeFor = Callable[[str], Compute]
"""The command's resolution of a --precision value (a trial's: it may be a dimension of the space) to a `Compute`."""


def run_sweep(cfg: SweepOptions, compute_for: ComputeFor, training: Training, *,
              progress: bool = True) -> SweepOutcome:
    """Run (or resume) every trial of `cfg`'s space, then rank them and write trials.csv, sweep.json, sweep.png and
    OUT/best (the best trial's best model). `cfg`'s reading options are resolved already (`commands.sweep`).
    `training`: how the problem family's runs train (each trial's reading and task; its data, read once by the
    command where the family reads it so)."""
    dims = cfg.dimensions
    if cfg.sweep.search == "optuna":
        import_optuna()  # a missing Optuna stops the sweep before it claims --out
    # every value checked, before any trial or claim
    layout = on_main(_processes(), lambda: _lay_out(cfg, dims, compute_for, training))
    for note in layout.notes:
        log.info("%s", note)
    run = on_main(_processes(), lambda: _claim(cfg, dims))
    root = run.path
    if cfg.sweep.search == "grid":
        rows = [run_trial(cfg, run.out, plan, compute_for, training, progress) for plan in layout.plans]
    else:
        rows = OptunaSearch(cfg, dims, compute_for, training).run(run.out, progress)
    summary = None
    if _processes().is_main_process:
        summary = trials_report.write_outputs(cfg, dims, root, rows, layout.notes)
        run.commit()
    _processes().wait_for_everyone()
    return SweepOutcome(run.out, summary, _processes().is_main_process)


def _lay_out(cfg: SweepOptions, dims: list[Dimension], compute_for: ComputeFor,
             training: Training) -> trial_plans.GridLayout:
    """Every value of the space checked against the model, data and machine, then (grid) the trials laid out with
    their values resolved and duplicates merged (main process)."""
    checked = trial_checks.check_space(cfg, dims, compute_for, training, _processes().num_processes)
    if cfg.sweep.search != "grid":
        return trial_plans.GridLayout(())
    return trial_plans.grid_plans(cfg, dims, checked.config_of)


def run_trial(cfg: SweepOptions, out: Path, plan: Plan, compute_for: ComputeFor, training: Training, progress: bool,
              on_evaluate: Any = None) -> TrialRow:
    """One trial through `finetune` (new, resumed, or finished already: finetune decides); its trials.csv row.
    The trial's reading and task are its family's (`training`: a new task per trial, which holds the trial's
    windows; a tagger reads words in windows of its --max-length and is ranked by its tags' metric).
    The trial's --out is its final path `OUT/trials/NAME` (what its config.json, metrics.json and cards record);
    while the sweep replaces an earlier one it is written in the staging folder (`rundir.located`). A finished
    trial keeps only its best/ model unless --keep-checkpoints."""
    shown = ", ".join(f"{flag(k)} {v}" for k, v in plan.params.items())
    log.info("trial %s: %s%s--seed %d", plan.name, shown, ", " if shown else "", plan.seed)
    trial_cfg = finetune_config(cfg, plan.params, plan.seed, str(out / "trials" / plan.name))
    # the trial's own reading and compute: --max-length and --precision may be dimensions of the space
    result = finetune(trial_cfg, compute=compute_for(trial_cfg.compute.precision), reading=training.reading(trial_cfg),
                      progress=progress, on_evaluate=on_evaluate, task=training.task())
    if _processes().is_main_process and not cfg.output.keep_checkpoints:
        _keep_only_best(rundir.located(trial_cfg.output.out or ""))
    _processes().wait_for_everyone()
    return trials_report.trial_row(plan.name, {flag(k)[2:]: v for k, v in plan.values.items()}, plan.seed,
                                  result.summary.to_json())


# ---------------------------------------------------------------- optuna


def import_optuna() -> Any:
    """Optuna, or a UserError saying how to install it."""
    try:
        import optuna
    except ImportError:
        raise UserError("--search optuna needs Optuna, which is not installed (grid sweeps, --search grid, work "
                        "without it). Install it with: pip install 'bertkit[sweep]'  (or: pip install optuna).") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def make_pruner(cfg: SweepOptions) -> Any:
    """The pruner: Optuna's MedianPruner from the third trial on (a trial below the median of the earlier trials at
    the same evaluation stops), or none (--no-prune)."""
    optuna = import_optuna()
    if not cfg.sweep.prune:
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0)


class OptunaSearch:
    """--search optuna: an in-memory study, replayed from the trial folders on every run (see module docstring)."""

    def __init__(self, cfg: SweepOptions, dims: list[Dimension], compute_for: ComputeFor, training: Training):
        self.cfg, self.dims, self.compute_for, self.training = cfg, dims, compute_for, training
        self.config_of = trial_plans.model_configs()  # lr=auto resolved per suggested model (main process)
        self.reported: dict[int, set[int]] = {}
        self.study = None
        if _processes().is_main_process:
            optuna = import_optuna()
            direction = "minimize" if cfg.training.metric_for_best in LOWER_IS_BETTER else "maximize"
            self.study = optuna.create_study(direction=direction, pruner=make_pruner(cfg),
                                             sampler=optuna.samplers.TPESampler(seed=cfg.inputs.seed))

    def run(self, out: Path, progress: bool) -> list[TrialRow]:
        rows: list[TrialRow] = []
        for number in range(self.cfg.sweep.trials):
            trial = self.study.ask() if self.study is not None else None
            plan = on_main(_processes(), lambda t=trial, n=number: self._suggest(t, n))  # every process: the main's
            rows += self._run_configuration(out, plan, trial, progress)
        return rows

    def _suggest(self, trial: Any, number: int) -> Plan:
        """The configuration Optuna suggests, its values resolved for its model (first seed)."""
        params = {}
        for d in self.dims:
            if d.values:
                params[d.name] = trial.suggest_categorical(d.name, list(d.values))
            elif d.integer:
                params[d.name] = trial.suggest_int(d.name, int(d.low), int(d.high), log=d.log)
            else:
                params[d.name] = trial.suggest_float(d.name, d.low, d.high, log=d.log)
        return Plan(number, params, self.cfg.inputs.seed, trial_plans.resolved_params(self.cfg, params, self.config_of))

    def _run_configuration(self, out: Path, first: Plan, trial: Any, progress: bool) -> list[TrialRow]:
        """The configuration's seeds: the first reported to the pruner (and stopped if pruned), then the others."""
        rows = []
        for k in range(self.cfg.sweep.seeds):
            plan = dataclasses.replace(first, seed=first.seed + k)
            callback = self._pruning(trial) if k == 0 else None
            rows.append(run_trial(self.cfg, out, plan, self.compute_for, self.training, progress,
                                  on_evaluate=callback))
            if k == 0 and trial is not None:
                self._report(trial, rows[0].history)  # a trial that ran before: replayed
            if rows[0].status == "pruned":
                break
        if trial is not None:
            self._tell(trial, rows)
        return rows

    def _pruning(self, trial: Any) -> Any:
        """The loop's callback: report the evaluations so far, ask the pruner (main process), broadcast."""
        def on_evaluate(history: list[dict[str, Any]], metric: str) -> str | None:
            def decide() -> str | None:
                self._report(trial, trials_report.metric_values(history, metric))
                return "pruned" if trial.should_prune() else None

            return on_main(_processes(), decide)  # only the main process decides (it holds the trial)

        return on_evaluate

    def _report(self, trial: Any, values: tuple[float | None, ...]) -> None:
        """Report each evaluation's ranked metric to the pruner once (its index is the step)."""
        done = self.reported.setdefault(trial.number, set())
        for index, value in enumerate(values, start=1):
            if index not in done and value is not None:
                trial.report(value, step=index)
                done.add(index)

    def _tell(self, trial: Any, rows: list[TrialRow]) -> None:
        import optuna

        if rows[0].status == "pruned":
            self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            values = [r.best for r in rows if r.best is not None]
            self.study.tell(trial, sum(values) / len(values))


# ---------------------------------------------------------------- the sweep's run directory


def _claim(cfg: SweepOptions, dims: list[Dimension]) -> rundir.RunDir:
    """Claim --out for the sweep (main process): refused if it holds a sweep of another space (unless --overwrite);
    a new sweep's config.json records what a re-run must match: every option but those a re-run may change
    (`trail.RERUN_MAY_CHANGE`: --trials, where it is written and logged)."""
    compared = {k: v for k, v in config_dict(cfg).items() if k not in trail.RERUN_MAY_CHANGE}
    compare = lambda path: _differences(path, compared)  # noqa: E731
    rundir.inspect_run_dir(cfg.output.out or "", "sweep", overwrite=cfg.output.overwrite, compare=compare,
                           inputs=ownership.input_paths(cfg))
    run = rundir.claim_run_dir(cfg.output.out or "", "sweep", overwrite=cfg.output.overwrite, compare=compare)
    if not (run.path / "config.json").is_file():
        trail.write_run_config(run.path, "sweep", config_dict(cfg), run_family(cfg), space=[d.to_json() for d in dims],
                               compared=compared)
    return dataclasses.replace(run, compare=None)  # sent to every process: no closures


def _differences(path: Path, compared: dict[str, Any]) -> list[str]:
    """The compared options of the sweep in `path` that differ from `compared`; a sweep whose trials ran without its
    config.json, or whose config.json compares nothing (an older bertkit's), is refused: nothing says it is this one."""
    record = trail.read_run_config(path)
    if record is None and (Path(path) / "trials").is_dir():
        raise UserError(f"--out {path} holds a `bertkit sweep` whose config.json is missing (its trials remain): "
                        f"bertkit cannot tell which space it searched. {move_aside(Path(path), 'sweep')}")
    if record is not None and not isinstance(record.get("compared"), dict):
        raise UserError(f"--out {path} holds a `bertkit sweep` made by an older bertkit: its config.json records no "
                        f"compared options. {move_aside(Path(path), 'sweep')}")
    return [] if record is None else trail.config_differences(record["compared"], compared)


def _keep_only_best(trial_dir: Path) -> None:
    """Remove the checkpoints/ and final/ a finished trial wrote (what its record does not vouch for stays)."""
    for name in ("checkpoints", "final"):
        kept = ownership.remove_recorded(trial_dir / name)
        if kept:
            log.warning("kept %s: bertkit did not write %s", trial_dir / name, ", ".join(map(str, kept[:5])))


def _processes() -> Any:
    """This process's place among the launched ones (a fresh PartialState: finetune may reset a single process's;
    cpu= as finetune's Accelerator gets it, so launched CPU processes form one group, not many alone)."""
    from accelerate import PartialState

    return PartialState(cpu=finetune_core.force_cpu())


