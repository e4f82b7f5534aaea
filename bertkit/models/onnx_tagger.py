"""A tagging model read for inference from either folder it can be in: the PyTorch one `bertkit finetune` saved
(`models.tagger.load_tagger`) or its ONNX export (`bertkit.models.onnx`, kind `tagger`). Both come back as a
`SavedTagger`, so predict, evaluate and the export gate run them through the one path of windows and word tags
(`models.tagger.window_logits`, `bertkit.scoring.word_tags`): an export's model is its session, which
`TokenClassifier` calls as it calls a transformers token classifier."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bertkit.encoding.reading import Reading
from bertkit.models import loading, metadata, onnx
from bertkit.models.compute import Compute
from bertkit.models.tagger import SavedTagger, load_tagger


def load_exported_tagger(folder: str, compute: Compute, reading: Reading | None = None) -> SavedTagger:
    """The tagger export in `folder` (its files verified against its record) as a `SavedTagger`: its session, its
    tokenizer, its tags, the scheme and reading of words it records. It runs on the CPU in the precision baked into
    its weights; `compute` asking for another (bf16, fp16) is refused (`onnx.check_precision`)."""
    own = onnx.export_compute(folder)
    if compute.precision not in ("fp32", own.precision):
        onnx.check_precision(compute.precision, folder)
    runner = onnx.load_export(folder, "tagger", "a tagging model's predict/evaluate")
    reading = reading or Reading.from_json(metadata.read_model_info(Path(folder).expanduser()).get("reading")) \
        or Reading.of_words()
    return saved_tagger(folder, runner, loading.load_tokenizer(folder), reading, own)


def saved_tagger(folder: str | Path, model: Any, tokenizer: Any, reading: Reading, compute: Compute) -> SavedTagger:
    """A tagging model already loaded (a transformers token classifier, or an export's session) as a `SavedTagger`:
    its tags in its config's id2label order, the tag scheme `folder` records."""
    config = model.config
    tags = tuple(str(config.id2label[i]) for i in range(config.num_labels))
    return SavedTagger(Path(folder).expanduser(), model, tokenizer, tags, metadata.saved_tag_scheme(folder), reading,
                       compute)


def load_any_tagger(model_dir: str, compute: Compute, reading: Reading | None = None) -> SavedTagger:
    """The tagging model in `model_dir`: its ONNX export (`load_exported_tagger`) or the PyTorch folder on `compute`
    (`load_tagger`), reading words as `reading` says (None: as its record says)."""
    if onnx.is_export(model_dir):
        return load_exported_tagger(model_dir, compute, reading)
    return load_tagger(model_dir, compute, reading)
