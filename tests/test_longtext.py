"""Long documents: which tokens --truncation keeps, windows over whole texts (--long-text chunk), pooling, and the
bad inputs (a stride that never moves the window on)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.commands.embed import EmbedConfig
from bertkit.commands.evaluate import EvaluateConfig
from bertkit.commands.predict import PredictConfig
from bertkit.data.dataset import TextDataset
from bertkit.data.splits import load_dataset_split
from bertkit.encoding import longtext
from bertkit.encoding.encode import encode_dataset, encode_windows
from bertkit.encoding.reading import Reading
from bertkit.errors import UserError
from bertkit.models import infer

runner = CliRunner()
WORDS = ("good", "bad", "film", "movie", "plot", "actor", "scene", "boring", "great", "music", "story", "ending")


def long_text(n_words: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


@pytest.fixture(scope="module")
def tokenizer(tiny_bert_dir):
    from bertkit.models.loading import load_tokenizer

    return load_tokenizer(str(tiny_bert_dir))


@pytest.fixture(scope="module")
def classifier_dir(tiny_bert_dir, tmp_path_factory):
    """The tiny BERT with a (random) two-label head, saved like a fine-tuned folder."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    torch.manual_seed(1)
    config = BertConfig.from_pretrained(str(tiny_bert_dir), num_labels=2, id2label={0: "neg", 1: "pos"},
                                        label2id={"neg": 0, "pos": 1})
    folder = tmp_path_factory.mktemp("long-clf")
    BertForSequenceClassification(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(str(tiny_bert_dir)).save_pretrained(folder)
    return folder


def content_ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


# ---------------------------------------------------------------- which tokens a cut keeps


def test_kept_positions_head_tail_and_head_plus_tail():
    assert longtext.kept_positions(10, 4, "head") == [0, 1, 2, 3]
    assert longtext.kept_positions(10, 4, "tail") == [6, 7, 8, 9]
    assert longtext.kept_positions(3, 4, "tail") == [0, 1, 2]
    # Sun et al.: 510 = head 128 + tail 382
    kept = longtext.kept_positions(2000, 510, "head+tail")
    assert kept == list(range(128)) + list(range(2000 - 382, 2000))


@pytest.mark.parametrize("truncation", ["head", "tail", "head+tail"])
def test_encode_dataset_keeps_exactly_the_right_tokens(tokenizer, truncation):
    text = long_text(300, seed=3)
    content = content_ids(tokenizer, text)
    assert len(content) > 64
    enc = encode_dataset(tokenizer, TextDataset([text, "a short one"]), 64, truncation=truncation)
    budget = 64 - 2
    if truncation == "head":
        kept = content[:budget]
    elif truncation == "tail":
        kept = content[-budget:]
    else:
        head = round(budget * 128 / 510)
        kept = content[:head] + content[-(budget - head):]
    assert enc.input_ids[0].tolist() == [tokenizer.cls_token_id, *kept, tokenizer.sep_token_id]
    assert enc.input_ids[1].tolist() == tokenizer("a short one")["input_ids"]  # rows that fit are never touched
    assert enc.token_type_ids[0].tolist() == [0] * 64
    assert list(enc.lengths) == [64, len(enc.input_ids[1])] and enc.n_truncated == 1
    assert enc.full_lengths[0] == len(content) + 2


def test_head_is_the_tokenizers_own_truncation(tokenizer):
    texts = [long_text(200, seed=s) for s in range(3)] + ["short"]
    default = encode_dataset(tokenizer, TextDataset(texts), 48)
    own = tokenizer(texts, truncation=True, max_length=48)
    assert default.input_ids.tolist() == own["input_ids"] and default.token_type_ids.tolist() == own["token_type_ids"]
    pairs = [long_text(30 + 40 * s, seed=10 + s) for s in range(3)] + [long_text(100, seed=20)]
    default = encode_dataset(tokenizer, TextDataset(texts, pairs=pairs), 48)
    own = tokenizer(texts, pairs, truncation=True, max_length=48)
    assert default.input_ids.tolist() == own["input_ids"] and default.token_type_ids.tolist() == own["token_type_ids"]


@pytest.mark.parametrize("lengths", [(100, 5), (5, 100), (60, 50), (50, 60), (40, 40), (31, 30)])
def test_pair_budgets_match_the_tokenizers_longest_first(tokenizer, lengths):
    """truncate_row's head cut of a pair equals transformers' own (longest_first), so tail and head+tail of pairs
    share the budget the same way."""
    first, second = (" ".join(["film"] * n) for n in lengths)
    own = tokenizer(first, second, truncation=True, max_length=64)
    full = tokenizer([first], [second])
    ids, types = longtext.truncate_row(full["input_ids"][0], full["token_type_ids"][0], full.sequence_ids(0), 64,
                                       "head")
    assert ids == own["input_ids"] and types == own["token_type_ids"]


def test_tail_of_a_pair_keeps_both_texts_ends(tokenizer):
    first, second = long_text(120, seed=1), long_text(20, seed=2)
    enc = encode_dataset(tokenizer, TextDataset([first], pairs=[second]), 64, truncation="tail")
    a, b = content_ids(tokenizer, first), content_ids(tokenizer, second)
    keep_a, keep_b = longtext.pair_budgets(len(a), len(b), 64 - 3)
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    assert enc.input_ids[0].tolist() == [cls, *a[-keep_a:], sep, *b[-keep_b:], sep]
    assert enc.token_type_ids[0].tolist() == [0] * (keep_a + 2) + [1] * (keep_b + 1)


# ---------------------------------------------------------------- windows


@pytest.mark.parametrize(("n", "size", "stride"), [(10, 4, 1), (100, 30, 0), (2500, 62, 16), (62, 62, 10), (5, 62, 3)])
def test_window_spans_cover_every_token_with_the_stride(n, size, stride):
    spans = longtext.window_spans(n, size, stride)
    covered = np.zeros(n, dtype=int)
    for start, end in spans:
        assert 0 <= start < end <= n and end - start <= size
        covered[start:end] += 1
    assert covered.min() >= 1 and spans[0][0] == 0 and spans[-1][1] == n
    for (_, e0), (s1, _) in zip(spans[:-2], spans[1:-1], strict=True):
        assert e0 - s1 == stride  # neighbours (all but the last, aligned to the end) share exactly `stride`


def test_chunked_windows_of_2000_token_texts_cut_nothing(tokenizer):
    texts = [long_text(2100, seed=7), "a short review", long_text(900, seed=8)]
    windows = encode_windows(tokenizer, TextDataset(texts), max_length=64, stride=16)
    assert windows.encoded.n_truncated == 0 and windows.encoded.lengths.max() <= 64
    assert list(np.unique(windows.owner)) == [0, 1, 2] and np.all(np.diff(windows.owner) >= 0)
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    for row, text in enumerate(texts):
        content = content_ids(tokenizer, text)
        mine = [w.tolist() for w, o in zip(windows.encoded.input_ids, windows.owner, strict=True) if o == row]
        assert all(len(w) <= 64 and w[0] == cls and w[-1] == sep for w in mine)
        # the windows, overlaps removed, are the whole text: every token is in some window
        spans = longtext.window_spans(len(content), 62, 16)
        assert [w[1:-1] for w in mine] == [content[s:e] for s, e in spans]
        rebuilt = list(mine[0][1:-1])
        for (_, e_prev), (s, _), w in zip(spans[:-1], spans[1:], mine[1:], strict=True):
            rebuilt += w[1:-1][e_prev - s:]
        assert rebuilt == content
    assert len(content_ids(tokenizer, texts[0])) >= 2000


def test_pair_windows_keep_the_second_text_whole(tokenizer):
    first, second = long_text(400, seed=4), "is the film good ?"
    windows = encode_windows(tokenizer, TextDataset([first], pairs=[second]), max_length=64, stride=8)
    tail = content_ids(tokenizer, second) + [tokenizer.sep_token_id]
    assert len(windows.owner) > 1
    for ids, types in zip(windows.encoded.input_ids.tolist(), windows.encoded.token_type_ids.tolist(), strict=True):
        assert ids[-len(tail):] == tail and len(ids) <= 64 and types[-len(tail):] == [1] * len(tail)


def test_a_second_text_that_leaves_no_room_is_a_user_error(tokenizer):
    ds = TextDataset([long_text(200, seed=1)], pairs=[long_text(55, seed=2)], source="pairs.tsv")
    with pytest.raises(UserError) as err:
        encode_windows(tokenizer, ds, max_length=64, stride=8)
    assert "--stride" in str(err.value) and "pairs.tsv" in str(err.value)


def test_pooling_mean_for_features_max_for_logits():
    values = np.array([[1.0, 0.0], [3.0, -2.0], [5.0, 5.0], [0.0, 1.0]], dtype=np.float32)
    owner = np.array([0, 0, 1, 2])
    np.testing.assert_allclose(longtext.pool_windows(values, owner, 3, "mean"), [[2, -1], [5, 5], [0, 1]])
    np.testing.assert_allclose(longtext.pool_windows(values, owner, 3, "max"), [[3, 0], [5, 5], [0, 1]])
    stacked = np.arange(12, dtype=np.float32).reshape(3, 2, 2)  # a layer axis (embed --layers all) pools too
    np.testing.assert_allclose(longtext.pool_windows(stacked, np.array([0, 0, 1]), 2, "mean")[0], [[2, 3], [4, 5]])


# ---------------------------------------------------------------- predict / evaluate over windows


def window_logits_one_by_one(model, windows) -> np.ndarray:
    """The plain model's logits of every window, one forward call each (the reference the pooled logits must equal)."""
    import torch

    with torch.inference_mode():
        return np.vstack([model(input_ids=torch.tensor([ids]), token_type_ids=torch.tensor([types])).logits.numpy()
                          for ids, types in zip(windows.encoded.input_ids.tolist(), windows.encoded.token_type_ids.tolist(),
                                               strict=True)])


def test_chunked_logits_are_the_max_over_each_texts_windows(classifier_dir):
    from bertkit.models.compute import Compute
    from bertkit.models.infer import load_for_inference

    model, tokenizer, _ = load_for_inference(str(classifier_dir), Compute("cpu", "fp32"))
    texts = [long_text(2050, seed=11), "a good film", long_text(300, seed=12)]
    logits = infer.classifier_logits(model, tokenizer, TextDataset(texts), reading=Reading(64, "chunk", stride=16),
                               batch_size=8,
                                     precision="fp32", )
    windows = encode_windows(tokenizer, TextDataset(texts), 64, 16)
    assert len(windows.owner) > 40
    one_by_one = window_logits_one_by_one(model, windows)
    expected = np.stack([one_by_one[windows.owner == row].max(axis=0) for row in range(3)])
    np.testing.assert_allclose(logits, expected, atol=1e-4)
    cut = infer.classifier_logits(model, tokenizer, TextDataset(texts[1:2]), reading=Reading(64), batch_size=8,
                                  precision="fp32")
    np.testing.assert_allclose(logits[1], cut[0], atol=1e-5)  # a text that fits is read exactly as before


def test_predict_and_evaluate_cli_chunk_and_head_plus_tail(classifier_dir, tmp_path):
    rows = [(long_text(2000 + 50 * i, seed=i), "pos" if i % 2 else "neg") for i in range(4)]
    path = tmp_path / "long.tsv"
    path.write_text("text\tlabel\n" + "\n".join(f"{t}\t{y}" for t, y in rows) + "\n", encoding="utf-8")
    for extra in (["--long-text", "chunk", "--stride", "16"], ["--truncation", "head+tail"]):
        result = runner.invoke(app, ["predict", "--model", str(classifier_dir), "--data", str(path), "--max-length",
                                     "64", "--json", "--quiet", *extra])
        assert result.exit_code == 0, result.output
        predictions = json.loads(result.stdout)["predictions"]
        assert len(predictions) == 4 and all(abs(sum(p["probabilities"].values()) - 1) < 1e-5 for p in predictions)
        result = runner.invoke(app, ["evaluate", "--model", str(classifier_dir), "--data", str(path), "--max-length",
                                     "64", "--json", "--quiet", *extra])
        assert result.exit_code == 0, result.output
        shown = json.loads(result.stdout)
        assert shown["metrics"]["n"] == 4 and shown["long_text"] == ("chunk" if "chunk" in extra else "cut")


def test_a_stride_not_smaller_than_the_window_exits_2(classifier_dir):
    for stride in ("64", "62", "200"):
        result = runner.invoke(app, ["predict", "--model", str(classifier_dir), "--text", "a film", "--max-length",
                                     "64", "--long-text", "chunk", "--stride", stride])
        assert result.exit_code == 2, result.output
        assert "--stride" in result.output and "--max-length" in result.output and "Traceback" not in result.output


def test_long_text_options_are_checked_together():
    from bertkit.models.metadata import read_as_saved

    with pytest.raises(UserError, match="--long-text chunk"):
        EvaluateConfig.of(model="m", data="d.tsv", stride=8)  # a stride without chunking would be ignored
    with pytest.raises(UserError, match="--stride"):
        EmbedConfig.of(data="d.tsv", out="o", long_text="chunk", stride=126, max_length=128)
    # no --max-length: the window is the model's record (or 128), known once the command reads it
    unresolved = EmbedConfig.of(data="d.tsv", out="o", long_text="chunk", stride=126)
    with pytest.raises(UserError, match="--stride 126 must be smaller than the window: --max-length 128"):
        read_as_saved(unresolved)
    with pytest.raises(UserError, match="--truncation"):
        PredictConfig.of(model="m", data="d.tsv", truncation="middle")
    with pytest.raises(UserError, match="--probe"):
        PredictConfig.of(probe="p", text=("x",), long_text="chunk")
    assert PredictConfig.of(model="m", text=("x",), long_text="chunk", stride=0).reading.stride == 0


def test_tokens_report_suggests_chunking_when_many_rows_are_cut(tiny_bert_dir, tmp_path):
    from bertkit.commands import tokens as tokens_command

    path = tmp_path / "docs.tsv"
    path.write_text("text\n" + "\n".join(long_text(300, seed=s) for s in range(5)) + "\nshort\n", encoding="utf-8")
    from bertkit.commands.tokens import TokensConfig

    report = tokens_command.run(TokensConfig.of(model=str(tiny_bert_dir), data=str(path), max_length=64))
    assert any("--long-text chunk" in note and "5 of 6 rows" in note for note in report.notes)
    few = tmp_path / "few.tsv"
    few.write_text("text\n" + long_text(300, seed=1) + "\n" + "\n".join(["a short one"] * 30) + "\n", encoding="utf-8")
    report = tokens_command.run(TokensConfig.of(model=str(tiny_bert_dir), data=str(few), max_length=64))
    assert report.splits[0]["truncated"] == 1 and not any("--long-text" in note for note in report.notes)


def test_finetune_reads_head_plus_tail_of_2000_token_texts(tiny_bert_dir, tmp_path, monkeypatch):
    """finetune cuts its training and dev rows through encode_dataset with --truncation (whose exact cut the tests
    above check), trains on 2,000-token texts and records the choice in the run."""
    import torch

    from bertkit.commands.finetune import FinetuneConfig, run
    from bertkit.encoding import encode as encode_module

    torch.set_num_threads(1)
    rows = [(long_text(2000, seed=i) + (" great" if i % 2 else " awful"), "pos" if i % 2 else "neg") for i in range(8)]
    path = tmp_path / "long.tsv"
    path.write_text("text\tlabel\n" + "\n".join(f"{t}\t{y}" for t, y in rows) + "\n", encoding="utf-8")
    seen = []
    encode = encode_dataset
    monkeypatch.setattr(encode_module, "encode_dataset", lambda *a, **kw: seen.append(kw["truncation"]) or encode(*a, **kw))
    cfg = FinetuneConfig.of(model=str(tiny_bert_dir), data=str(path), dev=str(path), out=str(tmp_path / "run"),
                         epochs=1, batch_size=4, max_length=64, truncation="head+tail", save_every=None)
    result = run(cfg, progress=False)
    assert seen == ["head+tail", "head+tail"] and result.metrics["global_step"] == 2
    record = json.loads((tmp_path / "run" / "config.json").read_text())
    assert "head+tail" in json.dumps(record)


# ---------------------------------------------------------------- embed and probe over windows


def window_features_by_hand(encoder, tokenizer, windows) -> np.ndarray:
    """Mean-pooled last-layer features of every window, one unpadded window at a time in plain transformers."""
    import torch

    rows = []
    with torch.inference_mode():
        for ids, types in zip(windows.encoded.input_ids.tolist(), windows.encoded.token_type_ids.tolist(), strict=True):
            out = encoder(input_ids=torch.tensor([ids]), token_type_ids=torch.tensor([types]))
            rows.append(out.last_hidden_state[0].mean(dim=0).numpy())
    return np.stack(rows)


@pytest.fixture(scope="module")
def encoder(tiny_bert_dir):
    from bertkit.models.loading import load_encoder

    return load_encoder(str(tiny_bert_dir))


def test_chunked_embed_is_the_mean_of_each_texts_window_features(encoder, tokenizer):
    from bertkit.features.extract import extract_features

    texts = [long_text(2100, seed=21), "a short review", long_text(700, seed=22)]
    ds = TextDataset(texts)
    windows = encode_windows(tokenizer, ds, max_length=64, stride=16)
    assert len(content_ids(tokenizer, texts[0])) >= 2000 and windows.counts[0] > 30 and windows.counts[1] == 1
    by_hand = window_features_by_hand(encoder, tokenizer, windows)
    expected = np.stack([by_hand[windows.owner == row].mean(axis=0) for row in range(3)])
    chunked = extract_features(encoder, tokenizer, ds, pool="mean", reading=Reading(64, "chunk", stride=16),
                               batch_size=8,
                               )
    assert chunked.shape == (3, 32)
    np.testing.assert_allclose(chunked, expected, atol=1e-4)
    # --normalize: the mean of the windows' unit vectors, made a unit vector again
    unit = by_hand / np.linalg.norm(by_hand, axis=1, keepdims=True)
    mean_unit = np.stack([unit[windows.owner == row].mean(axis=0) for row in range(3)])
    normalized = extract_features(encoder, tokenizer, ds, pool="mean", reading=Reading(64, "chunk", stride=16),
                                  batch_size=8, normalize=True)
    np.testing.assert_allclose(np.linalg.norm(normalized, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(normalized, mean_unit / np.linalg.norm(mean_unit, axis=1, keepdims=True), atol=1e-4)


@pytest.mark.parametrize("truncation", ["tail", "head+tail"])
def test_embed_truncation_reads_the_tokens_it_keeps(encoder, tokenizer, truncation):
    import torch

    from bertkit.features.extract import extract_features

    ds = TextDataset([long_text(2000, seed=31), "a good film"])
    cut = encode_dataset(tokenizer, ds, 64, truncation=truncation)  # its exact cut is checked above
    with torch.inference_mode():
        expected = np.stack([encoder(input_ids=torch.tensor([ids]), token_type_ids=torch.tensor([types]))
                             .last_hidden_state[0, 0].numpy()
                             for ids, types in zip(cut.input_ids.tolist(), cut.token_type_ids.tolist(), strict=True)])
    features = extract_features(encoder, tokenizer, ds, reading=Reading(64, truncation=truncation), batch_size=8)
    np.testing.assert_allclose(features, expected, atol=1e-4)
    head = extract_features(encoder, tokenizer, ds, reading=Reading(64), batch_size=8)
    assert not np.allclose(features[0], head[0], atol=1e-3) and np.allclose(features[1], head[1], atol=1e-5)


def write_long_tsv(path, n: int = 8, words: int = 2000):
    rows = [(long_text(words, seed=100 + i) + (" great" if i % 2 else " awful"), "pos" if i % 2 else "neg")
            for i in range(n)]
    path.write_text("text\tlabel\n" + "\n".join(f"{t}\t{y}" for t, y in rows) + "\n", encoding="utf-8")
    return path


def test_embed_cli_chunk_and_truncation_are_part_of_the_stores_identity(tiny_bert_dir, encoder, tokenizer, tmp_path):
    from bertkit.features import store
    from bertkit.features.extract import extract_features

    path = write_long_tsv(tmp_path / "long.tsv", n=4)
    out = tmp_path / "store"
    base = ["embed", "--quiet", "--model", str(tiny_bert_dir), "--data", str(path), "--out", str(out),
            "--max-length", "64", "--precision", "fp32", "--shard-size", "3"]
    result = runner.invoke(app, [*base, "--long-text", "chunk", "--stride", "16", "--pool", "mean"])
    assert result.exit_code == 0, result.output
    chunked = store.open(out)
    m = chunked.manifest
    assert (m["long_text"], m["stride"], m["truncation"], m["n_truncated"]) == ("chunk", 16, "head", 0)
    assert m["windows"] > 4 * 30 and chunked.features.shape == (4, 32)  # one row per text, not per window
    assert f"as {m['windows']:,} windows" in result.output
    ds = load_dataset_split(EmbedConfig.of(data=str(path), out="x").inputs, str(path), need_labels=False)
    direct = extract_features(encoder, tokenizer, ds, pool="mean", reading=Reading(64, "chunk", stride=16),
                              )
    np.testing.assert_allclose(chunked.features, direct, atol=1e-5)

    out2 = tmp_path / "cut"
    base[base.index(str(out))] = str(out2)
    assert runner.invoke(app, [*base, "--truncation", "head+tail"]).exit_code == 0
    assert store.open(out2).manifest["identity"]["truncation"] == "head+tail"
    other = runner.invoke(app, [*base, "--truncation", "tail"])
    assert other.exit_code == 2 and "truncation: 'head+tail' -> 'tail'" in other.output and "--overwrite" in other.output
    again = runner.invoke(app, [*base, "--truncation", "tail", "--overwrite"])
    assert again.exit_code == 0, again.output
    tail = store.open(out2)
    assert tail.manifest["truncation"] == "tail"
    np.testing.assert_allclose(tail.features, extract_features(
        encoder, tokenizer, ds, reading=Reading(64, truncation="tail")), atol=1e-5)


def test_stores_made_before_long_text_settings_were_recorded_still_match_their_defaults():
    from bertkit.features.store import identity_mismatch

    new = {"model": "m", "truncation": "head", "long_text": "cut", "stride": None}
    assert identity_mismatch({"model": "m"}, new) == []
    assert identity_mismatch({"model": "m"}, {**new, "truncation": "tail"}) == ["truncation: 'head' -> 'tail'"]


def test_probe_reads_long_texts_as_asked_and_its_saved_probe_does_too(tiny_bert_dir, encoder, tokenizer, tmp_path):
    from bertkit.features.extract import extract_features
    from bertkit.probe import saved as probe_io

    train, dev = write_long_tsv(tmp_path / "train.tsv", n=8), write_long_tsv(tmp_path / "dev.tsv", n=4, words=1500)
    out = tmp_path / "probe"
    result = runner.invoke(app, ["probe", "--model", str(tiny_bert_dir), "--data", str(train), "--dev", str(dev),
                                 "--max-length", "64", "--long-text", "chunk", "--stride", "16", "--pool", "mean",
                                 "--layers", "-1", "--no-baselines", "--precision", "fp32", "--out", str(out), "--quiet", "--json"])
    assert result.exit_code == 0, result.output
    ds = load_dataset_split(EmbedConfig.of(data=str(dev), out="x").inputs, str(dev), need_labels=False)
    cached = np.load(out / "features" / "dev-mean-2.npy")
    direct = extract_features(encoder, tokenizer, ds, pool="mean", reading=Reading(64, "chunk", stride=16),
                              )
    np.testing.assert_allclose(cached[:, 0], direct, atol=1e-5)
    key = json.loads((out / "features" / "dev-mean-2.json").read_text())
    assert (key["long_text"], key["stride"], key["truncation"]) == ("chunk", 16, "head")
    saved = probe_io.load_probe(out / "probe")
    assert saved.meta["long_text"] == "chunk" and saved.meta["stride"] == 16
    ids, _ = probe_io.predict_with_probe(saved, ds)  # re-reads the texts in windows, as the probe was trained
    np.testing.assert_array_equal(ids, saved.predict(direct))

    tail = runner.invoke(app, ["probe", "--model", str(tiny_bert_dir), "--data", str(train), "--dev", str(dev),
                               "--max-length", "64", "--truncation", "tail", "--pool", "cls", "--layers", "-1",
                               "--no-baselines", "--precision", "fp32",
                               "--out", str(tmp_path / "tail"), "--quiet", "--json"])
    assert tail.exit_code == 0, tail.output
    np.testing.assert_allclose(np.load(tmp_path / "tail" / "features" / "dev-cls-2.npy")[:, 0],
                               extract_features(encoder, tokenizer, ds, reading=Reading(64, truncation="tail")),
                               atol=1e-5)


def test_probe_feature_cache_is_keyed_by_how_long_texts_are_read(tmp_path):
    from bertkit.probe.inputs import cached_features

    ds = TextDataset(["a", "b"], source="x.tsv")
    calls = []

    def compute():
        calls.append(1)
        return {"cls": np.full((2, 1, 3), len(calls), np.float32)}

    meta = {"model": "m", "revision": "r", "max_length": 64, "normalize": False, "dtype": "fp32"}
    first = cached_features(tmp_path, "train", ds, {**meta, "truncation": "head"}, ["cls"], [2], compute)
    same = cached_features(tmp_path, "train", ds, {**meta, "truncation": "head"}, ["cls"], [2], compute)
    other = cached_features(tmp_path, "train", ds, {**meta, "truncation": "tail"}, ["cls"], [2], compute)
    assert len(calls) == 2 and same["cls"][0, 0, 0] == first["cls"][0, 0, 0] == 1 and other["cls"][0, 0, 0] == 2


def test_probe_on_a_store_uses_its_long_text_settings_and_refuses_others(tiny_bert_dir, tmp_path):
    path = write_long_tsv(tmp_path / "long.tsv", n=8, words=300)
    out = tmp_path / "store"
    embedded = runner.invoke(app, ["embed", "--quiet", "--model", str(tiny_bert_dir), "--data", str(path), "--out",
                                   str(out), "--max-length", "64", "--truncation", "tail", "--label-column", "label"])
    assert embedded.exit_code == 0, embedded.output
    result = runner.invoke(app, ["probe", "--features", str(out), "--no-baselines", "--dev-fraction", "0.5",
                                 "--out", str(tmp_path / "p"), "--quiet"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "p" / "probe" / "probe.json").read_text())["truncation"] == "tail"
    clash = runner.invoke(app, ["probe", "--features", str(out), "--truncation", "head+tail", "--quiet"])
    assert clash.exit_code == 2 and "--truncation head+tail (the store: tail)" in clash.output


def test_a_regression_models_windows_are_averaged(tiny_bert_dir, tmp_path):
    """A number is not evidence for a class: a regression model's chunked prediction is the mean of its windows'."""
    from transformers import BertForSequenceClassification

    model = BertForSequenceClassification.from_pretrained(tiny_bert_dir, num_labels=1, problem_type="regression",
                                                          use_safetensors=True).eval()
    from bertkit.models.loading import load_tokenizer

    tokenizer = load_tokenizer(str(tiny_bert_dir))
    texts = [long_text(600, seed=21), "a good film"]
    scores = infer.classifier_logits(model, tokenizer, TextDataset(texts), reading=Reading(64, "chunk", stride=16),
                               batch_size=8,
                                     precision="fp32", )
    windows = encode_windows(tokenizer, TextDataset(texts), 64, 16)
    per_window = window_logits_one_by_one(model, windows)
    expected = np.stack([per_window[windows.owner == row].mean(axis=0) for row in range(2)])
    np.testing.assert_allclose(scores, expected, atol=1e-4)
