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
    if cfg.out:
        run_dir = runs.prepare_run_dir(cfg.out)
        runs.write_run_config(run_dir, "tokens", vars(cfg), data_fingerprints={name: ds.fingerprint for name, ds in named if ds is not None})
        runs.write_json_atomic(run_dir / "tokens.json", summary)
        png = plots.length_histogram({r.split: r.lengths for r in reports}, cfg.max_length, run_dir / "token_lengths.png", f"Token lengths ({cfg.model})")
        summary["outputs"] = {"report": str(run_dir / "tokens.json"), "histogram": str(png)}
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


if __name__ == "__main__":  # `python -m bertkit.cli` (used by accelerate launch / torchrun)
    app()
