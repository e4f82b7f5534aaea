"""`bertkit finetune`: full fine-tuning of a BERT-style classifier (the McCormick recipe as an Accelerate loop:
`bertkit.training.finetune`), resumable, on a CPU, one GPU (steps replayed as CUDA graphs) or several processes.

The options are the training package's `FinetuneOptions` group, declared there once because the library builds
them too (a sweep's trial, `training.space.finetune_config`) and distill and sweep extend them. The training loop
returns a typed `TrainingRun` (`bertkit.training.outcome`); this module owns the command around it: its config, the
checks before torch is imported, the one resolution of --precision and of how texts are read (--max-length and
--truncation: as the --model records them, else 128 and head), the run, and the `FinetuneResult` it reports."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from pathlib import Path

from bertkit.data.options import reads_tagged
from bertkit.data.tagged import TaggedColumns, may_be_tagged
from bertkit.data.tagged_splits import TaggedTraining, load_tagged_training
from bertkit.data.tagscheme import TagSchemeOption
from bertkit.encoding.reading import Reading
from bertkit.errors import UserError, raise_if_problems
from bertkit.models.compute import Compute
from bertkit.models.preflight import DATA_FIELDS, checked_as_saved
from bertkit.options import flag
from bertkit.training.options import FinetuneOptions, TagTrainingOptions
from bertkit.training.outcome import EpochRow, Restored, RunSummary, TrainingRun

TAGGER_WORD_POOL = "first"
"""How a tagger reads a word: its first piece's logits (it is trained there), recorded in its reading."""


@dataclass(frozen=True)
class FinetuneConfig(TagSchemeOption, TagTrainingOptions, FinetuneOptions):
    """`bertkit finetune`: full fine-tuning (batch 32, 3 epochs, warmup 0.1; --lr auto: chosen from the model's width,
    the BERT paper's 5e-5 for BERT-base, 1e-4 for MiniLM-L6); on tagged data (--task tags, or a CoNLL-style --data) a
    tagger: one tag per word, best/ by dev entity F1 (strict seqeval) or word accuracy for plain tags."""

    READS_WORDS = True
    NOT_FOR_WORDS = ("text_pair_column", "label_sep", "dev_fraction", "task_preset", "metric", "calibrate",
                     "threshold", "truncation")
    """The options the tagging path does not read (given: refused, naming them)."""

    def __post_init__(self) -> None:
        problems = []
        try:
            super().__post_init__()
        except UserError as exc:
            problems.append(str(exc))
        problems += self.word_problems() if self.reads_words else [
            f"{flag(name)} applies to tagged data (one tag per word); {self.data} is read as rows of text. Pass a "
            f"CoNLL-style file (.iob2, .conll) or --task tags, or drop {flag(name)}."
            for name, unset in (("tag_scheme", "auto"), ("label_all_pieces", False), ("stride", None))
            if getattr(self, name) != unset]
        raise_if_problems(problems)

    @property
    def reads_words(self) -> bool:
        """Whether this run trains a tagger: --task tags, or --data a tagged corpus (`data.options.reads_tagged`)."""
        return reads_tagged(self.task, self.data, self.data_config, self.train_split)

    def word_problems(self) -> list[str]:
        """The tagging path's refusals: a tagged --dev is needed (no hold-out is made), both look tagged, and the
        options it does not read are not given."""
        problems = []
        if self.dev is None:
            problems.append("Fine-tuning a tagger needs --dev (tagged dev data: a file, or a split of the hub dataset "
                            "--data); no dev split is held out of tagged data. Pass --dev dev.iob2 (hub: --dev "
                            "validation).")
        for path in dict.fromkeys((self.data, self.dev)):
            if path is not None and not may_be_tagged(path):
                problems.append(f"--task tags reads one tag per word, but {path} does not look like a tagged corpus. "
                                f"Valid: a CoNLL-style column file (a word and its tag per line, a blank line between "
                                f"sentences), JSON lines or parquet with token and tag lists, or a hub dataset. Pass "
                                f"such data, or drop --task tags to fine-tune on rows of text.")
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        defaults["truncation"] = Reading.truncation  # as a --model records it: head, what windows of words keep
        given = [name for name in self.NOT_FOR_WORDS if getattr(self, name) not in (defaults[name], None)
                 and (getattr(self, name) or defaults[name])]
        return problems + [f"{flag(name)} does not apply to fine-tuning on tagged data (one tag per word). Drop "
                           f"{flag(name)}." for name in given]


@dataclass(frozen=True)
class FinetuneResult:
    """What `bertkit finetune` reports: the run's folder, its metrics.json summary, the epoch table, what a resume
    restored, whether it had finished already, and notes. The CLI renders it; `to_json` is its --json object."""

    out: Path
    summary: RunSummary
    epoch_table: tuple[EpochRow, ...]
    restored: Restored | None
    already_finished: bool
    is_main_process: bool
    notes: tuple[str, ...]

    @classmethod
    def of(cls, run: TrainingRun) -> FinetuneResult:
        """The command's result for the training loop's outcome (the same pieces, under the command's name)."""
        return cls(**{f.name: getattr(run, f.name) for f in fields(run)})

    @property
    def metrics(self) -> dict[str, object]:
        """metrics.json's object, for callers that read it whole (tests, benchmarks, a sweep's trial rows)."""
        return self.summary.to_json()

    def to_json(self) -> dict[str, object]:
        """metrics.json's keys, then where the run is, whether it had finished already and what a resume restored."""
        return {**self.summary.to_json(), "out": str(self.out), "already_finished": self.already_finished,
                "restored": self.restored.to_json() if self.restored is not None else None}


def run(cfg: FinetuneConfig, *, progress: bool = True) -> FinetuneResult:
    """The run: its folder, metrics.json's content, the epoch table, what a resume restored, notes. Every check
    before torch and transformers are imported: the --model, --out and --max-length, and the data (a tagger's
    tagged --data and --dev are read and checked here, by their own reader: `load_tagged_training`)."""
    words = cfg.reads_words
    cfg = checked_as_saved(cfg, "finetune", data_fields=() if words else DATA_FIELDS)  # tagged: its reader checks
    # a tagger reads words in windows of --max-length pieces (given, or as the --model records it), each word at its
    # first piece
    reading = Reading.of_words(TAGGER_WORD_POOL, cfg.max_length, cfg.stride) if words else Reading.from_options(cfg)
    data = checked_tagged_data(cfg, reading) if words else None
    from bertkit.training.finetune import finetune, training_device
    from bertkit.training.tagging import TagTask

    compute = Compute.resolve(training_device(), cfg.precision)
    task = None if data is None else TagTask(data)
    return FinetuneResult.of(finetune(cfg, progress=progress, compute=compute, reading=reading, task=task))


def checked_tagged_data(cfg: FinetuneConfig, reading: Reading) -> TaggedTraining:
    """A tagger's --data, --dev and --test read and checked by the tagged reader, once `reading` (its windows:
    --stride against --max-length) was."""
    raise_if_problems(reading.word_problems())
    return load_tagged_training(str(cfg.data), str(cfg.dev), TaggedColumns(cfg.text_column, cfg.label_column,
                                                                          cfg.tag_scheme),
                                cfg.data_config, cfg.train_split, cfg.limit, test=cfg.test)
