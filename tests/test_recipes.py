"""Every recipe validates against its command: its keys are that command's CLI options and load into its config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from bertkit import recipes
from bertkit.cli.app import app
from bertkit.commands.finetune import FinetuneConfig
from bertkit.commands.registry import config_for_command, recipe_commands
from bertkit.errors import UserError

RECIPES = recipes.list_recipes()


def command_options(command: str) -> set[str]:
    """Parameter names of a CLI command (as config field names)."""
    click_group = typer.main.get_command(app)
    return {p.name for p in click_group.commands[command].params}


def test_there_are_recipes():
    assert len(RECIPES) >= 1


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.name for r in RECIPES])
def test_recipe_keys_are_command_options(recipe):
    assert recipe.summary, f"{recipe.path} needs a header comment saying what it does"
    for command in recipe.commands:
        cls = config_for_command(command)
        values = recipes.load_recipe(str(recipe.path), command, cls)  # unknown keys raise
        assert set(values) <= command_options(command)


@pytest.mark.parametrize("command", recipe_commands())
def test_every_config_field_is_a_cli_option(command):
    """litgpt-style: the typed config and the command's signature describe the same options."""
    fields = recipes.option_fields(config_for_command(command))
    assert fields <= command_options(command), fields - command_options(command)
    assert fields, command


def test_recipes_list_and_show_cli():
    runner = CliRunner()
    listed = runner.invoke(app, ["recipes", "list", "--json"])
    assert listed.exit_code == 0
    names = {r["name"] for r in json.loads(listed.stdout)}
    assert {r.name for r in RECIPES} == names
    shown = runner.invoke(app, ["recipes", "show", RECIPES[0].name])
    assert shown.exit_code == 0 and f"[{RECIPES[0].commands[0]}]" in shown.stdout
    missing = runner.invoke(app, ["recipes", "show", "no-such-recipe"])
    assert missing.exit_code == 2 and "Known recipes" in missing.output


def test_recipes_show_an_unknown_name_says_so_lists_the_names_and_how_to_list_them():
    missing = CliRunner().invoke(app, ["recipes", "show", "nope"], env={"COLUMNS": "400"})
    assert missing.exit_code == 2
    message = " ".join(missing.output.split())
    assert "Unknown recipe 'nope'" in message and "Pass --recipe" not in message
    assert all(r.name in message for r in RECIPES)
    assert "`bertkit recipes list`" in message and "path of a .toml file" in message


def test_recipes_show_help_names_its_argument_without_placeholders():
    shown = CliRunner().invoke(app, ["recipes", "show", "--help"], env={"COLUMNS": "120"})
    assert shown.exit_code == 0
    assert "recipes show [OPTIONS] NAME" in shown.output and "NAME" in shown.output.split("Arguments")[1]
    assert "{name}" not in shown.output and "{NAME}" not in shown.output and "<str>" not in shown.output


def test_smoke_recipe_end_to_end(tmp_path, monkeypatch):
    """The `smoke` recipe, table by table, as CI's end-to-end run: real MiniLM weights, 64 demo rows."""
    monkeypatch.chdir(tmp_path)  # any folder: the recipe's data paths are relative to the recipe itself
    runner = CliRunner()

    def run(*args: str) -> dict:
        result = runner.invoke(app, [*args, "--recipe", "smoke", "--json", "--quiet"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    tokens = run("tokens")
    assert tokens["splits"][0]["rows"] == 64
    run("embed", "--out", str(tmp_path / "features"))
    from bertkit.features import store

    stores = store.open_splits(tmp_path / "features")
    assert stores["train"].features.shape == (64, 7, 384) and len(stores["dev"]) == 64
    probe = run("probe", "--out", str(tmp_path / "probe"))
    assert (tmp_path / "probe" / "probe" / "probe.safetensors").exists()
    assert "baselines" in json.dumps(probe)
    run("finetune", "--out", str(tmp_path / "ft"))
    assert (tmp_path / "ft" / "best" / "model.safetensors").exists()
    predicted = runner.invoke(app, ["predict", "--model", str(tmp_path / "ft" / "best"), "--text", "A delight.", "--json"])
    assert predicted.exit_code == 0, predicted.output
    assert json.loads(predicted.stdout)


def test_recipe_input_paths_resolve_next_to_the_recipe(tmp_path, monkeypatch):
    """A relative input path is looked up next to the recipe (from any current folder); hub names, split names and
    paths that exist only from the current folder are left as written; --out stays relative to the current folder."""
    folder = tmp_path / "project"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "train.tsv").write_text("sentence\tlabel\na\t0\nb\t1\n", encoding="utf-8")
    recipe = folder / "mine.toml"
    recipe.write_text('[finetune]\ndata = "data/train.tsv"\ndev = "validation"\nmodel = "minilm-offline"\n'
                      'test = "cwd-only.tsv"\nout = "runs/x"\n', encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "cwd-only.tsv").write_text("sentence\tlabel\na\t0\n", encoding="utf-8")
    monkeypatch.chdir(elsewhere)
    values = recipes.load_recipe(str(recipe), "finetune", FinetuneConfig)
    assert values["data"] == str((folder / "data" / "train.tsv").resolve())
    assert values["dev"] == "validation" and values["model"] == "minilm-offline"
    assert values["test"] == "cwd-only.tsv" and values["out"] == "runs/x"


def test_packaged_smoke_recipe_names_packaged_data(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    values = recipes.load_recipe("smoke", "finetune", FinetuneConfig)
    package = Path(recipes.__file__).resolve().parent.parent
    assert Path(values["data"]) == package / "resources" / "demo" / "train.tsv" and Path(values["data"]).is_file()
    assert Path(values["dev"]).is_file()


@pytest.mark.parametrize(("text", "says"), [
    ('epochs = 3\nlr = "2e-5"\n', "has options at the top level (epochs, lr) and no [finetune] table"),
    ("[probe]\nC = 1.0\n", "has no [finetune] table (it has: [probe]); it is for another command. Run `bertkit probe"),
    ("", "holds no options. Add a [finetune] table"),
])
def test_a_recipe_without_the_commands_table_says_what_to_fix(tmp_path, text, says):
    """Keys at the top level are options that need a [command] line above them (not a command to run); another
    command's table names that command; an empty recipe says it holds nothing."""
    recipe = tmp_path / "r.toml"
    recipe.write_text(text, encoding="utf-8")
    with pytest.raises(UserError) as caught:
        recipes.load_recipe(str(recipe), "finetune", FinetuneConfig)
    assert says in str(caught.value)
