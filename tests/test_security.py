"""Security regressions: no unpickling of user files, safetensors only, `trust_remote_code` off by default.

The source scan is an AST walk over every module in bertkit/ (comments and docstrings cannot trip it, and a
call cannot hide from it behind line breaks). The scanner is itself tested on snippets that contain each
forbidden pattern, so a scan that finds nothing means the code is clean, not that the scanner is blind.
"""

from __future__ import annotations

import ast
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.commands.registry import config_for_command, recipe_commands
from bertkit.errors import UserError
from bertkit.models import loading

PACKAGE = Path(__file__).resolve().parent.parent / "bertkit"
MODEL_LOADER = "models/loading.py"
UNPICKLERS = {"pickle", "cPickle", "_pickle", "joblib", "dill", "cloudpickle", "shelve", "marshal"}
runner = CliRunner()


# ---------------------------------------------------------------- the scanner


def _dotted(node: ast.AST) -> str:
    """`torch.load` for Attribute(Name(torch), load); '' for anything that is not a plain dotted name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _is_const(node: ast.expr | None, value: object) -> bool:
    return isinstance(node, ast.Constant) and node.value is value


def _is_false_default(node: ast.expr) -> bool:
    """A field default of False: the constant, or `option(False, ...)` (an option declaration, see bertkit.options)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "option" and node.args:
        return _is_const(node.args[0], False)
    return _is_const(node, False)


def scan_source(source: str, filename: str) -> list[str]:
    """Every security problem in one module's source, as `file:line: what` strings."""
    tree = ast.parse(source, filename=filename)
    problems: list[str] = []
    imported_load: dict[str, str] = {}  # `from pickle import load as l` -> {"l": "pickle.load"}

    def report(node: ast.AST, what: str) -> None:
        problems.append(f"{filename}:{getattr(node, 'lineno', '?')}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in UNPICKLERS | {"torch"}:
            for alias in node.names:
                if alias.name in {"load", "loads", "Unpickler", "open"}:
                    imported_load[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args.args + node.args.kwonlyargs
            defaults = [None] * (len(node.args.args) - len(node.args.defaults)) + list(node.args.defaults)
            defaults += list(node.args.kw_defaults)
            for arg, default in zip(args, defaults, strict=True):
                if arg.arg == "trust_remote_code" and default is not None and not _is_const(default, False):
                    report(node, f"parameter trust_remote_code of {node.name}() defaults to {ast.unparse(default)}")
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if node.target.id == "trust_remote_code" and node.value is not None and not _is_false_default(node.value):
                report(node, f"field trust_remote_code defaults to {ast.unparse(node.value)}")
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        root, _, last = name.rpartition(".")
        if name in imported_load:
            name = imported_load[name]
            root, _, last = name.rpartition(".")
        if root.split(".")[0] in UNPICKLERS and last in {"load", "loads", "Unpickler", "open"}:
            report(node, f"{name}() unpickles (runs arbitrary code from the file)")
        if last == "read_pickle":
            report(node, f"{name}() unpickles")
        if (root == "torch" and last == "load") or name == "torch.load":
            if not _is_const(_keyword(node, "weights_only"), True):
                report(node, "torch.load() without weights_only=True")
        if last == "load" and root in {"np", "numpy"} and _is_const(_keyword(node, "allow_pickle"), True):
            report(node, f"{name}(allow_pickle=True)")
        if _is_const(_keyword(node, "trust_remote_code"), True):
            report(node, f"{name}(trust_remote_code=True) hard-coded")
        for flag in ("use_safetensors", "safe_serialization"):
            if _is_const(_keyword(node, flag), False):
                report(node, f"{name}({flag}=False)")
        if last == "from_pretrained":
            if not Path(filename).as_posix().endswith(MODEL_LOADER):
                report(node, f"{name}() outside bertkit/{MODEL_LOADER} (the only module that loads weights)")
            elif "Model" in root and not _is_const(_keyword(node, "use_safetensors"), True):
                report(node, f"{name}() loads weights without use_safetensors=True")
    return problems


def package_modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "resources" not in p.parts)


# ---------------------------------------------------------------- the scanner finds what it must


@pytest.mark.parametrize(
    ("snippet", "expected"),
    [
        ("import pickle\npickle.load(open('f', 'rb'))", "pickle.load"),
        ("import pickle\npickle.loads(b'')", "pickle.loads"),
        ("from pickle import load\nload(f)", "pickle.load"),
        ("import joblib\njoblib.load('probe.joblib')", "joblib.load"),
        ("import pandas as pd\npd.read_pickle('x')", "read_pickle"),
        ("import torch\ntorch.load('w.bin')", "without weights_only"),
        ("import torch\ntorch.load(\n  'w.bin',\n  map_location='cpu',\n  weights_only=False)", "without weights_only"),
        ("import numpy as np\nnp.load('a.npy', allow_pickle=True)", "allow_pickle"),
        ("AutoModel.from_pretrained(p, trust_remote_code=True)", "trust_remote_code=True"),
        ("def load(name, trust_remote_code=True):\n    pass", "defaults to True"),
        ("def load(name, *, trust_remote_code: bool = True):\n    pass", "defaults to True"),
        ("class C:\n    trust_remote_code: bool = True", "field trust_remote_code"),
        ("class C:\n    trust_remote_code: bool = option(True, 'help')", "field trust_remote_code"),
        ("model.save_pretrained(p, safe_serialization=False)", "safe_serialization=False"),
        ("AutoModel.from_pretrained(p)", "outside bertkit/models/loading.py"),
    ],
)
def test_scanner_detects_forbidden_patterns(snippet, expected):
    problems = scan_source(snippet, "bertkit/somewhere.py")
    assert problems and any(expected in p for p in problems), problems


def test_scanner_requires_safetensors_in_the_model_loader():
    assert scan_source("AutoModel.from_pretrained(p, trust_remote_code=flag)", "bertkit/models/loading.py")
    assert not scan_source("AutoModel.from_pretrained(p, use_safetensors=True, trust_remote_code=flag)",
                           "bertkit/models/loading.py")
    assert not scan_source("AutoTokenizer.from_pretrained(p, trust_remote_code=flag)", "bertkit/models/loading.py")


def test_scanner_passes_safe_code():
    safe = (
        "import torch, numpy as np\n"
        "torch.load('x', map_location='cpu', weights_only=True)\n"
        "np.load('a.npy', mmap_mode='r')\n"
        "def f(trust_remote_code: bool = False):\n    '''pickle.load(x) in a docstring'''\n"
    )
    assert scan_source(safe, "bertkit/x.py") == []


# ---------------------------------------------------------------- the package is clean


def test_package_has_no_unsafe_loading():
    modules = package_modules()
    assert len(modules) >= 10 and any(p.as_posix().endswith(MODEL_LOADER) for p in modules)
    problems = [p for path in modules for p in scan_source(path.read_text(encoding="utf-8"), str(path))]
    assert problems == [], "unsafe loading in bertkit/:\n" + "\n".join(problems)


def test_only_modeling_calls_from_pretrained():
    callers = set()
    for path in package_modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and _dotted(node.func).endswith(".from_pretrained"):
                callers.add(path.relative_to(PACKAGE).as_posix())
    assert callers == {MODEL_LOADER}


# ---------------------------------------------------------------- trust_remote_code defaults


def _all_commands(command: Any, prefix: str = "") -> dict[str, Any]:
    """Every command and sub-command (Typer vendors its own click, so groups are found by their `commands`)."""
    found = {prefix or command.name or "bertkit": command}
    if isinstance(getattr(command, "commands", None), dict):
        for name, sub in command.commands.items():
            found.update(_all_commands(sub, f"{prefix} {name}".strip()))
    return found


def test_trust_remote_code_is_off_by_default_in_every_command():
    commands = _all_commands(typer.main.get_command(app))
    with_option = {}
    for name, command in commands.items():
        for param in command.params:
            if param.name == "trust_remote_code" or "--trust-remote-code" in getattr(param, "opts", []):
                with_option[name] = param
                assert param.default is False, f"`bertkit {name}` --trust-remote-code defaults to {param.default!r}"
                assert getattr(param, "is_flag", False), f"`bertkit {name}` --trust-remote-code must be a plain flag"
                assert param.envvar is None, f"`bertkit {name}` --trust-remote-code must not be settable from the environment"
    # every command that loads a pretrained model by name offers the switch (and so defaults it off)
    assert {"tokens", "embed", "finetune"} <= set(with_option), sorted(with_option)


def test_trust_remote_code_is_off_in_every_config_and_loader():
    import dataclasses
    import inspect

    configs = [config_for_command(name) for name in recipe_commands()]
    checked = 0
    for cls in configs:
        for f in dataclasses.fields(cls):
            if f.name == "trust_remote_code":
                assert f.default is False, f"{cls.__name__}.trust_remote_code defaults to {f.default!r}"
                checked += 1
    assert checked >= 3
    for fn in (loading.load_tokenizer, loading.load_config, loading.load_encoder, loading.load_classifier):
        assert inspect.signature(fn).parameters["trust_remote_code"].default is False


# ---------------------------------------------------------------- pickle-only checkpoints are refused, never opened


class _Payload:
    """Unpickling this creates the marker file: proof that a loader opened the pickle."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _pickle_only_folder(tiny_bert_dir: Path, target: Path, marker: Path) -> Path:
    shutil.copytree(tiny_bert_dir, target)
    (target / "model.safetensors").unlink()
    (target / "pytorch_model.bin").write_bytes(pickle.dumps({"state": _Payload(marker)}))
    return target


def _check_payload_is_live(folder: Path, marker: Path) -> None:
    """Sanity: the payload really does create the marker when unpickled (in a child process)."""
    code = f"import pickle; pickle.loads(open({str(folder / 'pytorch_model.bin')!r}, 'rb').read())"
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    assert marker.exists()
    marker.unlink()


@pytest.fixture
def pickle_model(tiny_bert_dir, tmp_path):
    marker = tmp_path / "UNPICKLED"
    folder = _pickle_only_folder(tiny_bert_dir, tmp_path / "pickle-only", marker)
    _check_payload_is_live(folder, marker)
    return folder, marker


def test_modeling_refuses_pickle_only_folder(pickle_model):
    folder, marker = pickle_model
    for load in (loading.load_encoder, loading.load_classifier):
        with pytest.raises(UserError, match="pickle") as err:
            load(str(folder))
        assert "safetensors" in str(err.value) and "save_pretrained" in str(err.value)
    assert not marker.exists()


def _cli_cases(folder: Path, tmp_path: Path, data: Path) -> list[list[str]]:
    cases = [
        ["embed", "--model", str(folder), "--data", str(data), "--out", str(tmp_path / "emb"), "--quiet"],
        ["finetune", "--model", str(folder), "--data", str(data), "--out", str(tmp_path / "ft"), "--quiet",
         "--epochs", "1", "--batch-size", "8"],
        ["predict", "--model", str(folder), "--text", "a fine film"],
        ["evaluate", "--model", str(folder), "--data", str(data)],
    ]
    registered = set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    return [c for c in cases if c[0] in registered]


def test_cli_refuses_pickle_only_checkpoint(pickle_model, tmp_path, write_tsv, toy_rows):
    folder, marker = pickle_model
    data = write_tsv("train.tsv", toy_rows, header=("sentence", "label"))
    cases = _cli_cases(folder, tmp_path, data)
    assert len(cases) >= 2
    for argv in cases:
        result = runner.invoke(app, argv, catch_exceptions=False)
        assert result.exit_code == 2, (argv[0], result.output)
        assert "pickle" in result.output and "safetensors" in result.output, result.output
        assert "Traceback" not in result.output
        assert not marker.exists(), f"`bertkit {argv[0]}` unpickled the checkpoint"


def test_cli_refuses_pickle_only_checkpoint_subprocess(pickle_model, tmp_path, write_tsv, toy_rows):
    folder, marker = pickle_model
    data = write_tsv("train.tsv", toy_rows, header=("sentence", "label"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    argv = [sys.executable, "-m", "bertkit", "embed", "--model", str(folder), "--data", str(data),
            "--out", str(tmp_path / "emb"), "--quiet"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "pickle weights" in proc.stderr and "Traceback" not in proc.stderr
    assert not marker.exists()
    assert not (tmp_path / "emb" / "features.npy").exists()


def test_safetensors_is_preferred_when_both_are_present(tiny_bert_dir, tmp_path):
    """A folder with model.safetensors and a booby-trapped pytorch_model.bin loads without touching the pickle."""
    marker = tmp_path / "UNPICKLED"
    folder = tmp_path / "both"
    shutil.copytree(tiny_bert_dir, folder)
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps({"state": _Payload(marker)}))
    encoder = loading.load_encoder(str(folder))
    assert encoder.config.hidden_size == 32
    loading.load_classifier(str(folder), id2label={0: "a", 1: "b"})
    assert not marker.exists()


def test_remote_code_is_not_run_without_the_flag(tiny_bert_dir, tmp_path, write_tsv, toy_rows):
    """A folder whose config asks for custom code (auto_map) is refused; the code module never runs."""
    marker = tmp_path / "CODE_RAN"
    folder = tmp_path / "custom-code"
    shutil.copytree(tiny_bert_dir, folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(model_type="bertkit-evil", architectures=["EvilModel"],
               auto_map={"AutoConfig": "evil.EvilConfig", "AutoModel": "evil.EvilModel"})
    (folder / "config.json").write_text(json.dumps(cfg))
    (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    data = write_tsv("train.tsv", toy_rows, header=("sentence", "label"))
    # the tokenizer alone needs no model code: it loads, and the custom module still does not run
    assert runner.invoke(app, ["tokens", "--model", str(folder), "--text", "hi"], catch_exceptions=False).exit_code == 0
    result = runner.invoke(app, ["embed", "--model", str(folder), "--data", str(data), "--out", str(tmp_path / "o")],
                           catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert "--trust-remote-code" in result.output and "Traceback" not in result.output
    with pytest.raises(UserError):
        loading.load_config(str(folder))
    assert not marker.exists()


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_resume_never_unpickles_a_tampered_checkpoint(tiny_bert_dir, tmp_path, write_tsv, toy_rows, monkeypatch):
    """Checkpoints hold optimizer/RNG state in torch files; a tampered one must not run code on resume."""
    if "finetune" not in typer.main.get_command(app).commands:  # type: ignore[attr-defined]
        pytest.skip("finetune is not registered yet")
    data = write_tsv("train.tsv", toy_rows, header=("sentence", "label"))
    out = tmp_path / "run"
    argv = ["finetune", "--model", str(tiny_bert_dir), "--data", str(data), "--out", str(out), "--epochs", "1",
            "--batch-size", "8", "--save-every", "2", "--quiet"]
    monkeypatch.setenv("BERTKIT_FAIL_AFTER_STEPS", "2")  # stop after the step-2 checkpoint (finetune's test hook)
    runner.invoke(app, argv)
    monkeypatch.delenv("BERTKIT_FAIL_AFTER_STEPS")
    checkpoint = out / "checkpoints" / "step-2"
    assert (checkpoint / "trainer_state.json").exists()
    marker = tmp_path / "UNPICKLED"
    tampered = [p for p in checkpoint.iterdir() if p.suffix in {".bin", ".pkl", ".pt"}]
    assert tampered, sorted(p.name for p in checkpoint.iterdir())
    for path in tampered:
        path.write_bytes(pickle.dumps({"state": _Payload(marker)}))
    result = runner.invoke(app, argv)
    assert not marker.exists(), "resuming unpickled a tampered checkpoint file"
    assert result.exit_code != 0


# ---------------------------------------------------------------- verified on read (issue 36)


def _saved_by_bertkit(tiny_bert_dir: Path, folder: Path) -> Path:
    """The tiny model as bertkit saves a model folder: the files first, then bertkit_model.json recording them."""
    from bertkit.models.metadata import write_model_info

    shutil.copytree(tiny_bert_dir, folder)
    write_model_info(folder, {"step": 1})
    return folder


def test_weights_swapped_for_another_models_of_the_same_shape_are_refused(tiny_bert_dir, tmp_path):
    """A well-formed safetensors file of the same size and architecture, other weights: no content check can tell,
    the record does."""
    import torch
    from transformers import AutoConfig, AutoModel

    folder = _saved_by_bertkit(tiny_bert_dir, tmp_path / "model")
    size = (folder / "model.safetensors").stat().st_size
    torch.manual_seed(1)
    AutoModel.from_config(AutoConfig.from_pretrained(str(folder))).save_pretrained(tmp_path / "other")
    shutil.copy(tmp_path / "other" / "model.safetensors", folder / "model.safetensors")
    assert (folder / "model.safetensors").stat().st_size == size
    with pytest.raises(UserError, match=r"model\.safetensors: its bytes changed since it was written"):
        loading.load_encoder(str(folder))
    assert loading.load_encoder(str(tiny_bert_dir)).config.hidden_size == 32  # the folder it was copied from: no record


def test_an_unrecorded_weights_index_beside_a_recorded_folder_is_refused(tiny_bert_dir, tmp_path):
    """A model.safetensors.index.json added later would point the loader at shards nobody recorded."""
    folder = _saved_by_bertkit(tiny_bert_dir, tmp_path / "model")
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {"embeddings.word_embeddings.weight": "model-00001-of-00001.safetensors"}}))
    with pytest.raises(UserError, match=r"model\.safetensors\.index\.json: not in the record"):
        loading.load_tokenizer(str(folder))


def test_a_well_formed_arrow_file_put_in_a_cache_entry_is_not_read_as_the_data(tmp_path, caplog):
    """rows.arrow replaced by a valid Arrow file of other rows (meta.json untouched): parsed again from the input."""
    import pyarrow as pa

    from bertkit.data.options import DataOptions
    from bertkit.data.splits import load_dataset_split

    data = tmp_path / "d.tsv"
    data.write_text("sentence\tlabel\na fine film\tpos\nan awful film\tneg\n", encoding="utf-8")
    opts = DataOptions(cache_dir=str(tmp_path / "cache"))
    assert list(load_dataset_split(opts, str(data)).texts) == ["a fine film", "an awful film"]
    (entry,) = (tmp_path / "cache" / "tables").iterdir()
    schema = pa.ipc.open_file(entry / "rows.arrow").schema
    forged = pa.table({name: (["run this", "rm -rf"] if name == "0" else ["pos", "neg"] if name == "1" else [2, 3])
                       for name in schema.names}, schema=schema)
    with pa.OSFile(str(entry / "rows.arrow"), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        writer.write_table(forged)
    with caplog.at_level("WARNING", logger="bertkit"):
        assert list(load_dataset_split(opts, str(data)).texts) == ["a fine film", "an awful film"]
    assert "failed verification" in caplog.text


def test_an_onnx_export_given_where_pytorch_weights_are_needed_is_named_as_such(tmp_path):
    """bench, finetune or distill handed an export folder: the message says it is an ONNX export and names the
    folder it was exported from (its record), instead of "no weights"."""
    import json

    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(b"onnx graph")
    (folder / "config.json").write_text(json.dumps({"model_type": "bert"}), encoding="utf-8")
    (folder / "bertkit_model.json").write_text(json.dumps({"onnx": {"source_model": "runs/sst2/best"}}),
                                               encoding="utf-8")
    with pytest.raises(UserError, match="is an ONNX export") as err:
        loading._check_weights(str(folder))
    assert "runs/sst2/best" in str(err.value) and "no weights" not in str(err.value)
