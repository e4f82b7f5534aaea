"""A saved word probe applied to new sentences (`predict --probe` on a word probe): the encoder loaded once, each
chunk of sentences read into word vectors exactly as the probe's training words were (the recorded `Reading` and
`Pooling`, `bertkit.features.words`), the probe's tag probabilities per word, and per sentence its tags and
entity spans (`bertkit.scoring.spans`). One chunk's vectors in memory at a time."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from bertkit.data.tagged import in_chunks
from bertkit.data.word_lines import WordSentence
from bertkit.errors import UserError
from bertkit.models.compute import Compute
from bertkit.probe.word_saved import SavedWordProbe
from bertkit.scoring.spans import TaggedWords, tagged_words

log = logging.getLogger(__name__)

CHUNK_SENTENCES = 256


@dataclass(frozen=True)
class WordTagger:
    """`tag(sentences)`: the probe's predictions for a chunk of sentences, the encoder loaded once."""

    probe: SavedWordProbe
    tag_chunk: Callable[[Sequence[WordSentence]], list[TaggedWords]]

    def tag(self, sentences: Iterable[WordSentence], chunk: int = CHUNK_SENTENCES) -> Iterator[list[TaggedWords]]:
        """Each chunk's predictions in input order, as they come."""
        return (self.tag_chunk(part) for part in in_chunks(sentences, chunk))


def word_tagger(probe: SavedWordProbe, batch_size: int = 32, compute: Compute = Compute()) -> WordTagger:
    """The encoder and tokenizer the probe records (a changed encoder is refused, as for sentence probes and
    stores: `saved.check_probe_encoder`), ready to tag chunks of sentences where and in the precision `compute` says
    (the command's, resolved once against the compute the probe records)."""
    from bertkit.models import loading
    from bertkit.probe.saved import check_probe_encoder

    source = probe.source
    check_probe_encoder(probe.path, source.model, source.revision, source.encoder_sha256)
    tokenizer = loading.load_tokenizer(source.model, source.trust_remote_code)
    encoder = loading.cast_for_inference(loading.load_encoder(source.model, source.trust_remote_code).eval(),
                                         compute.torch_device, compute.dtype)

    def tag_chunk(sentences: Sequence[WordSentence]) -> list[TaggedWords]:
        return tagged_chunk(probe, encoder, tokenizer, sentences, batch_size, compute.dtype)

    return WordTagger(probe, tag_chunk)


def tagged_chunk(probe: SavedWordProbe, encoder: object, tokenizer: object, sentences: Sequence[WordSentence],
                 batch_size: int, dtype: object = None) -> list[TaggedWords]:
    """Tags, their probabilities and the spans of each sentence of one chunk."""
    from bertkit.features.words import check_fits_model, encode_word_chunk

    check_fits_model(encoder, probe.source.reading)
    features = encode_word_chunk(encoder, tokenizer, [list(s.words) for s in sentences], probe.source.reading,
                                 [probe.fit.pooling], batch_size, dtype)
    X = features.vectors[0]
    if X.shape[1] != probe.fit.weights.coef.shape[1]:
        raise UserError(f"The word probe in {probe.path} expects {probe.fit.weights.coef.shape[1]} features but model "
                        f"{probe.source.model} gives {X.shape[1]}. Valid: the model folder the probe was fitted on, "
                        f"unchanged. Re-run `bertkit probe` with the model as it is now.")
    proba = probe.predict_proba(X)
    best = proba.argmax(axis=1)
    tags, top = np.asarray(probe.tags, dtype=object)[best], proba[np.arange(len(best)), best]
    offsets = features.sentence_offsets
    return [tagged_words(s.words, tags[offsets[k]:offsets[k + 1]].tolist(), top[offsets[k]:offsets[k + 1]].tolist(),
                         probe.source.scheme, s.text) for k, s in enumerate(sentences)]
