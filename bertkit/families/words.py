"""The words family: one tag per word (named entities, POS) - tagged corpora (CoNLL-style column files, JSON lines or
parquet with token and tag lists, hub datasets with a tag sequence), taggers fine-tuned on them, word probes and word
stores. What differs from sentences lives here; the work itself is the layers' (`data.tagged`, `encoding.words`,
`training.tagging`, `scoring.tag_outputs`, `probe.words_run`, `features.word_embed`)."""

from __future__ import annotations

from typing import Any, ClassVar

from bertkit.data.labels import TAGS_TASK
from bertkit.data.options import reads_tagged
from bertkit.data.tagged import may_be_tagged, unseen_tags_problems
from bertkit.data.tagged_splits import (
    TaggedTraining,
    load_tagged_training,
    load_tagged_training_for,
    tagged_columns,
)
from bertkit.encoding.reading import Reading
from bertkit.errors import UserError, raise_if_problems
from bertkit.families.base import Family
from bertkit.families.results import Evaluation, Predictions, TimedData
from bertkit.families.word_runs import (
    TaggerExport,
    sentences_to_time,
    tagger_evaluation,
    word_predictions,
    word_probe,
    word_probe_option_problems,
)
from bertkit.features.sentence_embed import EmbedReport
from bertkit.features.word_embed import run_word_embed_options
from bertkit.features.word_store import word_store_splits
from bertkit.features.words import word_settings_problems
from bertkit.models.compute import Compute
from bertkit.models.metadata import is_tagger, saved_tag_scheme
from bertkit.options import value
from bertkit.probe.records import ProbeReport
from bertkit.probe.word_saved import is_word_probe
from bertkit.probe.word_store_run import word_store_problems
from bertkit.scoring.word_outputs import word_out_problems
from bertkit.training.plans import Training
from bertkit.training.tag_options import TAGGER_WORD_POOL

TRAINING_NOT_READ = ("dev_fraction", "metric")
"""What a tagger's fine-tuning does not read: no dev split is held out of tagged data, and --metric scores sentence
labels."""


class Words(Family):
    name = "words"
    rows = "tagged data (one tag per word)"
    chosen_by = "a CoNLL-style file (.iob2, .conll) or --task tags"
    model_noun = "a tagger (one tag per word)"
    owner_phrase: ClassVar[dict[str, str]] = {"distill": "a tagging teacher",
                                              "predict": "a tagging model or word probe (one tag per word)"}
    doing: ClassVar[dict[str, str]] = {
        "finetune": "fine-tuning on tagged data (one tag per word)", "sweep": "fine-tuning on tagged data (one tag "
        "per word)", "distill": "distilling a tagger", "probe": "word probes (tagged data)", "embed": "tagged data (one tag per word)",
        "bench": "tagged data (one tag per word): bench times its sentences as a tagger reads them",
        "predict": "a tagging model (or word probe): it reads every word, a long sentence in windows of its max length",
        "evaluate": "a tagging model (tagged --data, words read in windows)",
        "export": "a tagging model: its gate reads sentences of words (a tagged file, or text with one sentence per "
                  "line), a long one in windows of its max length"}
    not_read: ClassVar[dict[str, tuple[str, ...]]] = {
        "finetune": TRAINING_NOT_READ, "sweep": TRAINING_NOT_READ,
        "distill": (*TRAINING_NOT_READ, "test"),
        "probe": ("test", "header", "cv", "C_grid", "class_weight", "repeats", "metric", "dev_fraction"),
        "embed": ("limit", "header", "cache_dir", "store_dtype"),
        "bench": ("test",),
        "evaluate": ("metric",),
    }

    def reads(self, inputs: Any, task: str) -> bool:
        return reads_tagged(task, inputs.data, inputs.data_config, inputs.train_split)

    def made(self, folder: str) -> bool:
        return is_tagger(folder)

    def saved_probe(self, path: str) -> bool:
        return is_word_probe(path)

    def stores(self, path: str) -> bool:
        return bool(word_store_splits(path))

    def option_problems(self, cfg: Any, command: str) -> list[str]:
        """--unseen-tags refuse, drop or a tag; fine-tuning or distilling a tagger: a tagged --dev is needed (no
        hold-out is made), and (fine-tuning) both files look tagged; predict: word predictions go to .jsonl or .csv,
        and a word probe reads words as it was fitted; probe: the word table's own refusals."""
        return unseen_tags_problems(value(cfg, "unseen_tags", "refuse")) + self.command_problems(cfg, command)

    def command_problems(self, cfg: Any, command: str) -> list[str]:
        if command == "predict":
            return word_out_problems(cfg.out) + (word_probe_option_problems(cfg) if cfg.probe is not None else [])
        if command == "probe":
            return word_table_problems(cfg)
        if command == "embed":
            return word_settings_problems(cfg, cfg.pooling.layers, cfg.pooling.combine)
        if command == "bench":
            return bench_problems(cfg)
        if command == "export" and cfg.kind not in ("auto", "tagger"):
            return [f"--kind {cfg.kind} does not apply to {cfg.model}: it is a tagging model (one tag per word), "
                    f"exported with its logits per word piece. Drop --kind (auto), or pass --kind tagger."]
        if command == "distill":
            return dev_problems(cfg.inputs.dev, "Distilling a tagger")
        if command not in ("finetune", "sweep"):
            return []
        return dev_problems(cfg.inputs.dev, "Fine-tuning a tagger") + not_tagged_problems(
            (cfg.inputs.data, cfg.inputs.dev), "fine-tune on rows of text")

    def evaluate(self, cfg: Any, claim: Any, progress: bool) -> Evaluation:
        """`bertkit evaluate`'s scores of the model on labelled --data (`tagger_evaluation`)."""
        return tagger_evaluation(cfg, claim, progress)

    def predict(self, cfg: Any, *, keep: int | None, progress: bool, on_chunk: Any) -> Predictions:
        """A tagging model's or a word probe's tags and spans of sentences (`word_runs.word_predictions`)."""
        return word_predictions(cfg, keep, on_chunk)

    def probe(self, cfg: Any, progress: bool) -> ProbeReport:
        """The word probe table (`word_runs.word_probe`: from tagged files, or a word store)."""
        return word_probe(cfg, progress)

    def exporter(self, cfg: Any) -> TaggerExport:
        """A tagger's per-piece logits (`word_runs.TaggerExport`)."""
        return TaggerExport()

    def bench_data(self, cfg: Any) -> TimedData:
        """Tagged sentences given as words, with the training corpus's tags (`word_runs.sentences_to_time`)."""
        return sentences_to_time(cfg)

    def quality_options(self, cfg: Any) -> dict[str, Any]:
        """The quality runs read the same corpus as tagged data, in bench's --tag-scheme and --unseen-tags."""
        return {"task": TAGS_TASK, "tag_scheme": cfg.tag_scheme, "unseen_tags": cfg.unseen_tags}

    def refused_options(self, cfg: Any, command: str, source: str | None = None) -> list[str]:
        """As every family refuses them; a word store (`probe --features`) fixed its options when it was embedded:
        it refuses every other one itself (`word_store_problems`)."""
        if command == "probe" and cfg.features is not None:
            return word_table_problems(cfg)
        return super().refused_options(cfg, command, source)

    # ---------------------------------------------------------------- fine-tuning (finetune, sweep)

    table_fields: ClassVar[tuple[str, ...]] = ()
    """Tagged data is checked by its own reader, not as a table."""

    def training(self, cfg: Any) -> TagTraining:
        """A tagger's runs: its windows of words checked against --max-length, then its tagged --data, --dev and
        --test read and checked (before torch is imported)."""
        training = TagTraining(None, lambda trial: self.refused_options(trial, "sweep"))
        raise_if_problems(training.reading(cfg).word_problems())
        training.data = load_tagged_training_for(cfg.inputs, cfg.tagging.tag_scheme, cfg.tagging.unseen_tags)
        return training

    def embed(self, cfg: Any, progress: bool) -> EmbedReport:
        """Word vectors of every sentence into a word store (`features.word_embed`), Compute resolved once here."""
        return EmbedReport.of_words(run_word_embed_options(cfg, Compute.resolve(cfg.device, cfg.precision), progress))

    def distillation(self, cfg: Any) -> tuple[Any, Any]:
        """A tagging student (`training.distill_tags.DistillTagTask`): --data and --dev read as tagged corpora in the
        teacher's tag scheme (before torch is imported), words read as the teacher reads them (windows of its recorded
        --max-length, each word at its first piece)."""
        cfg = cfg.in_the_teachers_shape(TAGS_TASK)
        teacher = str(cfg.distillation.teacher)
        scheme = saved_tag_scheme(teacher)
        inputs = cfg.inputs
        data = load_tagged_training(str(inputs.data), str(inputs.dev), tagged_columns(inputs), inputs.data_config,
                                    inputs.train_split, inputs.limit, unseen_tags=cfg.tagging.unseen_tags)
        for option, corpus in (("--data", data.train), ("--dev", data.dev)):
            if corpus.scheme.name != scheme.name:
                raise UserError(f"{option} {corpus.source} reads as {corpus.scheme.name} tags, but the teacher {teacher} "
                                f"was trained on {scheme.name} tags: their entities would be read differently. Valid: "
                                f"data in the teacher's scheme ({scheme.name}; IOB1 and IOB2 both read as IOB2). Pass "
                                f"such data, or convert it.")
        from bertkit.training.distill_tags import DistillTagTask

        return cfg, DistillTagTask(cfg, data, scheme, Reading.of_words(max_length=cfg.reading.max_length))


class TagTraining(Training):
    """A tagger's fine-tuning runs (`training.tagging.TagTask`): windows of --max-length word pieces, each word read at
    its first piece, its tagged data read once for every run."""

    def __init__(self, data: TaggedTraining | None, option_problems: Any) -> None:
        super().__init__(option_problems)
        self.data = data

    def reading(self, cfg: Any) -> Reading:
        return Reading.of_words(TAGGER_WORD_POOL, cfg.reading.max_length, cfg.reading.stride)

    def task(self) -> Any:
        from bertkit.training.tagging import TagTask

        return TagTask(self.data)

    def check_sweep(self, cfg: Any) -> None:
        """--metric-for-best is one its tags score (no value of the space changes the tags)."""
        from bertkit.scoring.tags import tag_metric_for_best

        tag_metric_for_best(cfg.training.metric_for_best, self.data.scheme)

    def check_trial(self, checker: Any, trial: Any) -> None:
        """A trial's options, and its windows: --stride against its --max-length (its windows are counted once its
        run cuts them)."""
        raise_if_problems(self.option_problems(trial) + self.reading(trial).word_problems())


def word_table_problems(cfg: Any) -> list[str]:
    """The word probe's own refusals: a word store's fixed options, or tagged --data and --dev (no dev split is held
    out); and its reading, layers and precision."""
    settings = word_settings_problems(cfg, cfg.layers, cfg.combine)
    if cfg.features is not None:
        return word_store_problems(cfg) + settings
    problems = [] if cfg.inputs.data is not None and cfg.inputs.dev is not None else [
        "Probing words needs --data (tagged training data) and --dev (tagged dev data: a file, or a split of the hub "
        "dataset --data); a dev split is not held out. Pass --dev dev.iob2 (hub: --dev validation)."]
    return problems + not_tagged_problems((cfg.inputs.data, cfg.inputs.dev), "probe sentences") + settings


def bench_problems(cfg: Any) -> list[str]:
    """Timing taggers: --data given and both files tagged, and a tagged --dev for the quality runs."""
    problems = [] if cfg.inputs.data else ["--task tags needs --data (a tagged corpus, e.g. train.iob2). Pass it."]
    problems += not_tagged_problems((cfg.inputs.data, cfg.inputs.dev), "time rows of text")
    if cfg.quality_kinds and cfg.inputs.dev is None:
        problems.append("--quality on tagged data needs --dev (tagged dev data: the fine-tuned taggers are scored "
                        "there by entity F1); no dev split is held out of tagged data. Pass --dev dev.iob2.")
    return problems


def dev_problems(dev: str | None, doing: str) -> list[str]:
    """No hold-out is made of tagged data: a tagged --dev is needed."""
    return [] if dev is not None else [
        f"{doing} needs --dev (tagged dev data: a file, or a split of the hub dataset --data); no dev split is held "
        f"out of tagged data. Pass --dev dev.iob2 (hub: --dev validation)."]


def not_tagged_problems(paths: tuple[str | None, ...], instead: str) -> list[str]:
    """Each of `paths` that is a file that does not look like a tagged corpus (a missing one: its reader says so)."""
    return [f"--task tags reads one tag per word, but {path} does not look like a tagged corpus. Valid: a CoNLL-style "
            f"column file (a word and its tag per line, a blank line between sentences), JSON lines or parquet with "
            f"token and tag lists, or a hub dataset. Pass such data, or drop --task tags to {instead}."
            for path in dict.fromkeys(paths) if path is not None and not may_be_tagged(path)]


WORDS = Words()
