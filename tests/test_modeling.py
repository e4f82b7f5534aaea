"""loading.py: local BERT/DistilBERT folders, safetensors-only loading, dtype/device choice, offline errors."""

from __future__ import annotations

import shutil

import pytest
import torch

from bertkit.errors import UserError
from bertkit.models import loading
from bertkit.models.compute import Compute


@pytest.mark.parametrize("fixture", ["tiny_bert_dir", "tiny_distilbert_dir"])
def test_local_folder_loads_encoder_tokenizer_classifier(request, fixture):
    path = str(request.getfixturevalue(fixture))
    tok = loading.load_tokenizer(path)
    assert tok.is_fast and tok.cls_token == "[CLS]"
    enc = loading.load_encoder(path)
    assert not enc.training
    clf = loading.load_classifier(path, id2label={0: "neg", 1: "pos"})
    assert clf.config.id2label == {0: "neg", 1: "pos"} and clf.config.label2id == {"neg": 0, "pos": 1}
    assert clf.num_labels == 2


def test_bert_checkpoint_gives_bert_for_sequence_classification(tiny_bert_dir):
    clf = loading.load_classifier(str(tiny_bert_dir), id2label={0: "a", 1: "b", 2: "c"})
    assert type(clf).__name__ == "BertForSequenceClassification" and clf.num_labels == 3


def test_random_init_keeps_architecture(tiny_bert_dir):
    trained = loading.load_encoder(str(tiny_bert_dir))
    fresh = loading.load_encoder(str(tiny_bert_dir), random_init=True)
    assert loading.parameter_count(trained) == loading.parameter_count(fresh)
    assert not torch.equal(trained.embeddings.word_embeddings.weight, fresh.embeddings.word_embeddings.weight)


def test_offline_name_resolves_to_packaged_folder():
    path = loading.resolve_model_name("minilm-offline")
    assert path.endswith("model") and (loading.offline_model_dir() / "model.safetensors").exists()


def test_unknown_hub_name_gives_offline_hint():
    with pytest.raises(UserError) as err:
        loading.load_tokenizer("no-such-org/no-such-model-bertkit")
    assert "local model folder" in str(err.value) and "bertkit[offline]" in str(err.value)


@pytest.mark.parametrize("offline", [True, False])
def test_a_mistyped_hub_name_is_one_message_without_retries(offline, monkeypatch):
    """Not a folder, not in the hub cache: with offline mode set the hub is not asked; without it one short connection
    attempt (here to a closed local port) stands for transformers' half a minute of retries. Either way one message
    naming why, the closest known name and the offline way out - before torch or transformers load anything."""
    from bertkit.models import folders

    if not offline:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
        folders.endpoint_reachable.cache_clear()
    with pytest.raises(UserError) as err:
        folders.resolve_model_name("bert-base-uncasd")
    message = str(err.value)
    assert "not a local folder, not in the hub cache" in message and "Did you mean bert-base-uncased?" in message
    assert ("offline mode is set (HF_HUB_OFFLINE=1)" if offline else "http://127.0.0.1:9 cannot be reached") in message
    assert "minilm-offline" in message
    folders.endpoint_reachable.cache_clear()


def test_missing_folder_and_folder_without_config(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        loading.resolve_model_name(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no config.json"):
        loading.resolve_model_name(str(tmp_path / "empty"))


def test_folder_without_weights(tiny_bert_dir, tmp_path):
    target = tmp_path / "noweights"
    shutil.copytree(tiny_bert_dir, target)
    (target / "model.safetensors").unlink()
    with pytest.raises(UserError, match="no weights"):
        loading.load_encoder(str(target))


def test_pickle_only_checkpoint_is_refused_not_unpickled(tiny_bert_dir, tmp_path):
    target = tmp_path / "pickled"
    shutil.copytree(tiny_bert_dir, target)
    (target / "model.safetensors").unlink()
    # A file that would execute code if unpickled: loading must refuse before reading it.
    (target / "pytorch_model.bin").write_bytes(b"\x80\x04cbuiltins\nexec\n")
    with pytest.raises(UserError, match="pickle weights.*safetensors only"):
        loading.load_classifier(str(target), id2label={0: "a", 1: "b"})


def test_max_length_over_model_limit(tiny_bert_dir):
    tok, cfg = loading.load_tokenizer(str(tiny_bert_dir)), loading.load_config(str(tiny_bert_dir))
    assert loading.model_max_length(tok, cfg) == 128
    loading.check_max_length(128, tok, cfg, "tiny")
    with pytest.raises(UserError, match="--max-length 512 is more than.*128"):
        loading.check_max_length(512, tok, cfg, "tiny")


def test_max_length_must_hold_the_special_tokens_and_a_token_of_each_text(tiny_bert_dir):
    tok, cfg = loading.load_tokenizer(str(tiny_bert_dir)), loading.load_config(str(tiny_bert_dir))
    assert loading.min_max_length(tok) == 3 and loading.min_max_length(tok, pair=True) == 5
    loading.check_max_length(3, tok, cfg, "tiny")
    loading.check_max_length(5, tok, cfg, "tiny", pair=True)
    for too_small in (1, 2):
        with pytest.raises(UserError, match=rf"--max-length {too_small} cannot hold a text: .* adds 2 special tokens.*"
                                            r"smallest valid value is 3; pass --max-length 3 or more"):
            loading.check_max_length(too_small, tok, cfg, "tiny")
    with pytest.raises(UserError, match=r"--max-length 4 cannot hold a sentence pair: .* adds 3 special tokens"):
        loading.check_max_length(4, tok, cfg, "tiny", pair=True)


def test_dtype_choice(monkeypatch):
    cpu = torch.device("cpu")
    assert loading.choose_dtype("fp32", cpu) == torch.float32
    assert loading.choose_dtype("bf16", cpu) == torch.bfloat16
    with pytest.raises(UserError, match="fp16 is a GPU precision"):
        loading.choose_dtype("fp16", cpu)
    with pytest.raises(UserError, match="Unknown dtype"):
        loading.choose_dtype("int4", cpu)
    loading.cpu_supports_bf16.cache_clear()
    monkeypatch.setenv("BERTKIT_ASSUME_BF16", "1")
    assert loading.choose_dtype("auto", cpu) == torch.bfloat16
    loading.cpu_supports_bf16.cache_clear()
    monkeypatch.setenv("BERTKIT_ASSUME_BF16", "0")
    assert loading.choose_dtype("auto", cpu) == torch.float32
    loading.cpu_supports_bf16.cache_clear()


def test_device_choice_and_autocast():
    assert loading.choose_device("cpu").type == "cpu"
    assert loading.choose_device().type in {"cpu", "cuda", "mps"}
    with loading.autocast(torch.device("cpu"), torch.bfloat16):
        out = torch.nn.Linear(4, 4)(torch.ones(1, 4))
    assert out.dtype == torch.bfloat16


def test_bertkit_device_is_what_auto_means_and_an_explicit_device_still_wins(monkeypatch):
    """On a GPU machine BERTKIT_DEVICE=cpu keeps every `auto` choice on the CPU (the fast suite relies on it)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU machine
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.delenv("BERTKIT_DEVICE", raising=False)
    assert loading.choose_device().type == "cuda" and loading.inference_device(None, "fp32").type == "cuda"
    monkeypatch.setenv("BERTKIT_DEVICE", "cpu")
    assert loading.choose_device().type == "cpu" and loading.choose_device("auto").type == "cpu"
    assert loading.inference_device(None, "fp32").type == "cpu"
    assert loading.choose_device("cuda").type == "cuda"  # --device cuda is explicit
    monkeypatch.setenv("BERTKIT_DEVICE", "gpu")
    with pytest.raises(UserError, match=r"BERTKIT_DEVICE=gpu names no usable device.*Or unset BERTKIT_DEVICE"):
        loading.choose_device()


def test_model_revision_is_stable(tiny_bert_dir):
    assert loading.model_revision(str(tiny_bert_dir)) == loading.model_revision(str(tiny_bert_dir))
    assert loading.model_revision(str(tiny_bert_dir)).startswith("local-sha256:")


# ---------------------------------------------------------------- int8


def test_int8_computes_in_fp32_on_the_cpu_and_is_refused_on_a_gpu():
    cpu = torch.device("cpu")
    assert loading.choose_dtype("int8", cpu) == torch.float32
    assert Compute.resolve("cpu", "int8") == Compute("cpu", "int8")
    for gpu in ("cuda", "cuda:1", "mps"):
        with pytest.raises(UserError, match=r"int8 is a CPU precision here.*auto, fp32, bf16 and fp16.*"
                                            r"--precision bf16 \(or fp16\).*--device cpu"):
            loading.choose_dtype("int8", torch.device(gpu))


def test_int8_with_device_auto_runs_on_the_cpu(monkeypatch):
    monkeypatch.setattr(loading, "choose_device", lambda requested=None: torch.device("cuda"))  # a GPU machine
    assert loading.inference_device("auto", "int8").type == "cpu"
    assert loading.inference_device(None, "int8").type == "cpu"
    assert loading.inference_device("auto", "fp32").type == "cuda"  # other precisions: unchanged


@pytest.mark.parametrize("bf16", ["0", "1"])
def test_auto_resolves_as_before(monkeypatch, bf16):
    loading.cpu_supports_bf16.cache_clear()
    monkeypatch.setenv("BERTKIT_ASSUME_BF16", bf16)
    try:
        assert Compute.resolve("cpu", "auto").precision == ("bf16" if bf16 == "1" else "fp32")
    finally:
        loading.cpu_supports_bf16.cache_clear()
