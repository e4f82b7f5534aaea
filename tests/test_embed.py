"""extract_features against plain transformers: [CLS], mean/max with padding, layer choice, order, bf16."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest
import torch

from bertkit.data.dataset import TextDataset
from bertkit.errors import UserError
from bertkit.features.extract import extract_features
from bertkit.features.settings import Pooling
from bertkit.models import loading, onnx, quantize
from bertkit.models.infer import auto_token_budget, plan_batches

TEXTS = [
    "a",
    "the movie was long , slow and in the end rather pointless for everyone involved in it",
    "great fun",
    "an honest , moving and beautifully acted story about growing up",
    "no",
    "it is what it is",
    "the plot makes no sense , but the songs are good and the cast seems to enjoy itself",
    "boring",
    "i laughed , i cried , i asked for my money back",
    "subtle",
    "one of the best films of the year , and one of the strangest",
    "meh .",
]


@pytest.fixture(scope="module")
def bert(tiny_bert_dir):
    return loading.load_encoder(str(tiny_bert_dir)), loading.load_tokenizer(str(tiny_bert_dir))


@pytest.fixture(scope="module")
def distilbert(tiny_distilbert_dir):
    return loading.load_encoder(str(tiny_distilbert_dir)), loading.load_tokenizer(str(tiny_distilbert_dir))


def reference_states(encoder, tokenizer, text: str, pair: str | None = None) -> tuple[torch.Tensor, ...]:
    """Hidden states of one unpadded row, from plain transformers."""
    enc = tokenizer(text, pair, return_tensors="pt")
    if "token_type_ids" not in inspect.signature(encoder.forward).parameters:
        enc.pop("token_type_ids", None)
    with torch.no_grad():
        out = encoder(**enc, output_hidden_states=True)
    return out.hidden_states


@pytest.mark.parametrize("which", ["bert", "distilbert"])
def test_cls_equals_plain_transformers_last_hidden_state(which, request):
    encoder, tokenizer = request.getfixturevalue(which)
    ds = TextDataset(TEXTS)
    got = extract_features(encoder, tokenizer, ds, batch_size=5)
    enc = tokenizer(TEXTS, padding=True, return_tensors="pt")
    if which == "distilbert":
        enc.pop("token_type_ids", None)
    with torch.no_grad():
        want = encoder(**enc).last_hidden_state[:, 0].numpy()
    assert got.shape == (len(TEXTS), 32) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_sentence_pairs_use_token_type_ids(bert):
    encoder, tokenizer = bert
    firsts, seconds = TEXTS[:6], TEXTS[6:]
    got = extract_features(encoder, tokenizer, TextDataset(firsts, pairs=seconds), batch_size=4)
    for i, (a, b) in enumerate(zip(firsts, seconds, strict=True)):
        want = reference_states(encoder, tokenizer, a, b)[-1][0, 0].numpy()
        np.testing.assert_allclose(got[i], want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("which", ["bert", "distilbert"])
def test_mean_and_max_ignore_padding(which, request):
    encoder, tokenizer = request.getfixturevalue(which)
    ds = TextDataset(TEXTS)
    # batch_size 12: one batch, so every short row carries a lot of padding
    mean = extract_features(encoder, tokenizer, ds, pool="mean", batch_size=12)
    maxed = extract_features(encoder, tokenizer, ds, pool="max", batch_size=12)
    for i, text in enumerate(TEXTS):
        states = reference_states(encoder, tokenizer, text)[-1][0]  # unpadded (seq, dim)
        np.testing.assert_allclose(mean[i], states.mean(0).numpy(), atol=1e-5, rtol=0)
        np.testing.assert_allclose(maxed[i], states.max(0).values.numpy(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("which", ["bert", "distilbert"])
def test_layers_all_matches_output_hidden_states(which, request):
    encoder, tokenizer = request.getfixturevalue(which)
    got = extract_features(encoder, tokenizer, TextDataset(TEXTS), layers="all", batch_size=3)
    assert got.shape == (len(TEXTS), 3, 32)  # embeddings + 2 layers
    for i, text in enumerate(TEXTS):
        states = reference_states(encoder, tokenizer, text)
        want = np.stack([h[0, 0].numpy() for h in states])
        np.testing.assert_allclose(got[i], want, atol=1e-5, rtol=0)


def test_layer_lists_concat_mean_sum(bert):
    encoder, tokenizer = bert
    ds = TextDataset(TEXTS)
    every = extract_features(encoder, tokenizer, ds, layers="all", batch_size=4)
    concat = extract_features(encoder, tokenizer, ds, layers="-2,-1", batch_size=4)
    np.testing.assert_allclose(concat, np.concatenate([every[:, 1], every[:, 2]], axis=1), atol=1e-6)
    mean = extract_features(encoder, tokenizer, ds, layers="-2,-1", combine="mean", batch_size=4)
    np.testing.assert_allclose(mean, every[:, 1:].mean(axis=1), atol=1e-6)
    total = extract_features(encoder, tokenizer, ds, layers="0,2", combine="sum", batch_size=4)
    np.testing.assert_allclose(total, every[:, 0] + every[:, 2], atol=1e-5)
    all_mean = extract_features(encoder, tokenizer, ds, layers="all", combine="mean", batch_size=4)
    assert all_mean.shape == (len(TEXTS), 32)


def test_order_is_preserved_under_length_sorting(bert):
    encoder, tokenizer = bert
    one_by_one = np.stack([extract_features(encoder, tokenizer, TextDataset([t]), batch_size=1)[0] for t in TEXTS])
    batched = extract_features(encoder, tokenizer, TextDataset(TEXTS), batch_size=4)
    auto = extract_features(encoder, tokenizer, TextDataset(TEXTS), batch_size="auto")
    np.testing.assert_allclose(batched, one_by_one, atol=1e-5)
    np.testing.assert_allclose(auto, one_by_one, atol=1e-5)
    perm = np.random.default_rng(0).permutation(len(TEXTS))
    shuffled = extract_features(encoder, tokenizer, TextDataset([TEXTS[i] for i in perm]), batch_size=4)
    np.testing.assert_allclose(shuffled, one_by_one[perm], atol=1e-5)


def test_normalize_gives_unit_vectors(bert):
    encoder, tokenizer = bert
    flat = extract_features(encoder, tokenizer, TextDataset(TEXTS), pool="mean", normalize=True)
    np.testing.assert_allclose(np.linalg.norm(flat, axis=-1), 1.0, atol=1e-5)
    stacked = extract_features(encoder, tokenizer, TextDataset(TEXTS), layers="all", normalize=True)
    np.testing.assert_allclose(np.linalg.norm(stacked, axis=-1), 1.0, atol=1e-5)


def test_bf16_close_to_fp32(bert):
    encoder, tokenizer = bert
    ds = TextDataset(TEXTS[:4])  # bf16 is emulated (slow) on CPUs without AVX512-BF16: keep it tiny
    fp32 = extract_features(encoder, tokenizer, ds, pool="mean", batch_size=4)
    bf16 = extract_features(encoder, tokenizer, ds, pool="mean", batch_size=4, dtype=torch.bfloat16)
    assert bf16.dtype == np.float32
    cosine = (fp32 * bf16).sum(1) / (np.linalg.norm(fp32, axis=1) * np.linalg.norm(bf16, axis=1))
    assert cosine.min() >= 0.99
    assert not np.array_equal(fp32, bf16)  # autocast really ran in bf16


def test_bad_layer_index_is_a_user_error(bert):
    encoder, tokenizer = bert
    with pytest.raises(UserError, match="out of range"):
        extract_features(encoder, tokenizer, TextDataset(TEXTS[:2]), layers="-4")
    with pytest.raises(UserError, match="--layers"):
        extract_features(encoder, tokenizer, TextDataset(TEXTS[:2]), layers="last")
    with pytest.raises(UserError, match="--pool"):
        extract_features(encoder, tokenizer, TextDataset(TEXTS[:2]), pool="first")


def test_feature_spec_shapes():
    assert Pooling.from_options("cls", "-1", "concat", False).row_shape(6, 384) == (384,)
    assert Pooling.from_options("cls", "-4,-3,-2,-1", "concat", False).row_shape(6, 384) == (4 * 384,)
    assert Pooling.from_options("cls", "-4,-3,-2,-1", "mean", False).row_shape(6, 384) == (384,)
    assert Pooling.from_options("cls", "all", "concat", False).row_shape(6, 384) == (7, 384)
    assert Pooling.from_options("cls", "all", "concat", False).layer_names(2) == ["embeddings", "layer 1", "layer 2"]
    assert Pooling.from_options("cls", "0,-1", "concat", False).resolve(6) == [0, 6]
    last4 = Pooling.from_options("cls", "last4", "concat", False)  # a name for -4,-3,-2,-1, recorded as the list
    assert last4 == Pooling.from_options("cls", "-4,-3,-2,-1", "concat", False) and last4.to_json()["layers"] == "-4,-3,-2,-1"


@pytest.mark.parametrize("pooling", [
    Pooling(), Pooling("mean", (-4, -3, -2, -1), "mean", True), Pooling("max", None, "concat", False),
    Pooling("cls", (0, 6), "sum", True), Pooling.from_options("mean", "all", "mean", False),
    Pooling("word", (-4, -3, -2, -1), "sum", False), Pooling.from_options("word", "last4", "concat", False),
    Pooling("word", None, "mean", False), Pooling("word", (1, 2, 3, 4, 5, 6), "sum", False)])
def test_pooling_reads_back_what_it_records(pooling):
    assert Pooling.from_json(pooling.to_json()) == pooling
    assert Pooling.from_json(json.loads(json.dumps(pooling.to_json()))) == pooling  # through the file, too


def test_pooling_records_the_keys_and_values_artifacts_always_had():
    record = Pooling.from_options("mean", "-4,-3,-2,-1", "concat", True).to_json()
    assert record == {"pool": "mean", "layers": "-4,-3,-2,-1", "combine": "concat", "normalize": True}
    assert list(record) == list(Pooling.KEYS)
    assert onnx.FEATURE_OPTIONS == Pooling.KEYS  # models/ sits below features/: the export record names them itself
    assert Pooling.from_options("cls", "all", "concat", False).to_json()["layers"] == "all"
    # a record from before a key existed reads it as the default
    assert Pooling.from_json({"pool": "max", "layers": "-1"}) == Pooling("max", (-1,), "concat", False)


def test_a_store_recorded_with_layers_as_typed_still_resumes():
    from bertkit.features.identity import IDENTITY_DEFAULTS, identity_mismatch

    new = {"model": "m", **IDENTITY_DEFAULTS, **Pooling.from_options("cls", "-2,-1", "concat", False).to_json()}
    assert identity_mismatch({**new, "layers": "-2, -1"}, new) == []  # stores written before Pooling.to_json
    assert identity_mismatch({**new, "layers": "-3,-1"}, new) == ["layers: '-3,-1' -> '-2,-1'"]


def test_auto_budget_scales_with_model_size():
    from transformers import BertConfig, BertModel, DistilBertConfig, DistilBertModel

    small = BertModel(BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=1536,
                                 vocab_size=100))
    big = BertModel(BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=3072,
                               vocab_size=100))
    distil = DistilBertModel(DistilBertConfig(dim=32, n_layers=1, n_heads=2, hidden_dim=3072, vocab_size=100))
    cpu = torch.device("cpu")
    assert auto_token_budget(small, cpu) == (4096, 256)
    assert auto_token_budget(big, cpu) == (2048, 256)
    assert auto_token_budget(distil, cpu) == (2048, 256)
    lengths = np.array([5, 100, 7, 60, 3] * 20)
    batches = plan_batches(lengths, None, (400, 256))
    assert sorted(np.concatenate(batches).tolist()) == list(range(100))  # every row exactly once
    assert all(len(b) * lengths[b].max() <= 400 for b in batches)


@pytest.mark.parametrize("which", ["bert", "distilbert"])
@pytest.mark.parametrize("pool,layers", [("cls", "-1"), ("cls", "0"), ("cls", "1"), ("cls", "0,1"), ("mean", "1"),
                                         ("cls", "all"), ("max", "-2,-1")])
def test_pruned_forward_equals_full_model(which, pool, layers, request, monkeypatch):
    """Skipping unused top layers and the [CLS]-only top layer give what the full model gives."""
    import bertkit.features.pooling as pooling_module

    encoder, tokenizer = request.getfixturevalue(which)
    ds = TextDataset(TEXTS)
    fast = extract_features(encoder, tokenizer, ds, pool=pool, layers=layers, batch_size=5)
    monkeypatch.setattr(pooling_module, "PRUNE_LAYERS", False)
    full = extract_features(encoder, tokenizer, ds, pool=pool, layers=layers, batch_size=5)
    np.testing.assert_allclose(fast, full, atol=1e-5, rtol=0)
    assert len(encoder.encoder.layer if which == "bert" else encoder.transformer.layer) == 2  # restored


@pytest.fixture(scope="module")
def megatron(bert):
    """A tiny MegatronBERT: BERT-like attribute names, but its encoder ends in a LayerNorm of its own."""
    from transformers import MegatronBertConfig, MegatronBertModel

    _, tokenizer = bert
    torch.manual_seed(0)
    config = MegatronBertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=3,
                                num_attention_heads=4, intermediate_size=64, max_position_embeddings=128)
    return MegatronBertModel(config).eval(), tokenizer


@pytest.mark.parametrize("pool", ["cls", "mean", "max"])
@pytest.mark.parametrize("layers", ["-1", "1,-1", "0,2", "all"])
def test_megatron_features_are_its_own_hidden_states_pooled(megatron, pool, layers):
    """Not allowlisted: no pruning and no [CLS]-only layer, so every layer equals the model's own hidden state."""
    from bertkit.models import fastforward

    encoder, tokenizer = megatron
    assert "MegatronBertModel" in fastforward.unsupported_reason(encoder)
    got = extract_features(encoder, tokenizer, TextDataset(TEXTS), pool=pool, layers=layers, batch_size=5)
    indices = [0, 1, 2, 3] if layers == "all" else [int(x) % 4 for x in layers.split(",")]
    pools = {"cls": lambda h: h[0], "mean": lambda h: h.mean(0), "max": lambda h: h.max(0).values}
    for row, text in enumerate(TEXTS):
        states = reference_states(encoder, tokenizer, text)
        want = np.stack([pools[pool](states[i][0]).numpy() for i in indices])
        np.testing.assert_allclose(got[row].reshape(want.shape), want, atol=1e-5, rtol=0)
    assert len(encoder.encoder.layer) == 3


def test_pruned_path_that_disagrees_falls_back_to_the_full_model(bert, monkeypatch, caplog):
    """The first batch compares the pruned features with the full model's; a difference is logged and the
    full model's features are returned."""
    from transformers import BertModel

    from bertkit.models import fastforward

    trained, tokenizer = bert
    encoder = BertModel(trained.config).eval()  # a fresh encoder: not yet checked
    encoder.load_state_dict(trained.state_dict())
    ds = TextDataset(TEXTS)
    full = extract_features(encoder, tokenizer, ds, pool="cls", layers="0,-1", batch_size=5)  # checked, agrees
    real = fastforward.cls_output
    monkeypatch.setattr(fastforward, "cls_output", lambda *args, **kw: real(*args, **kw) + 0.5)
    with caplog.at_level("WARNING", logger="bertkit.models.fastforward"):
        got = extract_features(encoder, tokenizer, ds, pool="cls", layers="-1", batch_size=5)
    assert "embed's pruned layers" in caplog.text and "model's own forward" in caplog.text
    np.testing.assert_allclose(got, full[:, 32:], atol=1e-5, rtol=0)


@pytest.mark.parametrize("which", ["bert", "distilbert"])
@pytest.mark.parametrize("pool,layers", [("cls", "-1"), ("mean", "-1"), ("cls", "0,1")])
def test_int8_features_are_close_to_fp32_and_keep_the_pruned_path(which, pool, layers, request, monkeypatch, caplog):
    import bertkit.features.pooling as pooling_module

    encoder, tokenizer = request.getfixturevalue(which)
    quantized = quantize.quantized_int8(encoder)
    ds = TextDataset(TEXTS)
    fp32 = extract_features(encoder, tokenizer, ds, pool=pool, layers=layers, batch_size=5)
    with caplog.at_level("WARNING", logger="bertkit.models.fastforward"):
        int8 = extract_features(quantized, tokenizer, ds, pool=pool, layers=layers, batch_size=5)
    assert not caplog.text  # the pruned/[CLS]-only path agreed with the int8 model's own forward
    assert int8.dtype == np.float32 and not np.array_equal(int8, fp32)  # the int8 layers really ran
    # measured on these tiny models: largest difference 1.05e-3 (features up to 2.4), cosine > 0.99999
    np.testing.assert_allclose(int8, fp32, atol=5e-3, rtol=0)
    monkeypatch.setattr(pooling_module, "PRUNE_LAYERS", False)
    full = extract_features(quantized, tokenizer, ds, pool=pool, layers=layers, batch_size=5)
    np.testing.assert_allclose(int8, full, atol=5e-3, rtol=0)
    assert not quantize.is_int8(encoder)  # the fp32 encoder was copied, not converted


@pytest.mark.slow
def test_int8_minilm_features_stay_close_to_fp32(minilm_dir, demo_dir, caplog):
    """The real encoder: int8 [CLS] features vs fp32 on the demo dev set (measured: mean cosine 0.973, min 0.948;
    MiniLM-L6 on SST-2 dev: 0.970), and the [CLS]-only top layer's check passes on real weights."""
    from bertkit.data.options import DataOptions
    from bertkit.data.splits import load_dataset_split

    encoder, tokenizer = loading.load_encoder(str(minilm_dir)), loading.load_tokenizer(str(minilm_dir))
    ds = load_dataset_split(DataOptions(), str(demo_dir / "dev.tsv"))
    fp32 = extract_features(encoder, tokenizer, ds, pool="cls", batch_size=32)
    with caplog.at_level("WARNING", logger="bertkit.models.fastforward"):
        int8 = extract_features(quantize.quantized_int8(encoder), tokenizer, ds, pool="cls", batch_size=32)
    assert not caplog.text
    cosine = (fp32 * int8).sum(1) / (np.linalg.norm(fp32, axis=1) * np.linalg.norm(int8, axis=1))
    assert cosine.mean() >= 0.95 and cosine.min() >= 0.9


@pytest.mark.parametrize("device, expected", [
    ("cuda", [("start", 0), ("start", 1), ("finish", 0), ("start", 2), ("finish", 1), ("finish", 2)]),
    ("cpu", [("start", 0), ("finish", 0), ("start", 1), ("finish", 1), ("start", 2), ("finish", 2)]),
])
def test_encode_shards_queues_the_next_shard_before_waiting_on_a_gpu(monkeypatch, device, expected):
    """On a GPU, shard k's batches are queued before shard k-1's outputs are waited for (the device does not idle
    between shards); on a CPU each shard is finished as it is started. Every shard is written once, in order."""
    from bertkit.encoding.reading import Reading
    from bertkit.features import extract

    events, written = [], []

    def start(encoder, tokenizer, part, spec, **kwargs):
        k = sum(1 for e in events if e[0] == "start")
        events.append(("start", k))

        def finish():
            events.append(("finish", k))
            rows = len(part.texts)
            return np.full((rows, 2), k, np.float32), extract.EncodeStats(rows, 0, 0, 0, 0.0, rows)

        return finish

    class Writer:
        ranges = [(0, 2), (2, 4), (4, 5)]

        def write_shard(self, k, features, meta):
            written.append((k, features[:, 0].tolist()))

    monkeypatch.setattr(extract, "start_features", start)
    monkeypatch.setattr(extract.encode, "encode_for", lambda *args, **kwargs: None)
    extract.encode_shards(Writer(), TextDataset(texts=list("abcde")), [0, 1, 2], None, None, Pooling(),
                          reading=Reading(8), batch_size=None, device=torch.device(device),
                          dtype=torch.float32)
    assert events == expected
    assert written == [(0, [0.0, 0.0]), (1, [1.0, 1.0]), (2, [2.0])]
