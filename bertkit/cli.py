"""The `bertkit` command line (Typer). The only module that prints and sets exit codes.

Each command: options -> typed config (CLI flag > --recipe value > default) -> one core call -> summary.
A `UserError` anywhere below becomes a one-paragraph message on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from bertkit import __version__
from bertkit.config import TokensConfig, load_recipe, merge_config
from bertkit.errors import UserError

app = typer.Typer(
    name="bertkit",
    help="BERT transfer learning from one CLI: token reports, feature extraction, probes, fine-tuning, benchmarks.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    add_completion=False,
)
# Piped output (files, CI logs) gets a wide console so report tables are not squeezed to 80 columns.
out_console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True, soft_wrap=True, width=None if sys.stderr.isatty() else 200)
log = logging.getLogger("bertkit")

DATA = "Data"
MODEL = "Model"
OUTPUT = "Output"
RUN = "Run"

# ---------------------------------------------------------------- shared options (one definition each)

DataOpt = Annotated[str | None, typer.Option("--data", help="Train/main data: .csv/.tsv/.json/.jsonl/.parquet file or hub dataset name.", rich_help_panel=DATA)]
DevOpt = Annotated[str | None, typer.Option("--dev", help="Dev data: a file, or a split name of the hub dataset. Default: stratified hold-out of --data.", rich_help_panel=DATA)]
TestOpt = Annotated[str | None, typer.Option("--test", help="Test data: a file, or a split name of the hub dataset.", rich_help_panel=DATA)]
DataConfigOpt = Annotated[str | None, typer.Option("--data-config", help="Hub dataset configuration (e.g. sst2 for nyu-mll/glue).", rich_help_panel=DATA)]
TrainSplitOpt = Annotated[str, typer.Option("--train-split", help="Hub split used as training data.", rich_help_panel=DATA)]
TextColOpt = Annotated[str | None, typer.Option("--text-column", help="Text column: name, or 0-based index for headerless files.", rich_help_panel=DATA)]
PairColOpt = Annotated[str | None, typer.Option("--text-pair-column", help="Second text column (sentence pairs, encoded as a true pair).", rich_help_panel=DATA)]
LabelColOpt = Annotated[str | None, typer.Option("--label-column", help="Label column: name or 0-based index; integer or string labels.", rich_help_panel=DATA)]
EncodingOpt = Annotated[str, typer.Option("--encoding", help="Text encoding of local files.", rich_help_panel=DATA)]
HeaderOpt = Annotated[str, typer.Option("--header", help="Header row in CSV/TSV files: auto, yes, no.", rich_help_panel=DATA)]
DevFractionOpt = Annotated[float, typer.Option("--dev-fraction", help="Share of --data held out as dev when --dev is not given.", rich_help_panel=DATA)]
LimitOpt = Annotated[int | None, typer.Option("--limit", help="Use only the first N rows of each split.", rich_help_panel=DATA)]
SeedOpt = Annotated[int, typer.Option("--seed", help="Random seed (splits, sampling, initialisation).", rich_help_panel=RUN)]
ModelOpt = Annotated[str, typer.Option("--model", help="Hub id, local model folder, or `minilm-offline` (packaged, works offline).", rich_help_panel=MODEL)]
MaxLenOpt = Annotated[int, typer.Option("--max-length", help="Truncate inputs to this many tokens.", rich_help_panel=MODEL)]
TrustOpt = Annotated[bool, typer.Option("--trust-remote-code", help="Allow custom code from the model repo (runs arbitrary code).", rich_help_panel=MODEL)]
OutOpt = Annotated[str | None, typer.Option("--out", help="Run directory for outputs.", rich_help_panel=OUTPUT)]
OverwriteOpt = Annotated[bool, typer.Option("--overwrite", help="Replace an --out that holds this command's run made with other options (the old output stays until the new one is complete).", rich_help_panel=OUTPUT)]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars; only the final summary.", rich_help_panel=OUTPUT)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the results as JSON on stdout.", rich_help_panel=OUTPUT)]
RecipeOpt = Annotated[str | None, typer.Option("--recipe", help="TOML recipe (path or name in recipes/); CLI flags override it.", rich_help_panel=RUN)]


# ---------------------------------------------------------------- plumbing


def _setup_logging(quiet: bool) -> None:
    """Library code logs through `logging`; here it goes to stderr. Hugging Face's own bars stay off."""
    level = logging.WARNING if quiet else logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("bertkit: %(message)s"))
    root = logging.getLogger("bertkit")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except ImportError:
        pass


def fail(message: str, code: int = 2) -> None:
    """Print one readable paragraph to stderr and exit with `code` (2: a user error)."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, markup=True)
    raise typer.Exit(code)


def user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run a command; a UserError becomes a message and exit code 2, Ctrl-C exit 130, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UserError as exc:
            fail(_escape(str(exc)))
        except KeyboardInterrupt:
            err_console.print("interrupted; re-run the same command to resume where it supports resuming.")
            raise typer.Exit(130) from None

    return wrapper


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


EXPLICIT_SOURCES = {"COMMANDLINE", "ENVIRONMENT", "PROMPT"}


def build_config(ctx: typer.Context, config_cls: type, command: str, params: dict[str, Any], recipe: str | None) -> Any:
    """The command's typed config: explicit CLI flags > recipe values > defaults (Typer's defaults).

    `params` are the command's locals; only names that are fields of `config_cls` are used.
    """
    names = set(config_cls.__dataclass_fields__)
    explicit, defaults = {}, {}
    for name, value in params.items():
        if name not in names:
            continue
        source = ctx.get_parameter_source(name)
        if source is not None and source.name in EXPLICIT_SOURCES:
            explicit[name] = value
        else:
            defaults[name] = value
    recipe_values = load_recipe(recipe, command, config_cls) if recipe else {}
    return merge_config(config_cls, defaults, explicit, recipe_values)


def emit_json(obj: Any) -> None:
    """Results as JSON on stdout (nothing else goes to stdout with --json)."""
    from bertkit.runs import to_json

    sys.stdout.write(to_json(obj) + "\n")
    sys.stdout.flush()


def info(message: str, quiet: bool = False) -> None:
    """A status line on stderr (kept off stdout so --json output stays parseable)."""
    if not quiet:
        err_console.print(message, highlight=False)


def table(title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    """A rich table; numbers right-aligned."""
    result = Table(title=title, title_justify="left")
    for i, column in enumerate(columns):
        result.add_column(column, justify="left" if i == 0 else "right")
    for row in rows:
        result.add_row(*[_cell(v) for v in row])
    return result


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if value.is_integer() and abs(value) >= 1:
            return f"{int(value):,}"
        return f"{value:.3f}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return "" if value is None else str(value)


def _version_callback(value: bool) -> None:
    if value:
        out_console.print(f"bertkit {__version__}")
        raise typer.Exit(0)


@app.callback()
def main(
    version: Annotated[bool, typer.Option("--version", callback=_version_callback, is_eager=True, help="Show the version and exit.")] = False,
) -> None:
    """bertkit: tokens, embed, probe, finetune, predict, evaluate, bench — the classic BERT workflows."""
    if os.environ.get("BERTKIT_KILL_AT"):  # fault-injection tests only (see bertkit/faults.py)
        from bertkit.faults import install_from_env

        install_from_env()


# ---------------------------------------------------------------- tokens


@app.command()
@user_errors
def tokens(
    ctx: typer.Context,
    model: ModelOpt = "minilm-offline",
    text: Annotated[str | None, typer.Option("--text", help="A sentence to show token by token.", rich_help_panel=DATA)] = None,
    text_pair: Annotated[str | None, typer.Option("--text-pair", help="Second sentence, encoded as a pair with --text.", rich_help_panel=DATA)] = None,
    data: DataOpt = None,
    dev: DevOpt = None,
    test: TestOpt = None,
    data_config: DataConfigOpt = None,
    train_split: TrainSplitOpt = "train",
    text_column: TextColOpt = None,
    text_pair_column: PairColOpt = None,
    label_column: LabelColOpt = None,
    encoding: EncodingOpt = "utf-8",
    header: HeaderOpt = "auto",
    dev_fraction: DevFractionOpt = 0.1,
    limit: LimitOpt = None,
    seed: SeedOpt = 42,
    max_length: MaxLenOpt = 128,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Batch size for the padding-waste estimate.", rich_help_panel=RUN)] = 32,
    trust_remote_code: TrustOpt = False,
    out: OutOpt = None,
    overwrite: OverwriteOpt = False,
    quiet: QuietOpt = False,
    json_output: JsonOpt = False,
    recipe: RecipeOpt = None,
) -> None:
    """How the tokenizer sees a sentence ([CLS]/[SEP], ids, mask), or a dataset's token-length report."""
    _setup_logging(quiet)
    cfg: TokensConfig = build_config(ctx, TokensConfig, "tokens", locals(), recipe)
    from bertkit import modeling

    tokenizer = modeling.load_tokenizer(cfg.model, cfg.trust_remote_code)
    if cfg.text is not None:
        _show_sentence(tokenizer, cfg, json_output)
        return
    _show_length_report(tokenizer, cfg, json_output, quiet)


def _show_sentence(tokenizer: Any, cfg: TokensConfig, json_output: bool) -> None:
    from bertkit.tokens import explain_sentence

    result = explain_sentence(tokenizer, cfg.text or "", cfg.text_pair)
    if json_output:
        emit_json(result)
        return
    columns = ["position", "token", "id", "attention_mask"] + (["token_type_id"] if result["token_type_ids"] else [])
    rows = []
    for i, token in enumerate(result["tokens"]):
        row = [str(i), token, result["input_ids"][i], result["attention_mask"][i]]
        if result["token_type_ids"]:
            row.append(result["token_type_ids"][i])
        rows.append(row)
    out_console.print(table(f"{result['n_tokens']} tokens", columns, rows))
    specials = ", ".join(f"{k.upper()} at {v}" for k, v in result["special_positions"].items() if v)
    out_console.print(f"special tokens: {specials}", highlight=False)


def _show_length_report(tokenizer: Any, cfg: TokensConfig, json_output: bool, quiet: bool) -> None:
    from bertkit import data, modeling, plots, runs
    from bertkit.tokens import length_report

    plan = runs.inspect_run_dir(cfg.out, "tokens", overwrite=cfg.overwrite,
                                compare=runs.config_compare(vars(cfg))) if cfg.out else None  # read-only, early
    model_config = modeling.load_config(cfg.model, cfg.trust_remote_code)
    limit = modeling.model_max_length(tokenizer, model_config)
    modeling.check_max_length(cfg.max_length, tokenizer, model_config, cfg.model)
    splits = data.load_splits(cfg, need_labels=cfg.label_column is not None, need_dev=False)
    named = [("train", splits.train), ("dev", splits.dev), ("test", splits.test)]
    reports = [
        length_report(tokenizer, ds, name, cfg.max_length, cfg.batch_size, limit, cfg.seed)
        for name, ds in named
        if ds is not None
    ]
    summary = {"model": cfg.model, "max_length": cfg.max_length, "model_limit": limit, "splits": [
        {k: v for k, v in vars(r).items() if k != "lengths"} for r in reports
    ]}
    if plan is not None:
        run = plan.claim()
        runs.write_run_config(run.path, "tokens", vars(cfg), data_fingerprints={name: ds.fingerprint for name, ds in named if ds is not None})
        runs.write_json_atomic(run.path / "tokens.json", summary)
        plots.length_histogram({r.split: r.lengths for r in reports}, cfg.max_length, run.path / "token_lengths.png", f"Token lengths ({cfg.model})")
        run.commit()
        summary["outputs"] = {"report": str(run.out / "tokens.json"), "histogram": str(run.out / "token_lengths.png")}
    if json_output:
        emit_json(summary)
        return
    rows = [[r.split, r.rows, r.min, r.p50, r.p95, r.p99, r.max, f"{r.truncated} ({r.truncated_share:.1%})",
             r.suggested_max_length, f"{r.waste_static:.0%}", f"{r.waste_dynamic_random:.0%}", f"{r.waste_dynamic_sorted:.0%}"]
            for r in reports]
    columns = ["split", "rows", "min", "p50", "p95", "p99", "max", f"cut@{cfg.max_length}", "suggest",
               "waste static", "dynamic", "sorted"]
    out_console.print(table(f"Token lengths — {cfg.model} (model limit {limit})", columns, rows))
    for r in reports:
        if r.label_counts:
            out_console.print(f"{r.split} labels: " + ", ".join(f"{k}={v}" for k, v in r.label_counts.items()), highlight=False)
    for note in splits.notes:
        info(note, quiet)
    if "outputs" in summary:
        info(f"wrote {summary['outputs']['report']} and {summary['outputs']['histogram']}", quiet)


# ---------------------------------------------------------------- embed


@app.command()
@user_errors
def embed(
    ctx: typer.Context,
    model: ModelOpt = "minilm-offline",
    data: DataOpt = None,
    dev: Annotated[str | None, typer.Option("--dev", help="Dev data (file or hub split), embedded into OUT/dev; no hold-out is made.", rich_help_panel=DATA)] = None,
    test: Annotated[str | None, typer.Option("--test", help="Test data (file or hub split), embedded into OUT/test.", rich_help_panel=DATA)] = None,
    data_config: DataConfigOpt = None,
    train_split: TrainSplitOpt = "train",
    text_column: TextColOpt = None,
    text_pair_column: PairColOpt = None,
    label_column: LabelColOpt = None,
    encoding: EncodingOpt = "utf-8",
    header: HeaderOpt = "auto",
    limit: LimitOpt = None,
    pool: Annotated[str, typer.Option("--pool", help="Token pooling: cls, mean or max (mean/max ignore padding).", rich_help_panel=MODEL)] = "cls",
    layers: Annotated[str, typer.Option("--layers", help="-1 (last), a list like -4,-3,-2,-1 (0 = embeddings), or all.", rich_help_panel=MODEL)] = "-1",
    combine: Annotated[str, typer.Option("--combine", help="Several layers: concat, mean or sum (all + concat keeps a layer axis).", rich_help_panel=MODEL)] = "concat",
    max_length: MaxLenOpt = 128,
    batch_size: Annotated[str, typer.Option("--batch-size", help="Rows per batch, or auto (padded-token budget from the model size).", rich_help_panel=RUN)] = "auto",
    dtype: Annotated[str, typer.Option("--dtype", help="Compute precision: auto, fp32, bf16, fp16 (GPU). auto = bf16 only where it is fast.", rich_help_panel=RUN)] = "auto",
    store_dtype: Annotated[str, typer.Option("--store-dtype", help="Stored precision: float32 or float16.", rich_help_panel=OUTPUT)] = "float32",
    normalize: Annotated[bool, typer.Option("--normalize", help="L2-normalise every feature vector.", rich_help_panel=OUTPUT)] = False,
    shard_size: Annotated[int, typer.Option("--shard-size", help="Rows per shard (unit of streaming and resume).", rich_help_panel=OUTPUT)] = 2048,
    device: Annotated[str, typer.Option("--device", help="cpu, cuda, cuda:N, mps or auto.", rich_help_panel=RUN)] = "auto",
    trust_remote_code: TrustOpt = False,
    out: Annotated[str | None, typer.Option("--out", help="Store directory (with --dev/--test: OUT/train, OUT/dev, OUT/test).", rich_help_panel=OUTPUT)] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace a store made with other settings.", rich_help_panel=OUTPUT)] = False,
    quiet: QuietOpt = False,
    json_output: JsonOpt = False,
    recipe: RecipeOpt = None,
) -> None:
    """Pooled features ([CLS]/mean/max, any layers) for every row, into a resumable on-disk store."""
    _setup_logging(quiet)
    from bertkit.config import EmbedConfig
    from bertkit.embed import embed_to_store

    cfg: EmbedConfig = build_config(ctx, EmbedConfig, "embed", locals(), recipe)
    summary = embed_to_store(cfg, progress=not quiet and not json_output)
    if not summary["main_process"]:
        return
    if json_output:
        emit_json(summary)
        return
    for split in summary["splits"]:
        shape = "x".join(str(d) for d in split["shape"])
        if split["status"] == "complete":
            out_console.print(f"{split['split']}: store {split['path']} is already complete ({shape}, same settings); nothing to do.", highlight=False)
            continue
        resumed = f", resumed: {split['shards_skipped']} of {split['shards_total']} shards were already done" if split["status"] == "resumed" else ""
        out_console.print(
            f"{split['split']}: {split['rows']:,} rows -> {split['path']} ({shape}, {_size(split['size_bytes'])}){resumed}",
            highlight=False,
        )
    if not summary["complete_already"]:
        rate = f"{summary['rows_per_s']:,.1f} rows/s, {summary['tokens_per_s']:,.0f} tokens/s" if summary["rows_per_s"] else "-"
        out_console.print(
            f"embedded {summary['rows_encoded']:,} rows, {summary['tokens_encoded']:,} tokens in {summary['seconds']:.1f} s "
            f"({rate}; {summary['dtype']} on {summary['device']}); store {_size(summary['size_bytes'])}; "
            f"{summary['n_truncated']:,} rows truncated at --max-length {summary['max_length']}",
            highlight=False,
        )


def _size(n_bytes: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n_bytes < 1024 or unit == "GiB":
            return f"{n_bytes:.0f} {unit}" if unit == "B" else f"{n_bytes:.1f} {unit}"
        n_bytes /= 1024  # type: ignore[assignment]
    return str(n_bytes)


# ---------------------------------------------------------------- probe


@app.command()
@user_errors
def probe(
    ctx: typer.Context,
    features: Annotated[str | None, typer.Option("--features", help="A `bertkit embed` store (its --out directory) instead of --data.", rich_help_panel=DATA)] = None,
    model: Annotated[str | None, typer.Option("--model", help="Encoder for on-the-fly features (default minilm-offline); with --features it must match the store.", rich_help_panel=MODEL)] = None,
    data: DataOpt = None,
    dev: DevOpt = None,
    test: TestOpt = None,
    data_config: DataConfigOpt = None,
    train_split: TrainSplitOpt = "train",
    text_column: TextColOpt = None,
    text_pair_column: PairColOpt = None,
    label_column: LabelColOpt = None,
    encoding: EncodingOpt = "utf-8",
    header: HeaderOpt = "auto",
    dev_fraction: DevFractionOpt = 0.1,
    limit: LimitOpt = None,
    pool: Annotated[str | None, typer.Option("--pool", help="Poolings to compare: cls, mean, max, comma-separated (default cls, or the store's).", rich_help_panel=MODEL)] = None,
    layers: Annotated[str | None, typer.Option("--layers", help="Layers probed one by one: -1, a list like 0,3,6 (0 = embeddings), or all.", rich_help_panel=MODEL)] = None,
    max_length: MaxLenOpt = 128,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Rows per batch for feature extraction.", rich_help_panel=RUN)] = 64,
    dtype: Annotated[str, typer.Option("--dtype", help="Extraction precision: auto, fp32, bf16, fp16 (GPU).", rich_help_panel=RUN)] = "auto",
    normalize: Annotated[bool, typer.Option("--normalize", help="L2-normalise features before the probe.", rich_help_panel=MODEL)] = False,
    C: Annotated[float | None, typer.Option("--C", help="Inverse regularisation strength (default 1.0 without --cv).", rich_help_panel="Probe")] = None,
    cv: Annotated[int | None, typer.Option("--cv", help="Choose C by K-fold cross-validation (stratified, data order).", rich_help_panel="Probe")] = None,
    C_grid: Annotated[str | None, typer.Option("--C-grid", help="C values for --cv, comma-separated, or `alammar` (linspace(0.0001, 100, 20)).", rich_help_panel="Probe")] = None,
    class_weight: Annotated[str, typer.Option("--class-weight", help="none or balanced (inverse class frequency).", rich_help_panel="Probe")] = "none",
    repeats: Annotated[int, typer.Option("--repeats", help="Refit the best cell N times on random 80% train subsets (mean ± std).", rich_help_panel="Probe")] = 0,
    baselines: Annotated[bool, typer.Option("--baselines/--no-baselines", help="Majority class, TF-IDF + LR and a random-weights encoder.", rich_help_panel="Probe")] = True,
    seed: SeedOpt = 42,
    trust_remote_code: TrustOpt = False,
    out: Annotated[str | None, typer.Option("--out", help="Run directory: config, metrics, plots, saved probe, cached features.", rich_help_panel=OUTPUT)] = None,
    overwrite: OverwriteOpt = False,
    quiet: QuietOpt = False,
    json_output: JsonOpt = False,
    recipe: RecipeOpt = None,
) -> None:
    """Logistic-regression probes on frozen features, per layer and pooling, with baselines and a saved probe."""
    _setup_logging(quiet or json_output)
    from bertkit.config import ProbeConfig
    from bertkit.probe import run_probe

    cfg: ProbeConfig = build_config(ctx, ProbeConfig, "probe", locals(), recipe)
    result = run_probe(cfg, progress=not quiet and not json_output)
    if json_output:
        emit_json(result)
        return
    _print_probe_report(result)
    for note in result["notes"]:
        info(note, quiet)
    if "outputs" in result:
        outputs = result["outputs"]
        info(f"wrote {outputs['metrics']}, {outputs['layer_curve']}, {outputs['confusion_matrix']}; "
             f"saved probe: {outputs['probe']} (use: bertkit predict --probe {outputs['probe']} --text ...)", quiet)


def _print_probe_report(result: dict[str, Any]) -> None:
    rows = []
    for r in result["sweep"]:
        ci = r["accuracy_ci95"]
        rows.append([r["pool"], r["layer_name"] + (" *" if r["best"] else ""), r["accuracy"], f"{ci[0]:.3f}-{ci[1]:.3f}",
                     r["f1"], r["mcc"], f"{r['C']:g}"])
    names = {"majority": "majority class", "tfidf": "TF-IDF + LR (text)", "random_encoder": "random-init encoder"}
    for key, b in result.get("baselines", {}).items():
        where = f" ({b['pool']} {b['layer']})" if key == "random_encoder" else ""
        rows.append(["baseline", names.get(key, key) + where, b["accuracy"], "", b["f1"], b["mcc"],
                     f"{b['C']:g}" if "C" in b else ""])
    sizes = result["rows"]
    title = (f"Linear probe — {result['model']} — train {sizes['train']:,} rows, dev {sizes['dev']:,} rows "
             f"(* = best dev accuracy)")
    out_console.print(table(title, ["pool", "layer", "dev acc", "95% CI", "macro-F1", "MCC", "C"], rows))
    best = result["best"]
    line = f"best: {best['pool']} {best['layer']}, dev accuracy {best['dev']['accuracy']:.3f}"
    if "repeats" in result:
        rep = result["repeats"]
        line += (f"; {rep['repeats']} refits on {rep['fraction']:.0%} subsets: {rep['accuracy']['mean']:.3f} "
                 f"± {rep['accuracy']['std']:.3f}")
    if "test" in best:
        line += f"; test accuracy {best['test']['accuracy']:.3f} (n={best['test']['n']})"
    out_console.print(line, highlight=False)


# ---------------------------------------------------------------- recipes

recipes_app = typer.Typer(help="List and show the recipes in recipes/ (use one with `bertkit COMMAND --recipe NAME`).",
                          no_args_is_help=True)
app.add_typer(recipes_app, name="recipes")


@recipes_app.command("list")
@user_errors
def recipes_list(json_output: JsonOpt = False) -> None:
    """Every recipe: name, command(s), what it does, measured result."""
    from bertkit.config import list_recipes

    found = list_recipes()
    if json_output:
        emit_json([{"name": r.name, "commands": list(r.commands), "summary": r.summary, "result": r.result,
                    "path": str(r.path)} for r in found])
        return
    rows = [[r.name, ", ".join(r.commands), r.summary, r.result] for r in found]
    out_console.print(table("Recipes (bertkit COMMAND --recipe NAME)", ["name", "command", "what", "measured"], rows))


@recipes_app.command("show")
@user_errors
def recipes_show(name: Annotated[str, typer.Argument(help="Recipe name (or path to a .toml file).")]) -> None:
    """Print a recipe file."""
    from bertkit.config import recipe_path

    path = recipe_path(name)
    out_console.print(f"# {path}", highlight=False)
    out_console.print(path.read_text(encoding="utf-8"), highlight=False, markup=False)


# ---------------------------------------------------------------- finetune / predict / evaluate


@app.command()
@user_errors
def finetune(
    ctx: typer.Context,
    model: ModelOpt = "minilm-offline",
    data: DataOpt = None,
    dev: DevOpt = None,
    test: TestOpt = None,
    data_config: DataConfigOpt = None,
    train_split: TrainSplitOpt = "train",
    text_column: TextColOpt = None,
    text_pair_column: PairColOpt = None,
    label_column: LabelColOpt = None,
    encoding: EncodingOpt = "utf-8",
    header: HeaderOpt = "auto",
    dev_fraction: DevFractionOpt = 0.1,
    limit: LimitOpt = None,
    seed: SeedOpt = 42,
    epochs: Annotated[int, typer.Option("--epochs", help="Passes over the training data (BERT paper: 2-4).", rich_help_panel=RUN)] = 3,
    lr: Annotated[float, typer.Option("--lr", help="Peak AdamW learning rate (BERT paper: 5e-5, 3e-5, 2e-5).", rich_help_panel=RUN)] = 5e-5,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Rows per forward pass per process (BERT paper: 16, 32); a step sees batch x grad-accum x processes.", rich_help_panel=RUN)] = 32,
    grad_accum: Annotated[int, typer.Option("--grad-accum", help="Batches accumulated per optimizer step.", rich_help_panel=RUN)] = 1,
    warmup_ratio: Annotated[float, typer.Option("--warmup-ratio", help="Share of steps with linear LR warmup.", rich_help_panel=RUN)] = 0.1,
    weight_decay: Annotated[float, typer.Option("--weight-decay", help="AdamW weight decay (not on bias/LayerNorm).", rich_help_panel=RUN)] = 0.01,
    max_grad_norm: Annotated[float, typer.Option("--max-grad-norm", help="Gradient clipping norm (0: off).", rich_help_panel=RUN)] = 1.0,
    max_length: MaxLenOpt = 128,
    precision: Annotated[str, typer.Option("--precision", help="auto (bf16 only where fast), fp32, bf16, fp16.", rich_help_panel=RUN)] = "auto",
    eval_every: Annotated[str, typer.Option("--eval-every", help="Evaluate every N steps, or `epoch`.", rich_help_panel=RUN)] = "epoch",
    early_stopping_patience: Annotated[int | None, typer.Option("--early-stopping-patience", help="Stop after N evaluations without improvement.", rich_help_panel=RUN)] = None,
    metric_for_best: Annotated[str, typer.Option("--metric-for-best", help="accuracy, f1, mcc, precision, recall, roc_auc or loss.", rich_help_panel=RUN)] = "accuracy",
    class_weight: Annotated[str, typer.Option("--class-weight", help="none or balanced (inverse class frequency).", rich_help_panel=RUN)] = "none",
    freeze_encoder: Annotated[bool, typer.Option("--freeze-encoder", help="Train only the classification head.", rich_help_panel=MODEL)] = False,
    fast_forward: Annotated[bool, typer.Option("--fast-forward/--no-fast-forward", help="BERT/DistilBERT: skip the last layer's work the logits do not use (same results, faster); off: the model's own forward.", rich_help_panel=MODEL)] = True,
    save_every: Annotated[int | None, typer.Option("--save-every", help="Checkpoint every N steps (and every epoch end).", rich_help_panel=OUTPUT)] = 100,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an --out that holds a different run.", rich_help_panel=OUTPUT)] = False,
    trust_remote_code: TrustOpt = False,
    out: OutOpt = None,
    quiet: QuietOpt = False,
    json_output: JsonOpt = False,
    recipe: RecipeOpt = None,
) -> None:
    """Fine-tune a BERT-style model for classification (Accelerate; resumable; runs under torchrun/accelerate launch)."""
    _setup_logging(quiet)
    from bertkit.config import FinetuneConfig
    from bertkit.finetune import finetune as run_finetune

    cfg: FinetuneConfig = build_config(ctx, FinetuneConfig, "finetune", locals(), recipe)
    result = run_finetune(cfg, progress=not quiet)
    if not result.is_main_process:
        return
    summary = result.metrics
    if json_output:
        emit_json({**summary, "out": str(result.out), "already_finished": result.already_finished,
                   "restored": result.restored})
        return
    for note in result.notes:
        info(note, quiet)
    if result.already_finished:
        out_console.print(f"{result.out} holds a finished run (step {summary['global_step']}); nothing to do. "
                          "Use a new --out, or --overwrite to train again.", highlight=False)
    elif result.restored:
        r = result.restored
        info(f"resumed from {r['checkpoint']}: epoch {r['epoch']}, step {r['step']} "
             f"(batch {r['batch_in_epoch']}/{r['steps_per_epoch']} of the epoch), lr {r['lr']:.3e}, "
             f"best {cfg.metric_for_best} so far {r['best_metric']}")
    _print_epoch_table(result.epoch_table)
    best = summary.get("best_dev") or {}
    out_console.print(
        f"best {summary['best_metric_name']} {summary['best_metric']:.4f} at step {summary['best_step']} "
        f"(accuracy {best.get('accuracy', float('nan')):.4f}, f1 {best.get('f1', float('nan')):.4f}, "
        f"mcc {best.get('mcc', float('nan')):.4f}); {summary['train_samples_per_second']:.1f} train samples/s",
        highlight=False,
    )
    out_console.print(f"saved {result.out}/best, {result.out}/final, metrics.json, training_table.csv, "
                      "curves.png, confusion_matrix.png, dev_errors.csv", highlight=False)


def _print_epoch_table(rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    columns = ["epoch", "train loss", "dev loss", "dev acc", "dev F1", "dev MCC", "train time (s)", "samples/s"]
    keys = ["epoch", "train_loss", "dev_loss", "dev_accuracy", "dev_f1", "dev_mcc", "train_seconds", "samples_per_second"]
    out_console.print(table("Training", columns, [[row.get(k) for k in keys] for row in rows]))


TextsOpt = Annotated[list[str] | None, typer.Option("--text", help="A sentence to classify (repeatable).", rich_help_panel=DATA)]
InferBatchOpt = Annotated[int, typer.Option("--batch-size", help="Rows per inference batch (sorted by length).", rich_help_panel=RUN)]
InferPrecisionOpt = Annotated[str, typer.Option("--precision", help="fp32, bf16, fp16 (GPU) or auto.", rich_help_panel=RUN)]


@app.command()
@user_errors
def predict(
    ctx: typer.Context,
    model: Annotated[str | None, typer.Option("--model", help="Fine-tuned model folder (e.g. runs/sst2/best).", rich_help_panel=MODEL)] = None,
    probe: Annotated[str | None, typer.Option("--probe", help="A probe saved by `bertkit probe` (instead of --model).", rich_help_panel=MODEL)] = None,
    text: TextsOpt = None,
    data: DataOpt = None,
    data_config: DataConfigOpt = None,
    train_split: TrainSplitOpt = "train",
    text_column: TextColOpt = None,
    text_pair_column: PairColOpt = None,
    label_column: LabelColOpt = None,
    encoding: EncodingOpt = "utf-8",
    header: HeaderOpt = "auto",
    limit: LimitOpt = None,
    batch_size: InferBatchOpt = 64,
    max_length: MaxLenOpt = 128,
    precision: InferPrecisionOpt = "fp32",
    out: Annotated[str | None, typer.Option("--out", help="CSV file for the predictions.", rich_help_panel=OUTPUT)] = None,
    quiet: QuietOpt = False,
    json_output: JsonOpt = False,
    recipe: RecipeOpt = None,
) -> None:
    """Label sentences (--text) or a file (--data) with a fine-tuned model or a saved probe: labels + probabilities."""
    _setup_logging(quiet)
    from bertkit.config import PredictConfig
    from bertkit.data import TextDataset, load_dataset_split

    cfg: PredictConfig = build_config(ctx, PredictConfig, "predict", locals(), recipe)
    if cfg.out:  # before any work: never over an input, never over a file bertkit did not write
        from bertkit.config import recipe_path
        from bertkit.runs import check_predictions_out

        check_predictions_out(cfg.out, {"--data": cfg.data, "--model": cfg.model, "--probe": cfg.probe,
                                        "--recipe": str(recipe_path(recipe)) if recipe else None})
    if cfg.text:
        dataset = TextDataset(list(cfg.text), source="--text")
    else:
        dataset = load_dataset_split(cfg, cfg.data or "", need_labels=False)
    label_names, proba = _predict(cfg, dataset, quiet)
    from bertkit.finetune import write_predictions_csv

    if cfg.out:
        from pathlib import Path

        write_predictions_csv(Path(cfg.out), dataset, proba, label_names)
    labels = [label_names[i] for i in proba.argmax(axis=1)]
    if json_output:
        emit_json({"predictions": [{"text": t, "label": lab, "probabilities": dict(zip(label_names, p.tolist(), strict=True))}
                                   for t, lab, p in zip(dataset.texts, labels, proba, strict=True)],
                   "out": cfg.out})
        return
    shown = min(len(dataset), 20 if cfg.out else 200)
    rows = [[t if len(t) <= 80 else t[:77] + "...", lab, float(p.max())]
            for t, lab, p in zip(dataset.texts[:shown], labels[:shown], proba[:shown], strict=True)]
    out_console.print(table(f"{len(dataset)} prediction(s)" + (f" (first {shown})" if shown < len(dataset) else ""),
                            ["text", "label", "probability"], rows))
    if cfg.out:
        info(f"wrote {cfg.out} ({len(dataset)} rows, columns: predicted, confidence, p_<label>)", quiet)


def _predict(cfg: Any, dataset: Any, quiet: bool) -> tuple[list[str], Any]:
    """(label names, probabilities in input order) from a fine-tuned folder or a saved probe."""
    if cfg.probe is not None:
        from bertkit.probe import load_probe, predict_with_probe

        saved = load_probe(cfg.probe)
        _, proba = predict_with_probe(saved, dataset, batch_size=cfg.batch_size, dtype=None, progress=not quiet)
        return [str(x) for x in saved.label_map.labels], proba
    from bertkit.finetune import load_for_inference, predict_proba

    model, tokenizer, label_map = load_for_inference(cfg.model)
    proba = predict_proba(model, tokenizer, dataset, max_length=cfg.max_length, batch_size=cfg.batch_size,
                          precision=cfg.precision, progress=not quiet)
    return [str(x) for x in label_map.labels], proba


@app.command()
@user_errors
def evaluate(
    ctx: typer.Context,
    model: Annotated[str | None, typer.Option("--model", help="Fine-tuned model folder (e.g. runs/sst2/best).", rich_help_panel=MODEL)] = None,
    data: DataOpt = None,
    data_config: DataConfigOpt = None,
    train_split: TrainSplitOpt = "train",
    text_column: TextColOpt = None,
    text_pair_column: PairColOpt = None,
    label_column: LabelColOpt = None,
    encoding: EncodingOpt = "utf-8",
    header: HeaderOpt = "auto",
    limit: LimitOpt = None,
    batch_size: InferBatchOpt = 64,
    max_length: MaxLenOpt = 128,
    precision: InferPrecisionOpt = "fp32",
    out: OutOpt = None,
    overwrite: OverwriteOpt = False,
    quiet: QuietOpt = False,
    json_output: JsonOpt = False,
    recipe: RecipeOpt = None,
) -> None:
    """Metrics of a fine-tuned model on labelled data: accuracy, macro-F1, MCC, precision/recall, ROC-AUC."""
    _setup_logging(quiet)
    from bertkit import metrics, runs
    from bertkit.config import EvaluateConfig, config_dict
    from bertkit.data import load_dataset_split
    from bertkit.finetune import load_for_inference, predict_proba, write_predictions_csv

    cfg: EvaluateConfig = build_config(ctx, EvaluateConfig, "evaluate", locals(), recipe)
    plan = runs.inspect_run_dir(cfg.out, "evaluate", overwrite=cfg.overwrite,
                                compare=runs.config_compare(config_dict(cfg))) if cfg.out else None  # read-only, early
    dataset = load_dataset_split(cfg, cfg.data or "", need_labels=True)
    model_obj, tokenizer, label_map = load_for_inference(cfg.model or "")
    y = label_map.encode(dataset.labels or [], f"The data {dataset.source}")
    proba = predict_proba(model_obj, tokenizer, dataset, max_length=cfg.max_length, batch_size=cfg.batch_size,
                          precision=cfg.precision, progress=not quiet)
    names = [str(x) for x in label_map.labels]
    result = metrics.classification_metrics(y, proba.argmax(axis=1), proba, names)
    result.update(model=cfg.model, data=dataset.source, data_fingerprint=dataset.fingerprint)
    if plan is not None:
        from bertkit import plots

        run = plan.claim()
        runs.write_run_config(run.path, "evaluate", config_dict(cfg), data_fingerprint=dataset.fingerprint)
        runs.write_json_atomic(run.path / "metrics.json", result)
        write_predictions_csv(run.path / "predictions.csv", dataset, proba, names, y_true=y)
        plots.confusion_matrix(result["confusion_matrix"], names, run.path / "confusion_matrix.png", f"{cfg.model} on {dataset.source}")
        run.commit()
    if json_output:
        emit_json(result)
        return
    scores = metrics.headline(result)
    out_console.print(table(f"{cfg.model} on {dataset.source} ({result['n']} rows)", ["metric", "value"],
                            [[k, v] for k, v in scores.items()]))
    matrix = result["confusion_matrix"]
    out_console.print(table("confusion matrix (rows = true)", ["true \\ predicted", *names],
                            [[names[i], *row] for i, row in enumerate(matrix)]))
    if cfg.out:
        info(f"wrote {cfg.out}/metrics.json, predictions.csv, confusion_matrix.png", quiet)


# ---------------------------------------------------------------- bench

BENCH = "Benchmark"


@app.command()
@user_errors
def bench(
    ctx: typer.Context,
    models: Annotated[str | None, typer.Option("--models", help="Comma-separated hub ids or folders, e.g. distilbert-base-uncased,bert-base-uncased.", rich_help_panel=MODEL)] = None,
    preset: Annotated[str | None, typer.Option("--preset", help="distilbert-vs-bert: exact DistilBertConfig() vs BertConfig() shapes, random init, works offline.", rich_help_panel=MODEL)] = None,
    random_init: Annotated[bool, typer.Option("--random-init", help="Build --models from their configs with random weights (speed/size only).", rich_help_panel=MODEL)] = False,
    data: DataOpt = None,
    dev: DevOpt = None,
    test: TestOpt = None,
    data_config: DataConfigOpt = None,
    train_split: TrainSplitOpt = "train",
    text_column: TextColOpt = None,
    text_pair_column: PairColOpt = None,
    label_column: LabelColOpt = None,
    encoding: EncodingOpt = "utf-8",
    header: HeaderOpt = "auto",
    dev_fraction: DevFractionOpt = 0.1,
    limit: LimitOpt = None,
    seed: SeedOpt = 42,
    max_length: Annotated[int, typer.Option("--max-length", help="Truncation length, and the width of static padding.", rich_help_panel=MODEL)] = 128,
    protocol: Annotated[str, typer.Option("--protocol", help="standard (latency, throughput, training step) or paper (CPU, batch 1, one full pass over the data).", rich_help_panel=BENCH)] = "standard",
    batch_sizes: Annotated[str, typer.Option("--batch-sizes", help="Throughput batch sizes, comma-separated.", rich_help_panel=BENCH)] = "1,8,32",
    train_batch_size: Annotated[int, typer.Option("--train-batch-size", help="Batch size of the timed training step (0 skips it).", rich_help_panel=BENCH)] = 32,
    warmup: Annotated[int, typer.Option("--warmup", help="Untimed warm-up iterations per model and measurement.", rich_help_panel=BENCH)] = 1,
    min_iters: Annotated[int, typer.Option("--min-iters", help="Minimum timed iterations per measurement and model.", rich_help_panel=BENCH)] = 3,
    min_seconds: Annotated[float, typer.Option("--min-seconds", help="Minimum timed seconds per measurement and model.", rich_help_panel=BENCH)] = 2.0,
    rounds: Annotated[int, typer.Option("--rounds", help="Chunks per measurement, alternating models (A B A B) so drift hits both.", rich_help_panel=BENCH)] = 2,
    dtype: Annotated[str, typer.Option("--dtype", help="auto (fp32 on CPUs without native bf16), fp32, bf16, fp16 (GPU).", rich_help_panel=BENCH)] = "auto",
    device: Annotated[str, typer.Option("--device", help="cpu, cuda, mps or auto.", rich_help_panel=BENCH)] = "auto",
    threads: Annotated[int | None, typer.Option("--threads", help="torch intra-op threads (default: torch's choice).", rich_help_panel=BENCH)] = None,
    quality: Annotated[str, typer.Option("--quality", help="none, probe, finetune or probe,finetune: score each model through those commands, same settings.", rich_help_panel=BENCH)] = "none",
    quality_args: Annotated[str | None, typer.Option("--quality-args", help="Extra flags for every quality command, e.g. \"--epochs 1\".", rich_help_panel=BENCH)] = None,
    trust_remote_code: TrustOpt = False,
    out: Annotated[str | None, typer.Option("--out", help="Directory for bench.json, bench.md, bench.png (default runs/bench).", rich_help_panel=OUTPUT)] = None,
    overwrite: OverwriteOpt = False,
    quiet: QuietOpt = False,
    json_output: JsonOpt = False,
    recipe: RecipeOpt = None,
) -> None:
    """DistilBERT vs BERT (or any encoders) on your hardware and data: size, latency, throughput, memory, claims."""
    _setup_logging(quiet)
    from bertkit.config import BenchConfig

    cfg: BenchConfig = build_config(ctx, BenchConfig, "bench", locals(), recipe)
    from bertkit import bench as bench_core
    from bertkit import plots, runs

    plan = runs.inspect_run_dir(cfg.out or "runs/bench", "bench", overwrite=cfg.overwrite,
                                compare=runs.config_compare(vars(cfg)))  # read-only; claimed once models are measured
    report = bench_core.benchmark(cfg, quality_dir=lambda: plan.claim().path / "quality")
    run = plan.claim()
    runs.write_run_config(run.path, "bench", vars(cfg), data_fingerprint=report["data_source"]["fingerprint"])
    report["outputs"] = {name: str(run.out / name) for name in ("bench.json", "bench.md", "bench.png")}
    plots.bench_bars(report, run.path / "bench.png")
    runs.write_json_atomic(run.path / "bench.json", report)
    runs.write_text_atomic(run.path / "bench.md", bench_core.report_markdown(report))
    run.commit()
    if json_output:
        emit_json(report)
        return
    _print_bench(report, quiet)


def _print_bench(report: dict[str, Any], quiet: bool) -> None:
    from bertkit import bench as bench_core

    env = report["environment"]
    title = (f"bertkit bench ({report['protocol']}) — {env['machine']['cpu']}, {env['device']}, {env['dtype']}, "
             f"{env['torch_threads']} threads")
    out_console.print(table(title, *bench_core.summary_rows(report)))
    columns, rows = bench_core.throughput_rows(report)
    if rows:
        out_console.print(table("Throughput (dynamic = length-sorted batches; static = padded to --max-length)", columns, rows))
    out_console.print("[bold]Claims vs the DistilBERT paper[/]")
    for line in bench_core.claim_lines(report["claims"]):
        out_console.print(f"  {_escape(line)}", highlight=False)
    for note in report["notes"]:
        info(f"note: {_escape(note)}", quiet)
    info(f"wrote {', '.join(report['outputs'].values())}", quiet)


if __name__ == "__main__":  # `python -m bertkit.cli` (used by accelerate launch / torchrun)
    app()
