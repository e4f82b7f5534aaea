"""Fast start: `--help`, and a missing data file or column, answer without importing torch or transformers (issue 33).

Each case runs the real CLI in a fresh interpreter that lists, at exit, the heavy packages it imported. A refused run
exits 2 with one message and no traceback, and leaves --out as it was (here: not created).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("torch", "transformers")
RUN_CLI = (
    "import atexit, json, runpy, sys\n"
    f"heavy = set({list(HEAVY)!r})\n"
    "atexit.register(lambda: print('IMPORTED ' + json.dumps(sorted({m.split('.')[0] for m in sys.modules} & heavy)), "
    "file=sys.stderr))\n"
    "sys.argv = ['bertkit', *sys.argv[1:]]\n"
    "runpy.run_module('bertkit', run_name='__main__', alter_sys=True)\n"
)
TRAIN = "sentence\tlabel\na fine film\t1\na dull film\t0\nquite good\t1\nvery bad\t0\n"


def run_cli(*args: str, cwd: Path) -> tuple[int, str, list[str]]:
    """(exit code, stdout + stderr without the import line, the heavy packages imported)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "100",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", RUN_CLI, *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=120)
    lines = (proc.stdout + proc.stderr).splitlines()
    imported = [json.loads(line[len("IMPORTED "):]) for line in lines if line.startswith("IMPORTED ")]
    assert len(imported) == 1, proc.stdout + proc.stderr
    return proc.returncode, "\n".join(line for line in lines if not line.startswith("IMPORTED ")), imported[0]


# command -> the arguments that make it read --data (with --out where the command writes one)
READS_DATA = {
    "tokens": ["--model", "minilm-offline"],
    "embed": ["--model", "minilm-offline", "--out", "OUT"],
    "probe": ["--model", "minilm-offline", "--out", "OUT"],
    "finetune": ["--model", "minilm-offline", "--out", "OUT"],
    "sweep": ["--model", "minilm-offline", "--out", "OUT", "--grid", "lr=1e-5,2e-5"],
    "distill": ["--teacher", "minilm-offline", "--out", "OUT"],
    "predict": ["--model", "minilm-offline"],
    "evaluate": ["--model", "minilm-offline", "--out", "OUT"],
    "export": ["--model", "minilm-offline", "--out", "OUT"],
    "bench": ["--preset", "distilbert-vs-bert", "--out", "OUT"],
}
COMMANDS = [*READS_DATA, "push"]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "train.tsv").write_text(TRAIN, encoding="utf-8")
    return tmp_path


def _args(command: str, *extra: str) -> list[str]:
    return [command, *READS_DATA[command], *extra]


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_imports_neither_torch_nor_transformers(command, tmp_path):
    code, output, imported = run_cli(*([command] if command else []), "--help", cwd=tmp_path)
    assert code == 0, output
    assert "Usage:" in output and imported == [], (command, imported)


@pytest.mark.parametrize("command", list(READS_DATA))
def test_a_missing_data_file_is_refused_before_torch(command, folder):
    code, output, imported = run_cli(*_args(command, "--data", "missing.tsv"), cwd=folder)
    assert code == 2, output
    assert "Data file missing.tsv does not exist" in output and "Traceback" not in output
    assert imported == [], (command, imported)
    assert not (folder / "OUT").exists()


@pytest.mark.parametrize("command", list(READS_DATA))
def test_a_missing_column_is_refused_before_torch(command, folder):
    code, output, imported = run_cli(*_args(command, "--data", "train.tsv", "--text-column", "zz"), cwd=folder)
    assert code == 2, output
    assert "Column 'zz' (from --text-column) not found in train.tsv; columns are: sentence, label" in output
    assert "Traceback" not in output and imported == [], (command, imported)
    assert not (folder / "OUT").exists()


@pytest.mark.parametrize("flag", ["--dev", "--test"])
def test_dev_and_test_files_are_checked_too(flag, folder):
    code, output, imported = run_cli(*_args("finetune", "--data", "train.tsv", flag, "nope.tsv"), cwd=folder)
    assert code == 2 and "Data file nope.tsv does not exist" in output and imported == [], output
    (folder / "dev.tsv").write_text("text\tlabel\nok\t1\n", encoding="utf-8")
    code, output, imported = run_cli(*_args("finetune", "--data", "train.tsv", flag, "dev.tsv", "--text-column",
                                            "sentence"), cwd=folder)
    assert code == 2 and "not found in dev.tsv; columns are: text, label" in output and imported == [], output


def test_headerless_files_and_indexes_are_checked_from_the_first_row(folder):
    (folder / "plain.tsv").write_text("a fine film\t1\na dull film\t0\n", encoding="utf-8")
    code, output, imported = run_cli(*_args("finetune", "--data", "plain.tsv", "--text-column", "0",
                                            "--label-column", "2"), cwd=folder)
    assert code == 2 and "Column '2' (from --label-column) not found in plain.tsv" in output, output
    assert "0-based indexes 0..1" in output and imported == []


def test_a_missing_label_column_and_a_missing_model_folder_are_refused_before_torch(folder):
    (folder / "texts.tsv").write_text("sentence\tsource\nfine\ta\n", encoding="utf-8")
    code, output, imported = run_cli(*_args("finetune", "--data", "texts.tsv"), cwd=folder)
    assert code == 2 and "No label column in texts.tsv" in output and imported == [], output
    code, output, imported = run_cli("predict", "--model", "./no-such-model", "--text", "a", cwd=folder)
    assert code == 2 and "Model folder ./no-such-model does not exist" in output and imported == [], output


def test_json_and_parquet_columns_are_checked_before_torch(folder):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (folder / "rows.jsonl").write_text('{"text": "fine", "label": 1}\n{"text": "bad", "label": 0, "x": 2}\n',
                                       encoding="utf-8")
    pq.write_table(pa.table({"text": ["fine", "bad"], "label": [1, 0]}), folder / "rows.parquet")
    for name, columns in (("rows.jsonl", "text, label, x"), ("rows.parquet", "text, label")):
        code, output, imported = run_cli(*_args("predict", "--data", name, "--text-column", "zz"), cwd=folder)
        assert code == 2 and f"not found in {name}; columns are: {columns}" in output and imported == [], output


def test_a_refused_run_leaves_an_existing_out_as_it_was(folder):
    out = folder / "OUT"
    out.mkdir()
    (out / "keep.txt").write_text("mine", encoding="utf-8")
    code, output, _ = run_cli(*_args("finetune", "--data", "train.tsv", "--label-column", "nope"), cwd=folder)
    assert code == 2 and "Column 'nope' (from --label-column)" in output
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]


def test_push_refuses_offline_before_torch(tmp_path):
    code, output, imported = run_cli("push", "--model", "no-such-folder", "--repo-id", "me/model", cwd=tmp_path)
    assert code == 2 and "offline mode is set (HF_HUB_OFFLINE=1)" in output and imported == [], output


@pytest.mark.parametrize(("name", "text", "header", "by_index", "label_index"), [
    ("h.tsv", "sentence\tlabel\nfine\t1\nbad\t0\n", "auto", False, None),
    ("h.csv", 'text,"a,b",text\n"x, y",1,z\n', "auto", False, None),
    ("plain.tsv", "fine\t1\nbad\t0\nok\t1\n", "auto", True, 1),
    ("guessed.tsv", "sentence\tlabel\n" + "".join(f"row {i}\t{i % 2}\n" for i in range(30)), "auto", True, 1),
    ("no.tsv", "sentence\tlabel\nfine\t1\n", "no", False, None),
    ("yes.tsv", "\n\nfine\t1\nbad\t0\n", "yes", True, 1),
    ("bom.tsv", "\ufeffsentence\tlabel\nfine\t1\n", "auto", False, None),
    ("rows.jsonl", '{"b": 1, "a": "x"}\n\n{"c": [1], "a": "y"}\n', "auto", False, None),
    ("rows.json", '[{"text": "x", "label": 1}, {"label": 0, "extra": 2}]', "auto", False, None),
])
def test_the_header_peek_names_the_columns_the_parse_gives(tmp_path, name, text, header, by_index, label_index):
    from bertkit.data import ingest, sources

    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    peeked = sources.column_names(path, "utf-8", header, by_index, label_index)
    table, _ = ingest.local_table(path, "utf-8", header, by_index, label_index, str(tmp_path / "cache"))
    assert peeked == list(table.columns)


def test_finetune_refuses_an_out_of_someone_elses_files_before_reading_data(tmp_path):
    """An --out holding the user's files is refused at once: before torch, before the data is parsed and before the
    --lr auto line (it was ~10 s in, after that line)."""
    (tmp_path / "train.tsv").write_text("sentence\tlabel\n" + "".join(f"row {i}\t{i % 2}\n" for i in range(40)))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("my notes")
    code, output, imported = run_cli("finetune", "--model", "minilm-offline", "--data", "train.tsv", "--out", "mine",
                                     cwd=tmp_path)
    assert code == 2 and "notes.txt" in output and imported == [], output
    assert "learning rate" not in output.lower() and (tmp_path / "mine" / "notes.txt").read_text() == "my notes"


def test_predict_with_a_classifier_does_not_import_scikit_learn(tmp_path):
    """`bertkit predict --model` never scores, so the CLI and the predict command import neither scikit-learn nor
    matplotlib (about a second of a three-sentence predict's start-up; benchmarks/bench_startup.py --only-predict)."""
    code = ("import sys, bertkit.cli.app, bertkit.commands.predict, bertkit.models.infer\n"
            "print(sorted(m for m in ('sklearn', 'matplotlib') if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
