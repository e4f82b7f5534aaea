"""Tagged data the code has never seen, through `bertkit probe` end to end (issue 45), each file written here: a
CoNLL-2003-like IOB1 file (four space-separated columns, -DOCSTART- lines, entities opening with I-, B- only
between neighbours of one type) and a WNUT-17-like IOB2 file (TAB-separated, types with hyphens, a #hashtag word),
both found by their content; a hub dataset with a list-of-ClassLabel tag feature (`--data NAME --dev validation`,
the hub replaced by splits built in memory), and parquet files. The table prints entity F1 rows, the scheme
recorded is IOB2 (read from IOB1), and the best row's entity F1 equals seqeval's on the saved probe's predictions
against gold tags written out by hand."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest
from datasets import ClassLabel, Dataset, Features, Value
from datasets import Sequence as HubSequence
from seqeval.metrics import f1_score
from seqeval.scheme import IOB2
from typer.testing import CliRunner

from bertkit import recipes
from bertkit.cli.app import app
from bertkit.commands.probe import ProbeConfig
from bertkit.data.tagged import is_tagged_file

runner = CliRunner()

CONLL_TRAIN = """-DOCSTART- -X- -X- O

EU NNP I-NP I-ORG
rejects VBZ I-VP O
German JJ I-NP I-MISC
call NN I-NP O
to TO I-VP O
boycott VB I-VP O
British JJ I-NP I-MISC
lamb NN I-NP O
. . O O

Peter NNP I-NP I-PER
Blackburn NNP I-NP I-PER

BRUSSELS NNP I-NP I-LOC
1996-08-22 CD I-NP O

Anna NNP I-NP I-PER
Paula NNP I-NP B-PER
met VBD I-VP O
Peter NNP I-NP I-PER
in IN I-PP O
BRUSSELS NNP I-NP I-LOC
. . O O
"""
CONLL_DEV = """-DOCSTART- -X- -X- O

Peter NNP I-NP I-PER
Blackburn NNP I-NP I-PER
met VBD I-VP O
Anna NNP I-NP I-PER
Paula NNP I-NP B-PER
in IN I-PP O
BRUSSELS NNP I-NP I-LOC
. . O O

EU NNP I-NP I-ORG
rejects VBZ I-VP O
British JJ I-NP I-MISC
lamb NN I-NP O
"""
CONLL_DEV_IOB2 = [["B-PER", "I-PER", "O", "B-PER", "B-PER", "O", "B-LOC", "O"], ["B-ORG", "O", "B-MISC", "O"]]
"""The dev file's tags as IOB2, written out by hand (Anna and Paula: two entities)."""

WNUT_TRAIN = [
    [("@paulwalk", "O"), ("It", "O"), ("'s", "O"), ("the", "O"), ("view", "O"), ("from", "O"), ("the", "O"),
     ("Empire", "B-location"), ("State", "I-location"), ("Building", "I-location"), ("=", "O"), ("ESB", "B-location")],
    [("#Toronto", "B-location"), ("fans", "O"), ("love", "O"), ("Game", "B-creative-work"),
     ("of", "I-creative-work"), ("Thrones", "I-creative-work")],
    [("Apple", "B-corporation"), ("sells", "O"), ("iPhones", "B-product"), ("to", "O"), ("Anna", "B-person")],
]
WNUT_DEV = [
    [("Anna", "B-person"), ("watched", "O"), ("Game", "B-creative-work"), ("of", "I-creative-work"),
     ("Thrones", "I-creative-work"), ("in", "O"), ("#Toronto", "B-location")],
    [("Apple", "B-corporation"), ("fans", "O"), ("love", "O"), ("ESB", "B-location")],
]


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def write_tab(path: Path, sentences) -> Path:
    return write(path, "\n\n".join("\n".join(f"{w}\t{t}" for w, t in s) for s in sentences) + "\n")


def probe_and_predict(train: Path, dev: Path, model: Path, out: Path) -> tuple[dict, list[list[str]], str]:
    """(metrics.json, the saved best probe's tags for the dev words, the table as printed)."""
    result = invoke("probe", "--data", str(train), "--dev", str(dev), "--model", str(model), "--layers", "0,-1",
                    "--out", str(out))
    assert result.exit_code == 0, result.output
    predicted = invoke("predict", "--probe", str(out), "--data", str(dev), "--json")
    assert predicted.exit_code == 0, predicted.output
    tags = [json.loads(line)["tags"] for line in predicted.stdout.splitlines()]
    return json.loads((out / "metrics.json").read_text()), tags, result.stdout


def best_entity_f1(metrics: dict, name: str = "f1") -> float:
    """The best row's entity F1 (`f1`: conlleval's counting; `f1_strict`: seqeval's strict mode)."""
    return next(r for r in metrics["rows"] if r["label"] == metrics["best"])["scores"]["entities"][name]


def test_conll2003_like_iob1_file_is_probed_as_iob2_and_scored_as_seqeval_does(tmp_path, tiny_bert_dir):
    train = write(tmp_path / "train.txt", "\n".join([CONLL_TRAIN] * 3))  # three documents
    dev = write(tmp_path / "valid.txt", CONLL_DEV)
    assert is_tagged_file(train) and is_tagged_file(dev)  # by content: space-separated columns, blank lines between
    metrics, predicted, table = probe_and_predict(train, dev, tiny_bert_dir, tmp_path / "run")
    assert "entity F1" in table and "embeddings (layer 0)" in table and "tags IOB2" in table
    assert metrics["scheme"] == {"name": "IOB2", "source": "IOB1"}
    assert metrics["columns"] == {"word_column": "0", "tag_column": "3", "tag_scheme": "IOB1"}  # NER, not chunks
    assert json.loads((tmp_path / "run" / "probe" / "probe.json").read_text())["scheme"] == metrics["scheme"]
    assert metrics["sentences"] == {"train": 12, "dev": 2} and "I-ORG" not in metrics["tags"]
    f1 = best_entity_f1(metrics)
    assert f1 > 0.5  # the embeddings row tells these seen words apart: not an all-O agreement
    assert f1 == pytest.approx(f1_score(CONLL_DEV_IOB2, predicted))
    assert best_entity_f1(metrics, "f1_strict") == pytest.approx(f1_score(CONLL_DEV_IOB2, predicted, mode="strict",
                                                                          scheme=IOB2))


def test_wnut_like_iob2_file_with_hyphenated_types_is_scored_as_seqeval_does(tmp_path, tiny_bert_dir):
    train = write_tab(tmp_path / "wnut17train.conll", WNUT_TRAIN * 4)
    dev = write_tab(tmp_path / "emerging.dev.conll", WNUT_DEV)
    metrics, predicted, table = probe_and_predict(train, dev, tiny_bert_dir, tmp_path / "run")
    assert "entity F1" in table
    assert metrics["scheme"] == {"name": "IOB2", "source": "IOB2"}
    assert {"B-creative-work", "I-creative-work", "B-corporation"} <= set(metrics["tags"])
    gold = [[t for _, t in s] for s in WNUT_DEV]
    f1 = best_entity_f1(metrics)
    assert f1 > 0  # some entities found: not an all-O agreement
    assert f1 == pytest.approx(f1_score(gold, predicted))
    assert best_entity_f1(metrics, "f1_strict") == pytest.approx(f1_score(gold, predicted, mode="strict", scheme=IOB2))


NER = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
FEATURES = Features({"tokens": HubSequence(Value("string")), "ner_tags": HubSequence(ClassLabel(names=NER))})
HUB_TRAIN = {"tokens": [["Anna", "met", "Bob", "Smith"], ["Paris", "saw", "Anna"], ["Bob", "left", "Rome"]] * 3,
             "ner_tags": [[1, 0, 1, 2], [3, 0, 1], [1, 0, 3]] * 3}
HUB_DEV = {"tokens": [["Bob", "Smith", "saw", "Paris"]], "ner_tags": [[1, 2, 0, 3]]}


@pytest.fixture
def hub(monkeypatch):
    """A hub dataset of train and validation splits, served by a replaced `datasets.load_dataset`."""
    splits = {"train": Dataset.from_dict(HUB_TRAIN, features=FEATURES),
              "validation": Dataset.from_dict(HUB_DEV, features=FEATURES)}
    asked: list[tuple] = []

    def load_dataset(name, config, split):
        asked.append((name, config, split))
        return splits[split]

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return asked


def test_a_hub_dataset_is_probed_with_dev_validation(hub, tiny_bert_dir, tmp_path):
    out = tmp_path / "run"
    result = invoke("probe", "--data", "someone/conll2003", "--data-config", "conll2003", "--dev", "validation",
                    "--model", str(tiny_bert_dir), "--layers", "0,-1", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "entity F1" in result.stdout
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["train"], metrics["dev"]) == ("someone/conll2003[train]", "someone/conll2003[validation]")
    assert metrics["columns"]["tag_column"] == "ner_tags" and metrics["tags"] == ["B-LOC", "B-PER", "I-PER", "O"]
    assert {split for _, _, split in hub} == {"train", "validation"}
    assert {config for _, config, _ in hub} == {"conll2003"}


def test_a_hub_dataset_is_embedded_into_a_word_store_per_split(hub, tiny_bert_dir, tmp_path):
    out = tmp_path / "store"
    result = invoke("embed", "--data", "someone/conll2003", "--dev", "validation", "--model", str(tiny_bert_dir),
                    "--out", str(out))
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "dev" / "manifest.json").read_text())
    assert manifest["data"] == "someone/conll2003[validation]" and manifest["scheme"] == "IOB2"
    assert manifest["identity"]["data_hub"] == "someone/conll2003[validation]"
    assert manifest["identity"]["data_fingerprint"]


def test_parquet_files_are_probed(tmp_path, tiny_bert_dir):
    train, dev = tmp_path / "train.parquet", tmp_path / "dev.parquet"
    Dataset.from_dict(HUB_TRAIN, features=FEATURES).to_parquet(str(train))
    Dataset.from_dict(HUB_DEV, features=FEATURES).to_parquet(str(dev))
    result = invoke("probe", "--data", str(train), "--dev", str(dev), "--model", str(tiny_bert_dir), "--layers", "-1",
                    "--json", "--quiet")
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record["words"] == {"train": 30, "dev": 4} and record["scheme"] == {"name": "IOB2", "source": "IOB2"}


@pytest.mark.parametrize("task", [[], ["--task", "tags"]])
def test_offline_a_hub_name_exits_2_with_the_houses_error(tmp_path, tiny_bert_dir, task):
    """conftest sets HF_HUB_OFFLINE=1: the real `datasets.load_dataset` cannot reach the hub."""
    out = tmp_path / "run"
    result = invoke("probe", "--data", "eriktks/conll2003", "--dev", "validation", "--model", str(tiny_bert_dir),
                    "--out", str(out), *task)
    assert result.exit_code == 2, result.output
    assert "Could not load hub dataset 'eriktks/conll2003'" in " ".join(result.output.split())
    assert not out.exists()


def test_a_split_name_beside_a_local_tagged_file_exits_2(tmp_path, tiny_bert_dir):
    train = write_tab(tmp_path / "train.conll", WNUT_TRAIN)
    result = invoke("probe", "--data", str(train), "--dev", "validation", "--model", str(tiny_bert_dir))
    assert result.exit_code == 2, result.output
    assert "looks like a split name of a hub dataset" in " ".join(result.output.split())


def test_the_conll2003_recipe_reads_the_hub_dataset_as_words(hub):
    values = recipes.load_recipe("words-conll2003", "probe", ProbeConfig)
    assert (values["data"], values["dev"], values["model"]) == ("lhoestq/conll2003", "validation", "bert-base-cased")
    assert ProbeConfig.of(**values).family.name == "words"  # detected from the ClassLabel tag feature, no --task tags
    assert hub[-1] == ("lhoestq/conll2003", None, "train")
    assert "Needs the hub" in recipes.recipe_path("words-conll2003").read_text(encoding="utf-8")
