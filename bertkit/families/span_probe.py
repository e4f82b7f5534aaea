"""The spans family's part of `bertkit probe`: which layer answers. SQuAD --data and --dev read and checked whole
(`data.squad_splits.load_qa_training`, as fine-tuning reads them; --limit: the first N questions of each), the windows
as `bertkit finetune` on questions resolves them (`span_runs.question_reading`: --max-length as the model records it,
else 384; --doc-stride, else the model's, else 128), the --out claimed once everything was checked, then the table
(`probe.span_run.run_span_probe`) and its run folder (config.json and metrics.json of family spans)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from bertkit.data.squad_splits import QATraining, load_qa_training
from bertkit.encoding.qa_windows import QAReading
from bertkit.errors import raise_if_problems
from bertkit.families.span_runs import question_reading
from bertkit.models.compute import Compute
from bertkit.models.folders import OFFLINE_NAME
from bertkit.models.metadata import read_as_saved
from bertkit.options import config_dict
from bertkit.probe.records import ProbeReport

log = logging.getLogger(__name__)

PROBE_NOT_READ = ("text_column", "label_column", "header", "encoding", "test", "dev_fraction", "features", "metric",
                  "cv", "C_grid", "class_weight", "repeats")
"""What the span probe does not read: a SQuAD set has its own columns and is UTF-8 read whole; no test split is
scored and no dev split held out; no feature store holds questions; the heads are fitted at one C (--C), without
the sentence probe's C search, class weights or refits."""


def span_probe(cfg: Any, progress: bool = False) -> ProbeReport:
    """The span probe table: data and reading checked (before torch), --out inspected, the table, the run folder."""
    from bertkit.io import ownership, run_claim, rundir, trail

    plan = rundir.inspect_run_dir(cfg.out, "probe", overwrite=cfg.overwrite, compare=trail.config_compare(
        config_dict(cfg)), inputs=ownership.input_paths(cfg)) if cfg.out else None
    model = cfg.model or OFFLINE_NAME
    read = read_as_saved(cfg, model)
    reading = question_reading(read.reading.max_length, cfg.doc_stride, model)
    raise_if_problems(reading.problems())
    data = load_qa_training(cfg.inputs)  # bad questions are refused before --out is claimed
    with run_claim.claimed_for_the_run(plan) as run_dir:
        compute = Compute.resolve("cpu", cfg.precision)  # once: windows are read on the CPU, as the other probes read
        run = probe_table(cfg, data, reading, model, compute, progress)
        if run_dir is not None:
            from bertkit.probe.span_run import write_span_probe_run

            run = write_span_probe_run(Path(run_dir.path), run, config_dict(cfg), final_dir=run_dir.out)
            run_dir.commit()
    return ProbeReport.of_spans(run)


def probe_table(cfg: Any, data: QATraining, reading: QAReading, model: str, compute: Compute,
                progress: bool) -> Any:
    """The table (`probe.span_run.run_span_probe`) on the checked data, the encoder's folder checked first."""
    from bertkit.models import loading
    from bertkit.probe.fit import DEFAULT_C
    from bertkit.probe.span_run import Encoder, run_span_probe

    loading.check_model_folder(model)
    encoder = Encoder(model, loading.load_tokenizer(model, cfg.trust_remote_code), compute, cfg.batch_size,
                      cfg.inputs.cache_dir, cfg.trust_remote_code)
    return run_span_probe(data, reading, encoder, cfg.layers, cfg.fit.C or DEFAULT_C, cfg.inputs.seed,
                          cfg.fit.baselines, say=log.info if progress else None, progress=progress)
