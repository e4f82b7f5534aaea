"""A command's config is a few nested option groups and its own options (issue 42: groups, not mixin chains): the
groups hold their options, the flags, recipe keys and config.json stay flat, and a flat record builds the config back."""

from __future__ import annotations

import dataclasses

import pytest

from bertkit import options
from bertkit.commands.finetune import FinetuneConfig
from bertkit.commands.registry import config_for_command, recipe_commands
from bertkit.commands.sweep import SweepConfig
from bertkit.data.options import DataOptions, TaskOptions
from bertkit.encoding.reading import ReadingOptions
from bertkit.errors import UserError
from bertkit.training.options import TrainingOptions

CONFIGS = {command: config_for_command(command) for command in recipe_commands()}
GROUPS = {group for cls in CONFIGS.values() for f in dataclasses.fields(cls)
          if (group := options.group_class(f)) is not None}


@pytest.mark.parametrize("command", sorted(CONFIGS))
def test_a_config_holds_its_groups_instead_of_inheriting_them(command):
    cls = CONFIGS[command]
    assert issubclass(cls, options.Config)
    inherited = [base.__name__ for base in cls.__mro__ if any(issubclass(base, group) for group in GROUPS)]
    assert not inherited, f"{cls.__name__} inherits the option groups {inherited}: it should hold them as fields"
    names = [f.name for f in options.all_fields(cls)]
    assert len(names) == len(set(names)), f"{cls.__name__}: an option is declared twice"
    held = {f.name for f in dataclasses.fields(cls) if options.group_class(f) is not None}
    assert not held & set(names), f"{cls.__name__}: a group is named as an option"


def test_finetune_reads_each_option_in_its_group():
    cfg = FinetuneConfig.of(data="train.csv", out="runs/a", epochs=2, max_length=16, text_column="sentence",
                            report_to=("tensorboard",), precision="fp32", label_all_pieces=False)
    assert isinstance(cfg.inputs, TaskOptions) and cfg.inputs.text_column == "sentence"
    assert isinstance(cfg.reading, ReadingOptions) and cfg.reading.max_length == 16
    assert isinstance(cfg.training, TrainingOptions) and cfg.training.epochs == 2
    assert cfg.tracking.trackers == ("tensorboard",) and cfg.compute.precision == "fp32"
    assert cfg.output.out == "runs/a" and cfg.model == "minilm-offline"


def test_flags_recipe_keys_and_records_stay_flat():
    values = options.flat_values(FinetuneConfig.of(data="train.csv", out="runs/a", max_length=16))
    assert values["max_length"] == 16 and values["data"] == "train.csv" and values["epochs"] == 3
    assert not {"inputs", "reading", "training"} & set(values)  # config.json keys are option names, as before
    assert options.config_dict(FinetuneConfig.of(data="train.csv", out="runs/a")) == \
        options.flat_values(FinetuneConfig.of(data="train.csv", out="runs/a"))
    flags = options.flag_fields(FinetuneConfig)
    assert "--max-length" in flags and "--text-column" in flags and "--reading-max-length" not in flags


@pytest.mark.parametrize("cls, values", [
    (FinetuneConfig, {"data": "train.csv", "out": "runs/a", "lr": "2e-5", "max_length": 64}),
    (SweepConfig, {"data": "train.csv", "out": "runs/s", "grid": ("lr=5e-5,3e-5",), "seeds": 2}),
])
def test_a_flat_record_builds_the_same_config(cls, values):
    cfg = cls.of(**values)
    assert options.build(cls, options.flat_values(cfg)) == cfg
    older = {k: v for k, v in options.flat_values(cfg).items() if k not in ("tag_scheme", "label_all_pieces")}
    assert options.build(cls, older) == cfg  # a record written before an option existed reads at its default


def test_replaced_puts_a_flat_change_into_its_group_and_checks_it_again():
    cfg = FinetuneConfig.of(data="train.csv", out="runs/a")
    copy = options.replaced(cfg, max_length=16, epochs=1)
    assert (copy.reading.max_length, copy.training.epochs, copy.inputs.data) == (16, 1, "train.csv")
    assert cfg.reading.max_length is None  # frozen: the original is unchanged
    with pytest.raises(UserError, match="--epochs must be a positive number"):
        options.replaced(cfg, epochs=0)
    with pytest.raises(TypeError, match="no option 'epoch'"):
        options.build(FinetuneConfig, {"epoch": 1})


def test_a_group_alone_is_plain_settings_and_the_config_checks_them():
    assert DataOptions(text_column="0").text_column == "0"  # the library takes a group on its own
    with pytest.raises(UserError, match="--dev-fraction must be between 0 and 1"):
        FinetuneConfig.of(data="train.csv", out="runs/a", dev_fraction=1.5)
    with pytest.raises(UserError, match="--max-length must be a positive number"):
        FinetuneConfig.of(data="train.csv", out="runs/a", max_length=0)


def test_a_group_named_as_an_option_is_refused():
    @dataclasses.dataclass(frozen=True)
    class Search:
        search: str = options.option("grid", "How.")

    @dataclasses.dataclass(frozen=True)
    class Clash(options.Config):
        search: Search = options.group(Search)

    with pytest.raises(TypeError, match="the group search is named as an option"):
        options.group_names(Clash)


def test_a_run_recorded_before_the_groups_is_the_same_run(tmp_path):
    """config.json keeps its flat keys; a tokens or bench run recorded before also held `preset_fill` (not an option:
    which options a --task-preset set), which a re-run does not compare."""
    from bertkit.commands.tokens import TokensConfig
    from bertkit.io import trail

    now = options.config_dict(TokensConfig.of(data="train.tsv", out=str(tmp_path / "t")))
    before = {**now, "preset_fill": {"preset": None, "options": []}}

    def read(config: dict) -> dict:  # a layout-1 config.json (no format), as its migration reads it
        return trail.migrated_run_config({"command": "tokens", "config": config})["config"]

    assert trail.config_differences(read(before), now) == []
    assert trail.config_differences(read({**before, "limit": 5}), now) == ["--limit: 5 -> None"]
