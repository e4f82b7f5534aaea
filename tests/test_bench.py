"""`bertkit bench`: timing discipline (stub models on a fake clock), claims arithmetic, report structure, CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from benchmark_scripts import benchmark_module
from typer.testing import CliRunner

from bertkit.cli.app import app
from bertkit.commands import bench
from bertkit.data.dataset import TextDataset
from bertkit.encoding.encode import Encoded, encode_dataset
from bertkit.errors import UserError
from bertkit.measure import contenders as bench_contenders
from bertkit.measure import measure as bench_measure
from bertkit.measure import report as bench_report
from bertkit.measure import timing
from bertkit.models import loading, quantize

runner = CliRunner()
FAST = ["--min-iters", "1", "--min-seconds", "0", "--warmup", "0", "--rounds", "2", "--batch-sizes", "2",
        "--train-batch-size", "2", "--limit", "6", "--max-length", "16"]


# ---------------------------------------------------------------- stubs with a known cost


class FakeClock:
    """A clock that only moves when the stubs say their work happened."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class StubModel(torch.nn.Module):
    """forward costs `per_call + per_token * padded tokens` on the fake clock and logs who ran."""

    def __init__(self, clock: FakeClock, name: str, log: list[str], per_call: float, per_token: float = 0.0):
        super().__init__()
        self.clock, self.name, self.log = clock, name, log
        self.per_call, self.per_token = per_call, per_token
        self.calls = 0
        self.config = SimpleNamespace(model_type="stub", hidden_size=4)

    def forward(self, input_ids, attention_mask=None):
        self.calls += 1
        self.log.append(self.name)
        self.clock.advance(self.per_call + self.per_token * input_ids.numel())
        return SimpleNamespace(last_hidden_state=torch.zeros(input_ids.shape[0], input_ids.shape[1], 4))


class StubTokenizer:
    """Tokenization costs `cost` on the fake clock; 3 tokens per sentence."""

    pad_token_id = 0

    def __init__(self, clock: FakeClock, cost: float):
        self.clock, self.cost, self.calls = clock, cost, 0

    def __call__(self, text, truncation=True, max_length=None, return_tensors=None):
        self.calls += 1
        self.clock.advance(self.cost)
        return {"input_ids": torch.ones(1, 3, dtype=torch.long), "attention_mask": torch.ones(1, 3, dtype=torch.long),
                "token_type_ids": torch.zeros(1, 3, dtype=torch.long)}


def _contender(clock, name, log, per_call, per_token=0.0, tok_cost=1000.0):
    model = StubModel(clock, name, log, per_call, per_token)
    return bench_contenders.Contender(name, name, True, model, StubTokenizer(clock, tok_cost), 0.0)


# ---------------------------------------------------------------- timing discipline


def test_latency_times_exactly_the_model_and_tokenization_separately():
    clock, log = FakeClock(), []
    a = _contender(clock, "A", log, per_call=7.0)
    b = _contender(clock, "B", log, per_call=3.0)
    settings = bench_measure.BenchSettings(budget=timing.Budget(warmup=2, min_iters=4, min_seconds=0.0, rounds=2, clock=clock))
    result = bench_measure.measure_latency([a, b], ["one", "two", "three"], settings, None, torch.float32)
    for c, cost in ((a, 7.0), (b, 3.0)):
        lat = result[c.label]
        assert lat["model_ms"]["n"] == 4  # warm-up calls are not samples
        assert c.model.calls == 2 + 4
        assert lat["model_ms"]["mean"] == pytest.approx(cost * 1000)  # tokenization (1000 s) is not in model time
        assert lat["model_ms"]["p99"] == pytest.approx(cost * 1000)
        assert lat["tokenize_ms"]["mean"] == pytest.approx(1000 * 1000)  # and the model is not in tokenization
        assert lat["end_to_end_ms"]["mean"] == pytest.approx((1000 + cost) * 1000)
    # warm-up A A B B, then interleaved chunks of 2: A A B B A A B B
    assert log == ["A", "A", "B", "B", "A", "A", "B", "B", "A", "A", "B", "B"]


def test_repeat_needs_both_min_iters_and_min_seconds():
    durations = iter([0.5] * 100)
    samples = timing.repeat(lambda: (next(durations),), warmup=3, min_iters=2, min_seconds=2.2)
    assert len(samples) == 5  # 2 iterations are not enough seconds: 5 x 0.5 >= 2.2
    samples = timing.repeat(lambda: (10.0,), warmup=0, min_iters=4, min_seconds=1.0)
    assert len(samples) == 4  # enough seconds after one, but 4 iterations are required


def _encoded(lengths):
    ids = [[101] + [7] * (n - 2) + [102] for n in lengths]
    return Encoded(ids, None, np.asarray(lengths), np.asarray(lengths), max_length=16)


def test_throughput_counts_rows_and_tokens_over_exactly_the_timed_forwards():
    clock, log = FakeClock(), []
    a = _contender(clock, "A", log, per_call=0.0, per_token=0.001)
    settings = bench_measure.BenchSettings(batch_sizes=(2,), max_length=16, seed=0,
                                           budget=timing.Budget(warmup=1, min_iters=3, min_seconds=0.0, rounds=1, clock=clock))
    encoded = _encoded([4, 4, 8, 8])  # two length-sorted batches: 2x8 and 2x4 padded tokens
    records = bench_measure.measure_throughput([a], encoded, 0, settings, None, torch.float32)["A"]
    dynamic, static = records
    assert dynamic["padding"] == "dynamic" and static["padding"] == "static"
    assert dynamic["iterations"] == 3 and dynamic["rows"] == 6
    # cost per batch = padded tokens * 0.001 s, so padded tokens/s is exactly 1000 whatever the batch mix
    assert dynamic["padded_tokens_per_s"] == pytest.approx(1000.0)
    assert dynamic["tokens_per_s"] == pytest.approx(1000.0)  # sorted batches of equal lengths: no padding
    assert static["padded_tokens_per_s"] == pytest.approx(1000.0)
    assert static["rows_per_s"] == pytest.approx(6 / (3 * 2 * 16 * 0.001))
    assert static["padding_share"] == pytest.approx(1 - static["tokens_per_s"] / static["padded_tokens_per_s"])
    assert 0.5 < static["padding_share"] < 1.0  # 4- and 8-token rows padded to 16


def test_train_step_runs_forward_backward_optimizer_and_restores_eval(tiny_bert_dir):
    torch.manual_seed(0)
    model = loading.load_encoder(str(tiny_bert_dir))
    tokenizer = loading.load_tokenizer(str(tiny_bert_dir))
    c = bench_contenders.Contender("tiny", str(tiny_bert_dir), False, model, tokenizer, 0.0)
    before = next(model.parameters()).detach().clone()
    encoded = encode_dataset(tokenizer, TextDataset(["a good film", "bad", "an awful , awful movie"] * 2), 16)
    settings = bench_measure.BenchSettings(train_batch_size=2, budget=timing.Budget(warmup=1, min_iters=2, min_seconds=0.0, rounds=1))
    result = bench_measure.measure_train_step([c], encoded, tokenizer.pad_token_id, settings, torch.device("cpu"), torch.float32)
    assert result["tiny"]["step_ms"]["n"] == 2 and result["tiny"]["batch_size"] == 2
    assert result["tiny"]["rows_per_s"] > 0 and "delta_mb" in result["tiny"]["memory"]
    assert not torch.equal(before, next(model.parameters()).detach())  # the optimizer really stepped
    assert not model.training and all(p.grad is None for p in model.parameters())


# ---------------------------------------------------------------- sizes, parameters, claims


def test_preset_builds_exact_default_shapes_offline():
    contenders = bench_contenders.load_contenders([], "distilbert-vs-bert", False)
    counts = {c.label: loading.parameter_count(c.model) for c in contenders}
    assert counts == {"distilbert-base-uncased (random init)": 66_362_880, "bert-base-uncased (random init)": 109_482_240}
    assert all(c.random_init for c in contenders)
    assert contenders[0].tokenizer.vocab_size == 30522  # bert-base-uncased vocabulary
    assert "token_type_ids" not in contenders[0].input_names and "token_type_ids" in contenders[1].input_names


def test_sizes_and_load_time_from_saved_safetensors(tiny_bert_dir, tmp_path):
    model = loading.load_encoder(str(tiny_bert_dir))
    c = bench_contenders.Contender("tiny", str(tiny_bert_dir), False, model, loading.load_tokenizer(str(tiny_bert_dir)), 0.1)
    sizes = bench_measure.measure_sizes([c], tmp_path, timing.Budget(rounds=2))["tiny"]
    params = loading.parameter_count(model)
    assert sizes["parameters"] == params
    assert sizes["size_mb_fp32"] == pytest.approx(params * 4 / 1e6, rel=0.02)
    assert sizes["size_mb_fp16"] == pytest.approx(params * 2 / 1e6, rel=0.02)
    assert len(sizes["load_seconds_all"]) == 2 and sizes["load_seconds"] > 0


def _model_record(label, params, latency_ms, rows_per_s, quality=None, paper_s=None):
    # the mean is pulled by slow calls: the claims and the table read the median (p50)
    record = {"label": label, "parameters": params,
              "latency": {"model_ms": {"mean": 3 * latency_ms, "p50": latency_ms},
                          "end_to_end_ms": {"mean": 3 * latency_ms, "p50": latency_ms + 1}},
              "throughput": [{"batch_size": b, "padding": p, "rows_per_s": r} for b, p, r in rows_per_s]}
    if quality is not None:
        record["quality"] = {"probe": {"status": "ok", "score": quality}}
    if paper_s is not None:
        record["paper_protocol"] = {"total_seconds": paper_s}
    return record


def test_claims_from_known_numbers():
    distil = _model_record("distil", 66_362_880, 410.0, [(1, "dynamic", 10.0), (32, "dynamic", 40.0)], 0.873, 410.0)
    bert = _model_record("bert", 109_482_240, 668.0, [(1, "dynamic", 6.0), (32, "dynamic", 20.0), (8, "static", 25.0)],
                         0.9, 668.0)
    claims = bench_report.compute_claims([distil, bert])  # order does not matter: fewest parameters = candidate
    assert claims["candidate"] == "distil" and claims["baseline"] == "bert"
    assert claims["parameter_reduction_pct"]["measured"] == pytest.approx(100 * (1 - 66_362_880 / 109_482_240))
    assert claims["parameter_reduction_pct"]["measured"] == pytest.approx(39.38, abs=0.01)
    assert claims["parameter_reduction_pct"]["paper"] == 40.0
    assert claims["speedup_batch1_x"]["measured"] == pytest.approx(668 / 410)
    assert claims["speedup_batch1_x"]["paper"] == pytest.approx(1.63)
    assert claims["speedup_batch1_end_to_end_x"]["measured"] == pytest.approx(669 / 411)
    best = claims["speedup_best_batch_x"]
    assert best["measured"] == pytest.approx(40.0 / 25.0)
    assert best["candidate_at"] == "batch 32, dynamic" and best["baseline_at"] == "batch 8, static"
    assert best["per_batch_size"]["32/dynamic"] == pytest.approx(2.0)
    assert claims["speedup_paper_protocol_x"]["measured"] == pytest.approx(668 / 410)
    assert claims["quality_retained_pct"]["probe"]["measured"] == pytest.approx(97.0)
    assert claims["quality_retained_pct"]["finetune"]["measured"] is None
    lines = "\n".join(bench_report.claim_lines(claims))
    assert "39.4%" in lines and "1.63x" in lines and "97.0%" in lines and "668 s / 410 s" in lines


def test_claims_need_two_models():
    assert "note" in bench_report.compute_claims([_model_record("a", 10, 1.0, [])])


# ---------------------------------------------------------------- quality, in process


def _quality_cfg(demo_dir, models="a,b", **kw):
    from bertkit.commands.bench import BenchConfig

    return BenchConfig.of(models=models, data=str(demo_dir / "train.tsv"), dev=str(demo_dir / "dev.tsv"), **kw)


def test_quality_args_are_typed_by_the_command_options(demo_dir):
    cfg = _quality_cfg(demo_dir, quality="probe", max_length=64, limit=30,
                       quality_args="--C 0.5 --no-baselines --layers -1 --max-length=32 -q")
    (plan,) = bench.plan_quality(cfg)
    probe_cfg = plan.config
    assert plan.kind == "probe" and probe_cfg.fit.C == 0.5 and probe_cfg.fit.baselines is False and probe_cfg.layers == "-1"
    assert probe_cfg.reading.max_length == 32  # --quality-args override bench's own settings, as flags given later did
    assert probe_cfg.inputs.data == cfg.inputs.data and probe_cfg.inputs.dev == cfg.inputs.dev and probe_cfg.inputs.limit == 30 and probe_cfg.inputs.seed == 42
    cfg = _quality_cfg(demo_dir, quality="finetune", dev_fraction=0.2, max_length=64,
                       quality_args="--epochs 2 --lr=3e-5 --metric-for-best f1")
    (plan,) = bench.plan_quality(cfg)
    assert (plan.config.training.epochs, float(plan.config.training.lr), plan.config.training.metric_for_best) == (2, 3e-5, "f1")
    assert plan.config.reading.max_length == 64 and plan.config.inputs.dev_fraction == 0.2  # bench's data settings reach it
    cfg = _quality_cfg(demo_dir, quality="probe", quality_args="--recipe alammar-sst2-probe-offline --C 2")
    (plan,) = bench.plan_quality(cfg)  # recipe < bench's data settings < the other --quality-args
    assert (plan.config.pool, plan.config.layers, plan.config.inputs.text_column) == ("cls,mean", "all", "0")
    assert plan.config.inputs.data == cfg.inputs.data and plan.config.fit.C == 2.0


@pytest.mark.parametrize("kind, args, message", [
    ("probe", "--C -1", "--C must be a positive number"),
    ("finetune", "--epochs x", "--epochs takes an integer"),
    ("finetune", "--warmup-ratio 1.5", "--warmup-ratio must be in [0, 1)"),
    ("finetune", "--metric-for-best loss", "higher is better"),
])
def test_quality_arg_values_are_refused_before_the_benchmark(kind, args, message, demo_dir, tmp_path):
    # --models a,b do not exist: had the benchmark started, the error would be about them
    result = runner.invoke(app, ["bench", "--models", "a,b", "--data", str(demo_dir / "train.tsv"), "--quality", kind,
                                 "--quality-args", args, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert message in result.output and "--quality-args" in result.output
    assert not (tmp_path / "out").exists()


def test_quality_probe_runs_in_process(tiny_bert_dir, tiny_distilbert_dir, demo_dir, tmp_path):
    cfg = _quality_cfg(demo_dir, limit=40, max_length=16, quality="probe", quality_args="--no-baselines")
    (plan,) = bench.plan_quality(cfg)
    models = {"distil": str(tiny_distilbert_dir), "bert": str(tiny_bert_dir), "missing": str(tmp_path / "nope")}
    result = bench.measure_quality(plan, models, tmp_path / "quality")
    for i, label in enumerate(("distil", "bert")):
        record = result[label]
        assert record["status"] == "ok" and record["metric"] == "best.dev.accuracy", record
        written = json.loads((tmp_path / "quality" / f"probe-{i}" / "metrics.json").read_text())
        assert record["score"] == written["best"]["dev"]["accuracy"]  # the probe's own best cell, in its own run dir
        assert f"--model {models[label]}" in record["command"] and "--no-baselines" in record["command"]
    assert result["missing"]["status"] == "failed" and "nope" in result["missing"]["message"]


def test_quality_finetune_runs_in_process(tiny_bert_dir, tiny_distilbert_dir, demo_dir, tmp_path):
    cfg = _quality_cfg(demo_dir, limit=16, max_length=16, quality="finetune",
                       quality_args="--epochs 1 --batch-size 8 --metric-for-best f1 --precision fp32")
    (plan,) = bench.plan_quality(cfg)
    models = {"distil": str(tiny_distilbert_dir), "bert": str(tiny_bert_dir)}  # two runs in one process
    result = bench.measure_quality(plan, models, tmp_path / "quality")
    for i, label in enumerate(models):
        record = result[label]
        assert record["status"] == "ok" and record["metric"] == "best_dev.f1", record  # the declared metric
        written = json.loads((tmp_path / "quality" / f"finetune-{i}" / "metrics.json").read_text())
        assert record["score"] == written["best_dev"]["f1"] and written["epochs_run"] == 1


# ---------------------------------------------------------------- the command


def _bench_json(args, tmp_path):
    result = runner.invoke(app, ["bench", *args, "--out", str(tmp_path / "out"), "--json", "--quiet"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_cli_report_structure_and_files(tiny_bert_dir, tiny_distilbert_dir, tmp_path, demo_dir, auto_dtype):
    models = f"{tiny_distilbert_dir},{tiny_bert_dir}"
    report = _bench_json(["--models", models, "--data", str(demo_dir / "dev.tsv"), *FAST], tmp_path)
    assert {"protocol", "data", "models", "claims", "environment", "notes", "outputs"} <= set(report)
    env = report["environment"]
    assert env["dtype"] == auto_dtype and env["device"] == "cpu" and "torch" in env["versions"] and "cpu" in env["machine"]
    assert report["data"]["rows"] == 6
    for m in report["models"]:
        assert {"parameters", "size_mb_fp32", "size_mb_fp16", "load_seconds", "latency", "throughput", "train_step"} <= set(m)
        assert {"mean", "p50", "p90", "p99"} <= set(m["latency"]["model_ms"]) and "mean" in m["latency"]["tokenize_ms"]
        assert [(r["batch_size"], r["padding"]) for r in m["throughput"]] == [(2, "dynamic"), (2, "static")]
        assert "folder" not in m and m["random_init"] is False and "quality" not in m  # quality is opt-in
    assert report["claims"]["candidate"] == str(tiny_distilbert_dir)
    out = tmp_path / "out"
    assert json.loads((out / "bench.json").read_text())["models"][0]["label"] == str(tiny_distilbert_dir)
    md = (out / "bench.md").read_text()
    assert "## Claims vs the paper" in md and "| model |" in md and "bench.png" in md
    assert (out / "bench.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "config.json").exists()


def test_cli_paper_protocol_and_random_init(tiny_bert_dir, tiny_distilbert_dir, tmp_path, demo_dir):
    models = f"{tiny_distilbert_dir},{tiny_bert_dir}"
    report = _bench_json(["--models", models, "--random-init", "--protocol", "paper", "--data",
                          str(demo_dir / "dev.tsv"), *FAST], tmp_path)
    assert report["protocol"] == "paper"
    for m in report["models"]:
        assert m["label"].endswith("(random init)") and m["random_init"]
        assert m["paper_protocol"]["rows"] == 6 and m["paper_protocol"]["total_seconds"] > 0
        assert "throughput" not in m and "latency" not in m
    assert any("Random-init" in n for n in report["notes"])
    assert report["claims"]["speedup_paper_protocol_x"]["measured"] > 0


def test_cli_table_and_claims_in_terminal(tiny_bert_dir, tiny_distilbert_dir, tmp_path, demo_dir):
    result = runner.invoke(app, ["bench", "--models", f"{tiny_distilbert_dir},{tiny_bert_dir}", "--data",
                                 str(demo_dir / "dev.tsv"), *FAST, "--train-batch-size", "0", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "Claims vs the DistilBERT paper" in result.stdout and "parameter reduction" in result.stdout
    assert "best rows/s" in result.stdout and "668 s / 410 s" in result.stdout
    assert "train_step" not in json.loads((tmp_path / "bench.json").read_text())["models"][0]


@pytest.mark.parametrize("args, message", [
    (["--models", "a,b", "--preset", "distilbert-vs-bert"], "exactly one of --models"),
    ([], "exactly one of --models"),
    (["--preset", "distilbert-vs-bert", "--batch-sizes", "1,x"], "--batch-sizes"),
    (["--preset", "nope"], "Unknown --preset"),
    (["--preset", "distilbert-vs-bert", "--quality", "vibes"], "--quality"),
])
def test_cli_rejects_bad_options(args, message, tmp_path):
    result = runner.invoke(app, ["bench", *args, "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert message in result.output


def test_hub_name_offline_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = runner.invoke(app, ["bench", "--models", "distilbert-base-uncased,bert-base-uncased", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "distilbert-base-uncased" in result.output and "minilm-offline" in result.output


def test_report_markdown_from_a_synthetic_report():
    distil = _model_record("distil", 66_362_880, 4.0, [(1, "dynamic", 10.0)])
    bert = _model_record("bert", 109_482_240, 8.0, [(1, "dynamic", 5.0)])
    for m in (distil, bert):
        m.update(size_mb_fp32=m["parameters"] * 4e-6, size_mb_fp16=m["parameters"] * 2e-6, load_seconds=0.5)
        m["latency"].update(tokenize_ms={"mean": 0.2})
        m["latency"]["model_ms"]["p90"] = 9.0
        m["throughput"][0].update(tokens_per_s=100.0, padding_share=0.1, batch_ms={"p50": 1.0}, iterations=3)
    report = {"protocol": "standard", "data": {"rows": 2, "mean_tokens": 5.0, "max_tokens": 9}, "models": [distil, bert],
              "notes": ["a note"], "environment": {}}
    report["claims"] = bench_report.compute_claims(report["models"])
    md = bench_report.report_markdown(report)
    assert "| distil | 66.36 |" in md and "2.00x" in md and "- a note" in md and "## Throughput" in md


def test_subprocess_json(tiny_bert_dir, tiny_distilbert_dir, tmp_path, demo_dir):
    command = [sys.executable, "-m", "bertkit", "bench", "--models", f"{tiny_distilbert_dir},{tiny_bert_dir}",
               "--data", str(demo_dir / "dev.tsv"), *FAST, "--train-batch-size", "0", "--out", str(tmp_path),
               "--json", "--quiet"]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [m["label"] for m in report["models"]] == [str(tiny_distilbert_dir), str(tiny_bert_dir)]
    assert Path(report["outputs"]["bench.png"]).exists()


def _meter_in_a_fresh_process(body: str, before: str = "") -> dict:
    """The meter's reading of `body` (Python lines run inside `peak_memory`, after the lines `before`) in a process
    of its own: in the test process, heap memory earlier tests freed, and threads they left running, can free or hand
    back memory while the block runs and so move the process's RSS by more than the block's own 64 MB."""
    script = "\n".join([
        "import gc, json, torch", "from bertkit.measure import timing", *before.splitlines(),
        "with timing.peak_memory(torch.device('cpu')) as meter:", *("    " + line for line in body.splitlines()),
        "print(json.dumps({'kind': meter.kind, **meter.as_dict()}))"])
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_memory_meter_reports_peak_above_start():
    result = _meter_in_a_fresh_process("block = torch.ones(64 * 2**20 // 4)\nblock += 1")  # 64 MB: fresh pages
    assert result["kind"].startswith("rss") and result["peak_mb"] > 0
    if result["kind"] == "rss":
        assert result["delta_mb"] >= 60.0


def test_memory_meter_start_level_holds_no_uncollected_garbage():
    """64 MB that only the garbage collector frees, left before the block: the meter collects it before reading the
    start level, so its memory coming back inside the block does not hide the block's own 64 MB."""
    result = _meter_in_a_fresh_process(
        "gc.collect()\nblock = torch.ones(64 * 2**20 // 4)\nblock += 1",
        before="gc.disable()\ncycle = [torch.ones(64 * 2**20 // 4)]\ncycle.append(cycle)\ndel cycle")
    if result["kind"] == "rss":
        assert result["delta_mb"] >= 60.0  # the block's 64 MB, not hidden by the garbage's


def test_memory_meter_counts_the_block_when_the_kernel_drops_file_pages_meanwhile(monkeypatch):
    """File-backed pages dropped from RSS during the block (a DAMON pageout or memory-pressure policy) lower RSS by as
    much as the block allocates: the peak-RSS counter then stays at the start level. The anonymous memory the block
    still holds at its end counts anyway."""
    readings = {"VmRSS": [1000.0], "RssAnon": [300.0, 364.0], "VmHWM": [1000.0]}  # 64 MB in, 64 MB of file pages out
    monkeypatch.setattr(timing, "_reset_peak_rss", lambda: True)
    monkeypatch.setattr(timing, "_proc_status_mb", lambda name: readings[name].pop(0))
    with timing.peak_memory(torch.device("cpu")) as meter:
        pass
    assert meter.as_dict() == {"peak_mb": 1000.0, "delta_mb": 64.0}


def test_quality_needs_labelled_data():
    with pytest.raises(UserError, match="--quality needs labelled --data"):
        from bertkit.commands.bench import BenchConfig

        BenchConfig.of(preset="distilbert-vs-bert", quality="probe")


def test_recipe_loads_into_bench_config():
    from bertkit.commands.bench import BenchConfig
    from bertkit.recipes import load_recipe

    cfg = BenchConfig.of(**load_recipe("distilbert-vs-bert", "bench", BenchConfig))
    assert cfg.preset == "distilbert-vs-bert" and cfg.timing.batch_size_list == (1, 8) and cfg.inputs.text_column == "0"


@pytest.mark.slow
def test_quality_probe_through_the_real_cli(tiny_bert_dir, tiny_distilbert_dir, tmp_path, demo_dir):
    report = _bench_json(["--models", f"{tiny_distilbert_dir},{tiny_bert_dir}", "--data", str(demo_dir / "train.tsv"),
                          "--dev", str(demo_dir / "dev.tsv"), "--quality", "probe", *FAST, "--train-batch-size", "0"],
                         tmp_path)
    for m in report["models"]:
        assert m["quality"]["probe"]["status"] == "ok", m["quality"]
        assert 0.0 <= m["quality"]["probe"]["score"] <= 1.0
    assert report["claims"]["quality_retained_pct"]["probe"]["measured"] is not None


# ---------------------------------------------------------------- benchmarks/bench_memory.py, benchmarks/bench_throughput.py


@pytest.fixture(scope="module")
def bench_scripts():
    """The two benchmark scripts as modules (benchmarks/ is not a package)."""
    return benchmark_module("bench_memory"), benchmark_module("bench_throughput")


def test_memory_bench_generates_files_block_by_block(bench_scripts, tmp_path, monkeypatch):
    bm, _ = bench_scripts
    monkeypatch.setattr(bm, "BLOCK_ROWS", 3)  # several blocks for 7 rows
    rows = [("one two three four five six seven eight", "1"), ("a b c d e f g h i j", "0")]
    path = bm.write_rows(tmp_path / "long-7.tsv", rows, 7, short=False)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines == [f"{rows[i % 2][0]}\t{rows[i % 2][1]}" for i in range(7)]
    short = bm.write_rows(tmp_path / "short-7.tsv", rows, 7, short=True).read_text(encoding="utf-8").splitlines()
    assert [len(line.split("\t")[0].split()) for line in short] == [3, 4, 5, 6, 3, 4, 5]  # the first 3-6 words
    assert [line.split("\t")[1] for line in short] == ["1", "0", "1", "0", "1", "0", "1"]
    path.write_text("kept\t1\n", encoding="utf-8")  # a complete file of that name is reused, not rewritten
    assert bm.write_rows(path, rows, 7, short=False).read_text() == "kept\t1\n"
    assert not list(tmp_path.glob("*.part"))
    sentences, source = bm.source_rows(None)  # no SST-2: bertkit's demo data, header skipped
    assert source.endswith("demo/train.tsv") and len(sentences) == 320 and sentences[0][1] == "negative"


def test_memory_bench_sizes_ratios_and_table(bench_scripts):
    bm, _ = bench_scripts
    assert bm.parse_sizes("quick")["tokens"] == (5_000, 50_000)
    assert bm.parse_sizes("full") == {"tokens": (50_000, 2_000_000, 10_000_000), "embed": (20_000, 400_000),
                                      "predict": (20_000, 400_000)}
    assert bm.parse_sizes("tokens=400,100; embed=5,9") == {"tokens": (100, 400), "embed": (5, 9)}
    for bad in ("probe=1,2", "tokens", ""):
        with pytest.raises(SystemExit):
            bm.parse_sizes(bad)
    runs = [{"tree": "current", "command": "tokens", "rows": n, "exit_code": 0, "peak_rss_mib": mib, "seconds": 2.0,
             "rows_per_s": n / 2} for n, mib in ((100, 400.0), (1000, 420.0), (10_000, 600.0))]
    runs.append({**runs[0], "command": "embed", "peak_rss_mib": 500.0})  # one size only: no ratio
    (ratio,) = bm.ratios(runs)
    assert ratio == {"tree": "current", "command": "tokens", "small_rows": 100, "large_rows": 10_000, "ratio": 1.5,
                     "target": 1.3, "within_target": False}
    report = {"machine": {"cpu": "CPU X", "cores": 2, "ram_gib": 8.0}, "sizes": {"tokens": [100, 1000, 10_000]},
              "trees": {"current": {"commit": "abcdef1234567", "dirty": False}}, "runs": runs, "ratios": [ratio]}
    md = bm.markdown(report)
    assert "CPU X, 2 cores, 8.0 GiB RAM; current: abcdef1234." in md
    assert "| tokens | 10,000 | 600 | 2.0 | 5,000 |" in md and "| 1.50x | no |" in md


def test_run_measured_is_the_childs_own_peak_rss(bench_scripts, tmp_path):
    bm, _ = bench_scripts
    ballast = bytearray(300 * 2**20)  # this process is big; the child's number must not start from it
    ballast[::4096] = b"\1" * len(ballast[::4096])
    env = {**os.environ}
    small = bm.run_measured([sys.executable, "-c", "pass"], env, tmp_path / "small.log")
    alloc = "b = bytearray(200 * 2**20)\nb[::4096] = b'\\1' * len(b[::4096])\nprint('done')"
    big = bm.run_measured([sys.executable, "-c", alloc], env, tmp_path / "big.log")
    assert small["exit_code"] == 0 and small["peak_rss_mib"] < 100, small
    assert big["exit_code"] == 0 and 200 <= big["peak_rss_mib"] < 300, big
    assert (tmp_path / "big.log").read_text().strip() == "done"
    stuck = bm.run_measured([sys.executable, "-c", "import signal; signal.pause()"], env, tmp_path / "t.log",
                            timeout=0.3)  # a child that never ends on its own: the timeout must kill it
    assert stuck["timed_out"] and stuck["exit_code"] == -9  # SIGKILL from the timeout, not an exit of its own
    del ballast


@pytest.mark.slow  # a benchmark script end to end (minutes on CI)
def test_memory_bench_quick_path_runs_the_real_command(bench_scripts, tmp_path):
    bm, _ = bench_scripts
    out = tmp_path / "results" / "memory.json"
    report = bm.main(["--sizes", "tokens=300,600", "--work", str(tmp_path / "work"), "--out", str(out)])
    assert [(r["command"], r["rows"], r["exit_code"]) for r in report["runs"]] == [("tokens", 300, 0), ("tokens", 600, 0)]
    assert all(r["peak_rss_mib"] > 50 and r["seconds"] > 0 for r in report["runs"])
    assert report["ratios"][0]["command"] == "tokens" and report["trees"]["current"]["commit"]
    assert json.loads(out.read_text())["runs"] == report["runs"]
    assert "| tokens | 600 |" in out.with_suffix(".md").read_text()
    assert (tmp_path / "work" / "data" / "long-600.tsv").read_text().count("\n") == 600
    assert not (tmp_path / "work" / "cache" / "current").exists()  # caches and outputs go after each run
    with pytest.raises(SystemExit, match="inside the repository"):
        bm.main(["--sizes", "tokens=10,20", "--work", str(Path(bm.ROOT) / "runs" / "x"), "--out", str(out)])


def test_throughput_bench_side_by_side(bench_scripts, tmp_path):
    _, bt = bench_scripts
    out = tmp_path / "throughput.json"
    root = str(Path(__file__).resolve().parent.parent)
    report = bt.main(["--commands", "tokens", "--limit", "40", "--repeats", "1", "--baseline-src", root,
                      "--work", str(tmp_path / "work"), "--out", str(out)])
    assert sorted(r["tree"] for r in report["runs"]) == ["baseline", "current"]
    assert all(r["exit_code"] == 0 and r["rows"] == 80 for r in report["runs"]), report["runs"]  # train + dev
    (row,) = report["summary"]
    assert row["command"] == "tokens" and row["time_ratio"] > 0 and row["slower_beyond_noise"] is None
    assert "time current/baseline" in out.with_suffix(".md").read_text()
    with pytest.raises(SystemExit, match="unknown probe"):
        bt.main(["--commands", "tokens,probe", "--out", str(out)])


@pytest.mark.slow
def test_memory_and_throughput_benches_with_models(bench_scripts, tmp_path):
    bm, bt = bench_scripts
    report = bm.main(["--sizes", "embed=40,80;predict=40,80", "--work", str(tmp_path / "work"),
                      "--out", str(tmp_path / "memory.json")])
    assert [r["exit_code"] for r in report["runs"]] == [0, 0, 0, 0] and len(report["ratios"]) == 2
    report = bt.main(["--commands", "predict,evaluate,finetune", "--limit", "40", "--finetune-rows", "32",
                      "--repeats", "1", "--work", str(tmp_path / "work"), "--out", str(tmp_path / "tp.json")])
    assert all(r["exit_code"] == 0 for r in report["runs"]), report["runs"]


@pytest.mark.slow  # int8 reading: tests/test_quantize.py; bench itself: test_throughput_bench_side_by_side
def test_cli_int8_times_each_model_beside_its_int8_copy(tiny_bert_dir, tiny_distilbert_dir, tmp_path, demo_dir):
    models = f"{tiny_distilbert_dir},{tiny_bert_dir}"
    report = _bench_json(["--models", models, "--data", str(demo_dir / "dev.tsv"), *FAST, "--precision", "int8"],
                         tmp_path)
    assert report["environment"]["dtype"] == "fp32 + int8" and report["environment"]["device"] == "cpu"
    assert [m["label"] for m in report["models"]] == [str(tiny_distilbert_dir), str(tiny_bert_dir)]
    for m in report["models"]:
        assert {"size_mb_fp32", "latency", "throughput", "train_step"} <= set(m)  # the fp32 model, trained as before
        int8 = m["int8"]
        assert int8["label"] == f"{m['label']} · int8" and "train_step" not in int8
        assert "mean" in int8["latency"]["model_ms"]
        assert [(r["batch_size"], r["padding"], r["rows"] > 0) for r in int8["throughput"]] == [
            (2, "dynamic", True), (2, "static", True)]
    assert report["claims"]["candidate"] == str(tiny_distilbert_dir)  # the claims compare the fp32 models
    columns, rows = bench_report.summary_rows(report)
    assert [r[0] for r in rows] == [str(tiny_distilbert_dir), f"{tiny_distilbert_dir} · int8", str(tiny_bert_dir),
                                    f"{tiny_bert_dir} · int8"]
    twin = rows[1]
    assert twin[columns.index("fp32 MB")] is None and twin[columns.index("train step ms")] is None
    assert twin[columns.index("b1 model ms (p50)")] == report["models"][0]["int8"]["latency"]["model_ms"]["p50"]
    assert sum(r[0].endswith("· int8") for r in bench_report.throughput_rows(report)[1]) == 4
    md = (tmp_path / "out" / "bench.md").read_text()
    assert f"| {tiny_bert_dir} · int8 |" in md and "fp32 + int8" in md


def test_cli_int8_paper_protocol(tiny_bert_dir, tiny_distilbert_dir, tmp_path, demo_dir):
    models = f"{tiny_distilbert_dir},{tiny_bert_dir}"
    report = _bench_json(["--models", models, "--protocol", "paper", "--data", str(demo_dir / "dev.tsv"), *FAST,
                          "--precision", "int8"], tmp_path)
    for m in report["models"]:
        assert m["paper_protocol"]["rows"] == 6 and m["int8"]["paper_protocol"]["rows"] == 6
    assert "· int8" in bench_report.summary_rows(report)[1][1][0]


def test_bench_int8_copies_leave_the_models_in_fp32(tiny_bert_dir):
    c = bench_contenders.load_contenders([str(tiny_bert_dir)], None, False)[0]
    (twin, label), = bench_measure.int8_twins([c])
    assert label == c.label and twin.label == f"{c.label} · int8"
    assert quantize.is_int8(twin.model) and not quantize.is_int8(c.model)


def test_the_batch1_claim_is_the_ratio_of_the_printed_medians():
    """One definition of a speed-up: the claim divides the medians the summary table prints, not means of its own."""
    distil = _model_record("distil", 66_362_880, 2.0, [(1, "dynamic", 10.0)])
    bert = _model_record("bert", 109_482_240, 4.3, [(1, "dynamic", 6.0)])
    bert["latency"]["model_ms"]["mean"] = 40.0  # a few slow calls on a busy machine
    for m in (distil, bert):
        m.update(load_seconds=1.0, size_mb_fp32=1.0, size_mb_fp16=0.5)
    report = {"models": [distil, bert], "protocol": "standard"}
    columns, rows = bench_report.summary_rows(report)
    printed = {r[0]: r[columns.index("b1 model ms (p50)")] for r in rows}
    claims = bench_report.compute_claims([distil, bert])
    assert claims["speedup_batch1_x"]["measured"] == pytest.approx(printed["bert"] / printed["distil"]) == 2.15
