"""A run's config.json as a record (issues 54, 57): its layout, family and seal; the one migration that reads the
older layout; the one rule of what a re-run may change; every option of a training run in a layout or added by a
migration step, and in the card's hyper-parameters or named as shown elsewhere; runs that cannot be resumed safely
refused with what to do."""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import shutil
from pathlib import Path

import pytest
from older_records import unsealed
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.errors import UserError
from bertkit.io import trail
from bertkit.options import all_fields, config_dict, flag, option_fields
from bertkit.training import cards
from bertkit.training.options import TRACKING_FIELDS, DistillOptions, FinetuneOptions
from bertkit.training.resume import resume_key
from bertkit.training.space import SweepOptions
from bertkit.training.spans import SPAN_HYPERPARAMETERS
from bertkit.training.tagging import TAG_HYPERPARAMETERS

LEGACY = Path(__file__).resolve().parent / "legacy" / "records"
RESUMING = (FinetuneOptions, DistillOptions, SweepOptions)
"""The configs whose runs are compared option by option on a re-run (a resume key, a sweep's compared options)."""


def _defaults(config_cls: type) -> dict[str, object]:
    return {f.name: f.default for f in all_fields(config_cls) if f.default is not dataclasses.MISSING}


def test_what_a_rerun_may_change_is_declared_once_for_options_that_exist():
    names = {f.name for cls in RESUMING for f in all_fields(cls)}
    assert set(trail.RERUN_MAY_CHANGE) <= names, set(trail.RERUN_MAY_CHANGE) - names
    assert TRACKING_FIELDS <= set(trail.RERUN_MAY_CHANGE)
    assert all(why.strip() for why in trail.RERUN_MAY_CHANGE.values())


@pytest.mark.parametrize("config_cls", RESUMING, ids=lambda c: c.__name__)
def test_every_compared_option_is_in_the_oldest_layout_or_added_by_a_migration_step_with_its_default(config_cls):
    """An option added to a training run changes the layout of what a re-run compares: it goes into a migration step
    (`trail.LAYOUT_2_FILLS`, or the next layout's) with the default it has, or runs recorded before it stop
    resuming."""
    compared = {f.name for f in all_fields(config_cls)} - set(trail.RERUN_MAY_CHANGE)
    missing = compared - trail.LAYOUT_1_KEY - set(trail.LAYOUT_2_FILLS)
    assert not missing, f"options neither in the oldest layout nor added by a migration step: {sorted(missing)}"
    defaults = _defaults(config_cls)
    assert {k: defaults[k] for k in trail.LAYOUT_2_FILLS if k in defaults} == {
        k: v for k, v in trail.LAYOUT_2_FILLS.items() if k in defaults}


@pytest.mark.parametrize("config_cls", (FinetuneOptions, DistillOptions), ids=lambda c: c.__name__)
def test_every_training_option_is_a_cards_hyperparameter_or_named_as_shown_elsewhere(config_cls):
    names = {f.name for f in option_fields(config_cls)}
    shown = set(cards.HYPERPARAMETERS) | set(TAG_HYPERPARAMETERS) | set(SPAN_HYPERPARAMETERS)
    shown |= set(cards.NOT_HYPERPARAMETERS)
    assert names <= shown, f"options the card neither shows nor places: {sorted(names - shown)}"
    assert not set(cards.HYPERPARAMETERS) & set(cards.NOT_HYPERPARAMETERS)


@pytest.mark.parametrize("config_cls", RESUMING, ids=lambda c: c.__name__)
def test_every_training_option_is_in_the_docs(config_cls):
    text = "".join(Path(p).read_text(encoding="utf-8") for p in glob.glob(str(LEGACY.parents[2] / "docs" / "*.md")))
    missing = [f.name for f in option_fields(config_cls)
               if flag(f.name) not in text and f"--no-{f.name.replace('_', '-')}" not in text]
    assert not missing, f"options no docs page names: {missing}"


def test_a_layout_1_resume_key_reads_as_todays_key(tmp_path):
    """The sentence run the legacy records hold: its key, without the tagging options, equals today's."""
    record = json.loads((LEGACY / "runs" / "sentences" / "config.json").read_text())
    migrated = trail.migrated_run_config(record)
    assert migrated["format"] == "bertkit-config/2" and migrated["family"] == "sentences"
    cfg = FinetuneOptions.of(**{k: v for k, v in record["config"].items() if k in config_dict(FinetuneOptions.of(
        data="x.tsv", out="o"))})
    today = json.loads(json.dumps(resume_key(cfg, record["resume_key"]["data"])))  # as config.json holds it
    assert trail.key_differences(migrated["resume_key"], today) == []


@pytest.mark.parametrize(("config", "extra", "hint", "family"), [
    ({"task": "tags"}, {}, None, "words"),
    ({"task": "auto"}, {"words": {"reading": {}}}, None, "words"),
    ({"task": "auto"}, {}, "words", "words"),
    ({"task": "auto"}, {}, None, "sentences"),
    ({"task": "single_label"}, {}, None, "sentences"),
])
def test_a_layout_1_config_gets_the_family_of_its_task(config, extra, hint, family):
    assert trail.migrated_run_config({"command": "finetune", "config": config, **extra}, hint)["family"] == family


def test_a_written_config_is_sealed_and_an_edit_is_refused_naming_it(tmp_path):
    trail.write_run_config(tmp_path, "tokens", {"data": "a.tsv", "max_length": 16}, "sentences", seed=1)
    record = json.loads((tmp_path / "config.json").read_text())
    assert record["format"] == "bertkit-config/2" and record["family"] == "sentences"
    assert trail.read_run_config(tmp_path)["config"]["max_length"] == 16
    record["config"]["max_length"] = 4
    (tmp_path / "config.json").write_text(json.dumps(record))
    with pytest.raises(UserError, match=r"config\.json is not the config\.json bertkit writes \(its content does not "
                                        r"match the sha256"):
        trail.read_run_config(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**unsealed(record, None), "family": "words"}))
    with pytest.raises(UserError, match=r"holds family: it was edited since"):
        trail.read_run_config(tmp_path)


def test_a_config_without_a_resume_key_says_an_older_bertkit_made_it(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"command": "finetune", "config": {"lr": 0.1}}))
    with pytest.raises(UserError) as caught:
        trail.key_compare({"config": {"lr": 0.2}, "data": {}})(tmp_path)
    text = str(caught.value)
    assert "made by an older bertkit" in text and "records no resume key" in text and "mv " in text
    assert "None ->" not in text


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_run_that_lost_its_config_is_refused_not_resumed_under_new_settings(tmp_path, monkeypatch):
    """An unfinished run whose config.json is gone keeps its checkpoints: resuming them under --lr 1e-3 and
    recording that would misdescribe the weights. Refused (exit 2) naming the file and how to move the run aside;
    nothing changes."""
    shutil.copytree(LEGACY, tmp_path / "records")
    monkeypatch.chdir(tmp_path / "records")
    run = Path("runs/sentences-unfinished")
    (run / "config.json").unlink()
    before = _tree(run)
    result = CliRunner().invoke(app, ["finetune", "--model", "model", "--data", "data/train.tsv", "--dev",
                                      "data/dev.tsv", "--epochs", "3", "--lr", "1e-3", "--max-length", "16",
                                      "--precision", "fp32", "--out", str(run), "-q"])
    assert result.exit_code == 2, result.output
    assert "without its config.json" in result.output and "checkpoints" in result.output
    assert f"mv {run} " in result.output and "Traceback" not in result.output
    assert _tree(run) == before
