"""`bertkit bench`: speed, size, memory and (optionally) quality of encoders, measured side by side
(`bertkit.measure` measures; `measure.quality` plans and scores the quality commands, which bench runs through
the command table, `commands.registry`).

The models under test ("contenders": a preset's exact shapes with random weights, or --models) are measured on
the user's machine and data: parameter count, safetensors size (fp32/fp16), load time, batch-1 latency over real
sentences (tokenization timed apart from the model), throughput per batch size (length-sorted dynamic padding vs
static padding to --max-length), peak memory, a training step, or the paper's protocol (one full pass at batch
size 1 on the CPU).

On tagged data (a CoNLL-style --data, or --task tags) every contender is a tagger: the encoder with one output
per tag (the training corpus's), timed on the sentences' windows of word pieces as a tagger reads words, its
training step scoring every real piece, and its quality a tagger fine-tuned on the same sentences (`bertkit
finetune` on tagged data: dev entity F1, or word accuracy for plain tags).

On questions on passages (a SQuAD --data, or --task spans) every contender is a question-answering model (a start and
an end score per token), timed on each question's windows as `bertkit finetune` and `predict` read them (question
first, only the passage cut, overlapping windows sharing the doc stride): a row is a window, batch 1 one question with
all its windows; its quality a question-answering model fine-tuned on the same sets (dev F1).
"""

from __future__ import annotations

import functools
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from bertkit.commands.registry import command_module, config_for_command
from bertkit.data.labels import SPANS_TASK
from bertkit.data.options import WORD_TASKS, DataOptions, config_problems
from bertkit.data.tagged import unseen_tags_option
from bertkit.data.tagscheme import tag_scheme_option
from bertkit.encoding.reading import Reading, doc_stride_option, max_length_option
from bertkit.errors import raise_if_problems
from bertkit.families.base import Family
from bertkit.families.registry import cached_family
from bertkit.families.results import TimedData
from bertkit.measure import quality
from bertkit.measure.report import BenchReport, compute_claims, report_markdown
from bertkit.measure.timing import TimingOptions
from bertkit.models.compute import (
    TRUST_HELP,
    Compute,
    check_device,
    precision_option,
)
from bertkit.models.metadata import read_as_saved, saved_reading
from bertkit.models.preflight import check_inputs
from bertkit.options import (
    BENCH,
    DATA,
    MODEL,
    OUTPUT,
    Config,
    config_dict,
    group,
    option,
    overwrite_option,
)

if TYPE_CHECKING:
    from bertkit.measure.timing import Clock

BENCH_QUALITY = ("none", "probe", "finetune", "probe,finetune")
QUALITY_CONFIGS: dict[str, type] = {kind: config_for_command(kind) for kind in quality.QUALITY_COMMANDS}
"""The --quality commands' configs, from the command table: bench runs other commands by name, as the CLI does."""



@dataclass(frozen=True)
class BenchConfig(Config):
    """`bertkit bench`: speed, size, memory and optional quality of several encoders, side by side."""

    # bench holds no dev set out itself: a --quality run's hold-out share goes in --quality-args (--dev-fraction)
    NOT_OPTIONS = ("dev_fraction",)
    ADVANCED_OPTIONS = ("trust_remote_code", "tag_scheme", "unseen_tags", "doc_stride")
    HELP_OVERRIDES = {"data": "The data whose texts are timed (unless --dev is given), and the --quality runs' training "
                              "data: a .csv/.tsv/.txt/.json/.jsonl/.parquet file, or a hub dataset name; a tagged "
                              "corpus (.iob2, .conll, or --task tags) benchmarks the models as taggers, a SQuAD set "
                              "(or --task spans) as question-answering models.",
                      "dev": "Dev data (a file, or a split of the hub --data): timed instead of --data, and the "
                             "--quality runs' dev set."}

    models: str | None = option(None, "Comma-separated hub ids or folders, e.g. "
                                "distilbert-base-uncased,bert-base-uncased.", panel=MODEL)
    inputs: DataOptions = group(DataOptions)
    max_length: int | None = max_length_option()
    doc_stride: int | None = doc_stride_option()
    tag_scheme: str = tag_scheme_option()
    unseen_tags: str = unseen_tags_option()
    preset: str | None = option(None, "distilbert-vs-bert: exact DistilBertConfig() vs BertConfig() shapes, random "
                                "init, works offline.", panel=MODEL)
    random_init: bool = option(False, "Build --models from their configs with random weights (speed/size only).",
                               panel=MODEL)
    timing: TimingOptions = group(TimingOptions)
    precision: str = precision_option(panel=BENCH)
    device: str = option("auto", "cpu, cuda, cuda:N, mps or auto.", panel=BENCH)
    quality: str = option("none", "none, probe, finetune or probe,finetune: score each model through those commands, "
                          "same settings.", panel=BENCH)
    quality_args: str | None = option(None, "Extra flags for every quality command, e.g. \"--epochs 1\".", panel=BENCH)
    out: str | None = option(None, "Directory for bench.json, bench.md, bench.png (default runs/bench).",
                             panel=OUTPUT)
    overwrite: bool = overwrite_option("a bench run")
    trust_remote_code: bool = option(False, TRUST_HELP, panel=MODEL)
    task: str = option("auto", "tags: --data is a tagged corpus (one tag per word) and the models are benchmarked as "
                       "taggers; spans: --data holds SQuAD questions on passages and the models are benchmarked as "
                       "question-answering models; auto: detected from the files' content, as finetune detects it.",
                       panel=DATA, choices=(*WORD_TASKS, SPANS_TASK))

    def __post_init__(self) -> None:
        problems = config_problems(self)
        if (self.models is None) == (self.preset is None):
            problems.append("Give exactly one of --models (comma-separated names) or --preset (e.g. distilbert-vs-bert).")
        if self.preset is not None and self.random_init:
            problems.append("--random-init goes with --models; --preset already builds random-init models.")
        if self.models is not None and not self.model_list:
            problems.append("--models is empty; pass comma-separated names, e.g. --models distilbert-base-uncased,bert-base-uncased.")
        if (",".join(self.quality_kinds) or "none") not in BENCH_QUALITY:
            problems.append(f"--quality must be one of {', '.join(BENCH_QUALITY)}; got {self.quality!r}.")
        problems += self.timing.timing_problems()
        if self.quality_kinds and self.inputs.data is None:
            problems.append("--quality needs labelled --data (and usually --dev); pass them, or drop --quality.")
        check_device(problems, self.device, check_available=self.timing.protocol != "paper")  # paper runs on the CPU
        problems += quality.quality_args_problems(QUALITY_CONFIGS, self.quality_kinds, self.quality_args)
        raise_if_problems(problems + self.family.refused_options(self, "bench", self.inputs.data))

    @property
    def family(self) -> Family:
        """The problem family of --data (`bertkit.families`): rows of text, or tagged data (taggers timed)."""
        return cached_family(self, data=self.inputs, task=self.task)

    @property
    def model_list(self) -> list[str]:
        return [m.strip() for m in (self.models or "").split(",") if m.strip()]

    @property
    def quality_kinds(self) -> list[str]:
        order = quality.QUALITY_COMMANDS
        asked = {q.strip() for q in str(self.quality).split(",") if q.strip() and q.strip() != "none"}
        return [q for q in order if q in asked] + sorted(asked - set(order))



def benchmark_data(cfg: Any) -> TimedData:
    """What the benchmark times, as the data's problem family reads it: rows of text, or tagged sentences given as
    words (the models timed as taggers)."""
    return cfg.family.bench_data(cfg)


def benchmark(cfg: Any, clock: Clock = time.perf_counter,
              quality_dir: Path | Callable[[], Path] | None = None, data: TimedData | None = None) -> dict[str, Any]:
    """The whole `bertkit bench` run for a BenchConfig: models, texts, measurements, quality, claims.

    `quality_dir` holds the run directories of the quality runs (probe/finetune), one per model; a callable is
    called only when quality is measured, after the models loaded and were timed (it may claim --out). Without
    it they go into the benchmark's temporary folder. `data`: what is timed, when the caller already read it
    (`benchmark_data`).
    """
    import numpy as np
    import torch

    cfg = read_as_recorded_models(cfg)  # (again a no-op when `run` resolved it)

    from bertkit.measure.contenders import contender_notes, load_contenders
    from bertkit.measure.measure import BenchSettings, environment, run_bench
    from bertkit.measure.timing import busy_machine_note, sync_for
    from bertkit.models import loading

    plans = plan_quality(cfg)  # every --quality-args value is checked before anything is measured
    if cfg.timing.threads:
        torch.set_num_threads(cfg.timing.threads)
    device, dtype, notes = device_and_dtype(cfg)
    busy = busy_machine_note()
    notes += [busy] if busy else []
    data = data or benchmark_data(cfg)
    texts = data.texts
    order = np.random.default_rng(cfg.inputs.seed).permutation(len(texts))
    torch.manual_seed(cfg.inputs.seed)
    contenders = load_contenders(cfg.model_list, cfg.preset, cfg.random_init, cfg.trust_remote_code, clock,
                                 tags=data.tags, questions=data.questions is not None)
    notes += contender_notes(cfg, contenders)
    settings = BenchSettings(
        batch_sizes=cfg.timing.batch_size_list, max_length=cfg.max_length, train_batch_size=cfg.timing.train_batch_size,
        protocol=cfg.timing.protocol, seed=cfg.inputs.seed, int8=cfg.precision == loading.INT8,
        budget=cfg.timing.budget(clock, sync_for(device)),
        words=None if data.tags is None else Reading.of_words(max_length=cfg.max_length),  # as a tagger reads words
        questions=data.questions,  # as a question-answering model reads them: windows sharing the doc stride
    )
    timed_texts = texts if cfg.timing.protocol == "paper" else [texts[i] for i in order]
    with tempfile.TemporaryDirectory(prefix="bertkit-bench-") as tmp:
        report = run_bench(contenders, timed_texts, settings, device, dtype, Path(tmp), keep_folders=True)
        if plans:
            where = quality_dir() if callable(quality_dir) else quality_dir or Path(tmp) / "quality"
            add_quality(report, plans, where)
    for record in report["models"]:
        record.pop("folder", None)
    report["claims"] = compute_claims(report["models"])
    report["notes"] = notes + report["notes"]
    report["data_source"] = data.source
    report["environment"] = environment(device, dtype, int8=settings.int8)
    return report


def read_as_recorded_models(cfg: Any) -> Any:
    """`cfg` with --max-length (the truncation length and static padding width every model is timed at) as the first
    of --models that records one (a bertkit model: `models.metadata.read_as_saved`, a note where a given flag differs
    from it), else 128."""
    recorded = [m for m in cfg.model_list if saved_reading(m) is not None]
    return read_as_saved(cfg, recorded[0] if recorded else "")


def device_and_dtype(cfg: Any) -> tuple[Any, Any, list[str]]:
    """The device and dtype the benchmark runs in, and notes on choices the user should know about."""
    import torch

    from bertkit.models import loading

    notes: list[str] = []
    compute = Compute.resolve("cpu" if cfg.timing.protocol == "paper" else cfg.device, cfg.precision)
    if cfg.timing.protocol == "paper" and cfg.device not in ("auto", "cpu"):
        notes.append(f"--protocol paper runs on the CPU (as the paper did); --device {cfg.device} ignored.")
    device, dtype = compute.torch_device, compute.dtype
    if device.type == "cpu" and dtype == torch.bfloat16 and not loading.cpu_supports_bf16():
        notes.append("bf16 on this CPU is emulated (no AVX512-BF16/AMX): expect it to be several times slower "
                     "than fp32. Use --precision fp32 (what auto picks here) for representative numbers.")
    return device, dtype, notes


def plan_quality(cfg: BenchConfig) -> list[quality.QualityPlan]:
    """The --quality commands' plans, every config built (so every --quality-args value checked) before measuring;
    each reads the data as bench's problem family does (`Family.quality_options`)."""
    return quality.plan_quality(cfg, QUALITY_CONFIGS, cfg.family.quality_options(cfg))


def measure_quality(plan: quality.QualityPlan, models: dict[str, str], out_dir: Path) -> dict[str, dict[str, Any]]:
    """`plan`'s command run in this process for each model (label -> hub id or folder), scored by `measure.quality`."""
    run = functools.partial(command_module(plan.kind).run, progress=False)
    return quality.measure_quality(plan, models, out_dir, run)


def add_quality(report: dict[str, Any], plans: Sequence[quality.QualityPlan], out_dir: Path) -> None:
    """Each model record's `quality` section: one result per --quality command (random-init models: their saved
    copy, so the quality run starts from the very weights that were timed)."""
    folders = {m["label"]: (m["folder"] if m["random_init"] else m["source"]) for m in report["models"]}
    for plan in plans:
        for label, result in measure_quality(plan, folders, out_dir).items():
            record = next(m for m in report["models"] if m["label"] == label)
            record.setdefault("quality", {})[plan.kind] = result


@dataclass(frozen=True)
class BenchResult:
    """What `bertkit bench` measured and where it wrote it (`measure.report.BenchReport`); its JSON is bench.json's
    object with the files written."""

    JSON_RECORD: ClassVar[bool] = True
    report: BenchReport

    def to_json(self) -> dict[str, Any]:
        return self.report.to_json()


def run(cfg: BenchConfig) -> BenchResult:
    """Measure, then write bench.json, bench.md and bench.png into --out (default runs/bench)."""
    from bertkit.io import atomic, ownership, rundir, trail

    # the inputs first, before torch is imported and before --out is looked at (a wrong input is named as such
    # whatever --out holds): the quality runs read every split with labels; the timing alone reads --dev, else --data
    timed = ("dev",) if cfg.inputs.dev else ("data",)
    plan_quality(cfg)  # every --quality-args value, before the models are looked for
    # the family's tables: all with --quality (its runs read every split), else the timed one
    tables = tuple(name for name in cfg.family.table_fields if cfg.quality_kinds or name in timed)
    check_inputs(cfg, need_labels=bool(cfg.quality_kinds), models=cfg.model_list, data_fields=tables)
    cfg = read_as_recorded_models(cfg)
    data = benchmark_data(cfg)  # read and checked before torch is imported
    # read-only; claimed once the models are measured
    plan = rundir.inspect_run_dir(cfg.out or "runs/bench", "bench", overwrite=cfg.overwrite,
                                  inputs=ownership.input_paths(cfg), compare=trail.config_compare(config_dict(cfg)))
    from bertkit import plots

    report = benchmark(cfg, quality_dir=lambda: plan.claim().path / "quality", data=data)
    run = plan.claim()
    trail.write_run_config(run.path, "bench", config_dict(cfg), cfg.family.name,
                           data_fingerprint=report["data_source"]["fingerprint"])
    report["outputs"] = {name: str(run.out / name) for name in ("bench.json", "bench.md", "bench.png")}
    plots.bench_bars(report, run.path / "bench.png")
    atomic.write_json_atomic(run.path / "bench.json", report)
    atomic.write_text_atomic(run.path / "bench.md", report_markdown(report))
    run.commit()
    return BenchResult(BenchReport.from_json(report))