"""cli/app.py: help, version, the tokens command on a sentence and a file, error exit codes (CliRunner + subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from typer.testing import CliRunner

from bertkit import __version__
from bertkit.cli.app import app

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_help_and_version():
    result = invoke("--help")
    assert result.exit_code == 0 and "tokens" in result.output
    result = invoke("--version")
    assert result.exit_code == 0 and __version__ in result.output


def test_tokens_sentence(tiny_bert_dir):
    result = invoke("tokens", "--model", str(tiny_bert_dir), "--text", "Hello world", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["tokens"] == ["[CLS]", "hello", "world", "[SEP]"]
    assert report["special_positions"]["cls"] == [0] and report["special_positions"]["sep"] == [3]
    assert report["attention_mask"] == [1, 1, 1, 1]


def test_tokens_sentence_pair_table(tiny_bert_dir):
    result = invoke("tokens", "--model", str(tiny_bert_dir), "--text", "a b", "--text-pair", "c")
    assert result.exit_code == 0
    assert "[SEP]" in result.stdout and "SEP at [3, 5]" in result.stdout


def test_tokens_dataset_report_and_outputs(tiny_bert_dir, write_tsv, toy_rows, tmp_path):
    path = write_tsv("t.tsv", toy_rows, header=("text", "label"))
    out = tmp_path / "run"
    result = invoke("tokens", "--model", str(tiny_bert_dir), "--data", str(path), "--max-length", "8",
                    "--out", str(out), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    train = report["splits"][0]
    assert train["rows"] == 40 and train["truncated"] > 0 and train["label_counts"] == {"neg": 20, "pos": 20}
    assert train["waste_dynamic_sorted"] <= train["waste_dynamic_random"] <= train["waste_static"]
    assert (out / "token_lengths.png").stat().st_size > 1000 and (out / "config.json").exists()


def test_tokens_sst2_report(shared_data):
    result = invoke("tokens", "--data", str(shared_data / "sst2" / "train.tsv"), "--text-column", "0",
                    "--label-column", "1", "--quiet")
    assert result.exit_code == 0, result.output
    assert "6,920" in result.stdout and "suggest" in result.stdout and "0=3310" in result.stdout


def test_user_error_exit_2_without_traceback(tmp_path):
    result = runner.invoke(app, ["tokens", "--data", str(tmp_path / "missing.tsv")])
    assert result.exit_code == 2
    assert "does not exist" in result.output and "Traceback" not in result.output


def test_bad_option_value_exit_2():
    result = runner.invoke(app, ["tokens", "--text", "x", "--max-length", "0"])
    assert result.exit_code == 2 and "--max-length must be a positive number" in result.output


def test_recipe_flag_with_override(tiny_bert_dir, tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text(f'[tokens]\nmodel = "{tiny_bert_dir}"\ntext = "from recipe"\n')
    result = invoke("tokens", "--recipe", str(recipe), "--text", "from cli", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["text"] == "from cli"


def test_subprocess_exit_codes(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    ok = subprocess.run([sys.executable, "-m", "bertkit", "--version"], capture_output=True, text=True, env=env)
    assert ok.returncode == 0 and __version__ in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "bertkit", "tokens", "--model", "no-such-org/no-model-x", "--text", "a"],
                         capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "bertkit[offline]" in bad.stderr and "Traceback" not in bad.stderr


# ---------------------------------------------------------------- every option is defined once, in the config


import dataclasses  # noqa: E402

import pytest  # noqa: E402
import typer  # noqa: E402

from bertkit import options  # noqa: E402
from bertkit.commands.registry import config_for_command, recipe_commands  # noqa: E402
from bertkit.data.options import DataOptions  # noqa: E402

CLI_ONLY = {"quiet", "json_output", "recipe", "help_all"}


def _click_command(name: str):
    return typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", recipe_commands())
def test_every_cli_option_default_and_help_comes_from_the_config(command):
    """The command's options are exactly its config's option fields (plus --quiet/--json/--recipe/--help-all), with
    the field's flag(s), default, help (marked when required) and panel (Advanced for the command's advanced
    options): cli/app.py declares none of them by hand."""
    from bertkit.cli.app import option_help

    cls = config_for_command(command)
    params = {p.name: p for p in _click_command(command).params}
    fields = {f.name: f for f in options.option_fields(cls)}
    assert set(params) == set(fields) | CLI_ONLY
    for name, f in fields.items():
        param = params[name]
        assert param.help == option_help(cls, f), name
        assert param.help.startswith(options.help_text(cls, f)), name
        assert param.rich_help_panel == options.help_panel(cls, f), name
        assert param.rich_help_panel in (f.metadata["panel"], options.ADVANCED), name
        assert set(options.flag_names(f)) <= set(param.opts), name
        expected = None if f.default == () else f.default  # a repeatable option's empty default
        assert param.default == expected, name
        if options.field_type(f)[0] is bool and f.default is True:
            assert param.secondary_opts == ["--no-" + options.flag(name)[2:]], name


def test_shared_data_options_have_one_definition():
    """--data, --label-column, ... are the DataOptions fields: every command's option has that field's help."""
    shared = {f.name: f for f in dataclasses.fields(DataOptions)}
    for command in recipe_commands():
        cls = config_for_command(command)
        for param in _click_command(command).params:
            if param.name in shared and param.name not in getattr(cls, "HELP_OVERRIDES", {}):
                assert param.help.startswith(options.help_text(cls, shared[param.name])), (command, param.name)


def test_recipe_values_go_through_the_option_types_and_flags_win(tiny_bert_dir, tmp_path, demo_dir):
    recipe = tmp_path / "r.toml"
    recipe.write_text('[tokens]\nmax-length = 32\nlimit = 5\ndtype = "fp32"\n', encoding="utf-8")
    result = invoke("tokens", "--model", str(tiny_bert_dir), "--data", str(demo_dir / "dev.tsv"), "--recipe",
                    str(recipe), "--max-length", "64", "--json")
    assert result.exit_code == 2 and "unknown keys: dtype" in result.output  # tokens has no precision option
    recipe.write_text('[tokens]\nmax-length = 32\nlimit = 5\n', encoding="utf-8")
    result = invoke("tokens", "--model", str(tiny_bert_dir), "--data", str(demo_dir / "dev.tsv"), "--recipe",
                    str(recipe), "--max-length", "64", "--json")
    report = json.loads(result.stdout)
    assert report["max_length"] == 64 and report["splits"][0]["rows"] == 5  # flag > recipe > default
    recipe.write_text('[tokens]\nlimit = 2.5\n', encoding="utf-8")
    bad = runner.invoke(app, ["tokens", "--model", str(tiny_bert_dir), "--data", str(demo_dir / "dev.tsv"),
                              "--recipe", str(recipe)])
    assert bad.exit_code == 2 and "limit must be an integer" in bad.output and "Traceback" not in bad.output


def test_old_option_name_dtype_still_works(tiny_bert_dir, demo_dir, tmp_path):
    """--precision is the one name for compute precision; --dtype (its old name in embed/probe/bench) is an alias."""
    result = invoke("embed", "--model", str(tiny_bert_dir), "--data", str(demo_dir / "dev.tsv"), "--limit", "4",
                    "--out", str(tmp_path / "s"), "--dtype", "fp32", "--json", "--quiet")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["dtype"] == "fp32"


def _finetune_summary_line(capsys, best_dev: dict) -> str:
    """The `best ...` line show_finetune prints for a run whose best dev scores are `best_dev`."""
    from pathlib import Path

    from bertkit.cli.output import View
    from bertkit.cli.show_training import show_finetune
    from bertkit.commands.finetune import FinetuneResult
    from bertkit.training.outcome import RunSummary

    summary = {"best_metric_name": "accuracy", "best_metric": 0.9, "best_step": 4, "train_samples_per_second": 12.0,
               "best_dev": best_dev, "outputs": {}, "global_step": 8}
    result = FinetuneResult(Path("runs/x"), RunSummary.from_json(summary), (), None, False, True, ())
    show_finetune(result, View(quiet=True))
    return next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("best "))


def test_finetune_summary_names_its_best_metric_once(capsys):
    """`best accuracy 0.900 at step 4 (accuracy 0.900, f1 ...)` said it twice: the other scores follow it."""
    line = _finetune_summary_line(capsys, {"accuracy": 0.9, "f1": 0.8, "loss": 0.3})
    assert line.count("accuracy") == 1 and "0.900" in line and "f1 0.800" in line, line
    line = _finetune_summary_line(capsys, {"accuracy": 0.9})
    assert line.count("accuracy") == 1 and "()" not in line and "at step 4; 12.0 train samples/s" in line, line


def test_finetune_summary_says_how_many_dev_rows_the_best_score_is_on(capsys):
    line = _finetune_summary_line(capsys, {"n": 872, "accuracy": 0.9, "f1": 0.8})
    assert "at step 4 on 872 dev rows (f1 0.80" in line, line


NUMPY_BLAS_THREADS = (
    "import json, os, bertkit.cli, numpy\n"
    "from threadpoolctl import threadpool_info\n"
    "pools = [p['num_threads'] for p in threadpool_info() if p['internal_api'] == 'openblas']\n"
    "print(json.dumps([os.environ['OPENBLAS_NUM_THREADS'], pools]))\n"
)


def blas_threads(env: dict[str, str]) -> list:
    """(OPENBLAS_NUM_THREADS, each loaded OpenBLAS's threads) in a fresh process that imported the CLI."""
    done = subprocess.run([sys.executable, "-c", NUMPY_BLAS_THREADS], capture_output=True, text=True, env=env,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_cli_gives_numpys_blas_one_thread_unless_the_user_set_it():
    """A command's process: torch's pool owns the cores; OpenBLAS's spinning threads would take them
    (bertkit/cli/__init__.py)."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    setting, pools = blas_threads(env)
    assert setting == "1" and set(pools) <= {1}  # every OpenBLAS loaded (numpy's) runs one thread
    env["OPENBLAS_NUM_THREADS"] = "3"
    assert blas_threads(env)[0] == "3"
