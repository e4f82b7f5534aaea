"""How results read in a terminal: one number format per column, identifiers without thousands separators, text
left-aligned, the bench summary within 100 columns, recipe descriptions whole, the distil claim check worded as a
measurement, the probe's hints, and the demo script's guard of its output folder."""

from __future__ import annotations

import subprocess
from pathlib import Path

from rich.console import Console

from bertkit.cli import show
from bertkit.cli.output import table
from bertkit.measure import distill_report
from bertkit.measure import report as bench_report
from bertkit.recipes import describe_recipe, list_recipes

ROOT = Path(__file__).resolve().parents[1]


def rendered(tbl, width: int = 200) -> list[str]:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115 - closed with the console
    console.print(tbl)
    return console.export_text().splitlines()


def cells_of(lines: list[str], first: str) -> list[str]:
    row = next(line for line in lines if line.strip("│ ").startswith(first))
    return [c.strip() for c in row.strip("│").split("│")]


def test_a_column_of_floats_has_one_format_and_ids_have_no_separators():
    rows = [[1, 0.6931, 36.1, 8.9, 1037, "hello"], [2, 0.41, 237.0, 12.25, 101, "x"], [3, 0.3, 393.8, 10.0, 5, "y"]]
    lines = rendered(table("t", ["epoch", "loss", "train s, total", "samples/s", "id", "text"], rows,
                           formats={"samples/s": ".1f", "id": "d"}))
    assert cells_of(lines, "1")[1:5] == ["0.693", "36.1", "8.9", "1037"]
    assert cells_of(lines, "2")[1:5] == ["0.410", "237.0", "12.2", "101"]  # 237.0, not 237 beside 36.100
    assert cells_of(lines, "3")[2] == "393.8"
    text_cell = next(line for line in lines if "hello" in line).split("│")[-2]
    assert text_cell.startswith(" hello")  # text is left-aligned


def test_large_numbers_get_thousands_separators_and_no_decimals():
    lines = rendered(table("t", ["model", "rows/s"], [["a", 12345.678], ["b", 999.5]]))
    assert cells_of(lines, "a")[1] == "12,346" and cells_of(lines, "b")[1] == "1,000"


def fake_bench_report(labels: list[str]) -> dict:
    def model(label: str, params: int) -> dict:
        return {"label": label, "parameters": params, "size_mb_fp32": params * 4 / 1e6, "size_mb_fp16": params * 2 / 1e6,
                "load_seconds": 1.234, "latency": {"model_ms": {"mean": 43.0, "p50": 41.5, "p90": 48.0},
                                                   "tokenize_ms": {"mean": 0.33, "p50": 0.31}},
                "throughput": [{"batch_size": 32, "padding": "dynamic", "rows_per_s": 123.4, "tokens_per_s": 2700.0,
                                "padding_share": 0.12, "batch_ms": {"p50": 250.0}, "iterations": 8}],
                "train_step": {"step_ms": {"mean": 900.0}}}
    return {"protocol": "standard", "models": [model(label, 66_000_000 + i * 43_000_000)
                                               for i, label in enumerate(labels)]}


def test_the_bench_summary_fits_100_columns_with_one_time_unit():
    report = fake_bench_report(["distilbert-base-uncased (random init)", "bert-base-uncased (random init)"])
    columns, rows = bench_report.summary_rows(report)
    assert "load ms" in columns and "train step ms" in columns and not any(c.endswith(" s") for c in columns)
    turned_columns, turned_rows = show._models_as_columns(columns, rows)
    lines = rendered(table("bench", turned_columns, turned_rows, measures_as_rows=True), width=200)
    assert max(len(line) for line in lines) <= 100
    assert cells_of(lines, "load ms")[1:] == ["1,234", "1,234"]
    assert cells_of(lines, "train step ms")[1] == "900.0" and cells_of(lines, "b1 model ms (p50)")[1] == "41.5"
    assert cells_of(lines, "params (M)")[1:] == ["66.0", "109.0"]
    t_columns, t_rows = bench_report.throughput_rows(report)
    lines = rendered(table("throughput", t_columns, t_rows, formats={"rows/s": ",.1f", "tokens/s": ",.0f"},
                           wrap_first=28))
    assert max(len(line) for line in lines) <= 100


def test_recipe_descriptions_are_whole_sentences_and_results_keep_their_continuation_lines():
    cola = describe_recipe(ROOT / "bertkit" / "recipes" / "glue-cola.toml")
    assert cola.summary.endswith("Matthews correlation (mcc).")  # the sentence runs onto the second line
    rte = describe_recipe(ROOT / "bertkit" / "recipes" / "rte-finetune-offline.toml")
    assert rte.summary.endswith("with the packaged MiniLM encoder, offline.")
    assert rte.result.endswith("are the first things to try.")
    for recipe in list_recipes():
        assert recipe.summary.endswith((".", ")", "]")), recipe.name
        assert "Run:" not in recipe.summary and "Result:" not in recipe.result


def test_the_distil_claim_check_reads_as_a_measurement_with_what_it_compares():
    report = {"metric": "accuracy", "student_layers": [0, 2, 5], "teacher_layers": 6, "claims": {
        "parameter_reduction_pct": {"measured": 12.0, "paper": 40.0, "pass": False},
        "speedup_batch1_x": {"measured": 1.9, "paper": 1.63, "pass": True}}}
    verdicts = [row[-1] for row in distill_report.claim_rows(report)]
    assert verdicts == ["short of the paper", "meets the paper"]
    assert "FAIL" not in str(distill_report.claim_rows(report))
    assert "3 of the teacher's 6 layers" in distill_report.claims_context(report)


def test_a_question_answering_distil_report_counts_windows_per_second():
    """A question-answering student is timed on the teacher's windows (a long context is several), so its report
    says windows/s where a sentence or tag report says rows/s: in the table, the markdown and the bar chart."""
    from bertkit.data.labels import SPANS_TASK, TAGS_TASK

    model = {"parameters": 2e6, "size_mb": 8.0, "latency_b1_ms": 3.0, "best_rows_per_s": 90.0, "dev": {"f1": 0.5}}
    report = {"metric": "f1", "task": SPANS_TASK, "teacher": "t", "student": "s", "student_layers": [0, 2],
              "dev_rows": 4, "device": "cpu", "dtype": "fp32", "machine": {"cpu": "x"},
              "models": {"teacher": model, "student": model}, "claims": {}}
    assert distill_report.DistillReport.from_json(report).model_columns()[4] == "best windows/s"
    assert "| best windows/s |" in distill_report.report_markdown(report)
    assert distill_report.model_columns({**report, "task": TAGS_TASK})[4] == "best rows/s"


def test_the_demo_refuses_an_output_folder_it_did_not_make(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("keep me")
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "demo.sh")], capture_output=True, text=True,
                          env={"DEMO_OUT": str(mine), "PATH": "/usr/bin:/bin", "BERTKIT": "/bin/false"})
    assert proc.returncode == 2 and "was not made by make demo" in proc.stderr
    assert (mine / "thesis.tex").read_text() == "keep me"


def test_the_demo_deletes_nothing_on_its_markers_word(tmp_path):
    """Issue 43: a folder an earlier demo made (its marker there) was removed whole, a user's file in it too. The
    marker only lets the demo in; each command replaces its own run (--overwrite: by bertkit's records)."""
    demo = tmp_path / "demo"
    demo.mkdir()
    (demo / ".bertkit-demo").touch()
    (demo / "thesis.tex").write_text("keep me")
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "demo.sh")], capture_output=True, text=True,
                          env={"DEMO_OUT": str(demo), "PATH": "/usr/bin:/bin", "BERTKIT": "/bin/false"})
    assert proc.returncode != 0  # /bin/false stands in for bertkit: the first step fails
    assert (demo / "thesis.tex").read_text() == "keep me"


def test_a_note_already_logged_is_not_printed_again(capsys):
    import logging

    from bertkit.cli.output import LOGGED, info

    handler = logging.StreamHandler()
    handler.addFilter(LOGGED)
    logger = logging.getLogger("bertkit.test-notes")
    logger.addHandler(handler)
    try:
        logger.warning("lr auto -> 1e-4 (a test line)")
    finally:
        logger.removeHandler(handler)
    capsys.readouterr()
    info("lr auto -> 1e-4 (a test line)")
    info("a note nobody logged")
    printed = capsys.readouterr().err
    assert "a note nobody logged" in printed and "a test line" not in printed
