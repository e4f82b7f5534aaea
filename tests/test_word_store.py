"""`bertkit embed` on tagged data (issue 45): a word-level store per split (vectors, sentence offsets, words and
tags, manifest with the settings and digests), equal to `extract_word_features`, verified on read, resumable to the
same bytes, refusing other settings, and flat in memory in the number of sentences."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from tagged_samples import DEV, SENTENCES, write_conll
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.commands.embed import EmbedConfig, EmbedResult, run
from bertkit.encoding.reading import Reading
from bertkit.features import word_store
from bertkit.features.settings import Pooling
from bertkit.features.store_manifests import WORD_STORE_RECORD
from bertkit.features.word_embed import WordEmbedRun, WordEncoder, run_word_embed
from bertkit.features.words import extract_word_features, word_pooling
from bertkit.io import faults

runner = CliRunner()

def invoke(*args: str, env: dict[str, str] | None = None):
    return runner.invoke(app, list(args), env=env)


@pytest.fixture
def tagged(tmp_path) -> tuple[Path, Path]:
    return write_conll(tmp_path / "train.iob2", SENTENCES * 3), write_conll(tmp_path / "dev.iob2", DEV)


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.startswith(".bertkit")}


def test_store_shapes_offsets_words_tags_and_settings(tiny_bert_dir, tagged, tmp_path):
    train, dev = tagged
    out = tmp_path / "store"
    result = run(EmbedConfig.of(data=str(train), dev=str(dev), out=str(out), model=str(tiny_bert_dir), layers="all",
                             combine="concat", shard_size=5), progress=False)
    assert isinstance(result, EmbedResult) and isinstance(result.words, WordEmbedRun)
    assert [s.split for s in result.words.splits] == ["train", "dev"] and result.rows == 14
    store = word_store.open_word_store(out / "train")
    n_words = sum(len(s) for s in SENTENCES) * 3
    assert store.vectors.shape == (n_words, 32 * 3)  # all: every hidden state (embeddings, 2 layers), concatenated
    assert isinstance(store.vectors, np.memmap)
    lengths = [len(s) for s in SENTENCES * 3]
    assert store.sentence_offsets.tolist() == np.concatenate([[0], np.cumsum(lengths)]).tolist()
    assert store.words[1] == ("Bob", "Smith", "left", "Rome") and store.tags[1] == ("B-PER", "I-PER", "O", "B-LOC")
    assert store.reading == Reading.of_words() and store.pooling == word_pooling("all", "concat")
    assert store.scheme == "IOB2" and store.n_sentences == 12
    manifest = json.loads((out / "train" / "manifest.json").read_text())
    assert set(manifest["digests"]) == {"vectors.npy", "sentence_offsets.npy", "sentences.jsonl"}
    assert manifest["revision"] and manifest["counts"] == {"sentences": 12, "words": n_words}
    assert word_store.open_word_store(out / "dev").n_words == 5
    assert not (out / "train" / "shards").exists() and not (out / "train" / "identity.json").exists()


def test_vectors_equal_extract_word_features(tiny_bert_dir, tagged, tmp_path):
    from bertkit.models import loading

    train, _ = tagged
    out = tmp_path / "store"
    reading, layers = Reading.of_words("mean", 16, 4), word_pooling("-2,-1", "sum")
    run(EmbedConfig.of(data=str(train), out=str(out), model=str(tiny_bert_dir), layers="-2,-1", combine="sum",
                    word_pool="mean", max_length=16, stride=4, shard_size=5, precision="fp32"),
        progress=False)  # fp32 as `extract_word_features` below (auto is bf16 where the CPU runs it natively)
    store = word_store.open_word_store(out)
    encoder, tokenizer = loading.load_encoder(str(tiny_bert_dir)).eval(), loading.load_tokenizer(str(tiny_bert_dir))
    expected = extract_word_features(encoder, tokenizer, [[w for w, _ in s] for s in SENTENCES * 3], reading,
                                     [layers])
    np.testing.assert_allclose(store.vectors, expected.vectors[0], rtol=1e-5, atol=1e-5)
    assert store.sentence_offsets.tolist() == expected.sentence_offsets.tolist()
    assert store.reading == reading


@pytest.mark.parametrize("name", ["vectors.npy", "sentence_offsets.npy", "sentences.jsonl"])
def test_a_flipped_byte_is_refused_naming_the_file(tiny_bert_dir, tagged, tmp_path, name):
    out = tmp_path / "store"
    assert invoke("embed", "--data", str(tagged[0]), "--out", str(out), "--model", str(tiny_bert_dir)).exit_code == 0
    target = out / name
    data = bytearray(target.read_bytes())
    data[-2] ^= 0x01
    target.write_bytes(bytes(data))
    with pytest.raises(Exception, match=name) as caught:
        word_store.open_word_store(out)
    assert type(caught.value).__name__ == "UserError"


def test_interrupted_run_resumes_to_identical_files(tiny_bert_dir, tagged, tmp_path, monkeypatch):
    args = ["embed", "--data", str(tagged[0]), "--model", str(tiny_bert_dir), "--shard-size", "3"]
    clean, broken = tmp_path / "clean", tmp_path / "broken"
    assert invoke(*args, "--out", str(clean)).exit_code == 0
    monkeypatch.setenv(faults.FAIL_AFTER_SHARDS_ENV, "2")
    failed = invoke(*args, "--out", str(broken))
    assert failed.exit_code != 0 and not (broken / "manifest.json").exists()
    assert len(list((broken / "shards").glob("chunk-*.npy"))) == 2
    monkeypatch.delenv(faults.FAIL_AFTER_SHARDS_ENV)
    resumed = invoke(*args, "--out", str(broken))
    assert resumed.exit_code == 0, resumed.output
    assert "resumed: 2 of 4 chunks" in resumed.output
    assert tree_bytes(broken) == tree_bytes(clean)
    again = invoke(*args, "--out", str(broken))
    assert again.exit_code == 0 and "already complete" in again.output


def test_other_settings_are_refused_on_resume_and_on_a_finished_store(tiny_bert_dir, tagged, tmp_path, monkeypatch):
    args = ["embed", "--data", str(tagged[0]), "--model", str(tiny_bert_dir), "--shard-size", "3"]
    out = tmp_path / "store"
    monkeypatch.setenv(faults.FAIL_AFTER_SHARDS_ENV, "1")
    assert invoke(*args, "--out", str(out)).exit_code != 0
    monkeypatch.delenv(faults.FAIL_AFTER_SHARDS_ENV)
    refused = invoke(*args, "--out", str(out), "--word-pool", "mean")
    assert refused.exit_code == 2 and "word_pool: 'first' -> 'mean'" in refused.output
    assert invoke(*args, "--out", str(out)).exit_code == 0
    refused = invoke(*args, "--out", str(out), "--layers", "0")
    assert refused.exit_code == 2 and "layers: '-1' -> '0'" in refused.output


def test_options_the_word_path_does_not_read_are_refused(tiny_bert_dir, tagged, tmp_path):
    refused = invoke("embed", "--data", str(tagged[0]), "--out", str(tmp_path / "o"), "--pool", "mean",
                     "--layers", "last5")
    assert refused.exit_code == 2 and "--pool does not apply to tagged data" in refused.output
    assert "got 'last5'" in refused.output and not (tmp_path / "o").exists()


def test_task_tags_reads_a_column_file_with_another_name(tiny_bert_dir, tmp_path):
    data = write_conll(tmp_path / "train.tsv", SENTENCES)
    result = invoke("embed", "--data", str(data), "--task", "tags", "--out", str(tmp_path / "o"),
                    "--model", str(tiny_bert_dir))
    assert result.exit_code == 0, result.output
    assert word_store.open_word_store(tmp_path / "o").n_sentences == 4


def peak_bytes(model_dir: Path, tmp_path: Path, copies: int, tag: str) -> int:
    """Python/numpy peak (tracemalloc) of a word store written from `copies` x 4 sentences, 64 per chunk, 512 floats
    per word (both layers, first_last)."""
    from bertkit.data.tagged import TaggedColumns
    from bertkit.models import loading

    data = write_conll(tmp_path / f"{tag}.iob2", SENTENCES * copies)
    model = loading.load_encoder(str(model_dir)).eval()
    encoder = WordEncoder(model, loading.load_tokenizer(str(model_dir)), str(model_dir), "r", "fp32")
    tracemalloc.start()
    try:
        run_word_embed([("train", str(data))], TaggedColumns(), Reading.of_words("first_last"), word_pooling("1,2"),
                       encoder, tmp_path / f"out-{tag}", False, 64, 32, "cpu")
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_is_flat_in_the_number_of_sentences(tiny_bert_dir, tmp_path):
    # both stores' files are larger than the 1 MiB blocks files are hashed and copied in (a smaller file is read
    # whole: the peak would follow its size up to a block). Each size's peak is the lower of two runs, in the order
    # small, large, small, large: what else lands in a peak only adds to it (a process's first run allocates ~0.34 MB
    # that later runs reuse; measured 2.74 then 2.40 MB small, 2.60 and 2.59 MB large), so the lower one is the run's
    # own. One run each failed about one full suite in four under xdist (large - small 491,523 bytes, limit 334,234).
    peaks: dict[int, list[int]] = {128: [], 512: []}
    for attempt in range(2):
        for copies in peaks:
            peaks[copies].append(peak_bytes(tiny_bert_dir, tmp_path, copies, f"{copies}-{attempt}"))
    small, large = min(peaks[128]), min(peaks[512])  # 512 sentences, 2,176 words: 1.1 MB of vectors; then 4x
    added = sum(len(s) for s in SENTENCES) * (512 - 128) * 128 * 4  # the bytes of vectors the large store holds more
    assert large - small < added / 10, (small, large, added)


def test_the_recorded_precision_is_the_one_computed(tiny_bert_dir, tagged, tmp_path):
    """--precision bf16 on a CPU: the store says bf16 and its vectors are bf16's (autocast), not fp32's."""
    train, _ = tagged
    stores = {}
    for precision in ("fp32", "bf16"):
        out = tmp_path / precision
        result = run(EmbedConfig.of(data=str(train), out=str(out), model=str(tiny_bert_dir), precision=precision,
                                 device="cpu"), progress=False)
        assert result.words.precision == precision
        stores[precision] = np.asarray(word_store.open_word_store(out).vectors)
    assert not np.array_equal(stores["fp32"], stores["bf16"])
    np.testing.assert_allclose(stores["fp32"], stores["bf16"], atol=0.1)


def as_written_before_the_fold(record: dict) -> dict:
    """A word store's identity or manifest as bertkit wrote it before the word settings were `Reading` and
    `Pooling` (format /1: word_pool, max_length, stride; layers, combine)."""
    old = {k: v for k, v in record.items() if k not in ("long_text", "truncation", "pool", "normalize", "family",
                                                         "record_sha256")}
    if "pooling" in record:
        old["layers"] = {k: record["pooling"][k] for k in ("layers", "combine")}
        old["reading"] = {k: record["reading"][k] for k in ("word_pool", "max_length", "stride")}
        old["identity"] = as_written_before_the_fold(record["identity"])
        old["format"] = "bertkit-word-store/1"
        del old["pooling"]
    return old


def test_a_store_written_before_the_fold_reads_with_its_settings_and_its_identity_matches(tiny_bert_dir, tagged,
                                                                                          tmp_path):
    out = tmp_path / "store"
    assert invoke("embed", "--data", str(tagged[0]), "--model", str(tiny_bert_dir), "--word-pool", "mean",
                  "--layers", "-2,-1", "--combine", "sum", "--out", str(out)).exit_code == 0
    manifest_file = out / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    assert manifest["format"] == WORD_STORE_RECORD.format and manifest["pooling"]["pool"] == "word"
    older = as_written_before_the_fold(manifest)
    manifest_file.write_text(json.dumps(older))
    store = word_store.open_word_store(out)
    assert store.reading == Reading.of_words("mean") and store.pooling == word_pooling("-2,-1", "sum")
    assert word_store.identity_differences(older["identity"], manifest["identity"]) == []  # the same run: done
    assert word_store.identity_differences({**older["identity"], "word_pool": "first"}, manifest["identity"]) == [
        "word_pool: 'first' -> 'mean'"]
    manifest_file.write_text(json.dumps({**older, "layers": {"layers": "all", "combine": "concat"}}))
    # its `all` meant every encoder layer (1, 2 of the tiny model), as its n_layers says; now `all` is every state
    assert word_store.open_word_store(out).pooling == Pooling("word", (1, 2), "concat", False)
    all_before = {**older["identity"], "layers": "all", "combine": "concat"}
    assert word_store.identity_differences(all_before, {**manifest["identity"], **word_pooling("all").to_json()}) == [
        f"layers: {word_store.ALL_BEFORE!r} -> 'all'"]


def test_an_unfinished_store_written_before_the_fold_resumes(tiny_bert_dir, tagged, tmp_path, monkeypatch):
    args = ["embed", "--data", str(tagged[0]), "--model", str(tiny_bert_dir), "--shard-size", "3"]
    out, clean = tmp_path / "store", tmp_path / "clean"
    assert invoke(*args, "--out", str(clean)).exit_code == 0
    monkeypatch.setenv(faults.FAIL_AFTER_SHARDS_ENV, "2")
    assert invoke(*args, "--out", str(out)).exit_code != 0
    monkeypatch.delenv(faults.FAIL_AFTER_SHARDS_ENV)
    identity = json.loads((clean / "manifest.json").read_text())["identity"]
    (out / "identity.json").write_text(json.dumps(as_written_before_the_fold(identity)))
    writer = word_store.WordStoreWriter(out, identity, 12, 3, 32)
    assert writer.status() == "partial" and writer.pending_chunks() == [2, 3]
