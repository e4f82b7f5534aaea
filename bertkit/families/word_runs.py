"""The words family's parts of the commands that read a model or data of its own: `bertkit predict` (a tagging
model - `bertkit finetune` on tagged data, or its ONNX export - or a saved word probe tags the words of --text,
--words or --data's sentences, chunk by chunk, every chunk written to --out (.jsonl or .csv) and handed to the
command's `on_chunk`, a list of `scoring.spans.TaggedWords`), `bertkit evaluate` (a tagging model's entity scores
and mistakes) and `bertkit probe` (the word probe table, from tagged files or a word store)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bertkit.data.gate_sentences import GateSentences, read_gate_sentences, run_dev_sentences
from bertkit.data.tagged import read_tagged_splits, tagged_sources
from bertkit.data.tagged_splits import corpus_fingerprint, tagged_columns
from bertkit.data.word_lines import data_sentences, text_sentence, words_sentence
from bertkit.encoding.reading import Reading
from bertkit.errors import UserError
from bertkit.families.exports import Exporter, run_dev_set
from bertkit.families.results import Evaluation, Predictions, TimedData, written_chunks
from bertkit.features.settings import Pooling
from bertkit.models.compute import Compute
from bertkit.models.export_gate import GateReport
from bertkit.models.folders import OFFLINE_NAME
from bertkit.models.metadata import read_as_saved, read_model_info
from bertkit.options import config_dict
from bertkit.probe.records import ProbeReport
from bertkit.probe.word_store_run import run_word_store_probe
from bertkit.scoring.scores import Scores
from bertkit.training.tag_options import TAGGER_WORD_POOL

log = logging.getLogger(__name__)


def word_predictions(cfg: Any, keep: int | None, on_chunk: Callable[[Any], None] | None) -> Predictions:
    """Tags and spans of the sentences, from a saved word probe (`--probe`) or a tagging model (`--model`); the first
    `keep` sentences kept in the record."""
    return (probe_predictions if cfg.probe is not None else tagger_predictions)(cfg, keep, on_chunk)


def probe_predictions(cfg: Any, keep: int | None, on_chunk: Callable[[Any], None] | None) -> Predictions:
    """A saved word probe's tags, its words read as the probe's record says (its encoder verified first)."""
    from bertkit.models import loading
    from bertkit.probe.word_predict import word_tagger
    from bertkit.probe.word_saved import load_word_probe

    probe = load_word_probe(cfg.probe or "")  # every file verified before the encoder is loaded
    loading.check_model_folder(probe.source.model)
    # the one resolution of --precision: auto reads words in the precision the probe's were read in, where the CPU
    # runs it natively (a probe saved before it recorded one: as auto resolves here)
    compute, notes = Compute.over_record("cpu", cfg.precision, probe.source.compute, f"The word probe {probe.path}")
    for note in notes:
        log.warning("%s", note)
    tagger = word_tagger(probe, cfg.batch_size, compute)
    kept, total = written_sentences(cfg.out, tagger.tag(sentences_of(cfg)), keep, on_chunk)
    reading = probe.source.reading
    return Predictions("tags", list(probe.tags), 0.5, cfg.out, compute.precision, reading.max_length, None,
                       f"word {reading.word_pool}, {probe.fit.pooling.label}", sentences=kept, n_sentences=total,
                       family="words")


def tagger_predictions(cfg: Any, keep: int | None, on_chunk: Callable[[Any], None] | None) -> Predictions:
    """A tagging model's tags, read in windows of the max length it was trained with (--max-length, --stride given:
    as asked), each word's tag from its pieces as --aggregate says."""
    from bertkit.models import infer, loading
    from bertkit.scoring.tag_outputs import tag_reader

    loading.check_model_folder(cfg.model or "")  # its files as recorded, before anything reads them
    cfg = read_as_saved(cfg)
    compute = infer.compute_of_model(cfg.model or "", cfg.precision)  # an export: its own, on the CPU
    reading = Reading.of_words(TAGGER_WORD_POOL, cfg.reading.max_length, cfg.reading.stride)
    reader = tag_reader(cfg.model or "", compute, reading, cfg.batch_size, cfg.aggregate)
    kept, total = written_sentences(cfg.out, reader.tag(sentences_of(cfg)), keep, on_chunk)
    return Predictions("tags", list(reader.tagger.tags), 0.5, cfg.out, infer.precision_of(reader.tagger.model, compute),
                       reading.max_length, sentences=kept, n_sentences=total, aggregate=cfg.aggregate, family="words")


def written_sentences(out: str | None, chunks: Any, keep: int | None,
                      on_chunk: Callable[[Any], None] | None) -> tuple[list[Any], int]:
    """Every chunk of tagged sentences to --out (.jsonl or .csv; none: nowhere) and `on_chunk`; (the first `keep`,
    the count)."""
    from bertkit.scoring.word_outputs import open_word_predictions

    return written_chunks(out, open_word_predictions, chunks, keep, on_chunk)


def sentences_of(cfg: Any) -> Iterator[Any]:
    """The sentences to tag: --text (split on whitespace), --words, or --data streamed."""
    if cfg.words is not None:
        return iter([words_sentence(cfg.words)])
    if cfg.text:
        return (text_sentence(t) for t in cfg.text)
    return data_sentences(cfg.inputs)


def word_probe_option_problems(cfg: Any) -> list[str]:
    """Options a word probe does not read (it reads words as it was fitted): --max-length, --stride, --precision
    int8, --aggregate (a tagging model's pieces)."""
    reading = cfg.reading
    given = [flag for flag, value in (("--max-length", reading.max_length), ("--stride", reading.stride)) if value]
    problems = [f"{flag} does not apply to a word probe: it reads words as it was fitted (its probe.json). Drop "
                f"{flag}." for flag in given]
    if cfg.precision == "int8":
        problems.append("--precision int8 does not apply to a word probe: word vectors are read in float. Pass "
                        "--precision auto, fp32 or bf16.")
    if cfg.aggregate != "first":
        problems.append(f"--aggregate {cfg.aggregate} reads a word's tag from a tagging model's word pieces; "
                        f"{cfg.probe} is not a tagging model (a word probe is fitted on pooled word vectors). Drop "
                        f"--aggregate.")
    return problems


# ---------------------------------------------------------------- evaluate


def tagger_evaluation(cfg: Any, claim: Callable[[], Path] | None, progress: bool) -> Evaluation:
    """A tagging model on tagged --data (IOB1 read as IOB2): entity P/R/F1 with the model's scheme (micro, macro,
    per type, the F1's interval over sentences) and word accuracy, or word accuracy and macro-F1 for plain tags; its
    mistakes (`scoring.tag_report.TagMistakes`); with `claim` (the evaluate run's folder, claimed once the model and
    data were checked) predictions.jsonl, predict's shape (words, tags, spans per sentence)."""
    from bertkit.data.tagged import read_tagged
    from bertkit.data.tagged_splits import corpus_fingerprint
    from bertkit.models.preflight import check_inputs
    from bertkit.scoring.tag_outputs import check_gold_scheme, score_tagger, tag_reader
    from bertkit.scoring.tags import tag_scores_record
    from bertkit.scoring.word_outputs import open_word_predictions

    check_inputs(cfg, need_labels=True, models=(cfg.model,), data_fields=())  # the model as saved, before torch
    inputs = cfg.inputs  # and the gold data
    corpus = read_tagged(inputs.data or "", tagged_columns(inputs))
    cfg = read_as_saved(cfg)
    compute, notes = Compute.over_record(None, cfg.precision, Compute.recorded_in(read_model_info(
        Path(cfg.model or "").expanduser())), f"The model {cfg.model}")
    reading = Reading.of_words(TAGGER_WORD_POOL, cfg.reading.max_length, cfg.reading.stride)
    reader = tag_reader(cfg.model or "", compute, reading, cfg.batch_size)
    notes += check_gold_scheme(reader, corpus)
    for note in notes:
        log.warning("%s", note)
    out = claim() / "predictions.jsonl" if claim is not None else None
    with open_word_predictions(out) if out is not None else contextlib.nullcontext(lambda _: None) as append:
        report = score_tagger(reader, corpus, limit=cfg.inputs.limit, seed=cfg.inputs.seed, on_chunk=append)
    record = {"task": "tags", **tag_scores_record(report.scores), **({"notes": notes} if notes else {})}
    return Evaluation(cfg.model or "", str(corpus.source), corpus_fingerprint(corpus), reading.max_length,
                      reading.long_text, reading.truncation, compute.precision, Scores.from_json(record),
                      mistakes=report.mistakes)


# ---------------------------------------------------------------- probe


def word_probe(cfg: Any, progress: bool = False) -> ProbeReport:
    """The word path: tagged train/dev read and checked, one extraction of every hidden state the table needs, a
    word probe per row (`bertkit.probe.words_run`), then the run directory."""
    from bertkit.io import ownership, run_claim, rundir, trail
    from bertkit.probe.words_run import write_word_probe_run

    plan = rundir.inspect_run_dir(cfg.out, "probe", overwrite=cfg.overwrite, compare=trail.config_compare(config_dict(cfg)),
                                  inputs=ownership.input_paths(cfg)) if cfg.out else None
    table = word_probe_table(cfg, progress)  # the tagged files read and checked before --out is claimed
    with run_claim.claimed_for_the_run(plan) as run_dir:
        words = table()
        if run_dir is not None:
            words = write_word_probe_run(run_dir.path, words, config_dict(cfg), final_dir=run_dir.out)
            run_dir.commit()
    return ProbeReport.of_words(words)


def word_probe_table(cfg: Any, progress: bool) -> Callable[[], Any]:
    """The word probe's table (a `WordProbeRun`) to compute: from a word store (its settings are the store's, checked
    as it is read), or from words read as a saved --model records them (a tagger's window, overlap, word pooling),
    unless given - the tagged files read and checked now."""
    from bertkit.probe.fit import DEFAULT_C
    from bertkit.probe.words_run import run_word_probe

    say = log.info if progress else None
    if cfg.features is not None:  # `probe.word_store_run`
        return lambda: run_word_store_probe(cfg, say=say)
    read = read_as_saved(cfg)
    reading = Reading.of_words(read.tagged.word_pool, read.reading.max_length, read.reading.stride)
    columns = tagged_columns(cfg.inputs, cfg.tagged.tag_scheme)
    train, dev = tagged_sources(str(cfg.inputs.data), [str(cfg.inputs.dev)], cfg.inputs.data_config,
                                cfg.inputs.train_split)
    compute = Compute.resolve("cpu", cfg.precision)  # once: words are read on the CPU, as sentence probes' text
    return lambda: run_word_probe(train, dev, columns, reading, cfg.model or OFFLINE_NAME, cfg.layers, cfg.combine,
                                  cfg.batch_size, cfg.fit.C or DEFAULT_C, cfg.inputs.seed, cfg.fit.baselines,
                                  cfg.trust_remote_code, say=say, limit=cfg.inputs.limit, compute=compute,
                                  cache_dir=cfg.inputs.cache_dir, unseen_tags=cfg.tagged.unseen_tags)


# ---------------------------------------------------------------- export


class TaggerExport(Exporter):
    """A tagging model: the graph ends in per-piece logits, read in the windows the model records; gated by the tag
    agreement per word with the PyTorch fp32 model and, with gold tags, the drop of its score."""

    kind = "tagger"
    ignores = (*Pooling.KEYS, "min_cosine")
    what = "a tagging model (its graph ends in per-piece logits)"

    def checked_data(self, cfg: Any) -> GateSentences:
        """The gate sentences (the first --limit): --data (gold tags when it has them), or the dev set of the tagging
        run the model folder was saved in; read and checked before torch is imported."""
        inputs = cfg.inputs
        sentences = read_gate_sentences(inputs.data, tagged_columns(inputs), inputs.limit, inputs.data_config,
                                        inputs.train_split) if inputs.data \
            else run_dev_set(cfg, lambda config, _: run_dev_sentences(config, inputs.limit), "sentences", "dev.iob2")
        if len(sentences) == 0:
            raise UserError(f"The gate data {sentences.source} has no sentences. Pass --data with sentences to compare "
                            f"the models on.")
        return sentences

    def reading(self, cfg: Any) -> Reading:
        return Reading.of_words(TAGGER_WORD_POOL, cfg.reading.max_length, cfg.reading.stride)

    def notes(self, cfg: Any, model: Any, tokenizer: Any, reading: Reading, dataset: Any) -> list[str]:
        """Gold tags in another scheme than the model's are refused before the export."""
        from bertkit.scoring import tag_gate

        return list(tag_gate.gold_tag_notes(cfg.model, model, tokenizer, reading, dataset))

    def gate(self, cfg: Any, model: Any, exported: Any, tokenizer: Any, dataset: Any, spec: Any,
             reading: Reading) -> GateReport:
        from bertkit.scoring import tag_gate

        return tag_gate.export_tagger_gate(cfg.model or "", model, exported, tokenizer, reading, dataset,
                                           batch_size=cfg.batch_size, min_agreement=cfg.gate.min_agreement,
                                           max_drop=cfg.gate.max_drop)


# ---------------------------------------------------------------- bench


def sentences_to_time(cfg: Any) -> TimedData:
    """Tagged data's timed sentences: --dev if given, else --data (its first --limit), read and checked as
    `bertkit finetune` reads them (columns, scheme, dev tags seen in training), with --data's tags."""
    sources = tagged_sources(cfg.inputs.data, [cfg.inputs.dev] if cfg.inputs.dev else [], cfg.inputs.data_config,
                             cfg.inputs.train_split)
    corpora = read_tagged_splits(sources[0], sources[1:], tagged_columns(cfg.inputs, cfg.tag_scheme),
                                 unseen_tags=cfg.unseen_tags)
    timed = corpora[-1]
    sentences = timed.head(cfg.inputs.limit) if cfg.inputs.limit else list(timed.sentences())
    if not sentences:
        raise UserError(f"No sentences to benchmark on: {timed.source} holds none. Pass a tagged corpus with "
                        f"sentences (a word and its tag per line, a blank line between sentences).")
    return TimedData([s.words for s in sentences], {"source": str(timed.source),
                                                    "fingerprint": corpus_fingerprint(timed)}, corpora[0].tags)
