"""bertkit push: offline is one message before the folder is read; incomplete folders are refused; only bertkit's
own files are uploaded, after the card passes the hub's validation (create_repo, upload_folder and
ModelCard.validate are replaced here: no network)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bertkit.cli import app
from bertkit.io import ownership, record
from bertkit.models import hub
from bertkit.models.card import CardFacts, write_model_card
from bertkit.models.metadata import write_model_info

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, ["push", *map(str, args)], catch_exceptions=False)


@pytest.fixture
def saved_model(tiny_bert_dir, tmp_path) -> Path:
    """A folder as save_model_folder leaves it: weights, tokenizer, bertkit_model.json, a card, the file list."""
    folder = tmp_path / "run" / "best"
    shutil.copytree(tiny_bert_dir, folder)
    write_model_info(folder, {"step": 3})  # with the record of the files saved before it
    write_model_card(folder, CardFacts(command="finetune", model="minilm-offline", task="single_label",
                                       labels=["neg", "pos"], role="best", step=3,
                                       results={"dev": {"metrics": {"accuracy": 0.9}, "rows": 20}}))
    ownership.write_file_list(folder)
    return folder


@pytest.fixture
def hub_calls(monkeypatch):
    """Online, with the hub's calls recorded instead of made."""
    import huggingface_hub

    calls: dict[str, list] = {"create": [], "upload": [], "validate": []}
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "endpoint_reachable", lambda endpoint: True)
    monkeypatch.setattr(huggingface_hub, "create_repo",
                        lambda repo_id, **kw: calls["create"].append((repo_id, kw)) or f"https://hf.co/{repo_id}")
    monkeypatch.setattr(huggingface_hub, "upload_folder",
                        lambda **kw: calls["upload"].append(kw) or "https://hf.co/commit/abc")
    monkeypatch.setattr(huggingface_hub.ModelCard, "validate",
                        lambda self, repo_type=None: calls["validate"].append(self.data.pipeline_tag))
    return calls


def test_offline_is_one_message_before_the_folder_is_read(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = invoke("--model", tmp_path / "does-not-exist", "--repo-id", "me/model")
    assert result.exit_code == 2 and "offline mode is set (HF_HUB_OFFLINE=1)" in result.output
    assert "does-not-exist" not in result.output
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "endpoint_reachable", lambda endpoint: False)
    result = invoke("--model", tmp_path / "does-not-exist", "--repo-id", "me/model")
    assert result.exit_code == 2 and "cannot reach the Hugging Face hub" in result.output


def test_uploads_only_bertkits_files_with_the_card(saved_model, hub_calls):
    (saved_model / "notes.txt").write_text("mine")  # the user's: not in the file list, never uploaded
    (saved_model / ".hidden").write_text("x")
    result = invoke("--model", saved_model, "--repo-id", "me/tiny", "--private", "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    upload = hub_calls["upload"][0]
    assert hub_calls["create"] == [("me/tiny", {"private": True, "exist_ok": True})]
    assert hub_calls["validate"] == ["text-classification"]
    assert upload["repo_id"] == "me/tiny" and Path(upload["folder_path"]) == saved_model
    assert "README.md" in upload["allow_patterns"] and "model.safetensors" in upload["allow_patterns"]
    assert "notes.txt" not in upload["allow_patterns"] and not any(p.startswith(".") for p in upload["allow_patterns"])
    assert shown["files"] == upload["allow_patterns"] and shown["url"] == "https://hf.co/me/tiny"


@pytest.mark.parametrize("damage", ["no_card", "bad_card", "no_weights", "leftover", "no_folder", "changed_weights"])
def test_refuses_a_folder_that_is_not_a_complete_saved_model(saved_model, hub_calls, damage):
    if damage == "changed_weights":  # a byte flipped in the middle: the folder is not the model bertkit saved
        data = bytearray((saved_model / "model.safetensors").read_bytes())
        data[len(data) // 2] ^= 0xFF
        (saved_model / "model.safetensors").write_bytes(bytes(data))
    elif damage == "no_card":
        (saved_model / "README.md").unlink()
    elif damage == "bad_card":
        (saved_model / "README.md").write_text("---\nlibrary_name: transformers\n---\nno pipeline tag\n")
    elif damage == "no_weights":
        (saved_model / "model.safetensors").unlink()
    elif damage == "leftover":  # a save killed mid-way: the run's record lists the temp folder it was making
        record.Record.create(saved_model.parent, "finetune")
        temp = saved_model.parent / ".tmp-best-1a2b3c4d"
        record.Record.at(saved_model.parent).add(record.TEMP, temp.name)
        temp.mkdir()
    else:
        shutil.rmtree(saved_model)
    result = invoke("--model", saved_model, "--repo-id", "me/tiny")
    assert result.exit_code == 2 and "is not a complete saved model" in result.output
    if damage == "changed_weights":
        assert "not as saved (model.safetensors: its bytes changed since it was written" in " ".join(result.output.split())
    if damage == "leftover":
        assert "leftovers of an interrupted save: .tmp-best-1a2b3c4d" in result.output
    assert hub_calls["create"] == [] and hub_calls["upload"] == []


def test_a_folder_named_like_a_temp_that_no_record_lists_is_not_taken_for_a_leftover(saved_model, hub_calls):
    """By record, never by name: a user's `.tmp-best` next to best/ is not bertkit's interrupted save."""
    record.Record.create(saved_model.parent, "finetune")
    (saved_model.parent / ".tmp-best").mkdir()
    (saved_model / ".tmp-notes").mkdir()
    result = invoke("--model", saved_model, "--repo-id", "me/tiny")
    assert result.exit_code == 0, result.output
    assert hub_calls["upload"] and (saved_model.parent / ".tmp-best").is_dir()


def test_a_card_the_hub_rejects_and_a_bad_repo_id_create_nothing(saved_model, hub_calls, monkeypatch):
    import huggingface_hub

    result = invoke("--model", saved_model, "--repo-id", "me/bad id")
    assert result.exit_code == 2 and "--repo-id 'me/bad id' is not a hub repository id" in result.output

    def reject(self, repo_type=None):
        raise ValueError("Invalid metadata in README.md.\n- \"model-index\" is bad")

    monkeypatch.setattr(huggingface_hub.ModelCard, "validate", reject)
    result = invoke("--model", saved_model, "--repo-id", "me/tiny")
    assert result.exit_code == 2 and "The hub rejected the model card" in result.output
    assert hub_calls["create"] == [] and hub_calls["upload"] == []


@pytest.mark.parametrize("listed", ["../victim.txt", "/etc/hostname", "sub/../../victim.txt", "./config.json",
                                    "linked.txt", "link-dir/victim.txt", 7])
def test_a_file_list_naming_a_path_outside_the_folder_is_damaged_and_nothing_is_uploaded(saved_model, hub_calls,
                                                                                         listed):
    """The file list is a record: every path in it relative, normalised and inside the folder, links resolved;
    any other makes the folder damaged (exit 2 naming the list and the path), before anything is created."""
    victim = saved_model.parent / "victim.txt"
    victim.write_text("not the model's")
    (saved_model / "linked.txt").symlink_to(victim)
    (saved_model / "link-dir").symlink_to(saved_model.parent, target_is_directory=True)
    file_list = saved_model / ownership.FILE_LIST
    found = json.loads(file_list.read_text())
    file_list.write_text(json.dumps({**found, "files": [*found["files"], listed]}))
    result = invoke("--model", saved_model, "--repo-id", "me/tiny")
    message = " ".join(result.output.split())
    assert result.exit_code == 2 and "is damaged" in message and ownership.FILE_LIST in message
    assert repr(str(listed)) in message and "uploaded nothing" in message
    assert hub_calls["create"] == [] and hub_calls["upload"] == [] and victim.read_text() == "not the model's"


def test_a_link_inside_the_folder_to_a_file_inside_it_is_not_outside(saved_model, tmp_path):
    """Resolving links keeps what stays inside: a listed link to the folder's own file is inside (and the rule is
    record.outside_of, the one every record's paths are held to)."""
    (saved_model / "alias.json").symlink_to(saved_model / "config.json")
    assert record.outside_of(saved_model, ["alias.json", "config.json"]) == []
    assert record.outside_of(saved_model, ["../x", "/abs", "a//b", "alias.json/.."]) == ["../x", "/abs", "a//b",
                                                                                         "alias.json/.."]
