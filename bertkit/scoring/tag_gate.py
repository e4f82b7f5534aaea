"""The accuracy gate of a tagging model's export (`bertkit export`): the export and the PyTorch fp32 model read the
same sentences through the one path of windows and word tags (`TagReader.word_probabilities`, as predict and
evaluate read them) and are compared without gold tags word by word (the tag agreement, gated by --min-agreement as
a classifier's label agreement is: a label per word instead of per row) and, for an entity scheme, entity by entity
(F1 of the export's entities against the fp32 model's, with the model's scheme: reported, as a
flipped B- or a shifted boundary costs a whole entity that per-word agreement counts once). With gold tags the task's
score of both models (entity F1 as conlleval counts, with the model's scheme, the strict F1 recorded beside it; plain
tags such as POS: word accuracy) is gated too: the export's may fall at most --max-drop below the fp32 model's. The
sentences are `bertkit.data.gate_sentences`'.

Measured on MiniLM fine-tuned on uner_ewt (dev 2,077 sentences): int8 tags 99.68% of words as fp32 does, its
entities agree at F1 0.954, and its entity F1 on the gold tags is 0.6329 against fp32's 0.6324: int8 moves
entities both ways without losing any. A gate on entity agreement at 0.99 would refuse it; these two keep it and
still refuse an export that changes what the tagger finds (a broken graph collapses both)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from bertkit.data.gate_sentences import GateSentences
from bertkit.encoding.reading import Reading
from bertkit.models.compute import Compute
from bertkit.models.export_gate import GateReport
from bertkit.models.onnx import OnnxModel, export_compute
from bertkit.models.onnx_tagger import saved_tagger
from bertkit.scoring.entities import score_tags
from bertkit.scoring.tag_outputs import CHUNK_SENTENCES, TagReader, check_gold_scheme

FP32 = Compute("cpu", "fp32")
"""Where and how the PyTorch model the export is compared with runs: the CPU in fp32, as the export was traced."""


def gold_tag_notes(model_dir: str, model: Any, tokenizer: Any, reading: Reading, data: GateSentences) -> list[str]:
    """Gold tags of the gate data in another scheme than the tagger `model`'s (saved in `model_dir`) are refused
    (`check_gold_scheme`), before the export is made; notes for gold tags it never predicts."""
    if data.corpus is None:
        return []
    return check_gold_scheme(TagReader(saved_tagger(model_dir, model, tokenizer, reading, FP32)), data.corpus)


def export_tagger_gate(model_dir: str, model: Any, exported: OnnxModel, tokenizer: Any, reading: Reading,
                       data: GateSentences, *, batch_size: int, min_agreement: float,
                       max_drop: float) -> GateReport:
    """`tagger_gate` of the export's session `exported` against the PyTorch fp32 tagger `model` saved in
    `model_dir`, both reading words as `reading` says, `batch_size` windows per batch."""
    source = saved_tagger(model_dir, model, tokenizer, reading, FP32)
    onnx = saved_tagger(exported.folder, exported, tokenizer, reading, export_compute(exported.folder))
    return tagger_gate(TagReader(source, batch_size), TagReader(onnx, batch_size), data, min_agreement, max_drop)


def tagger_gate(source: TagReader, exported: TagReader, data: GateSentences, min_agreement: float,
                max_drop: float) -> GateReport:
    """The export against the PyTorch fp32 model on the gate sentences (see the module docstring): tag agreement,
    words that disagree, entity agreement, the largest logit difference, both scores on gold tags (checked against
    the model's scheme beforehand: `scoring.tag_outputs.check_gold_scheme`) and the drop between them; `passed`
    when the tag agreement is at least `min_agreement` and the drop (gold tags) at most `max_drop`."""
    reference: list[list[str]] = []
    tags: list[list[str]] = []
    largest = 0.0
    for start in range(0, len(data), CHUNK_SENTENCES):
        chunk = data.words[start:start + CHUNK_SENTENCES]
        ours, theirs, difference = _compared_chunk(source, exported, chunk)
        reference += ours
        tags += theirs
        largest = max(largest, difference)
    scheme = source.tagger.scheme
    same = np.array([a == b for ours, theirs in zip(reference, tags, strict=True)
                     for a, b in zip(ours, theirs, strict=True)], dtype=bool)
    agreement = float(same.mean()) if len(same) else 1.0
    entities = score_tags(reference, tags, scheme).entities if scheme.has_entities and reference else None
    result: dict[str, Any] = {
        "statistic": "agreement", "threshold": min_agreement, "rows": len(data), "words": int(len(same)),
        "task": "tags", "scheme": scheme.name, "agreement": agreement, "disagreeing_words": int((~same).sum()),
        "entity_agreement": _entity_agreement(entities) if entities else None,
        "max_abs_logit_diff": largest, "passed": agreement >= min_agreement}
    if data.gold is not None:
        result.update(gold_drop([list(s) for s in data.gold], reference, tags, scheme, max_drop))
        result["passed"] = result["passed"] and (result["metric_drop"] is None or result["metric_drop"] <= max_drop)
    return GateReport.of(**result)


def _entity_agreement(entities: Any) -> float:
    """F1 of the export's entities against the fp32 model's: 1 when neither finds any, 0 when only the export does."""
    if entities.f1 is not None:
        return float(entities.f1)
    return 0.0 if entities.n_predicted else 1.0


def gold_drop(gold: list[list[str]], reference: list[list[str]], tags: list[list[str]], scheme: Any,
              max_drop: float) -> dict[str, Any]:
    """Both models' task score on the gold tags (entity F1 as conlleval counts, strict F1 beside it; plain tags:
    word accuracy) and the drop the gate judges; the drop is None when the score is undefined (no gold entity)."""
    before, after = score_tags(gold, reference, scheme), score_tags(gold, tags, scheme)
    drop = None if before.main is None or after.main is None else before.main - after.main
    record = {"metric": "f1" if scheme.has_entities else "accuracy", "metric_fp32": before.main,
              "metric_export": after.main, "metric_drop": drop, "max_drop": max_drop}
    if scheme.has_entities:
        record.update(metric_fp32_strict=before.main_strict, metric_export_strict=after.main_strict)
    return record


def _compared_chunk(source: TagReader, exported: TagReader,
                    words: Sequence[Sequence[str]]) -> tuple[list[list[str]], list[list[str]], float]:
    """(the fp32 model's tags of each sentence, the export's, the largest absolute difference of their logits on
    the pieces of the windows, padding left out)."""
    ours, reference_logits, windows = source.word_probabilities(words)
    theirs, logits, _ = exported.word_probabilities(words)
    real = np.arange(logits.shape[1])[None, :] < windows.lengths[:, None] if windows.n_words else None
    difference = float(np.abs(reference_logits - logits)[real].max()) if real is not None and real.any() else 0.0
    offsets = windows.sentence_offsets

    def sentences(proba: np.ndarray, reader: TagReader) -> list[list[str]]:
        flat = np.asarray(reader.tagger.tags, dtype=object)[proba.argmax(axis=1)] if len(proba) else []
        return [list(flat[offsets[k]:offsets[k + 1]]) for k in range(len(words))]

    return sentences(ours, source), sentences(theirs, exported), difference
