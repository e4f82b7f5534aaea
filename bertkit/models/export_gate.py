"""The export gate: its thresholds as the options group of `bertkit export` (`GateOptions`), its report, typed
(every kind's gate makes one, `bertkit export` returns it, `cli/show.py` reads its attributes; it writes back the
object export_report.json holds, where `export_report` puts its numbers beside the export's own keys), and the
refusal message with the digits that show a number below its threshold. Beside `models.onnx`, whose export
folder holds the report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bertkit.io.atomic import JsonRecord
from bertkit.options import OUTPUT, RUN, option

MIN_COSINE = 0.98
"""The default --min-cosine of a features export. Measured on minilm-offline, SST-2 dev (872 rows): fp32 ONNX gives
cosine 1.0000 on every row; int8 (per-channel weights) [CLS] features a mean of 0.995 (lowest row 0.989), mean
pooling 0.991 (lowest 0.966). Per-tensor int8 gave 0.983 and 0.958 (lowest row 0.78): 0.98 keeps the first and
refuses the second; broken int8 encoders (onnxruntime#9599) land far below. The mean is gated: one odd row should
not refuse features that are otherwise the same."""


@dataclass(frozen=True)
class GateOptions:
    """The gate group of `bertkit export`: the least agreement, the most score drop and the least cosine an export
    must show against the PyTorch fp32 model to be kept, and --force."""

    min_agreement: float = option(0.99, "The least share of gate rows (a tagger: of words; a question-answering model: "
                                  "of questions) whose label (tag, answer text) the export predicts as the PyTorch "
                                  "fp32 model does; below it nothing is kept (exit 2).", panel=RUN, minimum=0)
    max_drop: float = option(0.01, "Taggers, gate data with gold tags: the most the export's entity F1 (plain tags: word "
                             "accuracy) may fall below the PyTorch fp32 model's; question-answering models: its "
                             "official F1 as a share (0.01: one point); more and nothing is kept (exit 2).",
                             panel=RUN, minimum=0)
    min_cosine: float = option(MIN_COSINE, "Features: the least mean (over the gate rows) cosine similarity between the "
                               "export's and the PyTorch fp32 features; below it nothing is kept (exit 2). Measured "
                               "on MiniLM, SST-2 dev: fp32 1.000; int8 0.995 with --pool cls, 0.991 with mean.",
                               panel=RUN, minimum=-1)
    force: bool = option(False, "Keep an export the gate refuses (its export_report.json says so).", panel=OUTPUT)

    def gate_problems(self) -> list[str]:
        """Each threshold within its range (the lower bounds are the declarations')."""
        problems = []
        if self.min_agreement > 1:
            problems.append(f"--min-agreement is a share of rows, at most 1; got {self.min_agreement}.")
        if self.max_drop > 1:
            problems.append(f"--max-drop is a fall of a score between 0 and 1, at most 1; got {self.max_drop}.")
        if self.min_cosine > 1:
            problems.append(f"--min-cosine is a cosine similarity, at most 1; got {self.min_cosine}.")
        return problems


@dataclass(frozen=True)
class GateReport(JsonRecord):
    """The export against the PyTorch fp32 model on the gate rows: `statistic` (agreement for a classifier and a
    tagger, mean_cosine for features) against `threshold` (and a tagger's `metric_drop` against `max_drop`), and the
    numbers behind it."""

    statistic: str
    threshold: float
    rows: int
    passed: bool
    task: str | None = None
    """What the gated model does: a classifier's task (single_label, ...), "tags" or "spans"."""
    scheme: str | None = None
    """A tagger's tag scheme."""
    rules: str | None = None
    """A question-answering model's scoring rules (the corpus's SQuAD version)."""
    agreement: float | None = None
    disagreeing_rows: int | None = None
    max_abs_logit_diff: float | None = None
    metric: str | None = None
    """The headline metric on labelled gate rows, before (fp32) and after (the export)."""
    metric_fp32: float | None = None
    metric_export: float | None = None
    words: int | None = None
    """A tagger's gate: the words of its `rows` (sentences); `agreement` is then per word."""
    disagreeing_words: int | None = None
    entity_agreement: float | None = None
    """A tagger's gate: strict seqeval F1 of the export's entities against the fp32 model's (entity schemes)."""
    metric_drop: float | None = None
    """A tagger's gate on gold tags (a question-answering model's on gold answers): metric_fp32 - metric_export, at
    most `max_drop` to pass."""
    answer_f1_agreement: float | None = None
    """A question-answering model's gate: the mean SQuAD F1 of the export's answers against the fp32 model's."""
    max_drop: float | None = None
    mean_cosine: float | None = None
    min_cosine: float | None = None
    max_abs_diff: float | None = None
    metric_fp32_strict: float | None = None
    """A tagger's gate on gold entity tags: strict seqeval F1 beside conlleval's `metric_fp32`."""
    metric_export_strict: float | None = None
    record: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def of(cls, **values: Any) -> GateReport:
        """The report a gate made: exactly the `values` it names (a name that is not a field is a TypeError), and
        written back as they are (export_report.json holds those keys, None ones included)."""
        return cls(**values, record=dict(values))

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> GateReport:
        known = {k: record[k] for k in cls.__dataclass_fields__ if k in record and k != "record"}
        return cls(**known, record=record)


def export_report(head: dict[str, Any], gate: GateReport, tail: dict[str, Any]) -> dict[str, Any]:
    """export_report.json's object: the export's own keys (`head`, `tail`) around the gate's, which sit at its top
    level (the layout readers know); a key of both would let one overwrite the other, so it is refused."""
    gated = gate.to_json()
    clash = sorted((head.keys() | tail.keys()) & gated.keys())
    if clash:
        raise ValueError(f"the export report and its gate both hold {clash}")
    return {**head, **gated, **tail}


def below(value: float, threshold: float) -> str:
    """`value` with the fewest decimals (at least 4) that show it below `threshold`: "0.999987" against 0.99999,
    never "1.0000" against "1.0000"."""
    for decimals in range(4, 16):
        shown = f"{value:.{decimals}f}"
        if float(shown) < threshold:
            return shown
    return repr(value)


def refusal_message(gate: GateReport, cfg: Any) -> str:
    """The gate's refusal (`cfg`: the ExportConfig): the numbers (with the digits that show them below the
    threshold), that nothing was written, and the fixes."""
    what = f"The {'int8 ' if cfg.quantized else ''}ONNX export of {cfg.model}"
    if gate.words is not None or gate.task == "spans":
        numbers = (_tagger_numbers if gate.words is not None else _answer_numbers)(gate, cfg)
        lower = "--min-agreement (or raise --max-drop)"
    elif gate.statistic == "agreement":
        share = below(gate.agreement, cfg.gate.min_agreement)
        numbers = (f"predicts the PyTorch fp32 model's label on a share {share} of {gate.rows} gate rows "
                   f"({gate.disagreeing_rows} disagree), below --min-agreement {cfg.gate.min_agreement!r}; "
                   f"largest logit difference {gate.max_abs_logit_diff:.3g}")
        if gate.metric:
            numbers += f"; {gate.metric} {_number(gate.metric_fp32)} -> {_number(gate.metric_export)}"
        lower = "--min-agreement"
    else:
        numbers = (f"has features with mean cosine similarity {below(gate.mean_cosine, cfg.gate.min_cosine)} "
                   f"(lowest row {gate.min_cosine:.6g}) to the PyTorch fp32 features on {gate.rows} gate "
                   f"rows, below --min-cosine {cfg.gate.min_cosine!r}")
        lower = "--min-cosine"
    fix = ("Export with --quantize none (fp32 ONNX, which matches PyTorch), " if cfg.quantized else
           "Check the model with the PyTorch folder, ")
    return (f"{what} {numbers}. Nothing was written (--out {cfg.out} is as it was). {fix}lower {lower} if that "
            f"loss is acceptable, or pass --force to keep it anyway (its export_report.json then says forced).")


def _tagger_numbers(gate: GateReport, cfg: Any) -> str:
    """A tagger's gate numbers: what failed first (the tag agreement below --min-agreement, the score's drop above
    --max-drop), then the rest."""
    share = below(gate.agreement, cfg.gate.min_agreement)
    numbers = _failed(gate, cfg, f"tags a share {share} of {gate.words} words ({gate.rows} gate "
                      f"sentences) as the PyTorch fp32 model does", f"{gate.metric} {{}} on the gold tags", "")
    if gate.entity_agreement is not None:
        numbers += f"; its entities agree with the fp32 model's at F1 {gate.entity_agreement:.4f}"
    return numbers + f"; largest logit difference {gate.max_abs_logit_diff:.3g}"


def _answer_numbers(gate: GateReport, cfg: Any) -> str:
    """A question-answering model's gate numbers: what failed (the answer agreement below --min-agreement, the F1's
    drop above --max-drop), then the rest."""
    share = below(gate.agreement, cfg.gate.min_agreement)
    numbers = _failed(gate, cfg, f"answers a share {share} of {gate.rows} gate questions with the PyTorch fp32 "
                      f"model's answer text ({gate.disagreeing_rows} differ)", "F1 {} on the gold answers",
                      " (as shares: 0.01 is one point)")
    return numbers + (f"; its answers overlap the fp32 model's at F1 {gate.answer_f1_agreement:.4f}; "
                      f"largest logit difference {gate.max_abs_logit_diff:.3g}")


def _failed(gate: GateReport, cfg: Any, agreed: str, scored: str, unit: str) -> str:
    """Which of a gate's two tests failed: the model `agreed` with the fp32 model's outputs on a share below
    --min-agreement; it `scored` (a format for its score) with a drop (`unit` says how to read it) above
    --max-drop."""
    failed = []
    if gate.agreement < cfg.gate.min_agreement:
        failed.append(f"{agreed}, below --min-agreement {cfg.gate.min_agreement!r}")
    drop = gate.metric_drop
    if drop is not None and drop > cfg.gate.max_drop:
        failed.append(f"scores {scored.format(_number(gate.metric_export))} against the fp32 model's "
                      f"{_number(gate.metric_fp32)}, a drop of {drop:.4f}{unit}, above --max-drop "
                      f"{cfg.gate.max_drop!r}")
    return " and ".join(failed)


def _number(score: float | None) -> str:
    """A score to four places, or `undefined` (no gold entity to score)."""
    return "undefined" if score is None else f"{score:.4f}"
