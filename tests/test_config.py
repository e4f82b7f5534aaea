"""Command configs and options: validation naming flags, recipe loading, precedence CLI > recipe > default, --quality-args."""

from __future__ import annotations

import json

import pytest

from bertkit import options, recipes
from bertkit.commands.bench import QUALITY_CONFIGS, BenchConfig
from bertkit.commands.distill import DistillConfig
from bertkit.commands.embed import EmbedConfig
from bertkit.commands.evaluate import EvaluateConfig
from bertkit.commands.finetune import FinetuneConfig
from bertkit.commands.predict import PredictConfig
from bertkit.commands.probe import ProbeConfig
from bertkit.commands.registry import config_for_command, recipe_commands
from bertkit.commands.tokens import TokensConfig
from bertkit.errors import UserError
from bertkit.measure import quality as quality_args
from bertkit.options import all_fields
from bertkit.scoring import options as groups


def test_all_problems_reported_at_once():
    with pytest.raises(UserError) as err:
        TokensConfig.of(text="hi", max_length=0, batch_size=-1, header="maybe")
    message = str(err.value)
    assert "--max-length" in message and "--batch-size" in message and "--header" in message


def test_text_or_data_exclusive():
    with pytest.raises(UserError, match="exactly one of --text"):
        TokensConfig.of()
    with pytest.raises(UserError, match="exactly one of --text"):
        TokensConfig.of(text="a", data="b.tsv")


def test_recipe_precedence(tiny_bert_dir, demo_dir, tmp_path):
    """CLI flag > recipe value > default, the way the CLI resolves them: --recipe fills the command's option
    defaults (Typer's default_map), the flags given override them, and the config is built once from the result."""
    from typer.testing import CliRunner

    from bertkit.cli.app import app

    path = tmp_path / "r.toml"
    path.write_text(f'[tokens]\ndata = "{(demo_dir / "dev.tsv").as_posix()}"\nmax-length = 64\nbatch-size = 8\n')
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["tokens", "--recipe", str(path), "--model", str(tiny_bert_dir), "--max-length",
                                      "32", "--out", str(out), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    cfg = json.loads((out / "config.json").read_text(encoding="utf-8"))["config"]
    assert (cfg["max_length"], cfg["batch_size"], cfg["limit"], cfg["seed"]) == (32, 8, None, 42)
    assert cfg["data"] == (demo_dir / "dev.tsv").as_posix() and cfg["model"] == str(tiny_bert_dir)


def test_recipe_unknown_key_lists_valid_keys(tmp_path):
    path = tmp_path / "r.toml"
    path.write_text('[tokens]\ntext = "x"\nlearning-rate = 1\n')
    with pytest.raises(UserError, match=r"unknown keys: learning_rate.*Valid keys.*max-length"):
        recipes.load_recipe(str(path), "tokens", TokensConfig)


def test_recipe_wrong_table_and_bad_toml(tmp_path):
    other = tmp_path / "o.toml"
    other.write_text("[probe]\nC = 1.0\n")
    with pytest.raises(UserError, match=r"no \[tokens\] table"):
        recipes.load_recipe(str(other), "tokens", TokensConfig)
    bad = tmp_path / "b.toml"
    bad.write_text("[tokens\n")
    with pytest.raises(UserError, match="not valid TOML"):
        recipes.load_recipe(str(bad), "tokens", TokensConfig)
    with pytest.raises(UserError, match="not found"):
        recipes.recipe_path("no-such-recipe")


# ---------------------------------------------------------------- issue 13: value types, numbers, devices, quality args


FIELDS = {f.name: f for f in all_fields(FinetuneConfig)}


def test_check_value_accepts_the_field_types():
    assert options.check_value(FIELDS["epochs"], 2) == 2
    assert options.check_value(FIELDS["warmup_ratio"], 0) == 0.0
    assert isinstance(options.check_value(FIELDS["warmup_ratio"], 0), float)
    assert options.check_value(FIELDS["lr"], 1) == "1" and options.check_value(FIELDS["lr"], 1e-4) == "0.0001"
    assert options.check_value(FIELDS["text_column"], 0) == "0"
    assert options.check_value(FIELDS["text_column"], None) is None
    assert options.check_value(FIELDS["freeze_encoder"], True) is True
    text = {f.name: f for f in all_fields(PredictConfig)}["text"]
    assert options.check_value(text, ["a", "b"]) == ("a", "b") and options.check_value(text, "one") == ("one",)


@pytest.mark.parametrize(("name", "value", "message"), [
    ("epochs", 1.5, r"must be an integer \(e\.g\. 3\), not 1\.5 \(a float\)"),
    ("epochs", "three", r"must be an integer.*not 'three' \(a string\)"),
    ("epochs", True, r"must be an integer.*\(a boolean\)"),
    ("limit", 20.5, r"must be an integer"),
    ("warmup_ratio", "fast", r"must be a number"),
    ("lr", True, r"must be a string"),
    ("freeze_encoder", 1, r"must be true or false"),
    ("text_column", 1.5, r"must be a string"),
    ("model", None, r"must be a string"),
])
def test_check_value_refuses_wrong_types(name, value, message):
    with pytest.raises(TypeError, match=message):
        options.check_value(FIELDS[name], value)


def test_every_config_field_has_a_checkable_type():
    for command in recipe_commands():
        for f in options.all_fields(config_for_command(command)):
            options.field_type(f)  # raises for a type check_value does not know


def test_recipe_values_of_the_wrong_type_name_the_key(tmp_path):
    path = tmp_path / "r.toml"
    path.write_text('[finetune]\nepochs = 1.5\nbatch-size = 2.5\nlr = 1\ndata = "x.tsv"\n')
    with pytest.raises(UserError, match=r"wrong type: epochs must be an integer.*; batch-size must be an integer") as err:
        recipes.load_recipe(str(path), "finetune", FinetuneConfig)
    assert "lr must" not in str(err.value)  # an int is a valid number (--lr: a number or auto)
    path.write_text('[finetune]\nlr = 1\nepochs = 2\n')
    assert recipes.load_recipe(str(path), "finetune", FinetuneConfig) == {"lr": "1", "epochs": 2}


@pytest.mark.parametrize(("kw", "message"), [
    ({"lr": float("inf")}, r"--lr must be a finite number; got inf"),
    ({"lr": float("nan")}, r"--lr must be a finite number; got nan"),
    ({"weight_decay": float("nan")}, r"--weight-decay must be a finite number"),
    ({"warmup_ratio": float("nan")}, r"^--warmup-ratio must be a finite number"),
    ({"dev_fraction": float("nan")}, r"^--dev-fraction must be a finite number"),
    ({"seed": -1}, r"--seed must be between 0 and 4294967295.*got -1"),
    ({"seed": 99999999999}, r"--seed must be between 0 and 4294967295.*got 99999999999"),
])
def test_numbers_must_be_finite_and_seeds_in_range(kw, message):
    with pytest.raises(UserError, match=message):
        FinetuneConfig.of(data="x.tsv", out="o", **kw)


def test_seed_bounds_are_accepted():
    assert FinetuneConfig.of(data="x.tsv", out="o", seed=0).inputs.seed == 0
    assert FinetuneConfig.of(data="x.tsv", out="o", seed=2**32 - 1).inputs.seed == 2**32 - 1


def test_probe_c_and_grid_must_be_finite():
    with pytest.raises(UserError, match="--C must be a finite number"):
        ProbeConfig.of(data="x.tsv", C=float("nan"))
    with pytest.raises(UserError, match="--C-grid must be positive finite numbers"):
        ProbeConfig.of(data="x.tsv", cv=3, C_grid="nan,1")
    with pytest.raises(UserError, match="--min-seconds must be a finite number"):
        BenchConfig.of(preset="distilbert-vs-bert", min_seconds=float("inf"))


@pytest.mark.parametrize(("device", "message"), [
    ("gpu", r"--device 'gpu' is not a device name \(for an NVIDIA GPU: --device cuda\)"),
    ("cuda:x", r"not a device name. Valid: cpu, cuda, cuda:N"),
    ("mps:1", r"not a device name"),
])
def test_device_names_are_checked(device, message):
    with pytest.raises(UserError, match=message):
        EmbedConfig.of(data="x.tsv", out="o", device=device)


def test_device_availability_is_checked(monkeypatch):
    import torch

    from bertkit.models import loading

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match=r"--device cuda: CUDA is not available.*--device cpu"):
        EmbedConfig.of(data="x.tsv", out="o", device="cuda")
    with pytest.raises(UserError, match=r"CUDA is not available"):
        loading.choose_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(UserError, match=r"--device cuda:1: this machine has 1 CUDA device\(s\), cuda:0 to cuda:0"):
        BenchConfig.of(preset="distilbert-vs-bert", device="cuda:1")
    assert loading.device_problem("cuda:0") is None and loading.device_problem("CPU") is None
    assert loading.choose_device("cpu").type == "cpu"
    # the paper protocol runs on the CPU whatever --device says: only the name is checked there
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert BenchConfig.of(preset="distilbert-vs-bert", device="cuda", protocol="paper").device == "cuda"


def test_command_flags_match_the_real_commands():
    import typer

    from bertkit.cli.app import app

    group = typer.main.get_command(app)
    for kind in tuple(QUALITY_CONFIGS):
        params = [p for p in group.commands[kind].params if p.param_type_name == "option"]
        real = {name: not p.is_flag for p in params for name in [*p.opts, *p.secondary_opts]}
        assert quality_args.command_flags(config_for_command(kind)) == real, kind


@pytest.mark.parametrize(("quality", "args", "message"), [
    ("probe", "--C '1", r"cannot be split into arguments \(No closing quotation\)"),
    ("probe", "--epochs 1", r"`bertkit probe` has no option '--epochs'"),
    ("finetune", "--epoch 1", r"`bertkit finetune` has no option '--epoch' \(did you mean --epochs\?\)"),
    ("finetune", "--lr", r"--lr needs a value"),
    ("finetune", "1", r"`bertkit finetune` has no option '1'"),
    ("probe", "--model other", r"--model is set by `bertkit bench` itself"),
    ("none", "--epochs 1", r"--quality is none, so it would be ignored"),
])
def test_quality_args_are_checked_before_the_benchmark(quality, args, message):
    with pytest.raises(UserError, match=message):
        BenchConfig.of(preset="distilbert-vs-bert", data="x.tsv", quality=quality, quality_args=args)


def test_valid_quality_args_pass():
    cfg = BenchConfig.of(preset="distilbert-vs-bert", data="x.tsv", quality="probe,finetune",
                             quality_args="--batch-size 8 --class-weight=balanced -q --max-length 64")
    assert cfg.quality_args
    cfg = BenchConfig.of(preset="distilbert-vs-bert", data="x.tsv", quality="probe",
                             quality_args="--layers -1 --no-baselines --C 0.5")
    assert cfg.quality_kinds == ["probe"]


def test_predict_refuses_empty_texts():
    with pytest.raises(UserError, match=r"--text number 2, 3 \(of 3\) is empty"):
        PredictConfig.of(model="m", text=("fine", "", "\u200b"))


def test_a_recipe_threshold_may_be_a_number(tmp_path):
    """`threshold = 0.4` in a recipe is the text option --threshold 0.4 (the field is text: tune is also allowed)."""
    from bertkit.recipes import load_recipe

    recipe = tmp_path / "r.toml"
    recipe.write_text('[finetune]\ndata = "x.tsv"\nout = "o"\nthreshold = 0.4\n')
    values = load_recipe(str(recipe), "finetune", FinetuneConfig)
    assert values["threshold"] == "0.4"
    assert FinetuneConfig.of(**values).inputs.threshold == "0.4"


def test_metric_for_best_is_left_to_the_shape_unless_given():
    """Issue 20: no --metric-for-best (nor recipe, nor preset) stays None until the data's shape is known, so an
    explicit `accuracy` on regression data can be refused while the default becomes pearson."""
    from bertkit.scoring import shapes as objectives

    assert FinetuneConfig.of(data="x.tsv", out="o").training.metric_for_best is None
    assert DistillConfig.of(data="x.tsv", out="o", teacher="t").training.metric_for_best is None
    assert groups.metric_for_best_problems(None, []) == []
    assert [objectives.best_metric(task, None) for task in ("single_label", "regression", "multi_label")] == \
        ["accuracy", "pearson", "micro_f1"]
    with pytest.raises(UserError, match="accuracy is a single-label metric; this is regression data"):
        objectives.best_metric("regression", "accuracy")
    assert objectives.best_metric("single_label", "my_module/score") == "my_module/score"  # modules: checked later
    assert objectives.shape_metrics("single_label", 3) == ("accuracy", "f1", "mcc", "precision", "recall", "ece", "loss")


def test_int8_is_an_inference_precision_only():
    from bertkit.models.compute import INFERENCE_PRECISIONS, PRECISIONS

    assert INFERENCE_PRECISIONS == (*PRECISIONS, "int8")
    for cfg in (EmbedConfig.of(data="x.tsv", out="o", precision="int8"),
                PredictConfig.of(model="m", text=("a",), precision="int8"),
                EvaluateConfig.of(model="m", data="x.tsv", precision="int8"),
                ProbeConfig.of(data="x.tsv", precision="int8"),
                BenchConfig.of(preset="distilbert-vs-bert", precision="int8")):
        assert cfg.precision == "int8"
    for training, extra in ((FinetuneConfig, {}), (DistillConfig, {"teacher": "t"})):
        with pytest.raises(UserError, match=r"--precision must be one of auto, fp32, bf16, fp16; got 'int8'"):
            training.of(data="x.tsv", precision="int8", **extra)
