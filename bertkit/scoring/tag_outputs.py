"""A tagging model's outputs (its PyTorch folder or its ONNX export: `bertkit.models.onnx_tagger`) read as predict,
evaluate and the export gate read them: per sentence (given as words) its tags, one per word, from the first
piece's logits in the window where the word has the most context (`bertkit.models.tagger`),
the tags' probabilities and the entity spans (`bertkit.scoring.spans`, the JSONL shape a word probe writes), chunk
by chunk so a file of any length streams (`TagReader.tag`); and a tagged corpus scored against them (`score_tagger`:
entity F1 as conlleval counts, strict beside it, with the model's scheme: `bertkit.scoring.entities.score_tags`, the
same entities the spans show,
with the mistakes `bertkit.scoring.tag_report` counts)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertkit.data.tagged import TaggedCorpus, in_chunks
from bertkit.data.word_lines import WordSentence
from bertkit.encoding.reading import Reading
from bertkit.errors import UserError
from bertkit.models import loading
from bertkit.models.compute import Compute
from bertkit.models.onnx_tagger import load_any_tagger
from bertkit.models.tagger import SavedTagger, window_logits
from bertkit.scoring.entities import BOOTSTRAP_RESAMPLES
from bertkit.scoring.spans import TaggedWords, tagged_words
from bertkit.scoring.tag_report import TagReport, tag_report
from bertkit.scoring.word_tags import windowed_word_distributions

CHUNK_SENTENCES = 256
"""Sentences read (windows run, outputs kept) at a time."""


@dataclass
class TagReader:
    """A loaded tagger and how many windows run per batch: `tag_chunk` a list of sentences, `tag` a stream."""

    tagger: SavedTagger
    batch_size: int = 64
    aggregate: str = "first"
    """--aggregate: how a word's tag is read from its pieces (`scoring.word_tags`; first: the piece taggers learn on)."""

    def word_probabilities(self, sentences: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray, Any]:
        """(every word's tag probabilities (words, tags), its sentences' words in order, read by --aggregate; the
        logits of every piece of every window; the windows, `window_logits`')."""
        logits, windows = window_logits(self.tagger, [list(s) for s in sentences], self.batch_size)
        proba = windowed_word_distributions(logits, windows.word_window, windows.word_start, windows.word_end,
                                            self.aggregate) if windows.n_words else np.zeros((0, 1))
        return proba, logits, windows

    def tag_chunk(self, sentences: Sequence[WordSentence]) -> list[TaggedWords]:
        """Each sentence's tags, their probabilities and its spans (offsets into its text as given)."""
        proba, _, windows = self.word_probabilities([s.words for s in sentences])
        offsets = windows.sentence_offsets
        best = proba.argmax(axis=1)
        tags = np.asarray(self.tagger.tags, dtype=object)[best]
        top = proba[np.arange(len(best)), best]
        return [tagged_words(s.words, tags[offsets[k]:offsets[k + 1]].tolist(), top[offsets[k]:offsets[k + 1]].tolist(),
                             self.tagger.scheme, s.text) for k, s in enumerate(sentences)]

    def tag(self, sentences: Iterable[WordSentence], chunk: int = CHUNK_SENTENCES) -> Iterator[list[TaggedWords]]:
        """Each chunk's predictions in input order, as they come (one chunk's windows in memory at a time)."""
        return (self.tag_chunk(part) for part in in_chunks(sentences, chunk))


def tag_reader(model_dir: str, compute: Compute, reading: Reading, batch_size: int = 64,
               aggregate: str = "first") -> TagReader:
    """The tagging model in `model_dir` (a PyTorch folder or its ONNX export, `load_any_tagger`) loaded on `compute`,
    reading words as `reading` says (the record's, or the flags given), its --max-length checked against what the
    model accepts; a word's tag read by `aggregate`."""
    tagger = load_any_tagger(model_dir, compute, reading)
    loading.check_max_length(reading.max_length, tagger.tokenizer, tagger.model.config, model_dir)
    return TagReader(tagger, batch_size, aggregate)


def check_gold_scheme(reader: TagReader, corpus: TaggedCorpus) -> list[str]:
    """Refuse gold tags that name entities another way than the model's (a POS file for an entity tagger, IOBES
    against IOB2: IOB1 reads as IOB2); the corpus's own notes (stray I- tags counted) and notes for gold tags the
    model never predicts (no prediction can match them)."""
    model, gold = reader.tagger.scheme, corpus.scheme
    if model.name != gold.name:
        raise UserError(f"{corpus.source} reads as {gold.name} tags but the model {reader.tagger.path} was trained on "
                        f"{model.name} tags: its entities would be read differently. Valid: gold data in the model's "
                        f"scheme ({model.name}; IOB1 and IOB2 both read as IOB2). Pass such data, or convert it.")
    unseen = sorted(set(corpus.tags) - set(reader.tagger.tags))
    return [*corpus.notes, *([f"{corpus.source} has tags the model never predicts (no prediction can match them): "
                              f"{', '.join(unseen[:10])}"] if unseen else [])]


def score_tagger(reader: TagReader, corpus: TaggedCorpus, *, limit: int | None = None, seed: int = 0,
                 on_chunk: Callable[[list[TaggedWords]], Any] | None = None) -> TagReport:
    """The model's tags of the corpus's sentences (the first `limit`) scored against its gold tags as the scheme they
    were read with reads them (the model's: `check_gold_scheme`), with the main score's bootstrap interval over
    sentences and the mistakes (`tag_report`); `on_chunk` sees every chunk's predictions in order (the predictions
    file). Only the tags are held, a list per sentence; a chunk's windows go once its tags are read."""
    gold: list[list[str]] = []
    predicted: list[list[str]] = []
    for chunk in corpus.chunks(CHUNK_SENTENCES):
        chunk = chunk[:max(0, limit - len(gold))] if limit is not None else chunk
        if not chunk:
            break
        tagged = reader.tag_chunk([WordSentence(s.words) for s in chunk])
        gold.extend(list(s.tags) for s in chunk)
        predicted.extend(list(t.tags) for t in tagged)
        if on_chunk is not None:
            on_chunk(tagged)
    return tag_report(gold, predicted, corpus.scheme, BOOTSTRAP_RESAMPLES, seed)
