"""Word probes read one row at a time (issue 45): hidden states written once to unlinked layer files (or read from a
word store one block of columns at a time) give each row the vectors an in-memory extraction gives, so the table
of the disk path equals the in-memory one, while memory holds one row's matrix, not every state of every word."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tagged_samples import DEV, SENTENCES, write_conll

from bertkit.data.tagged import TaggedColumns
from bertkit.encoding.reading import Reading
from bertkit.features import word_layers
from bertkit.features.settings import combine_layers
from bertkit.features.word_layers import (
    MemoryLayers,
    row_matrix,
    scratch_folder,
    store_gives,
    write_layer_files,
)
from bertkit.features.word_store import open_word_store
from bertkit.features.words import extract_word_features, word_pooling
from bertkit.probe.words_run import run_word_probe


@pytest.fixture
def tagged(tmp_path) -> tuple[Path, Path]:
    return write_conll(tmp_path / "train.iob2", SENTENCES * 3), write_conll(tmp_path / "dev.iob2", DEV)


@pytest.fixture
def encoder(tiny_bert_dir):
    from bertkit.models import loading

    return loading.load_encoder(str(tiny_bert_dir)).eval(), loading.load_tokenizer(str(tiny_bert_dir))


@pytest.mark.parametrize("combine", ["concat", "sum", "mean"])
def test_a_row_from_single_states_is_the_combination_bit_for_bit(combine):
    rng = np.random.default_rng(0)
    states = {i: rng.normal(size=(7, 3)).astype(np.float32) for i in range(4)}
    assert np.array_equal(row_matrix(states.__getitem__, [1, 2, 3], combine), combine_layers([states[i] for i in [1, 2, 3]], combine))
    assert row_matrix(states.__getitem__, [2], combine) is states[2]


def test_layer_files_hold_every_state_as_extracted_and_leave_no_file(encoder, monkeypatch, tmp_path):
    model, tokenizer = encoder
    words = [[w for w, _ in s] for s in SENTENCES * 5]
    reading = Reading.of_words("first_last", 8, 2)  # windows, and two pieces per word
    expected = extract_word_features(model, tokenizer, words, reading, [word_pooling(str(i)) for i in range(3)])
    chunks = []
    encode = word_layers.encode_word_chunk
    monkeypatch.setattr(word_layers, "encode_word_chunk", lambda *a: chunks.append(len(a[2])) or encode(*a))
    with write_layer_files(model, tokenizer, words, reading, [0, 1, 2], str(tmp_path / "cache"),
                           chunk_sentences=3) as layers:
        assert chunks == [3] * 6 + [2]
        assert list(scratch_folder(str(tmp_path / "cache")).iterdir()) == []  # unlinked: no name to leave behind
        assert np.array_equal(layers.sentence_offsets, expected.sentence_offsets)
        for k in range(3):
            assert np.array_equal(layers.layer(k), expected.vectors[k])
        spec = word_pooling("0,2", "sum")
        assert np.array_equal(layers.matrix(spec), combine_layers([expected.vectors[0], expected.vectors[2]], "sum"))
        concat = word_pooling("0,1,2", "concat")
        assert np.array_equal(layers.rows(concat, 4, 11), layers.matrix(concat)[4:11])  # read at the words' offset
        for row in (concat, spec, word_pooling("1,2", "mean"), word_pooling("2")):
            reader = word_layers.RowReader(layers, row)
            assert np.array_equal(reader(4, 11), layers.matrix(row)[4:11])
            assert np.array_equal(reader(0, 3), layers.matrix(row)[:3])  # the buffers reused, the values right
        assert layers.row_width(concat) == 3 * layers.width
    assert layers.files == {}


def test_the_disk_path_gives_the_in_memory_table(tagged, tiny_bert_dir, tmp_path):
    """The default path (states on disk, one row in memory) and the in-memory one: the same table, to float
    tolerance (here bit for bit: the same vectors, the same fits), and the same saved probe."""
    reading = Reading.of_words("first", 32)
    runs = {in_memory: run_word_probe(*tagged, TaggedColumns(), reading, str(tiny_bert_dir), seed=3, in_memory=in_memory,
                                      cache_dir=str(tmp_path / "cache"))
            for in_memory in (False, True)}
    disk, memory = runs[False], runs[True]
    assert [r.label for r in disk.table.rows] == [r.label for r in memory.table.rows]
    assert len(disk.table.rows) == 6  # tiny BERT: 3 states and the paper's 3 combinations
    for a, b in zip(disk.table.rows, memory.table.rows, strict=True):
        assert a.dim == b.dim and a.train_accuracy == pytest.approx(b.train_accuracy, abs=1e-9)
        assert a.scores.main == pytest.approx(b.scores.main, abs=1e-9)
        assert a.scores.interval == pytest.approx(b.scores.interval, abs=1e-9)
    assert disk.table.baselines.keys() == memory.table.baselines.keys()
    assert disk.table.baselines["random-init encoder"].main == pytest.approx(
        memory.table.baselines["random-init encoder"].main, abs=1e-9)
    assert disk.best_probe is not None and memory.best_probe is not None
    assert np.allclose(disk.best_probe.weights.coef, memory.best_probe.weights.coef, atol=1e-6)


def test_memory_layers_are_the_extracted_arrays(encoder):
    model, tokenizer = encoder
    words = [[w for w, _ in s] for s in SENTENCES]
    features = extract_word_features(model, tokenizer, words, Reading.of_words(), [word_pooling("0"), word_pooling("2")])
    layers = MemoryLayers.of(features, 2)
    assert layers.states == (0, 2) and layers.missing(word_pooling("-2")) == [1]
    row = layers.matrix(word_pooling("-1"))
    assert np.array_equal(row, features.vectors[1]) and row is not features.vectors[1]  # a copy the fit may change
    assert np.array_equal(layers.rows(word_pooling("-1"), 2, 5), features.vectors[1][2:5])


def test_a_store_gives_its_states_apart_or_its_own_row(tiny_bert_dir, tagged, tmp_path):
    from bertkit.commands.embed import EmbedConfig, run

    train, dev = tagged
    run(EmbedConfig.of(data=str(train), dev=str(dev), out=str(tmp_path / "all"), model=str(tiny_bert_dir),
                    layers="all", precision="fp32"))
    store = open_word_store(tmp_path / "all" / "train")
    layers = word_layers.StoreLayers.of(store, 5)
    assert layers.states == (0, 1, 2) and layers.block == 32 and layers.n_words == int(store.sentence_offsets[5])
    full = np.asarray(store.vectors)
    assert np.array_equal(store.read_columns(32, 64, 17, block_bytes=96 * 4 * 3), full[:17, 32:64])  # 3 rows a block
    assert np.array_equal(layers.matrix(word_pooling("1,2", "sum")), full[:layers.n_words, 32:64] + full[:layers.n_words, 64:])
    assert np.array_equal(layers.rows(word_pooling("1,2", "sum"), 3, 9), layers.matrix(word_pooling("1,2", "sum"))[3:9])
    assert np.array_equal(layers.rows(word_pooling("all"), 3, 9), full[3:9])  # the store's own row
    summed = word_pooling("1,2", "sum")
    assert store_gives(summed, 2, summed) and not store_gives(summed, 2, word_pooling("1"))
    assert store_gives(word_pooling("all"), 2, word_pooling("0,2", "concat"))


def test_a_row_streamed_from_the_layers_is_fitted_as_the_row_in_memory(encoder):
    """A row bigger than the memory allowance is read block by block at every pass of its fit: the same probe, to
    float32 tolerance, as the row held in memory."""
    from bertkit.probe.words import StreamedMatrix, fit_word_tags
    from bertkit.probe.words_run import row_features

    model, tokenizer = encoder
    words = [[w for w, _ in s] for s in SENTENCES * 4]
    tags = [t for s in SENTENCES * 4 for _, t in s]
    features = extract_word_features(model, tokenizer, words, Reading.of_words(), [word_pooling(str(i)) for i in range(3)])
    layers = MemoryLayers.of(features, 2)
    spec = word_pooling("1,2", "concat")
    streamed = row_features(layers, spec, memory_bytes=64)
    assert isinstance(streamed, StreamedMatrix) and streamed.n == layers.n_words and streamed.dim == 64
    held = row_features(layers, spec)
    assert isinstance(held, np.ndarray)
    from_disk, disk_solution, accuracy_disk = fit_word_tags(streamed, tags, 1.0)
    in_memory, memory_solution, accuracy_memory = fit_word_tags(held, tags, 1.0, owned=True)
    # The same objective (7e-6 apart, measured) and the same predictions. The coefficients only as near as a fit to the
    # default tolerance (max |gradient| <= 1e-4) pins them: the folded standardisation rounds differently, and the
    # flat directions of this small problem are left undetermined at ~1e-3 (8e-4 measured). At a tight tolerance
    # the two give one solution: tests/test_probe_engine.py's blocks-and-streamed test.
    assert disk_solution.objective == pytest.approx(memory_solution.objective, rel=5e-5)
    np.testing.assert_allclose(from_disk.head.coef_, in_memory.head.coef_, atol=3e-3)
    assert accuracy_disk == accuracy_memory
