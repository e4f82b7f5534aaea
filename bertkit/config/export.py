"""`bertkit export`'s config (its own module: `commands.py` is near the size limit; registered in `registry.py`)."""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.config.fields import MODEL, OUTPUT, RUN, option
from bertkit.config.groups import COMBINES, POOLS, LabelOptions, LongTextOptions, layers_problem
from bertkit.errors import raise_if_problems

EXPORT_KINDS = ("auto", "classifier", "features")
QUANTIZE = ("int8", "none")
MIN_COSINE = 0.98
"""The default --min-cosine of a features export. Measured on minilm-offline, SST-2 dev (872 rows): fp32 ONNX gives
cosine 1.0000 on every row; int8 (per-channel weights) [CLS] features a mean of 0.995 (lowest row 0.989), mean
pooling 0.991 (lowest 0.966). Per-tensor int8 gave 0.983 and 0.958 (lowest row 0.78): 0.98 keeps the first and
refuses the second; broken int8 encoders (onnxruntime#9599) land far below. The mean is gated: one odd row should
not refuse features that are otherwise the same."""


@dataclass(frozen=True)
class ExportConfig(LongTextOptions, LabelOptions):
    """`bertkit export`: a fine-tuned classifier (logits) or an encoder (pooled features) to an ONNX folder,
    optionally int8, kept only when the accuracy gate against the PyTorch fp32 model passes."""

    # the gate reads one --data file and makes no split: these DataOptions fields are not its options.
    NOT_OPTIONS = ("dev", "test", "dev_fraction", "seed")
    HELP_OVERRIDES = {"data": "Gate data: rows the PyTorch fp32 model and the export both run on (labels optional: with "
                              "them the metric before and after is reported). Default for a model saved by `bertkit "
                              "finetune` (RUN/best, RUN/final): that run's dev set.",
                      "limit": "Run the gate on the first N rows only (quicker, less sure)."}

    model: str | None = option(None, "What to export: a fine-tuned model folder (e.g. runs/sst2/best) or an encoder "
                               "(a folder, hub id, or `minilm-offline`).", panel=MODEL)
    out: str | None = option(None, "The export folder: model.onnx, config.json, tokenizer, bertkit_model.json, "
                             "export_report.json.", panel=OUTPUT)
    kind: str = option("auto", "classifier (logits of a fine-tuned head) or features (pooled encoder features); auto: "
                       "classifier when the folder has a trained classification head.", panel=MODEL,
                       choices=EXPORT_KINDS)
    quantize: str = option("int8", "int8: onnxruntime dynamic int8 weights (smaller, faster on a CPU); none: fp32.",
                           panel=MODEL, choices=QUANTIZE)
    pool: str = option("cls", "Features: token pooling baked into the graph (as `embed --pool`).", panel=MODEL,
                       choices=POOLS)
    layers: str = option("-1", "Features: hidden states to pool (as `embed --layers`).", panel=MODEL)
    combine: str = option("concat", "Features: how several --layers are combined (as `embed --combine`).",
                          panel=MODEL, choices=COMBINES)
    normalize: bool = option(False, "Features: L2-normalise the feature vectors inside the graph.", panel=MODEL)
    max_length: int = option(128, "Truncate the gate's inputs to this many tokens (the graph takes any length).",
                             panel=MODEL, above=0)
    batch_size: int = option(64, "Rows per gate batch (sorted by length).", above=0)
    min_agreement: float = option(0.99, "Classifiers: the least share of gate rows whose label the export predicts as "
                                  "the PyTorch fp32 model does; below it nothing is kept (exit 2).", panel=RUN,
                                  minimum=0)
    min_cosine: float = option(MIN_COSINE, "Features: the least mean (over the gate rows) cosine similarity between the "
                               "export's and the PyTorch fp32 features; below it nothing is kept (exit 2). Measured "
                               "on MiniLM, SST-2 dev: fp32 1.000; int8 0.995 with --pool cls, 0.991 with mean.",
                               panel=RUN, minimum=-1)
    force: bool = option(False, "Keep an export the gate refuses (its export_report.json says so).", panel=OUTPUT)
    overwrite: bool = option(False, "Replace an --out that holds an export made with other options (swapped in "
                             "once the new one passed the gate).", panel=OUTPUT)

    def __post_init__(self) -> None:
        problems = self.data_problems()
        if not self.model:
            problems.append("--model is required: a fine-tuned model folder (e.g. runs/sst2/best) or an encoder.")
        if not self.out:
            problems.append("--out is required: the folder the export is written to.")
        if self.min_agreement > 1:
            problems.append(f"--min-agreement is a share of rows, at most 1; got {self.min_agreement}.")
        if self.min_cosine > 1:
            problems.append(f"--min-cosine is a cosine similarity, at most 1; got {self.min_cosine}.")
        problems += layers_problem(self.layers)
        problems += self.long_text_problems()
        raise_if_problems(problems)

    @property
    def quantized(self) -> str | None:
        return None if self.quantize == "none" else self.quantize
