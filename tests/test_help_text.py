"""`bertkit COMMAND --help` (issue 33): no type labels, --model first, required options marked, each command's own
wording of --data, no option that does not apply, and the rarely used options in an Advanced panel that --help-all
shows."""

from __future__ import annotations

import dataclasses
import re

import pytest
from typer.testing import CliRunner

from bertkit import options
from bertkit.cli.app import app
from bertkit.commands.registry import config_for_command, recipe_commands
from bertkit.errors import UserError

runner = CliRunner()
TYPE_LABEL = re.compile(r"<(bool|str|int|float|list\[str\]|text|integer)>", re.IGNORECASE)


def help_of(*args: str) -> str:
    result = runner.invoke(app, [*args], env={"COLUMNS": "100"}, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("args", [("--help",), ("recipes", "--help"), ("recipes", "list", "--help"), ("recipes", "show", "--help"),
                                  *[(c, "--help") for c in recipe_commands()],
                                  *[(c, "--help-all") for c in recipe_commands()]])
def test_help_shows_no_type_labels(args):
    text = help_of(*args)
    assert not TYPE_LABEL.search(text), TYPE_LABEL.search(text)


@pytest.mark.parametrize("command", ["finetune", "predict", "evaluate", "embed", "probe", "export", "tokens"])
def test_model_comes_first_in_the_first_panel(command):
    text = help_of(command, "--help-all")
    assert text.index("╭─ Model") < text.index("╭─ Data") and text.index("--model") < text.index("--max-length")
    if "--truncation" in text:
        assert text.index("--model") < text.index("--truncation")
    assert text.split("╭─", 1)[1].startswith(" Model")


@pytest.mark.parametrize("command", recipe_commands())
def test_required_options_are_marked_and_are_refused_when_missing(command):
    cls = config_for_command(command)
    text = help_of(command, "--help")
    required = options.required_options(cls)
    assert text.count("[required]") == len(required), text
    for name in required:
        row = next(line for line in text.splitlines() if f" {options.flag(name)} " in line)
        block = text[text.index(row):]
        assert "[required]" in block[:block.index("│ --", 4)], name  # in this option's own rows
    base = {"finetune": {"data": "x.tsv", "out": "o"}, "sweep": {"data": "x.tsv", "out": "o", "grid": ("lr=1e-5,2e-5",)},
            "distill": {"teacher": "t", "data": "x.tsv", "out": "o"}, "embed": {"data": "x.tsv", "out": "o"},
            "evaluate": {"model": "m", "data": "x.tsv"}, "export": {"model": "m", "out": "o"},
            "push": {"model": "m", "repo_id": "me/m"}}.get(command, {})
    if required:
        cls.of(**base)  # all given: accepted
    for name in required:
        with pytest.raises(UserError, match=re.escape(f"{options.flag(name)} is required")):
            cls.of(**{k: v for k, v in base.items() if k != name})


def test_finetune_marks_data_and_out():
    assert options.required_options(config_for_command("finetune")) == ("data", "out")


def test_predict_and_evaluate_say_what_their_data_is():
    predict, evaluate = help_of("predict", "--help"), help_of("evaluate", "--help")
    assert "The data to label" in predict and "The labelled data to score" in evaluate
    assert "Training (or only) data" not in predict + evaluate
    assert "Training (or only) data" in help_of("finetune", "--help")


def test_bench_lists_only_options_that_apply():
    text = help_of("bench", "--help-all")
    assert "--dev-fraction" not in text
    result = runner.invoke(app, ["bench", "--preset", "distilbert-vs-bert", "--dev-fraction", "0.2"])
    assert result.exit_code == 2 and "No such option" in result.output


def test_advanced_options_are_listed_by_help_all_and_still_work():
    short, full = help_of("finetune", "--help"), help_of("finetune", "--help-all")
    assert "│ --weight-decay" not in short and "│ --weight-decay" in full and "╭─ Advanced" in full
    assert "--weight-decay" in short.split("--help-all`)")[1]  # named at the end of --help
    assert len(short.splitlines()) < 110 < len(full.splitlines())  # was 169 lines at 100 columns
    assert "│ --weight-decay" not in help_of("finetune", "--help")  # --help-all hid them again
    command = __import__("typer").main.get_command(app).commands["finetune"]
    params = command.make_context("finetune", ["--data", "x.tsv", "--out", "o", "--weight-decay", "0.1"]).params
    assert params["weight_decay"] == 0.1


def test_advanced_and_required_options_name_real_fields():
    for command in recipe_commands():
        cls = config_for_command(command)
        declared = {n for c in cls.__mro__ for n in vars(c).get("ADVANCED_OPTIONS", ())}
        assert declared <= {f.name for f in options.all_fields(cls)}, (command, declared)  # no typo
        for f in dataclasses.fields(cls):  # a group names only its own options
            group = options.group_class(f)
            if group is not None:
                own = {n for c in group.__mro__ for n in vars(c).get("ADVANCED_OPTIONS", ())}
                assert own <= {g.name for g in dataclasses.fields(group)}, (command, group.__name__, own)
        assert set(options.required_options(cls)) <= {f.name for f in options.option_fields(cls)}, command
        assert not set(options.required_options(cls)) & options.advanced_options(cls), command


def test_bench_quality_runs_take_their_hold_out_share_from_quality_args():
    from pathlib import Path

    import bertkit
    from bertkit.commands.bench import BenchConfig, plan_quality

    demo = Path(bertkit.__file__).parent / "resources" / "demo" / "train.tsv"
    cfg = BenchConfig.of(preset="distilbert-vs-bert", data=str(demo), quality="finetune",
                      quality_args="--dev-fraction 0.2 --epochs 1")
    assert plan_quality(cfg)[0].config.inputs.dev_fraction == 0.2


ALIASED = [c for c in recipe_commands() if any(f.metadata.get("aliases") for f in options.option_fields(config_for_command(c)))]


@pytest.mark.parametrize("command", ALIASED)
def test_an_alias_is_named_in_the_help_not_glued_to_the_flag(command):
    """`--precision,--dtype` read as one name: the flag column shows --precision, its help names --dtype."""
    text = help_of(command, "--help-all")
    assert ",--" not in text
    row = next(line for line in text.splitlines() if "│ --precision " in line)
    block = " ".join(text[text.index(row):].split("[default:")[0].replace("│", " ").split())
    assert "Also --dtype (an alias)." in block
    refused = runner.invoke(app, [command, "--dtype", "nope"], env={"COLUMNS": "100"})
    assert refused.exit_code == 2 and "No such option" not in refused.output  # still parsed, as --precision
    assert "--precision must be one of" in refused.output


def _row(text: str, flag_name: str) -> str:
    """The help of one option, its wrapped lines joined."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if f"│ {flag_name} " in line)
    rows = [lines[start]]
    for line in lines[start + 1:]:
        if not line.startswith("│ ") or line[2:].lstrip().startswith("-") or line.startswith("╰"):
            break
        rows.append(line)
    return " ".join(" ".join(rows).replace("│", " ").replace(flag_name, "", 1).split())


def test_one_file_commands_word_their_data_options_for_one_file():
    evaluate, predict = help_of("evaluate", "--help"), help_of("predict", "--help")
    assert "probe" not in _row(evaluate, "--max-length") and "as the model records it" in _row(evaluate, "--max-length")
    for text in (evaluate, predict):
        assert "each split" not in _row(text, "--limit") and "first N rows of --data" in _row(text, "--limit")
    label = _row(predict, "--label-column")
    assert "neither writes nor scores it" in label and "bertkit evaluate" in label
