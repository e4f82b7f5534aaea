"""Problem families are objects (`bertkit.families`): a command asks `family_of` once and calls the family, and a new
family is its module and one registry line. The trivial `parity` family of tests/parity_family.py is registered
here at run time, and `finetune`, `predict` and `evaluate` reach it with no edit to `commands/`."""

from __future__ import annotations

import ast
import json
import pathlib
import re

import pytest
from parity_family import PARITY
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.commands.evaluate import EvaluateConfig
from bertkit.commands.evaluate import run as evaluate
from bertkit.commands.finetune import FinetuneConfig
from bertkit.commands.finetune import run as finetune
from bertkit.commands.predict import PredictConfig
from bertkit.commands.predict import run as predict
from bertkit.families import registry
from bertkit.families.base import FAMILIES, option_families

COMMANDS = pathlib.Path(__file__).resolve().parent.parent / "bertkit" / "commands"
KIND = re.compile(r"\b(is_tagger|reads_words|reads_tagged|tagger|word_probe|words|is_words|family\.(name|kind)|kind)\b"
                  r"|['\"](tagger|words|sentences|spans|tags|parity)['\"]")


@pytest.fixture
def parity():
    registry.register(PARITY)
    yield PARITY
    registry.unregister(PARITY.name)


def write_parity(path: pathlib.Path, n: int, offset: int) -> pathlib.Path:
    words = ["apple", "river", "stone", "cloud", "green", "table"]
    lines = [" ".join(words[(i + j + offset) % 6] for j in range(1 + (i % 4))) for i in range(n)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_family_added_at_run_time_is_reached_by_finetune_predict_and_evaluate(parity, tiny_bert_dir, tmp_path):
    train = write_parity(tmp_path / "train.parity", 32, 0)
    dev = write_parity(tmp_path / "dev.parity", 8, 1)
    cfg = FinetuneConfig.of(model=str(tiny_bert_dir), data=str(train), dev=str(dev), out=str(tmp_path / "run"),
                            epochs=1, batch_size=8, lr="1e-3", precision="fp32", max_length=32)
    assert cfg.family is PARITY
    result = finetune(cfg, progress=False)
    best = tmp_path / "run" / "best"
    assert json.loads((best / "bertkit_model.json").read_text())["family"] == "parity"
    assert result.summary.to_json()["best_dev"]["n"] == 8
    predicted = predict(PredictConfig.of(model=str(best), text=("apple river", "stone")))
    assert predicted.family == "parity" and set(predicted.labels) <= {"even", "odd"} and len(predicted.labels) == 2
    scored = evaluate(EvaluateConfig.of(model=str(best), data=str(dev)))
    assert scored.rows == 8 and 0.0 <= scored.metrics.score("accuracy") <= 1.0
    shown = CliRunner().invoke(app, ["predict", "--model", str(best), "--text", "apple river"])
    assert shown.exit_code == 0 and ("even" in shown.output or "odd" in shown.output), shown.output


def test_a_family_without_a_part_says_so_with_exit_2(parity, tiny_bert_dir, tmp_path):
    data = write_parity(tmp_path / "train.parity", 8, 0)
    result = CliRunner().invoke(app, ["probe", "--data", str(data), "--model", str(tiny_bert_dir)])
    assert result.exit_code == 2 and "`bertkit probe` does not read texts labelled by the parity" in result.output


def test_another_familys_option_is_refused_by_the_family_naming_it(parity, tmp_path):
    data = write_parity(tmp_path / "train.parity", 8, 0)
    result = CliRunner().invoke(app, ["finetune", "--data", str(data), "--dev", str(data), "--out", str(tmp_path / "o"),
                                      "--label-all-pieces"])
    assert result.exit_code == 2 and "--label-all-pieces does not apply to" in result.output


def test_commands_never_branch_on_a_family():
    found = [f"{p.name}:{n.lineno}" for p in sorted(COMMANDS.glob("*.py")) for n in ast.walk(ast.parse(p.read_text()))
             if isinstance(n, (ast.If, ast.IfExp)) and KIND.search(ast.unparse(n.test))]
    assert found == []


def test_family_of_is_asked_once_per_command():
    """Each command module asks its config's `family` (cached: one question per config) and never calls
    `family_of` itself."""
    for path in COMMANDS.glob("*.py"):
        assert "family_of(" not in path.read_text(), path.name


def test_every_option_declares_families_that_exist():
    from bertkit.commands.registry import config_for_command, recipe_commands

    names = {f.name for f in FAMILIES}
    for command in recipe_commands():
        for option, families in option_families(config_for_command(command)).items():
            assert set(families) <= names, (command, option, families)


def test_every_not_read_option_is_an_option_of_its_command():
    from bertkit.commands.registry import config_for_command
    from bertkit.options import option_fields

    for family in FAMILIES:
        for command, names in family.not_read.items():
            options = {f.name for f in option_fields(config_for_command(command))}
            assert set(names) <= options, (family.name, command, set(names) - options)
