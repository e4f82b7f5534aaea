"""Malformed input, command by command: every case exits 2 with a message that names the problem and the fix,
prints no traceback, and leaves every file that existed before byte-for-byte untouched.

The corpus is one table (`CASES`): (id, command, argv builder, problem regex, fix regex). Each argv builder gets a
fresh workspace (`Workspace`) that makes the bad files on demand; outputs the case may touch (--out) are
pre-populated with a real previous result where that makes sense, so "untouched" is checked on real outputs.
A few cases also run as separate processes. Cases for commands that are not registered yet are skipped.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import typer
from older_records import resealed
from typer.testing import CliRunner

from bertkit.cli.app import app

runner = CliRunner()
REGISTERED = set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def _rows(n: int = 40) -> list[tuple[str, str]]:
    good = ["great", "wonderful", "lovely", "superb", "delightful"]
    bad = ["awful", "terrible", "boring", "dreadful", "horrible"]
    rows = []
    for i in range(n // 2):
        rows.append((f"a {good[i % 5]} film , truly {good[(i + 2) % 5]}", "pos"))
        rows.append((f"an {bad[i % 5]} movie , really {bad[(i + 1) % 5]}", "neg"))
    return rows


def _tsv(rows: list[tuple[str, ...]], header: tuple[str, ...] | None = ("sentence", "label")) -> str:
    lines = (["\t".join(header)] if header else []) + ["\t".join(r) for r in rows]
    return "\n".join(lines) + "\n"


GOOD_TSV = _tsv(_rows())
BIG_LINE = "word " * 210_000  # ~1 MB of text on one line


# ---------------------------------------------------------------- premade real outputs (built once per session)


def _invoke_ok(argv: list[str]) -> None:
    result = runner.invoke(app, argv, catch_exceptions=False)
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="session")
def premade(tmp_path_factory, tiny_bert_dir, tiny_distilbert_dir) -> dict[str, Path]:
    """Real outputs to copy into a case's workspace: an embed store, a finished finetune run, a classifier folder."""
    root = tmp_path_factory.mktemp("premade")
    data = root / "train.tsv"
    data.write_text(GOOD_TSV, encoding="utf-8")
    made: dict[str, Path] = {"data": data}
    if "embed" in REGISTERED:
        made["store"] = root / "store"
        _invoke_ok(["embed", "--model", str(tiny_bert_dir), "--data", str(data), "--out", str(made["store"]),
                    "--shard-size", "16", "--quiet"])
    if "finetune" in REGISTERED:
        made["run"] = root / "run"
        _invoke_ok(["finetune", "--model", str(tiny_bert_dir), "--data", str(data), "--out", str(made["run"]),
                    "--epochs", "1", "--batch-size", "8", "--save-every", "2", "--lr", "1e-3", "--keep-checkpoints",
                    "--quiet"])  # its copies stand for unfinished runs too (metrics.json removed): checkpoints kept
        made["clf"] = made["run"] / "best"
    return made


# ---------------------------------------------------------------- a workspace per case


class Workspace:
    """The files one case needs, made on demand under `root` (everything under root is snapshotted)."""

    def __init__(self, root: Path, tiny: Path, distil: Path, premade: dict[str, Path]):
        self.root, self.tiny_dir, self.distil_dir, self.premade = root, tiny, distil, premade

    @property
    def tiny(self) -> str:
        return str(self.tiny_dir)

    @property
    def distil(self) -> str:
        return str(self.distil_dir)

    def file(self, name: str, content: str | bytes) -> str:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        return str(path)

    def good(self, name: str = "train.tsv") -> str:
        return self.file(name, GOOD_TSV)

    def path(self, name: str) -> str:
        return str(self.root / name)

    def a_file(self) -> str:
        """An existing regular file (an --out that is a file)."""
        return self.file("existing.txt", "keep me\n")

    def under_a_file(self, name: str = "sub") -> str:
        """A path below a regular file: mkdir/open fail with a real OS error even for root."""
        return str(Path(self.a_file()) / name)

    def foreign_dir(self) -> str:
        self.file("mine/notes.txt", "my own notes\n")
        return self.path("mine")

    def copy(self, key: str, name: str | None = None) -> str:
        if key not in self.premade:
            pytest.skip(f"premade {key} needs a command that is not registered yet")
        target = self.root / (name or key)
        shutil.copytree(self.premade[key], target)
        return str(target)

    def model_variant(self, kind: str) -> str:
        """The tiny model, damaged in one way: noweights, pickle, truncated, customcode."""
        target = self.root / f"model-{kind}"
        if target.exists():
            return str(target)
        shutil.copytree(self.tiny_dir, target)
        weights = target / "model.safetensors"
        if kind == "noweights":
            weights.unlink()
        elif kind == "pickle":
            weights.unlink()
            (target / "pytorch_model.bin").write_bytes(b"\x80\x04K\x01.")  # a valid pickle of the int 1
        elif kind == "truncated":
            data = weights.read_bytes()
            weights.write_bytes(data[: len(data) // 3])
        elif kind == "customcode":
            cfg = json.loads((target / "config.json").read_text())
            cfg.update(model_type="bertkit-custom", auto_map={"AutoConfig": "custom.C", "AutoModel": "custom.M"})
            (target / "config.json").write_text(json.dumps(cfg))
            (target / "custom.py").write_text("raise SystemExit('custom code ran')\n")
        return str(target)

    def premade_data(self) -> str:
        """The exact data file the premade run was trained on (a resume must see the same data)."""
        return str(self.premade["data"])

    def unfinished_store(self) -> str:
        """What a killed first `bertkit embed` leaves: identity.json and some shards, no manifest."""
        store = Path(self.copy("store", "unfinished-store"))
        manifest = json.loads((store / "manifest.json").read_text())
        for name in ("manifest.json", "features.npy", "labels.npy"):
            (store / name).unlink(missing_ok=True)
        (store / "identity.json").write_text(json.dumps(manifest["identity"]))
        return str(store)

    def damaged_store(self) -> str:
        store = Path(self.copy("store"))
        features = store / "features.npy"
        features.write_bytes(features.read_bytes()[:200])
        return str(store)

    def unfinished_run_with_truncated_checkpoint(self) -> str:
        run = Path(self.copy("run"))
        (run / "metrics.json").unlink()  # not finished: a re-run resumes from the newest checkpoint
        newest = max((run / "checkpoints").glob("step-*"), key=lambda p: int(p.name.split("-")[1]))
        for weights in newest.glob("*.safetensors"):
            weights.write_bytes(weights.read_bytes()[:100])
        return str(run)


@dataclass(frozen=True)
class Case:
    id: str
    command: str
    argv: Callable[[Workspace], list[str]]
    problem: str
    """Regex: the message names what is wrong."""
    fix: str
    """Regex: the message names the fix (a flag, a file, a command)."""


def tokens(w: Workspace, *extra: str) -> list[str]:
    return ["tokens", "--model", w.tiny, *extra]


def embed(w: Workspace, *extra: str, out: str | None = None, model: str | None = None) -> list[str]:
    return ["embed", "--model", model or w.tiny, "--out", out or w.copy("store"), "--quiet", "--shard-size", "16",
            *extra]


def finetune(w: Workspace, *extra: str, out: str | None = None, model: str | None = None) -> list[str]:
    return ["finetune", "--model", model or w.tiny, "--out", out or w.copy("run"), "--epochs", "1",
            "--batch-size", "8", "--save-every", "2", "--lr", "1e-3", "--quiet", *extra]


UNSEEN_DEV = _tsv([("a great film", "pos"), ("so so", "meh"), ("awful", "neg")])
ONE_CLASS = _tsv([(f"row {i}", "pos") for i in range(20)])
NO_LABELS = _tsv([(f"row {i}",) for i in range(20)], header=("sentence",))
CSV_IN_TSV = "sentence,label\n" + "\n".join(f"{t},{lab}" for t, lab in _rows(10)) + "\n"
EMPTY_CELLS = _tsv([("a great film", "pos"), ("", "neg"), ("   ", "pos"), ("awful", "neg")])
BLANK_LABELS = _tsv([("a great film", "pos"), ("bad", ""), ("awful", "neg"), ("fine", "pos")])
NAN_LABELS = _tsv([("a great film", "pos"), ("bad", "NaN"), ("awful", "neg"), ("fine", "nan")])
LATIN1 = ("sentence\tlabel\n" + "un film tr\xe8s r\xe9ussi\tpos\n" + "nul\tneg\n").encode("latin-1")
BIG_LINE_BAD_LABEL = _tsv([("a great film", "pos"), (BIG_LINE, ""), ("awful", "neg")])

CASES = [
    # ------------------------------------------------ data files (through `tokens`, the cheapest reader)
    Case("missing-file", "tokens", lambda w: tokens(w, "--data", w.path("nope.tsv")), r"nope\.tsv does not exist", r"--data"),
    Case("empty-file", "tokens", lambda w: tokens(w, "--data", w.file("e.tsv", "")), r"is empty \(0 bytes\)", r"--data"),
    Case("whitespace-only", "tokens", lambda w: tokens(w, "--data", w.file("w.tsv", "\n \n\t\n")), r"only whitespace", r"--data"),
    Case("header-only", "tokens", lambda w: tokens(w, "--data", w.file("h.tsv", "sentence\tlabel\n")),
         r"header but no data rows", r"--header no"),
    Case("wrong-delimiter", "tokens",
         lambda w: tokens(w, "--data", w.file("c.tsv", CSV_IN_TSV), "--text-column", "sentence"),
         r"single column.*delimiter", r"--text-column"),
    Case("unknown-text-column", "tokens", lambda w: tokens(w, "--data", w.good(), "--text-column", "review"),
         r"Column 'review'.*not found.*columns are: sentence, label", r"Pass --text-column"),
    Case("unknown-label-column", "tokens", lambda w: tokens(w, "--data", w.good(), "--label-column", "stars"),
         r"Column 'stars'.*not found", r"Pass --label-column"),
    Case("column-index-out-of-range", "tokens", lambda w: tokens(w, "--data", w.good(), "--text-column", "7"),
         r"Column '7'.*0-based indexes 0\.\.1", r"--text-column"),
    Case("missing-pair-column", "tokens", lambda w: tokens(w, "--data", w.good(), "--text-pair-column", "sentence2"),
         r"Column 'sentence2'.*not found", r"Pass --text-pair-column"),
    Case("empty-text-cells", "tokens", lambda w: tokens(w, "--data", w.file("t.tsv", EMPTY_CELLS)),
         r"2 empty text cell\(s\).*lines 3, 4", r"Remove those rows or fill them in"),
    Case("blank-labels", "tokens", lambda w: tokens(w, "--data", w.file("b.tsv", BLANK_LABELS), "--label-column", "label"),
         r"1 missing/blank label\(s\).*line 3\b", r"Fill them in or drop those rows"),
    Case("nan-labels", "tokens", lambda w: tokens(w, "--data", w.file("n.tsv", NAN_LABELS), "--label-column", "label"),
         r"2 missing/blank label\(s\).*lines 3, 5", r"Fill them in"),
    Case("non-utf8-bytes", "tokens", lambda w: tokens(w, "--data", w.file("l.tsv", LATIN1)),
         r"not valid utf-8: byte 0xe8 at line 2", r"--encoding latin-1"),
    Case("unknown-encoding", "tokens", lambda w: tokens(w, "--data", w.good(), "--encoding", "klingon"),
         r"Unknown --encoding 'klingon'", r"utf-8 or latin-1"),
    Case("unsupported-file-type", "tokens", lambda w: tokens(w, "--data", w.file("d.xlsx", "x")),
         r"unsupported file type \.xlsx", r"Supported: .*\.tsv"),
    Case("data-is-directory", "tokens", lambda w: tokens(w, "--data", str(w.root)), r"is a directory", r"--data"),
    Case("broken-jsonl", "tokens", lambda w: tokens(w, "--data", w.file("j.jsonl", '{"text": "ok", "label": 1}\n{"text": \n')),
         r"not valid JSON Lines", r"Fix the file"),
    Case("1mb-line-with-blank-label", "tokens",
         lambda w: tokens(w, "--data", w.file("big.tsv", BIG_LINE_BAD_LABEL), "--label-column", "label"),
         r"missing/blank label\(s\).*line 3\b", r"Fill them in"),
    Case("unreachable-hub-dataset", "tokens",
         lambda w: tokens(w, "--data", "no-such-org/no-such-dataset-bertkit", "--text-column", "text"),
         r"Could not load hub dataset 'no-such-org/no-such-dataset-bertkit'", r"--data train\.tsv"),
    Case("limit-zero", "tokens", lambda w: tokens(w, "--data", w.good(), "--limit", "0"),
         r"--limit must be a positive number, got 0", r"--limit"),
    # ------------------------------------------------ models
    Case("unreachable-hub-model", "tokens", lambda w: ["tokens", "--model", "no-such-org/no-such-model-bertkit", "--text", "hi"],
         r"Could not load model 'no-such-org/no-such-model-bertkit'", r"local model folder|minilm-offline"),
    Case("model-folder-missing", "tokens", lambda w: ["tokens", "--model", w.path("no-model"), "--text", "hi"],
         r"Model folder .*no-model does not exist", r"minilm-offline"),
    Case("model-is-a-file", "tokens", lambda w: ["tokens", "--model", w.a_file(), "--text", "hi"],
         r"is a file; it must be a model folder", r"minilm-offline"),
    Case("max-length-over-model-limit", "tokens", lambda w: tokens(w, "--data", w.good(), "--max-length", "512"),
         r"--max-length 512 is more than model .* accepts \(128 tokens\)", r"Pass --max-length 128 or less"),
    # ------------------------------------------------ options and outputs
    Case("batch-size-zero", "tokens", lambda w: tokens(w, "--data", w.good(), "--batch-size", "0"),
         r"--batch-size must be a positive number, got 0", r"--batch-size"),
    Case("batch-size-negative", "tokens", lambda w: tokens(w, "--data", w.good(), "--batch-size", "-4"),
         r"--batch-size must be a positive number, got -4", r"--batch-size"),
    Case("out-is-a-file", "tokens", lambda w: tokens(w, "--data", w.good(), "--out", w.a_file()),
         r"--out .*existing\.txt is an existing file", r"Pass a directory path for --out"),
    Case("out-unwritable", "tokens", lambda w: tokens(w, "--data", w.good(), "--out", w.under_a_file()),
         r"Cannot write to --out .*existing\.txt/sub", r"Choose a directory you can write to"),
    Case("out-in-proc", "tokens", lambda w: tokens(w, "--data", w.good(), "--out", "/proc/bertkit-no/run"),
         r"Cannot write to --out /proc/bertkit-no/run", r"Choose a directory you can write to"),
    Case("recipe-missing", "tokens", lambda w: tokens(w, "--text", "hi", "--recipe", w.path("nope.toml")),
         r"Unknown recipe '.*nope\.toml': not found", r"Pass --recipe .*`bertkit recipes list`"),
    Case("recipe-unknown-key", "tokens",
         lambda w: tokens(w, "--text", "hi", "--recipe", w.file("r.toml", "[tokens]\nmax-lenght = 64\n")),
         r"unknown keys: max_lenght", r"Valid keys .*max-length"),
    Case("recipe-not-toml", "tokens", lambda w: tokens(w, "--text", "hi", "--recipe", w.file("r.toml", "[tokens\n")),
         r"is not valid TOML", r"Fix the file"),
    # ------------------------------------------------ embed
    Case("embed-missing-file", "embed", lambda w: embed(w, "--data", w.path("nope.tsv")), r"does not exist", r"--data"),
    Case("embed-header-only", "embed", lambda w: embed(w, "--data", w.file("h.tsv", "sentence\tlabel\n")),
         r"header but no data rows", r"--header no"),
    Case("embed-non-utf8", "embed", lambda w: embed(w, "--data", w.file("l.tsv", LATIN1)), r"not valid utf-8", r"--encoding"),
    Case("embed-unseen-dev-labels", "embed",
         lambda w: embed(w, "--data", w.good(), "--dev", w.file("dev.tsv", UNSEEN_DEV), out=w.path("split-store")),
         r"dev data .* has labels not seen in the training data: 'meh'", r"Fix the labels"),
    Case("embed-batch-size-zero", "embed", lambda w: embed(w, "--data", w.good(), "--batch-size", "0"),
         r"--batch-size must be a positive integer or auto; got '0'", r"--batch-size"),
    Case("embed-batch-size-negative", "embed", lambda w: embed(w, "--data", w.good(), "--batch-size", "-8"),
         r"--batch-size must be a positive integer or auto; got '-8'", r"--batch-size"),
    Case("embed-max-length-over-limit", "embed", lambda w: embed(w, "--data", w.good(), "--max-length", "1024"),
         r"--max-length 1024 is more than model", r"--max-length 128 or less"),
    Case("embed-layer-out-of-range", "embed", lambda w: embed(w, "--data", w.good(), "--layers", "5"),
         r"--layers 5 is out of range: the model has 2 layers", r"Pass --layers"),
    Case("embed-out-is-a-file", "embed", lambda w: embed(w, "--data", w.good(), out=w.a_file()),
         r"existing\.txt is an existing file", r"directory path for --out"),
    Case("embed-out-unwritable", "embed", lambda w: embed(w, "--data", w.good(), out=w.under_a_file()),
         r"Cannot (write to|create) --out .*existing\.txt/sub", r"Choose (a directory you can write to|another --out)"),
    Case("embed-out-holds-other-files", "embed", lambda w: embed(w, "--data", w.good(), out=w.foreign_dir()),
         r"holds files bertkit did not write \(notes\.txt\)", r"Choose another --out"),
    Case("embed-store-from-another-model", "embed", lambda w: embed(w, "--data", w.good(), model=w.distil),
         r"holds a `bertkit embed` run made with different settings:.*model:", r"--overwrite"),
    Case("embed-damaged-store", "embed", lambda w: embed(w, "--data", w.premade_data(), out=w.damaged_store()),
         r"holds files changed since bertkit wrote them \(features\.npy\)", r"delete the changed ones"),
    Case("embed-model-without-weights", "embed", lambda w: embed(w, "--data", w.good(), model=w.model_variant("noweights")),
         r"has no weights \(no \*\.safetensors", r"model\.safetensors"),
    Case("embed-pickle-only-checkpoint", "embed", lambda w: embed(w, "--data", w.good(), model=w.model_variant("pickle")),
         r"only pickle weights \(pytorch_model\.bin\)", r"save_pretrained.*safe_serialization=True"),
    Case("embed-truncated-weights", "embed", lambda w: embed(w, "--data", w.good(), model=w.model_variant("truncated")),
         r"weights in model folder .* are damaged", r"--model"),
    Case("embed-custom-code-model", "embed", lambda w: embed(w, "--data", w.good(), model=w.model_variant("customcode")),
         r"needs custom code", r"--trust-remote-code"),
    Case("embed-unreachable-hub-model", "embed", lambda w: embed(w, "--data", w.good(), model="no-such-org/nothing-bertkit"),
         r"Could not load model 'no-such-org/nothing-bertkit'", r"minilm-offline"),
    # ------------------------------------------------ finetune
    Case("finetune-single-class", "finetune", lambda w: finetune(w, "--data", w.file("one.tsv", ONE_CLASS)),
         r"single class \('pos'\)", r"label column"),
    Case("finetune-unseen-dev-labels", "finetune", lambda w: finetune(w, "--data", w.good(), "--dev", w.file("dev.tsv", UNSEEN_DEV)),
         r"dev data .* has labels not seen in the training data: 'meh'", r"Fix the labels"),
    Case("finetune-no-label-column", "finetune", lambda w: finetune(w, "--data", w.file("nl.tsv", NO_LABELS)),
         r"No label column in .*nl\.tsv", r"pass --label-column"),
    Case("finetune-blank-labels", "finetune", lambda w: finetune(w, "--data", w.file("b.tsv", BLANK_LABELS)),
         r"missing/blank label", r"Fill them in"),
    Case("finetune-batch-size-zero", "finetune", lambda w: finetune(w, "--data", w.good(), "--batch-size", "0"),
         r"--batch-size must be a positive number, got 0", r"--batch-size"),
    Case("finetune-batch-size-negative", "finetune", lambda w: finetune(w, "--data", w.good(), "--batch-size", "-2"),
         r"--batch-size must be a positive number, got -2", r"--batch-size"),
    Case("finetune-dev-fraction", "finetune", lambda w: finetune(w, "--data", w.good(), "--dev-fraction", "1.5"),
         r"--dev-fraction must be between 0 and 1", r"--dev-fraction"),
    Case("finetune-max-length-over-limit", "finetune",
         lambda w: finetune(w, "--data", w.good(), "--max-length", "600", out=w.path("fresh")),
         r"--max-length 600 is more than model", r"--max-length 128 or less"),
    Case("finetune-out-is-a-file", "finetune", lambda w: finetune(w, "--data", w.good(), out=w.a_file()),
         r"existing\.txt is an existing file|not a directory", r"--out"),
    Case("finetune-out-unwritable", "finetune", lambda w: finetune(w, "--data", w.good(), out=w.under_a_file()),
         r"Cannot write to --out", r"--out|directory you can write to"),
    Case("finetune-out-holds-other-files", "finetune", lambda w: finetune(w, "--data", w.good(), out=w.foreign_dir()),
         r"holds files bertkit did not write \(notes\.txt\)", r"Choose another --out"),
    Case("finetune-out-holds-other-run", "finetune", lambda w: finetune(w, "--data", w.premade_data(), "--epochs", "2"),
         r"holds a `bertkit finetune` run made with different settings:.*--epochs: 1 -> 2", r"--overwrite"),
    Case("finetune-pickle-only-checkpoint", "finetune",
         lambda w: finetune(w, "--data", w.good(), model=w.model_variant("pickle"), out=w.path("fresh")),
         r"only pickle weights", r"safetensors"),
    Case("finetune-model-without-weights", "finetune",
         lambda w: finetune(w, "--data", w.good(), model=w.model_variant("noweights"), out=w.path("fresh")),
         r"has no weights", r"model\.safetensors"),
    Case("finetune-truncated-checkpoint", "finetune",
         lambda w: finetune(w, "--data", w.premade_data(), out=w.unfinished_run_with_truncated_checkpoint()),
         r"checkpoint.*(damaged|corrupt|truncated|incomplete)", r"--overwrite|delete|remove"),
    # ------------------------------------------------ probe (features from a store)
    Case("probe-store-from-another-model", "probe",
         lambda w: ["probe", "--features", w.copy("store"), "--model", w.distil, "--out", w.path("probe-run")],
         r"feature store .* was made by model .*not by --model", r"Drop --model|bertkit embed --model"),
    Case("probe-store-missing", "probe", lambda w: ["probe", "--features", w.path("no-store"), "--out", w.path("probe-run")],
         r"--features .*no-store does not exist", r"--out directory of a `bertkit embed` run"),
    Case("probe-not-a-store", "probe", lambda w: ["probe", "--features", w.foreign_dir(), "--out", w.path("probe-run")],
         r"is not a bertkit embedding store", r"--out directory of a finished\s+`bertkit embed`"),
    Case("probe-unfinished-store", "probe",
         lambda w: ["probe", "--features", w.unfinished_store(), "--out", w.path("probe-run")],
         r"unfinished embedding store", r"Re-run the same `bertkit embed`"),
    Case("probe-damaged-store", "probe", lambda w: ["probe", "--features", w.damaged_store(), "--out", w.path("probe-run")],
         r"store .* is (damaged|corrupt)", r"--overwrite|bertkit embed"),
    Case("probe-features-and-data", "probe",
         lambda w: ["probe", "--features", w.copy("store"), "--data", w.good(), "--out", w.path("probe-run")],
         r"Give exactly one of --features .* or --data", r"--features"),
    Case("probe-cv-one-fold", "probe", lambda w: ["probe", "--features", w.copy("store"), "--cv", "1"],
         r"--cv must be at least 2", r"--cv"),
    Case("predict-probe-missing", "predict", lambda w: ["predict", "--probe", w.path("no-probe"), "--text", "hi"],
         r"no-probe", r"bertkit probe"),
    # ------------------------------------------------ bench
    Case("bench-batch-sizes-zero", "bench", lambda w: ["bench", "--models", w.tiny, "--batch-sizes", "0", "--quiet"],
         r"--batch-sizes must be comma-separated positive integers.*got '0'", r"e\.g\. 1,8,32"),
    Case("bench-pickle-only-checkpoint", "bench", lambda w: ["bench", "--models", w.model_variant("pickle"), "--quiet"],
         r"only pickle weights", r"safetensors"),
    Case("bench-out-unwritable", "bench", lambda w: ["bench", "--models", w.tiny, "--out", w.under_a_file(), "--quiet"],
         r"Cannot write to --out", r"Choose a directory you can write to"),
    Case("bench-max-length-over-limit", "bench", lambda w: ["bench", "--models", w.tiny, "--max-length", "4096", "--quiet"],
         r"--max-length 4096 is more than model", r"--max-length 128 or less"),
    # ------------------------------------------------ predict / evaluate
    Case("predict-neither-model-nor-probe", "predict", lambda w: ["predict", "--text", "hi"],
         r"Give exactly one of --model .* or --probe", r"--model"),
    Case("predict-missing-file", "predict", lambda w: ["predict", "--model", w.copy("clf"), "--data", w.path("nope.tsv")],
         r"does not exist", r"--data"),
    Case("predict-model-without-weights", "predict", lambda w: ["predict", "--model", w.model_variant("noweights"), "--text", "hi"],
         r"has no weights", r"model\.safetensors"),
    Case("predict-batch-size-zero", "predict", lambda w: ["predict", "--model", w.copy("clf"), "--text", "hi", "--batch-size", "0"],
         r"--batch-size must be a positive number, got 0", r"--batch-size"),
    Case("predict-out-unwritable", "predict",
         lambda w: ["predict", "--model", w.copy("clf"), "--text", "hi", "--out", w.under_a_file("p.csv"), "--quiet"],
         r"Cannot write .*existing\.txt/p\.csv \(.*existing\.txt is a file, not a directory\)", r"--out"),
    Case("predict-out-is-a-directory", "predict",
         lambda w: ["predict", "--model", w.copy("clf"), "--text", "hi", "--out", w.foreign_dir(), "--quiet"],
         r"Cannot write .*mine: it is an existing directory", r"--out"),
    Case("evaluate-unseen-labels", "evaluate",
         lambda w: ["evaluate", "--model", w.copy("clf"), "--data", w.file("dev.tsv", UNSEEN_DEV), "--quiet"],
         r"has labels not seen in the training data: 'meh'", r"Fix the labels"),
    Case("evaluate-no-label-column", "evaluate",
         lambda w: ["evaluate", "--model", w.copy("clf"), "--data", w.file("nl.tsv", NO_LABELS), "--quiet"],
         r"No label column", r"--label-column"),
    Case("evaluate-out-is-a-file", "evaluate",
         lambda w: ["evaluate", "--model", w.copy("clf"), "--data", w.good(), "--out", w.a_file(), "--quiet"],
         r"is an existing file", r"--out"),
    Case("evaluate-pickle-only-checkpoint", "evaluate",
         lambda w: ["evaluate", "--model", w.model_variant("pickle"), "--data", w.good(), "--quiet"],
         r"only pickle weights", r"safetensors"),
]
"""The malformed-input corpus (docs/reliability.md states its size: count the entries)."""

CASES += [  # issue 13: output directories
    Case("tokens-out-holds-other-files-overwrite", "tokens",
         lambda w: tokens(w, "--data", w.good(), "--out", w.foreign_dir(), "--overwrite"),
         r"holds files bertkit did not write \(notes\.txt\)", r"Choose another --out"),
    Case("embed-out-holds-someones-manifest", "embed",
         lambda w: embed(w, "--data", w.good(), "--overwrite", out=str(Path(w.file("theirs/manifest.json", '{"format": 1}')).parent)),
         r"holds files bertkit did not write \(manifest\.json\)", r"Choose another --out"),
    Case("finetune-overwrite-then-max-length-over-limit", "finetune",
         lambda w: finetune(w, "--data", w.premade_data(), "--overwrite", "--max-length", "100000"),
         r"--max-length 100000 is more than model", r"--max-length 128 or less"),
    Case("probe-out-is-its-feature-store", "probe",
         lambda w: (lambda s: ["probe", "--features", s, "--out", s, "--overwrite"])(w.copy("store")),
         r"holds a `bertkit embed` run; `bertkit probe` never writes into another command's run", r"Choose another --out"),
    Case("evaluate-out-is-a-finetune-run", "evaluate",
         lambda w: ["evaluate", "--model", w.copy("clf"), "--data", w.good(), "--out", w.copy("run"), "--quiet"],
         r"holds a `bertkit finetune` run", r"Choose another --out"),
    Case("bench-out-is-a-finetune-run", "bench",
         lambda w: ["bench", "--models", w.tiny, "--out", w.copy("run"), "--overwrite", "--quiet"],
         r"holds a `bertkit finetune` run", r"Choose another --out"),
    Case("predict-out-is-the-data", "predict",
         lambda w: (lambda d: ["predict", "--model", w.copy("clf"), "--data", d, "--out", d, "--quiet"])(w.good()),
         r"--out .*train\.tsv is the --data", r"Choose another --out"),
]


# ------------------------------------------------ issue 13: data and options (helpers, then the cases)


def _fifo(w: Workspace) -> str:
    path = w.root / "pipe.tsv"
    os.mkfifo(path)
    return str(path)


def _symlink_loop(w: Workspace) -> str:
    path = w.root / "loop.tsv"
    os.symlink(path.name, path)
    return str(path)


def _without_cuda() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: --device cuda is valid here")


def _all_layers_store(w: Workspace) -> str:
    out = w.path("all-layers-store")
    _invoke_ok(["embed", "--model", w.tiny, "--data", w.good(), "--layers", "all", "--out", out, "--quiet"])
    return out


def _recipe(w: Workspace, command: str, body: str) -> str:
    return w.file(f"{command}.toml", f"[{command}]\n{body}\n")


def _bench(w: Workspace, *extra: str) -> list[str]:
    return ["bench", "--models", w.tiny, "--data", w.good(), "--out", w.path("bench-out"), "--quiet", *extra]


MULTILINE_CSV = 'sentence,label\n"a long\nreview over\nthree lines",pos\nfine,neg\n"",pos\nok,neg\n'
TEXT_AND_LABEL = _tsv([("a great film", "pos"), ("", "neg"), ("fine", ""), ("awful", "neg")])
ZERO_WIDTH = _tsv([("a great film", "pos"), ("\u200b\u200b", "neg"), ("\u2060\ufeff", "pos"), ("awful", "neg")])
LIST_TEXTS = json.dumps([{"text": "fine", "label": "pos"}, {"text": ["two", "parts"], "label": "neg"}])
LIST_LABELS = "\n".join(json.dumps(r) for r in [{"text": "fine", "label": "pos"}, {"text": "bad", "label": ["neg", "pos"]}])

CASES += [  # issue 13: data and options
    Case("hold-out-needs-more-rows", "finetune", lambda w: finetune(w, "--data", w.good(), "--limit", "3", out=w.path("fresh")),
         r"hold-out\s+needs 2 rows.*at least 4 rows are needed", r"Pass --dev"),
    Case("finetune-lr-inf", "finetune", lambda w: finetune(w, "--data", w.good(), "--lr", "inf"),
         r"--lr must be a finite number; got inf", r"--lr 5e-05"),
    Case("finetune-lr-nan", "finetune", lambda w: finetune(w, "--data", w.good(), "--lr", "nan"),
         r"--lr must be a finite number; got nan", r"--lr"),
    Case("finetune-warmup-nan", "finetune", lambda w: finetune(w, "--data", w.good(), "--warmup-ratio", "nan"),
         r"--warmup-ratio must be a finite number", r"--warmup-ratio"),
    Case("finetune-seed-negative", "finetune", lambda w: finetune(w, "--data", w.good(), "--seed", "-1"),
         r"--seed must be between 0 and 4294967295.*got -1", r"--seed 42"),
    Case("finetune-seed-too-big", "finetune", lambda w: finetune(w, "--data", w.good(), "--seed", "99999999999"),
         r"--seed must be between 0 and 4294967295.*got 99999999999", r"--seed 42"),
    Case("probe-C-nan", "probe", lambda w: ["probe", "--features", w.copy("store"), "--C", "nan"],
         r"--C must be a finite number; got nan", r"--C"),
    Case("probe-C-grid-nan", "probe", lambda w: ["probe", "--features", w.copy("store"), "--cv", "3", "--C-grid", "nan,1"],
         r"--C-grid must be positive finite numbers.*got 'nan,1'", r"e\.g\. 0\.01,0\.1,1"),
    Case("bench-min-seconds-inf", "bench", lambda w: _bench(w, "--min-seconds", "inf"),
         r"--min-seconds must be a finite number; got inf", r"--min-seconds"),
    Case("embed-device-gpu", "embed", lambda w: embed(w, "--data", w.good(), "--device", "gpu"),
         r"--device 'gpu' is not a device name", r"--device cuda|--device cpu"),
    Case("embed-device-cuda-without-cuda", "embed",
         lambda w: (_without_cuda(), embed(w, "--data", w.good(), "--device", "cuda"))[1],
         r"--device cuda: CUDA is not available on this machine", r"Pass --device cpu, or --device auto"),
    Case("bench-device-cuda-without-cuda", "bench", lambda w: (_without_cuda(), _bench(w, "--device", "cuda"))[1],
         r"--device cuda: CUDA is not available on this machine", r"Pass --device cpu"),
    Case("finetune-has-no-device-option", "finetune", lambda w: finetune(w, "--data", w.good(), "--device", "cuda"),
         r"No such option: --device", r"--help"),
    Case("data-fifo", "tokens", lambda w: tokens(w, "--data", _fifo(w)),
         r"pipe\.tsv is not a regular file but a FIFO", r"pass that to --data"),
    Case("data-symlink-loop", "tokens", lambda w: tokens(w, "--data", _symlink_loop(w)),
         r"loop\.tsv is a symlink loop", r"Point --data/--dev/--test at the real file"),
    Case("data-gzip", "tokens", lambda w: tokens(w, "--data", w.file("g.tsv", gzip.compress(GOOD_TSV.encode()))),
         r"g\.tsv is gzip-compressed", r"gunzip -k g\.tsv"),
    Case("data-utf16", "tokens", lambda w: tokens(w, "--data", w.file("u.tsv", GOOD_TSV.encode("utf-16"))),
         r"u\.tsv is UTF-16-encoded", r"--encoding utf-16, or re-save the file as UTF-8"),
    Case("data-deeply-nested-json", "tokens", lambda w: tokens(w, "--data", w.file("deep.json", "[" * 100_000 + "]" * 100_000)),
         r"deep\.json is nested too deeply", r"fix or re-export the file"),
    Case("multiline-csv-line-numbers", "tokens", lambda w: tokens(w, "--data", w.file("m.csv", MULTILINE_CSV)),
         r"1 empty text cell\(s\).*at line 6\b", r"Remove those rows"),
    Case("text-and-label-problems-together", "tokens",
         lambda w: tokens(w, "--data", w.file("tl.tsv", TEXT_AND_LABEL), "--label-column", "label"),
         r"1 empty text cell\(s\).*line 3\b.*1 missing/blank label\(s\).*line 4\b", r"Fill them in"),
    Case("recipe-limit-float", "tokens", lambda w: tokens(w, "--data", w.good(), "--recipe", _recipe(w, "tokens", "limit = 20.5")),
         r"wrong type: limit must be an integer.*not 20\.5", r"Fix the value"),
    Case("recipe-batch-size-float", "finetune",
         lambda w: finetune(w, "--data", w.good(), "--recipe", _recipe(w, "finetune", "batch-size = 2.5")),
         r"batch-size must be an integer.*not 2\.5", r"Fix the value"),
    Case("recipe-epochs-string", "finetune",
         lambda w: ["finetune", "--data", w.good(), "--out", w.path("fresh"), "--recipe", _recipe(w, "finetune", 'epochs = "three"')],
         r"epochs must be an integer \(e\.g\. 3\), not 'three'", r"Fix the value"),
    Case("recipe-epochs-fraction", "finetune",
         lambda w: ["finetune", "--data", w.good(), "--out", w.path("fresh"), "--recipe", _recipe(w, "finetune", "epochs = 1.5")],
         r"epochs must be an integer \(e\.g\. 3\), not 1\.5", r"Fix the value"),
    Case("bench-quality-args-unbalanced", "bench", lambda w: _bench(w, "--quality", "probe", "--quality-args", "--C '1"),
         r"--quality-args .* cannot be split into arguments", r"Balance the quotes"),
    Case("bench-quality-args-unknown-option", "bench", lambda w: _bench(w, "--quality", "finetune", "--quality-args", "--epoch 1"),
         r"`bertkit finetune` has no option '--epoch'", r"did you mean --epochs"),
    Case("json-list-text-cells", "tokens", lambda w: tokens(w, "--data", w.file("l.json", LIST_TEXTS)),
         r"1 cell\(s\) of column 'text' \(--text-column\).*hold a list", r"join the pieces into one string"),
    Case("jsonl-list-labels", "tokens", lambda w: tokens(w, "--data", w.file("l.jsonl", LIST_LABELS), "--label-column", "label"),
         r"column 'label' \(--label-column\).*line 2\b", r"Labels must be single values.*multi-label"),
    Case("same-column-twice-by-index", "tokens",
         lambda w: tokens(w, "--data", w.good(), "--text-column", "0", "--label-column", "0"),
         r"--text-column and --label-column both select column 'sentence'", r"with different columns"),
    Case("same-column-text-and-pair", "tokens",
         lambda w: tokens(w, "--data", w.good(), "--text-column", "sentence", "--text-pair-column", "0"),
         r"--text-column and --text-pair-column both select column 'sentence'", r"with different columns"),
    Case("embed-layers-same-state-twice", "embed", lambda w: embed(w, "--data", w.good(), "--layers", "-1,2"),
         r"--layers -1,2 names hidden state 2 twice", r"Pass each layer once, e.g. --layers 2"),
    Case("probe-layers-same-state-twice", "probe",
         lambda w: ["probe", "--model", w.tiny, "--data", w.good(), "--layers", "2,-1", "--out", w.path("probe-run")],
         r"--layers 2,-1 names hidden state 2 twice", r"Pass each layer once"),
    Case("probe-store-layers-same-state-twice", "probe",
         lambda w: ["probe", "--features", _all_layers_store(w), "--layers", "0,-3", "--out", w.path("probe-run")],
         r"--layers 0,-3 names hidden state 0 twice", r"Pass each layer once"),
    Case("probe-one-layer-store-other-layer", "probe",
         lambda w: ["probe", "--features", w.copy("store"), "--layers", "0", "--out", w.path("probe-run")],
         r"--layers 0: the store holds one feature vector per row, made from hidden state\(s\) 2", r"Drop --layers"),
    Case("zero-width-texts", "tokens", lambda w: tokens(w, "--data", w.file("z.tsv", ZERO_WIDTH)),
         r"2 empty text cell\(s\).*lines 3, 4.*invisible characters", r"Remove those rows"),
    Case("predict-empty-text", "predict", lambda w: ["predict", "--model", w.copy("clf"), "--text", ""],
         r"--text number 1 \(of 1\) is empty", r"Drop it or pass a sentence"),
    Case("predict-invisible-text", "predict",
         lambda w: ["predict", "--model", w.copy("clf"), "--text", "fine", "--text", "\u200b"],
         r"--text number 2 \(of 2\) is empty or only whitespace/invisible", r"Drop it or pass a sentence"),
]



# ---------------------------------------------------------------- problem shapes (regression, multi-label; issue 15)

MIXED_SCORES = _tsv([("a great film", "4.5"), ("bad", "neg"), ("awful", "0.5"), ("fine", "3.2"), ("meh", "pos")])
EMPTY_TAGS = "".join(json.dumps(r) + "\n" for r in [{"text": "a", "labels": ["x"]}, {"text": "b", "labels": []},
                                                    {"text": "c", "labels": ["x", "y"]}])
SCORES = _tsv([(f"row {i}", f"{i / 7:.2f}") for i in range(20)])

CASES += [
    Case("regression-labels-mix-numbers-and-names", "finetune",
         lambda w: finetune(w, "--data", w.file("m.tsv", MIXED_SCORES), "--task", "regression", out=w.path("fresh")),
         r"--task regression needs a number.*mixes numbers and names: 2 cell\(s\).*lines 3, 6.*'neg'",
         r"Fix those cells, or, to classify the labels as names, fine-tune with --task single_label"),
    Case("multilabel-empty-tag-list", "finetune",
         lambda w: finetune(w, "--data", w.file("e.jsonl", EMPTY_TAGS), out=w.path("fresh")),
         r"1 empty tag list\(s\) .* at line 2: every row needs at least one tag",
         r"Drop those rows, or give them an explicit tag"),
    Case("threshold-above-one", "finetune", lambda w: finetune(w, "--data", w.good(), "--threshold", "1.5"),
         r"--threshold must be a probability strictly between 0 and 1.*got '1\.5'", r"e\.g\. 0\.5\), tune"),
    Case("threshold-zero", "finetune", lambda w: finetune(w, "--data", w.good(), "--threshold", "0"),
         r"--threshold must be a probability strictly between 0 and 1.*got '0'", r"tune-per-label"),
    Case("label-sep-with-regression", "finetune",
         lambda w: finetune(w, "--data", w.good(), "--label-sep", "|", "--task", "regression"),
         r"--label-sep splits tag lists .* does not apply to --task regression", r"Drop --label-sep"),
    Case("classification-metric-for-regression", "finetune",
         lambda w: finetune(w, "--data", w.file("s.tsv", SCORES), "--metric-for-best", "mcc", out=w.path("fresh")),
         r"--metric-for-best mcc is a single-label metric; this is regression data", r"Pass --metric-for-best pearson"),
]

def _run_with_damaged_checkpoint_file(w: Workspace, name: str) -> str:
    """The premade run, unfinished, with one file of its newest checkpoint changed after it was saved."""
    run = Path(w.copy("run", f"run-damaged-{name}"))
    (run / "metrics.json").unlink()
    newest = max((run / "checkpoints").glob("step-*"), key=lambda p: int(p.name.split("-")[1]))
    target = newest / name
    target.write_bytes(target.read_bytes()[:-4] + b"\x00bad")
    return str(run)


CASES += [  # issue 13: integrity (see tests/test_integrity.py for resumes, full disks and diverging runs)
    Case("finetune-damaged-rng-state", "finetune",
         lambda w: finetune(w, "--data", w.premade_data(), out=_run_with_damaged_checkpoint_file(w, "random_states_0.pkl")),
         r"changed since bertkit wrote them \(checkpoints/step-\d+/random_states_0\.pkl\)", r"delete the changed ones"),
    Case("finetune-damaged-trainer-state", "finetune",
         lambda w: finetune(w, "--data", w.premade_data(), out=_run_with_damaged_checkpoint_file(w, "trainer_state.json")),
         r"changed since bertkit wrote them \(checkpoints/step-\d+/trainer_state\.json\)", r"delete the changed ones"),
    Case("finetune-diverging-lr", "finetune",
         lambda w: finetune(w, "--data", w.good(), "--lr", "5e5", "--max-grad-norm", "0", out=w.path("diverge")),
         r"became NaN/inf at step \d+ \(epoch 1\)", r"smaller --lr"),
    Case("predict-base-encoder", "predict", lambda w: ["predict", "--model", w.tiny, "--text", "a film", "--quiet"],
         r"No fine-tuned classification head found", r"bertkit finetune|--probe"),
    Case("evaluate-base-encoder", "evaluate", lambda w: ["evaluate", "--model", w.tiny, "--data", w.good(), "--quiet"],
         r"No fine-tuned classification head found", r"bertkit finetune|--probe"),
]


# ------------------------------------------------ issue 13: integrity and disk - damaged probes (helpers, then the cases)


def _saved_probe(w: Workspace) -> Path:
    """A real saved probe of the tiny model, made once per session next to the premade outputs."""
    run = Path(w.premade["data"]).parent / "probe-run"
    if not (run / "probe" / "probe.safetensors").is_file():
        _invoke_ok(["probe", "--model", w.tiny, "--data", str(w.premade["data"]), "--out", str(run), "--no-baselines",
                    "--quiet"])
    return run / "probe"


def _damaged_probe(w: Workspace, kind: str) -> str:
    """The saved probe with one kind of damage: truncated, nan-coef, intercept-shape, class-ids, layers-bad."""
    from safetensors.numpy import load_file, save_file

    target = w.root / f"probe-{kind}"
    shutil.copytree(_saved_probe(w), target)
    weights, meta_file = target / "probe.safetensors", target / "probe.json"
    arrays, meta = load_file(str(weights)), json.loads(meta_file.read_text())
    if kind == "truncated":
        weights.write_bytes(weights.read_bytes()[:-16])
    elif kind == "layers-bad":
        meta_file.write_text(json.dumps(resealed({**meta, "layers": "last"})))  # as a writer would seal it
    else:
        arrays["coef"] = arrays["coef"] * float("nan") if kind == "nan-coef" else arrays["coef"]
        arrays["intercept"] = np.zeros(3) if kind == "intercept-shape" else arrays["intercept"]
        arrays["classes"] = np.array([0, 7]) if kind == "class-ids" else arrays["classes"]
        save_file(arrays, str(weights))
        # recorded as saved, as a writer that made them would record them: the content checks are what must catch it
        meta["files"]["probe.safetensors"] = {"size": weights.stat().st_size,
                                              "sha256": hashlib.sha256(weights.read_bytes()).hexdigest()}
        meta_file.write_text(json.dumps(resealed(meta)))
    return str(target)


CASES += [  # issue 13: integrity and disk
    Case("predict-probe-truncated-weights", "predict",
         lambda w: ["predict", "--probe", _damaged_probe(w, "truncated"), "--text", "a great film"],
         r"saved probe file .*probe\.safetensors is damaged", r"Re-run `bertkit probe"),
    Case("predict-probe-nan-coefficients", "predict",
         lambda w: ["predict", "--probe", _damaged_probe(w, "nan-coef"), "--text", "a great film"],
         r"probe\.safetensors is damaged \(it holds NaN/inf values", r"Re-run `bertkit probe"),
    Case("predict-probe-intercept-shape", "predict",
         lambda w: ["predict", "--probe", _damaged_probe(w, "intercept-shape"), "--text", "a great film"],
         r"probe\.safetensors is damaged \(the scaler, coefficient and intercept shapes do not match", r"Re-run `bertkit probe"),
    Case("predict-probe-class-ids-beyond-labels", "predict",
         lambda w: ["predict", "--probe", _damaged_probe(w, "class-ids"), "--text", "a great film"],
         r"probe\.json is damaged \(its label_map has 2 label\(s\) but probe\.safetensors predicts class ids \[0, 7\]",
         r"Re-run `bertkit probe"),
    Case("predict-probe-json-bad-layers", "predict",
         lambda w: ["predict", "--probe", _damaged_probe(w, "layers-bad"), "--text", "a great film"],
         r"probe\.json is damaged \(layers 'last' is not a layer list", r"Re-run `bertkit probe"),
    Case("evaluate-distilbert-base-encoder-without-head", "evaluate",
         lambda w: ["evaluate", "--model", w.distil, "--data", w.good(), "--quiet"],
         r"No fine-tuned classification head found in .*: its weights lack (pre_)?classifier", r"bertkit finetune.*--probe"),
]


# ---------------------------------------------------------------- running a case


def snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    """{relative path: (size, mtime_ns, sha256)} of every file under root."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            stat = path.stat()
            found[str(path.relative_to(root))] = (stat.st_size, stat.st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
    return found


def check_result(case: Case, code: int, output: str, before: dict, root: Path) -> None:
    assert code == 2, f"{case.id}: exit {code}\n{output}"
    assert "Traceback" not in output, f"{case.id}: traceback in output\n{output}"
    output = output.replace(str(root), "WS")  # the tmp path holds the test id: it must not satisfy a regex
    assert re.search(case.problem, output, re.S | re.I), f"{case.id}: problem /{case.problem}/ not named in:\n{output}"
    assert re.search(case.fix, output, re.S), f"{case.id}: fix /{case.fix}/ not named in:\n{output}"
    after = snapshot(root)
    changed = [p for p, sig in before.items() if after.get(p) != sig]
    assert not changed, f"{case.id}: existing files changed or removed: {changed}"
    stray = [p for p in after if p not in before and p.endswith(".tmp")]
    assert not stray, f"{case.id}: temp files left behind: {stray}"


@pytest.fixture
def workspace(tmp_path, tiny_bert_dir, tiny_distilbert_dir, premade) -> Workspace:
    return Workspace(tmp_path, tiny_bert_dir, tiny_distilbert_dir, premade)


METRIC_SCRIPT = """
import datasets
import evaluate


class {name}(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(description="", citation="", inputs_description="", features=datasets.Features(
            {{"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}}))

    def _compute(self, predictions, references):
        {body}
"""


def _metric_script(w: Workspace, name: str, body: str) -> str:
    """A local evaluate metric script `metrics/NAME.py` whose _compute runs `body`."""
    return w.file(f"metrics/{name}.py", METRIC_SCRIPT.format(name=name.capitalize(), body=body))


def _distill(w: Workspace, *extra: str, teacher: str | None = None) -> list[str]:
    return ["distill", "--teacher", teacher or w.copy("clf"), "--data", w.good(), "--out", w.path("student"),
            "--epochs", "1", "--batch-size", "8", "--quiet", *extra]


RAISES = 'raise ZeroDivisionError("boom")'
HITS = 'return {"hits": float(sum(p == r for p, r in zip(predictions, references)))}'
THREE_CLASSES = _tsv([(f"row {i}", "abc"[i % 3]) for i in range(30)])

CASES += [  # issue 20: metrics, distill and option messages
    Case("finetune-metric-script-raises", "finetune",
         lambda w: finetune(w, "--data", w.good(), "--metric", _metric_script(w, "raising", RAISES), out=w.path("fresh")),
         r"--metric .*raising\.py does not work on single-label data: tried on 8 synthetic rows.*raised "
         r"ZeroDivisionError: boom", r"Fix the metric script .*drop --metric"),
    Case("finetune-metric-script-returns-list", "finetune",
         lambda w: finetune(w, "--data", w.good(), "--metric", _metric_script(w, "listing", "return [0.5]"),
                            out=w.path("fresh")),
         r"returned a list \(\[0\.5\]\) instead of a dict of scores", r"returns a dict of numbers, or drop --metric"),
    Case("evaluate-metric-script-returns-list", "evaluate",
         lambda w: ["evaluate", "--model", w.copy("clf"), "--data", w.good(), "--quiet", "--out", w.path("eval"),
                    "--metric", _metric_script(w, "listing", "return [0.5]")],
         r"does not work on single-label data.*returned a list", r"drop --metric"),
    Case("evaluate-metric-script-string-value", "evaluate",
         lambda w: ["evaluate", "--model", w.copy("clf"), "--data", w.good(), "--quiet",
                    "--metric", _metric_script(w, "wordy", 'return {"score": "high"}')],
         r"its dict holds no number \(got \{'score': 'high'\}\)", r"returns a dict of numbers, or drop --metric"),
    Case("probe-metric-script-raises", "probe",
         lambda w: ["probe", "--model", w.tiny, "--data", w.good(), "--no-baselines", "--quiet",
                    "--metric", _metric_script(w, "raising", RAISES)],
         r"does not work on single-label data.*raised ZeroDivisionError", r"drop --metric"),
    Case("metric-for-best-regression-metric-on-single-label", "finetune",
         lambda w: finetune(w, "--data", w.good(), "--metric-for-best", "pearson", out=w.path("fresh")),
         r"--metric-for-best pearson is a regression metric; this is single-label data",
         r"Pass --metric-for-best accuracy / f1"),
    Case("metric-for-best-accuracy-on-regression", "finetune",
         lambda w: finetune(w, "--data", w.file("s.tsv", SCORES), "--metric-for-best", "accuracy", out=w.path("fresh")),
         r"--metric-for-best accuracy is a single-label metric; this is regression data", r"Pass --metric-for-best pearson"),
    Case("metric-for-best-roc-auc-three-classes", "finetune",
         lambda w: finetune(w, "--data", w.file("3.tsv", THREE_CLASSES), "--metric-for-best", "roc_auc",
                            out=w.path("fresh")),
         r"--metric-for-best roc_auc needs two classes; this single-label data has 3", r"Pass --metric-for-best accuracy"),
    Case("metric-for-best-not-a-module-score", "finetune",
         lambda w: finetune(w, "--data", w.good(), "--metric", _metric_script(w, "counting", HITS),
                            "--metric-for-best", "counting/bleu", out=w.path("fresh")),
         r"--metric-for-best counting/bleu is not a score the --metric modules return.*they return counting/hits",
         r"Pass --metric-for-best with one of those"),
    Case("distill-student-as-deep-as-teacher", "distill", lambda w: _distill(w, "--student-layers", "2"),
         r"--student-layers 2 is as many as the teacher's 2 layers.*not a distillation", r"Pass --student-layers 1\b"),
    Case("distill-student-deeper-than-teacher", "distill", lambda w: _distill(w, "--student-layers", "3"),
         r"--student-layers 3 is more than the teacher's 2 layers", r"Pass --student-layers 1\b"),
    Case("distill-teacher-without-head", "distill", lambda w: _distill(w, teacher=w.tiny),
         r"No fine-tuned classification head found", r"pass that run's best/ folder as --teacher"),
    Case("preset-column-missing-from-file", "tokens", lambda w: tokens(w, "--data", w.good(), "--task-preset", "glue/rte"),
         r"Column 'sentence1' \(set by --task-preset glue/rte, which expects the GLUE files' columns\) not found",
         r"Pass --text-column with one of them to override the preset"),
]


# ------------------------------------------------ issue 20: problem shapes and lengths (helpers, then the cases)


FRACTIONS = [f"{0.1 * (i + 1):.1f}" for i in range(24)]


def _scores(labels: list[str]) -> str:
    """sentence/label rows with these labels (the first on line 2)."""
    return _tsv([(f"review number {i} was {'good' if i % 2 else 'bad'}", y) for i, y in enumerate(labels)])


def _pairs() -> str:
    return _tsv([(f"the cat sat {i}", f"a dog ran {i}", "ab"[i % 2]) for i in range(16)], ("sentence1", "sentence2", "label"))


def _tag_model(w: Workspace) -> str:
    """A tiny multi-label model with the tags a, b, c (0/1 columns), made once per session next to the premade outputs."""
    run = Path(w.premade["data"]).parent / "tag-run"
    if not (run / "best" / "config.json").is_file():
        rows = [f"text {i},{i % 2},{(i // 2) % 2},{int(i % 3 == 0)}" for i in range(24)]
        data = Path(w.premade["data"]).parent / "tags.csv"
        data.write_text("text,a,b,c\n" + "\n".join(rows) + "\n", encoding="utf-8")
        _invoke_ok(["finetune", "--model", w.tiny, "--data", str(data), "--label-column", "a,b,c", "--out", str(run),
                    "--epochs", "1", "--batch-size", "8", "--quiet"])
    return str(run / "best")


def _tag_columns(w: Workspace) -> str:
    return w.file("tags.csv", "text,a,b,c,d\n" + "\n".join(f"text {i},{i % 2},0,1,0" for i in range(6)) + "\n")


CASES += [  # issue 20: problem shapes and lengths
    Case("finetune-auto-scores-with-an-na-cell", "finetune",
         lambda w: finetune(w, "--data", w.file("s.tsv", _scores(FRACTIONS[:7] + ["n/a"] + FRACTIONS[8:])), out=w.path("fresh")),
         r"holds numbers in 23 of 24 label cells, but 1 cell\(s\) are not numbers: line 9 \('n/a'\)", r"--task single_label"),
    Case("finetune-auto-scores-with-dashes", "finetune",
         lambda w: finetune(w, "--data", w.file("s.tsv", _scores(["-" if i in (3, 10) else y for i, y in enumerate(FRACTIONS)])),
                            out=w.path("fresh")),
         r"2 cell\(s\) are not numbers: line 5 \('-'\), line 12 \('-'\)", r"--task single_label"),
    Case("finetune-auto-scores-with-inf", "finetune",
         lambda w: finetune(w, "--data", w.file("s.tsv", _scores(FRACTIONS[:-1] + ["inf"])), out=w.path("fresh")),
         r"are not finite numbers: line 25 \('inf'\)", r"--task single_label"),
    Case("finetune-auto-huge-numbers", "finetune",
         lambda w: finetune(w, "--data", w.file("h.tsv", _scores(["1e30", "2e30"] * 10)), out=w.path("fresh")),
         r"numbers beyond \+-1e\+06 that are not plain integers: line 2 \('1e30'\)", r"--task single_label.*--task regression"),
    Case("finetune-regression-inf-target", "finetune",
         lambda w: finetune(w, "--data", w.file("s.tsv", _scores(FRACTIONS[:2] + ["inf"] + FRACTIONS[3:])), "--task", "regression",
                            out=w.path("fresh")),
         r"Regression targets must be finite numbers.*line 4 \('inf'\)", r"Fix those cells, or drop those rows"),
    Case("finetune-regression-huge-targets", "finetune",
         lambda w: finetune(w, "--data", w.file("h.tsv", _scores([f"{y}e30" for y in FRACTIONS])), "--task", "regression",
                            out=w.path("fresh")),
         r"Regression targets in column 'label' of .*h\.tsv reach 2\.4e\+30 \(line 25\)", r"Scale the targets"),
    Case("probe-constant-dev-target", "probe",
         lambda w: ["probe", "--model", w.tiny, "--data", w.file("s.tsv", _scores(FRACTIONS)), "--task", "regression",
                    "--dev", w.file("d.tsv", _scores(["2.5"] * 6)), "--out", w.path("probe-run")],
         r"Every dev target in .*d\.tsv is 2\.5: dev Pearson.* is undefined", r"Pass --dev with targets that vary"),
    Case("evaluate-tag-columns-leave-out-a-tag", "evaluate",
         lambda w: ["evaluate", "--model", _tag_model(w), "--data", _tag_columns(w), "--label-column", "a,b", "--quiet"],
         r"does not match the tags of model .*: no column for its tag\(s\) 'c'", r"Pass --label-column a,b,c"),
    Case("evaluate-tag-columns-add-a-tag", "evaluate",
         lambda w: ["evaluate", "--model", _tag_model(w), "--data", _tag_columns(w), "--label-column", "a,b,c,d", "--quiet"],
         r"column\(s\) 'd' that are not its tags", r"Pass --label-column a,b,c"),
    Case("tokens-max-length-below-special-tokens", "tokens", lambda w: tokens(w, "--data", w.good(), "--max-length", "2"),
         r"--max-length 2 cannot hold a text", r"pass --max-length 3 or more"),
    Case("tokens-pair-max-length-below-special-tokens", "tokens",
         lambda w: tokens(w, "--data", w.file("p.tsv", _pairs()), "--text-column", "sentence1", "--text-pair-column",
                          "sentence2", "--max-length", "4"),
         r"--max-length 4 cannot hold a sentence pair", r"pass --max-length 5 or more"),
    Case("embed-max-length-1", "embed", lambda w: embed(w, "--data", w.good(), "--max-length", "1"),
         r"--max-length 1 cannot hold a text", r"pass --max-length 3 or more"),
    Case("probe-max-length-2", "probe",
         lambda w: ["probe", "--model", w.tiny, "--data", w.good(), "--max-length", "2", "--out", w.path("probe-run")],
         r"--max-length 2 cannot hold a text", r"pass --max-length 3 or more"),
    Case("finetune-max-length-2", "finetune", lambda w: finetune(w, "--data", w.good(), "--max-length", "2", out=w.path("fresh")),
         r"--max-length 2 cannot hold a text", r"pass --max-length 3 or more"),
    Case("finetune-pair-max-length-4", "finetune",
         lambda w: finetune(w, "--data", w.file("p.tsv", _pairs()), "--text-column", "sentence1", "--text-pair-column",
                            "sentence2", "--max-length", "4", out=w.path("fresh")),
         r"--max-length 4 cannot hold a sentence pair", r"pass --max-length 5 or more"),
    Case("predict-max-length-1", "predict",
         lambda w: ["predict", "--model", w.copy("clf"), "--text", "word " * 300, "--max-length", "1", "--quiet"],
         r"--max-length 1 cannot hold a text", r"pass --max-length 3 or more"),
    Case("predict-max-length-over-model-limit", "predict",
         lambda w: ["predict", "--model", w.copy("clf"), "--text", "word " * 300, "--max-length", "100000", "--quiet"],
         r"--max-length 100000 is more than model .* accepts \(128 tokens\)", r"Pass --max-length 128 or less"),
    Case("evaluate-max-length-2", "evaluate",
         lambda w: ["evaluate", "--model", w.copy("clf"), "--data", w.good(), "--max-length", "2", "--quiet"],
         r"--max-length 2 cannot hold a text", r"pass --max-length 3 or more"),
    Case("evaluate-max-length-over-model-limit", "evaluate",
         lambda w: ["evaluate", "--model", w.copy("clf"), "--data", w.good(), "--max-length", "100000", "--quiet"],
         r"--max-length 100000 is more than model", r"Pass --max-length 128 or less"),
    Case("distill-max-length-2", "distill",
         lambda w: ["distill", "--teacher", w.copy("clf"), "--data", w.good(), "--out", w.path("student"),
                    "--max-length", "2", "--quiet"],
         r"--max-length 2 cannot hold a text", r"pass --max-length 3 or more"),
    Case("bench-max-length-2", "bench", lambda w: ["bench", "--models", w.tiny, "--max-length", "2", "--quiet"],
         r"--max-length 2 cannot hold a text", r"pass --max-length 3 or more"),
]


def _user_file_in(w: Workspace, key: str, relative: str) -> str:
    """A copy of a premade output with a user's file put somewhere inside it."""
    out = Path(w.copy(key))
    w.file(str((out / relative).relative_to(w.root)), "mine\n")
    return str(out)


DEEP_FIX = r"Move them out of .*, or choose another --out"
INPUT_FIX = r"Choose another --out, e\.g\. --out"

CASES += [  # issue 20: ownership at every depth, inputs never inside --out
    Case("finetune-overwrite-user-notes-in-best", "finetune",
         lambda w: finetune(w, "--data", w.premade_data(), "--overwrite", out=_user_file_in(w, "run", "best/notes.txt")),
         r"holds files bertkit did not write \(best/notes\.txt\) in its `bertkit finetune` run", DEEP_FIX),
    Case("finetune-overwrite-user-predictions-in-final", "finetune",
         lambda w: finetune(w, "--data", w.premade_data(), "--overwrite",
                            out=_user_file_in(w, "run", "final/predictions.csv")),
         r"did not write \(final/predictions\.csv\)", DEEP_FIX),
    Case("finetune-rerun-user-file-in-checkpoints", "finetune",
         lambda w: finetune(w, "--data", w.premade_data(), out=_user_file_in(w, "run", "checkpoints/mine.txt")),
         r"did not write \(checkpoints/mine\.txt\)", DEEP_FIX),
    Case("finetune-overwrite-run-saved-under-best", "finetune",
         lambda w: finetune(w, "--data", w.premade_data(), "--overwrite",
                            out=_user_file_in(w, "run", "best/student/config.json")),
         r"did not write \(best/student/\)", DEEP_FIX),
    Case("finetune-overwrite-folder-named-like-a-temp-one", "finetune",
         lambda w: finetune(w, "--data", w.premade_data(), "--overwrite",
                            out=_user_file_in(w, "run", ".tmp-best-backup/notes.txt")),
         r"did not write \(\.tmp-best-backup/\)", DEEP_FIX),
    Case("embed-overwrite-user-file-in-shards", "embed",
         lambda w: embed(w, "--data", w.premade_data(), "--overwrite", out=_user_file_in(w, "store", "shards/notes.txt")),
         r"did not write \(shards/\) in its `bertkit embed` run", DEEP_FIX),
    Case("finetune-model-inside-out", "finetune",
         lambda w: (lambda run: finetune(w, "--data", w.premade_data(), "--overwrite", out=run,
                                         model=str(Path(run) / "best")))(w.copy("run")),
         r"--out WS/run contains the --model WS/run/best", INPUT_FIX),
    Case("distill-out-inside-teacher", "distill",
         lambda w: (lambda clf: ["distill", "--teacher", clf, "--data", w.premade_data(), "--out",
                                 str(Path(clf) / "student"), "--quiet"])(w.copy("clf")),
         r"--out WS/clf/student is inside the --teacher WS/clf", INPUT_FIX),
    Case("tokens-out-inside-model", "tokens",
         lambda w: (lambda clf: ["tokens", "--model", clf, "--data", w.good(), "--out", str(Path(clf) / "tokens"),
                                 "--quiet"])(w.copy("clf")),
         r"--out WS/clf/tokens is inside the --model WS/clf", INPUT_FIX),
    Case("probe-out-inside-features", "probe",
         lambda w: (lambda store: ["probe", "--features", store, "--out", str(Path(store) / "probe-run"),
                                   "--quiet"])(w.copy("store")),
         r"--out WS/store/probe-run is inside the --features WS/store", INPUT_FIX),
    Case("bench-out-inside-models", "bench",
         lambda w: (lambda clf: ["bench", "--models", clf, "--out", str(Path(clf) / "bench"), "--quiet"])(w.copy("clf")),
         r"--out WS/clf/bench is inside the --models WS/clf", INPUT_FIX),
]


def _without(w: Workspace, key: str, *relatives: str) -> str:
    """A copy of a premade output with some of bertkit's own files removed (its record: as an older bertkit left it)."""
    out = Path(w.copy(key))
    for relative in relatives:
        (out / relative).unlink()
    return str(out)


def sweep(w: Workspace, *extra: str, out: str | None = None) -> list[str]:
    return ["sweep", "--model", w.tiny, "--data", w.premade_data(), "--out", out or w.path("sweep"), "--epochs", "1",
            "--batch-size", "8", "--quiet", *extra]


UNRECORDED_FIX = r"Move that run aside \(e\.g\. `mv WS/\w+ WS/\w+\.old`\)"
SPACE_FIX = r"pass --max-length 3 or more"

CASES += [  # issue 36: ownership by record, never by name; every sweep value checked against the model and data
    Case("finetune-overwrite-temp-looking-file-at-the-top", "finetune",
         lambda w: finetune(w, "--data", w.premade_data(), "--overwrite", out=_user_file_in(w, "run", ".draft.tmp")),
         r"did not write \(\.draft\.tmp\)", DEEP_FIX),
    Case("finetune-overwrite-temp-looking-file-in-best", "finetune",
         lambda w: finetune(w, "--data", w.premade_data(), "--overwrite", out=_user_file_in(w, "run", "best/.notes.tmp")),
         r"did not write \(best/\.notes\.tmp\)", DEEP_FIX),
    Case("finetune-rerun-file-named-exactly-like-bertkits-temp-files", "finetune",
         lambda w: finetune(w, "--data", w.premade_data(),
                            out=_user_file_in(w, "run", "checkpoints/.optimizer.bin.0badc0de.tmp")),
         r"did not write \(checkpoints/\.optimizer\.bin\.0badc0de\.tmp\)", DEEP_FIX),
    Case("finetune-overwrite-folder-named-exactly-like-bertkits-temp-folders", "finetune",
         lambda w: finetune(w, "--data", w.premade_data(), "--overwrite",
                            out=_user_file_in(w, "run", ".tmp-best-0badc0de/notes.txt")),
         r"did not write \(\.tmp-best-0badc0de/\)", DEEP_FIX),
    Case("finetune-overwrite-user-card-over-bertkits", "finetune",
         lambda w: finetune(w, "--data", w.premade_data(), "--overwrite", out=_user_file_in(w, "run", "best/README.md")),
         r"holds files changed since bertkit wrote them \(best/README\.md\)", DEEP_FIX),
    Case("finetune-overwrite-run-without-record", "finetune",
         lambda w: finetune(w, "--data", w.premade_data(), "--overwrite",
                            out=_without(w, "run", ".bertkit-record.jsonl", "best/.bertkit-files.json")),
         r"holds a `bertkit finetune` run without the record of the files bertkit wrote there", UNRECORDED_FIX),
    Case("embed-rerun-store-without-record", "embed",
         lambda w: embed(w, "--data", w.premade_data(), out=_without(w, "store", ".bertkit-record.jsonl")),
         r"holds a `bertkit embed` run without the record", UNRECORDED_FIX),
    Case("finetune-damaged-record", "finetune",
         lambda w: finetune(w, "--data", w.premade_data(), "--overwrite",
                            out=_user_file_in(w, "run", ".bertkit-record.jsonl")),
         r"has a \.bertkit-record\.jsonl that bertkit did not write", r"Choose another --out"),
    Case("sweep-grid-max-length-too-small-for-the-model", "sweep",
         lambda w: sweep(w, "--grid", "max-length=64,2"),
         r"--grid max-length=2: a trial with --max-length 2 would stop before training", SPACE_FIX),
    Case("sweep-grid-max-length-over-the-model-limit", "sweep",
         lambda w: sweep(w, "--grid", "max-length=64,4096"),
         r"--grid max-length=4096: .*--max-length 4096 is more than model", r"Pass --max-length 128 or less"),
    Case("sweep-grid-model-that-does-not-exist", "sweep",
         lambda w: sweep(w, "--grid", f"model={w.tiny},/nonexistent-bertkit-model"),
         r"--grid model=/nonexistent-bertkit-model: .*does not exist", r"--grid|--model"),
    Case("sweep-grid-model-is-a-file", "sweep",
         lambda w: sweep(w, "--grid", f"model={w.tiny},{w.a_file()}"),
         r"--grid model=WS/existing\.txt: .*is a file", r"model folder"),
    Case("sweep-grid-text-column-the-data-lacks", "sweep",
         lambda w: sweep(w, "--grid", "text-column=sentence,review"),
         r"--grid text-column=review: .*review", r"sentence"),
    Case("sweep-grid-model-inside-out", "sweep",
         lambda w: (lambda run: sweep(w, "--grid", f"model={w.tiny},{run}/best", "--overwrite", out=run))(w.copy("run")),
         r"--grid model=WS/run/best: --model WS/run/best is inside --out WS/run", r"Copy it outside --out"),
    Case("sweep-grid-data-is-out", "sweep",
         lambda w: sweep(w, "--grid", f"data={w.premade_data()},{w.path('sweep')}"),
         r"--grid data=WS/sweep: --data WS/sweep is --out WS/sweep", r"choose another --out"),
    Case("sweep-grid-model-holds-out", "sweep",
         lambda w: sweep(w, "--grid", f"model={w.tiny},{w.root}", out=w.path("sweep")),
         r"--grid model=WS: --model WS holds --out WS/sweep", r"Pass an --out outside WS \(e\.g\. --out "),
    Case("sweep-grid-of-one-value-too-small", "sweep", lambda w: sweep(w, "--grid", "max-length=2"),
         r"--grid max-length=2: a trial with --max-length 2 would stop before training", SPACE_FIX),
    Case("sweep-data-missing-whatever-the-grid", "sweep",  # not the space's fault: said as finetune says it
         lambda w: ["sweep", "--model", w.tiny, "--data", w.path("nope.tsv"), "--out", w.path("sweep"), "--quiet",
                    "--grid", "lr=1e-3,1e-4"],
         r"^(?!.*--grid lr).*nope\.tsv does not exist", r"--data"),
    Case("sweep-space-max-length-range-starts-too-low", "sweep",
         lambda w: sweep(w, "--search", "optuna", "--trials", "2", "--space", "max-length=2:64"),
         r"--space max-length=2: a trial with --max-length 2 would stop before training", SPACE_FIX),
]


def _metric_named(w: Workspace, name: str) -> str:
    """A local metric script named like a built-in metric (it would overwrite it in history and tables)."""
    return w.file(f"{name}.py", "import evaluate\n")


RANKING_FIX = r"Give --[\w-]+ once as an option of the sweep"

CASES += [  # issue 43: sweeps compare like with like, every value checked before trial 0; keys
    Case("sweep-grid-over-metric-for-best", "sweep", lambda w: sweep(w, "--grid", "metric-for-best=accuracy,loss"),
         r"--metric-for-best changes which dev score ranks the trials", RANKING_FIX),
    Case("sweep-grid-over-task", "sweep", lambda w: sweep(w, "--grid", "task=single-label,regression"),
         r"--task changes the kind of labels", RANKING_FIX),
    Case("sweep-grid-over-metric", "sweep", lambda w: sweep(w, "--grid", "metric=mcc,f1"),
         r"--metric changes which dev scores", RANKING_FIX),
    Case("sweep-space-over-metric-for-best", "sweep",
         lambda w: sweep(w, "--search", "optuna", "--space", "metric-for-best=accuracy,f1"),
         r"--space 'metric-for-best=accuracy,f1': --metric-for-best changes", RANKING_FIX),
    Case("sweep-grid-over-dev-data", "sweep", lambda w: sweep(w, "--grid", f"dev={w.premade_data()},{w.good()}"),
         r"--dev changes the dev rows the score is computed on", RANKING_FIX),
    Case("sweep-grid-grad-accum-over-the-rows", "sweep", lambda w: sweep(w, "--grid", "grad-accum=1,100000"),
         r"--grid grad-accum=100000: a trial with --grad-accum 100000 would stop before training: .*too few",
         r"lower --grad-accum"),
    Case("sweep-grid-precision-this-machine-lacks", "sweep", lambda w: sweep(w, "--grid", "precision=fp32,fp16"),
         r"--grid precision=fp16: a trial with --precision fp16 would stop before training", r"--precision"),
    Case("sweep-grid-model-path-name-too-long", "sweep",
         lambda w: sweep(w, "--grid", f"model={w.tiny},{w.path('m' * 300)}"),
         r"--model is not a path this machine can open: its name m+\.\.\. is 300 bytes long",
         r"shorter path"),
    Case("sweep-grid-data-path-name-too-long", "sweep",
         lambda w: sweep(w, "--grid", f"data={w.premade_data()},{w.path('d' * 256)}/train.tsv"),
         r"--data is not a path this machine can open: .* is 256 bytes long", r"shorter path"),
    Case("sweep-metric-script-named-accuracy", "sweep",
         lambda w: sweep(w, "--metric", _metric_named(w, "accuracy"), "--grid", "lr=1e-3,1e-4"),
         r"named 'accuracy', like bertkit's built-in accuracy metric", r"Rename the file.*my_accuracy\.py"),
    Case("finetune-metric-script-named-f1", "finetune",
         lambda w: finetune(w, "--data", w.good(), "--metric", _metric_named(w, "f1"), out=w.path("fresh")),
         r"named 'f1', like bertkit's built-in f1 metric", r"Rename the file"),
    Case("evaluate-metric-script-named-loss", "evaluate",
         lambda w: ["evaluate", "--model", w.copy("clf"), "--data", w.good(), "--metric", _metric_named(w, "loss"),
                    "--quiet"],
         r"named 'loss', like bertkit's built-in loss metric", r"Rename the file"),
]


# ------------------------------------------------ issue 36: verified on read (helpers, then the cases)


def _flip_middle_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _changed(w: Workspace, key: str, relative: str, change: str = "flip", name: str | None = None) -> str:
    """A copy of a premade output with one of its files changed after bertkit wrote it: flip (a byte in the middle),
    truncate (the last quarter gone), remove."""
    out = Path(w.copy(key, name or f"{key}-{change}-{relative.replace('/', '-')}"))
    target = out / relative
    if change == "flip":
        _flip_middle_byte(target)
    elif change == "truncate":
        target.write_bytes(target.read_bytes()[: 3 * target.stat().st_size // 4])
    else:
        target.unlink()
    return str(out)


def _no_tokenizer_json(w: Workspace, *also: str) -> str:
    """The tiny model (saved without a record, as by transformers) without tokenizer.json (and `also`)."""
    target = w.root / ("model-no-tokenizer" + "".join(f"-{n}" for n in also))
    shutil.copytree(w.tiny_dir, target)
    for name in ("tokenizer.json", *also):
        (target / name).unlink()
    return str(target)


def _export(w: Workspace) -> Path:
    """A real fp32 ONNX export of the premade classifier, made once per session next to the premade outputs."""
    pytest.importorskip("onnxruntime")
    out = Path(w.premade["data"]).parent / "export"
    if not (out / "model.onnx").is_file():
        _invoke_ok(["export", "--model", str(w.premade["clf"]), "--data", str(w.premade["data"]), "--out", str(out),
                    "--quantize", "none", "--min-agreement", "0.5", "--quiet"])
    return out


def _changed_export(w: Workspace, change: str) -> str:
    target = w.root / f"export-{change}"
    shutil.copytree(_export(w), target)
    model = target / "model.onnx"
    data = model.read_bytes()
    half = len(data) // 2
    model.write_bytes(data[:half] + (np.random.default_rng(0).bytes(len(data) - half) if change == "half" else b""))
    return str(target)


def _changed_probe(w: Workspace) -> str:
    target = w.root / "probe-flipped"
    shutil.copytree(_saved_probe(w), target)
    _flip_middle_byte(target / "probe.safetensors")
    return str(target)


def _store_with_changed_labels(w: Workspace) -> str:
    store = Path(w.copy("store", "store-labels-changed"))
    np.save(store / "labels.npy", 1 - np.load(store / "labels.npy"))  # same size, every label flipped
    return str(store)


RECORD_FIX = r"Copy the folder again from where it was saved, or re-run the command that wrote it"
TOKENIZER_FIX = r"Copy the tokenizer files in from the model the folder was made from"
STORE_FIX = r"Re-run the `bertkit embed` command that made it, with --overwrite"
CACHE_FIX = r"Pass a --cache-dir outside --out, e\.g\. --cache-dir"

CASES += [  # issue 36: every artifact bertkit reads is verified against its record
    Case("predict-model-weights-byte-flipped", "predict",
         lambda w: ["predict", "--model", _changed(w, "clf", "model.safetensors"), "--text", "a film", "--quiet"],
         r"is not the one bertkit saved: model\.safetensors: its bytes changed since it was written", RECORD_FIX),
    Case("evaluate-model-weights-truncated", "evaluate",
         lambda w: ["evaluate", "--model", _changed(w, "clf", "model.safetensors", "truncate"), "--data", w.good(),
                    "--quiet"],
         r"model\.safetensors: it is [\d,]+ bytes but was written as [\d,]+ \(changed since it was written\)", RECORD_FIX),
    Case("export-model-tokenizer-json-removed", "export",
         lambda w: ["export", "--model", _changed(w, "clf", "tokenizer.json", "remove"), "--data", w.good(), "--out",
                    w.path("export-out"), "--quiet"],
         r"tokenizer\.json: it is missing", RECORD_FIX),
    Case("distill-teacher-config-changed", "distill",
         lambda w: _distill(w, teacher=_changed(w, "clf", "config.json")),
         r"is not the one bertkit saved: config\.json: (its bytes changed|it is)", RECORD_FIX),
    Case("predict-model-without-tokenizer-json", "predict",
         lambda w: ["predict", "--model", _no_tokenizer_json(w), "--text", "a film", "--quiet"],
         r"has no tokenizer: tokenizer\.json is missing and so is vocab\.txt.*every word would be read as \[UNK\]",
         TOKENIZER_FIX),
    Case("tokens-model-without-any-tokenizer-file", "tokens",
         lambda w: ["tokens", "--model", _no_tokenizer_json(w, "tokenizer_config.json"), "--text", "a film"],
         r"has no tokenizer: tokenizer\.json is missing and so is vocab\.txt", TOKENIZER_FIX),
    Case("embed-model-without-tokenizer-json", "embed",
         lambda w: embed(w, "--data", w.good(), model=_no_tokenizer_json(w), out=w.path("fresh-store")),
         r"has no tokenizer: tokenizer\.json is missing", TOKENIZER_FIX),
    Case("finetune-model-without-tokenizer-json", "finetune",
         lambda w: finetune(w, "--data", w.good(), model=_no_tokenizer_json(w), out=w.path("fresh")),
         r"has no tokenizer: tokenizer\.json is missing", TOKENIZER_FIX),
    Case("predict-export-model-onnx-half-overwritten", "predict",
         lambda w: ["predict", "--model", _changed_export(w, "half"), "--text", "a film", "--quiet"],
         r"model\.onnx: its bytes changed since it was written", RECORD_FIX),
    Case("evaluate-export-model-onnx-truncated", "evaluate",
         lambda w: ["evaluate", "--model", _changed_export(w, "truncated"), "--data", w.good(), "--quiet"],
         r"model\.onnx: it is [\d,]+ bytes but was written as [\d,]+ \(changed since it was written\)", RECORD_FIX),
    Case("predict-probe-weights-byte-flipped", "predict",
         lambda w: ["predict", "--probe", _changed_probe(w), "--text", "a great film"],
         r"probe\.safetensors is damaged \(its bytes changed since it was written", r"Re-run `bertkit probe"),
    Case("probe-store-features-byte-flipped", "probe",
         lambda w: ["probe", "--features", _changed(w, "store", "features.npy"), "--out", w.path("probe-run")],
         r"Store .* is damaged: features\.npy: its bytes changed", STORE_FIX),
    Case("probe-store-labels-changed", "probe",
         lambda w: ["probe", "--features", _store_with_changed_labels(w), "--out", w.path("probe-run")],
         r"Store .* is damaged: labels\.npy: its bytes changed", STORE_FIX),
    Case("embed-rerun-on-a-store-whose-features-changed", "embed",
         lambda w: embed(w, "--data", w.premade_data(), out=_changed(w, "store", "features.npy")),
         r"holds files changed since bertkit wrote them \(features\.npy\)", r"delete the changed ones"),
    Case("export-model-is-a-run-folder", "export",
         lambda w: ["export", "--model", w.copy("run"), "--out", w.path("export-out"), "--quiet"],
         r"WS/run is a bertkit run directory, not a model folder: the models it saved are in best/, final/",
         r"Use WS/run/best or WS/run/final"),
    Case("evaluate-model-is-a-run-folder", "evaluate",
         lambda w: ["evaluate", "--model", w.copy("run"), "--data", w.good(), "--quiet"],
         r"is a bertkit run directory, not a model folder", r"Use WS/run/best"),
    Case("finetune-cache-dir-inside-new-out", "finetune",
         lambda w: finetune(w, "--data", w.good(), "--cache-dir", w.path("fresh/cache"), out=w.path("fresh")),
         r"--cache-dir WS/fresh/cache is inside --out WS/fresh", CACHE_FIX),
    Case("embed-cache-dir-is-the-out", "embed",
         lambda w: embed(w, "--data", w.good(), "--cache-dir", w.path("fresh-store"), out=w.path("fresh-store")),
         r"--cache-dir WS/fresh-store is inside --out WS/fresh-store", CACHE_FIX),
    Case("probe-cache-dir-inside-existing-out", "probe",
         lambda w: (lambda s: ["probe", "--features", s, "--out", w.path("probe-run"), "--cache-dir",
                               w.path("probe-run/cache")])(w.copy("store")),
         r"--cache-dir WS/probe-run/cache is inside --out WS/probe-run", CACHE_FIX),
]


def _run_with_record_line(w: Workspace, line: dict) -> str:
    """A copy of the premade fine-tuning run whose record holds `line` (as a damaged or forged record would)."""
    run = Path(w.copy("run"))
    with open(run / ".bertkit-record.jsonl", "ab") as handle:
        handle.write(json.dumps(line).encode() + b"\n")
    return str(run)


DAMAGED_RECORD_FIX = r"Move that run aside \(e\.g\. `mv WS/run WS/run\.old`\)"

CASES += [  # issue 43: records are confined and complete; predict's --out is bertkit's by its record
    Case("finetune-record-names-a-parent-path", "finetune",
         lambda w: finetune(w, "--data", w.premade_data(), out=_run_with_record_line(w, {"temp": "../train.tsv"})),
         r"has a damaged record: WS/run/\.bertkit-record\.jsonl names paths outside WS/run, directly or through a "
         r"link \(\.\./train\.tsv\)", DAMAGED_RECORD_FIX),
    Case("finetune-overwrite-record-names-dotdot", "finetune",
         lambda w: finetune(w, "--data", w.premade_data(), "--overwrite", out=_run_with_record_line(w, {"dir": ".."})),
         r"names paths outside WS/run, directly or through a link \(\.\.\)", DAMAGED_RECORD_FIX),
    Case("finetune-record-names-an-absolute-path", "finetune",
         lambda w: finetune(w, "--data", w.premade_data(), out=_run_with_record_line(w, {"temp": w.good("x.tsv")})),
         r"names paths outside WS/run, directly or through a link \(WS/x\.tsv\)", DAMAGED_RECORD_FIX),
    Case("finetune-record-lists-a-file-without-digests", "finetune",
         lambda w: finetune(w, "--data", w.premade_data(), out=_run_with_record_line(w, {"file": "metrics.json"})),
         r"lists files without their size and sha256 \(metrics\.json\)", DAMAGED_RECORD_FIX),
    Case("predict-out-has-predicts-header-but-no-record", "predict",
         lambda w: ["predict", "--model", w.copy("clf"), "--text", "hi", "--out",
                    w.file("notes.csv", "row,text,predicted\n1,my text,my label\n"), "--quiet"],
         r"exists and is not a predictions file bertkit wrote \(bertkit has no record of writing it though its "
         r"header is predict's", r"Choose another --out"),
]


def test_corpus_size():
    assert len(CASES) >= 30
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, workspace: Workspace):
    if case.command not in REGISTERED:
        pytest.skip(f"`bertkit {case.command}` is not registered yet")
    argv = case.argv(workspace)
    before = snapshot(workspace.root)
    result = runner.invoke(app, argv, catch_exceptions=False)
    check_result(case, result.exit_code, result.output, before, workspace.root)


SUBPROCESS_CASES = ["non-utf8-bytes", "embed-out-unwritable", "predict-neither-model-nor-probe"]


def test_bad_input_as_subprocesses(workspace: Workspace):
    """The same guarantees from a real `python -m bertkit` process (exit status, stderr), run side by side."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    cases = [c for c in CASES if c.id in SUBPROCESS_CASES and c.command in REGISTERED]
    assert cases
    started = []
    for case in cases:
        argv = case.argv(workspace)
        started.append((case, subprocess.Popen([sys.executable, "-m", "bertkit", *argv], stdout=subprocess.PIPE,
                                                stderr=subprocess.PIPE, text=True, env=env)))
    before = snapshot(workspace.root)
    for case, proc in started:
        out, err = proc.communicate(timeout=600)
        check_result(case, proc.returncode, out + err, before, workspace.root)
        assert case.problem and re.search(case.problem, err, re.S | re.I), "the message goes to stderr"


# ---------------------------------------------------------------- a failed start loses nothing and blocks nothing


def test_failed_start_leaves_out_reusable(workspace: Workspace):
    """A run refused before any work (bad --model) must not leave an --out that refuses the corrected command."""
    for command in ("embed", "finetune"):
        if command not in REGISTERED:
            continue
        build = embed if command == "embed" else finetune
        out = workspace.path(f"{command}-out")
        bad = runner.invoke(app, build(workspace, "--data", workspace.good(), model=workspace.model_variant("pickle"),
                                       out=out), catch_exceptions=False)
        assert bad.exit_code == 2, bad.output
        fixed = runner.invoke(app, build(workspace, "--data", workspace.good(), out=out), catch_exceptions=False)
        assert fixed.exit_code == 0, f"`bertkit {command}` with the corrected --model was refused:\n{fixed.output}"


# ---------------------------------------------------------------- a 1 MB line is truncated and counted, not an error


def test_one_megabyte_line_is_truncated_and_counted(workspace: Workspace):
    data = workspace.file("big.tsv", _tsv([*_rows(10), (BIG_LINE, "pos")]))
    result = runner.invoke(app, tokens(workspace, "--data", data, "--json"), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)["splits"][0]
    assert report["rows"] == 11 and report["truncated"] == 1 and report["max"] > 200_000
    if "embed" in REGISTERED:
        out = workspace.path("big-store")
        result = runner.invoke(app, ["embed", "--model", workspace.tiny, "--data", data, "--out", out, "--json", "--quiet"],
                               catch_exceptions=False)
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout)
        assert summary["n_truncated"] == 1 and summary["splits"][0]["shape"] == [11, 32]
        from bertkit.features import store

        opened = store.open(out)
        assert opened.features.shape == (11, 32) and opened.manifest["n_truncated"] == 1


@pytest.mark.slow
def test_one_megabyte_line_finetune_and_predict(workspace: Workspace):
    data = workspace.file("big.tsv", _tsv([*_rows(20), (BIG_LINE, "pos")]))
    out = workspace.path("ft-big")
    result = runner.invoke(app, finetune(workspace, "--data", data, "--json", out=out), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["predict", "--model", f"{out}/best", "--text", BIG_LINE, "--json", "--quiet"],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["predictions"]) == 1


# ---------------------------------------------------------------- issue 43: nothing created before a refusal


def _no_cache(w: Workspace) -> list[str]:
    return ["--cache-dir", w.path("cache")]


NOTHING_BEFORE = [  # (id, argv, what the message says); every one leaves no --out, and those the model's files
    # decide no cache entry either (--cv is judged on the labels: the data is read, and cached, for it)
    ("finetune-max-length-over-the-model", lambda w: finetune(w, "--data", w.good(), "--max-length", "1000",
                                                             *_no_cache(w), out=w.path("out")),
     r"--max-length 1000 is more than model .* accepts \(128 tokens\)"),
    ("embed-max-length-over-the-model", lambda w: embed(w, "--data", w.good(), "--max-length", "1000",
                                                       *_no_cache(w), out=w.path("out")),
     r"--max-length 1000 is more than model"),
    ("embed-layers-beyond-the-model", lambda w: embed(w, "--data", w.good(), "--layers", "9", *_no_cache(w),
                                                     out=w.path("out")),
     r"--layers 9 is out of range: the model has 2 layers"),
    ("predict-max-length-over-the-model", lambda w: ["predict", "--model", w.copy("clf"), "--data", w.good(),
                                                     "--max-length", "1000", "--quiet", *_no_cache(w),
                                                     "--out", w.path("out")],
     r"--max-length 1000 is more than model"),
    ("probe-max-length-over-the-model", lambda w: ["probe", "--model", w.tiny, "--data", w.good(), "--max-length",
                                                   "1000", "--quiet", *_no_cache(w), "--out", w.path("out")],
     r"--max-length 1000 is more than model"),
    ("probe-layers-beyond-the-model", lambda w: ["probe", "--model", w.tiny, "--data", w.good(), "--layers", "9",
                                                 "--quiet", *_no_cache(w), "--out", w.path("out")],
     r"--layers 9 is out of range: the model has 2 layers"),
    ("distill-student-deeper-than-teacher", lambda w: _distill(w, "--student-layers", "5", *_no_cache(w)),
     r"--student-layers 5 is more than the teacher's 2 layers"),
    ("probe-cv-more-folds-than-rows-of-a-class", lambda w: ["probe", "--model", w.tiny, "--data", w.good(), "--cv", "30",
                                                            "--quiet", *_no_cache(w), "--out", w.path("out")],
     r"--cv 30 needs at least 30 training rows of every class"),
    ("probe-store-cv-more-folds-than-rows", lambda w: ["probe", "--features", w.copy("store"), "--cv", "30",
                                                       "--quiet", "--out", w.path("out")],
     r"--cv 30 needs at least 30 training rows of every class"),
]


@pytest.mark.parametrize("argv, problem", [c[1:] for c in NOTHING_BEFORE], ids=[c[0] for c in NOTHING_BEFORE])
def test_a_model_or_fold_refusal_creates_nothing(argv, problem, workspace: Workspace):
    """Refusals that the model's own files or the labels decide come before any data is cached or --out is made."""
    args = argv(workspace)
    if args[0] not in REGISTERED:
        pytest.skip(f"`bertkit {args[0]}` is not registered yet")
    out = Path(args[args.index("--out") + 1])
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert re.search(problem, " ".join(result.output.split()), re.S), result.output
    assert not out.exists(), f"--out {out} was created before the refusal"
    cache = workspace.root / "cache"
    if "--cv" not in args:
        assert not cache.exists() or not any(cache.rglob("*")), sorted(map(str, cache.rglob("*")))


@pytest.mark.parametrize("name", ["a" * 300, "a" * 300 + ".tsv"])
def test_a_data_name_too_long_to_stat_is_one_readable_error(tmp_path, name):
    """A --data name the system cannot stat (longer than a file name may be) is refused by the data reader with exit 2
    and no traceback, whether it looks like a file or a hub name, and --out is not created."""
    out = tmp_path / "run"
    result = runner.invoke(app, ["finetune", "--data", name, "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "--data" in result.output and "too long" in result.output
    assert not out.exists()
