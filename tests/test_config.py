"""config.py: validation naming flags, recipe loading, precedence CLI > recipe > default."""

from __future__ import annotations

import pytest

from bertkit import config
from bertkit.errors import UserError


def test_all_problems_reported_at_once():
    with pytest.raises(UserError) as err:
        config.TokensConfig(text="hi", max_length=0, batch_size=-1, header="maybe")
    message = str(err.value)
    assert "--max-length" in message and "--batch-size" in message and "--header" in message


def test_text_or_data_exclusive():
    with pytest.raises(UserError, match="exactly one of --text"):
        config.TokensConfig()
    with pytest.raises(UserError, match="exactly one of --text"):
        config.TokensConfig(text="a", data="b.tsv")


def test_recipe_precedence(tmp_path):
    path = tmp_path / "r.toml"
    path.write_text('[tokens]\ntext = "from recipe"\nmax-length = 64\nbatch-size = 8\n')
    recipe = config.load_recipe(str(path), "tokens", config.TokensConfig)
    defaults = {"max_length": 128, "batch_size": 32, "model": "minilm-offline"}
    cfg = config.merge_config(config.TokensConfig, defaults, {"max_length": 32}, recipe)
    assert (cfg.text, cfg.max_length, cfg.batch_size, cfg.model) == ("from recipe", 32, 8, "minilm-offline")


def test_recipe_unknown_key_lists_valid_keys(tmp_path):
    path = tmp_path / "r.toml"
    path.write_text('[tokens]\ntext = "x"\nlearning-rate = 1\n')
    with pytest.raises(UserError, match=r"unknown keys: learning_rate.*Valid keys.*max-length"):
        config.load_recipe(str(path), "tokens", config.TokensConfig)


def test_recipe_wrong_table_and_bad_toml(tmp_path):
    other = tmp_path / "o.toml"
    other.write_text("[probe]\nC = 1.0\n")
    with pytest.raises(UserError, match=r"no \[tokens\] table"):
        config.load_recipe(str(other), "tokens", config.TokensConfig)
    bad = tmp_path / "b.toml"
    bad.write_text("[tokens\n")
    with pytest.raises(UserError, match="not valid TOML"):
        config.load_recipe(str(bad), "tokens", config.TokensConfig)
    with pytest.raises(UserError, match="not found"):
        config.recipe_path("no-such-recipe")
