"""The `bertkit` command line (Typer). bertkit.cli is the only package that prints and sets exit codes; what each
command prints is in `bertkit.cli.show`.

Every command is `@config_command(SomeConfig)`: its options are generated from the config dataclass's fields
(flag, type, default, help and panel all come from their declarations in `bertkit.commands`), `--recipe`
feeds a recipe's values in as defaults through the same option types (precedence: flag > recipe > default),
and the command body is parse -> `bertkit.commands.<name>.run` -> show. A `UserError` anywhere below becomes a one-paragraph
message on stderr and exit code 2, never a traceback; Ctrl-C exits 130, SIGTERM 143, each with one line saying what
a re-run does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import logging
import os
import sys
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import typer
from rich.markup import escape
from typer.core import TyperArgument, TyperCommand, TyperGroup

from bertkit import __version__
from bertkit.cli import show, show_models, show_recipes, show_training
from bertkit.cli.interrupts import Terminated, interrupted_line, sigterm_as_interrupt
from bertkit.cli.output import LOGGED, View, err_console, out_console
from bertkit.commands import bench as bench_command
from bertkit.commands import distill as distill_command
from bertkit.commands import embed as embed_command
from bertkit.commands import evaluate as evaluate_command
from bertkit.commands import export as export_command
from bertkit.commands import finetune as finetune_command
from bertkit.commands import predict as predict_command
from bertkit.commands import probe as probe_command
from bertkit.commands import push as push_command
from bertkit.commands import sweep as sweep_command
from bertkit.commands import tokens as tokens_command
from bertkit.commands.bench import BenchConfig
from bertkit.commands.distill import DistillConfig
from bertkit.commands.embed import EmbedConfig
from bertkit.commands.evaluate import EvaluateConfig
from bertkit.commands.export import ExportConfig
from bertkit.commands.finetune import FinetuneConfig
from bertkit.commands.predict import PredictConfig
from bertkit.commands.probe import ProbeConfig
from bertkit.commands.push import PushConfig
from bertkit.commands.sweep import SweepConfig
from bertkit.commands.tokens import TokensConfig
from bertkit.errors import UserError
from bertkit.io import runlock
from bertkit.io.faults import install_from_env
from bertkit.options import (
    ADVANCED,
    OUTPUT,
    RUN,
    advanced_options,
    build,
    field_type,
    flag,
    flag_names,
    help_order,
    help_panel,
    help_text,
    required_options,
)
from bertkit.recipes import list_recipes, load_recipe, recipe_path

NO_LABEL = ""
"""The metavar of every option: Typer's type labels (`<str>`, `<bool>`) say nothing the help does not."""
REQUIRED_MARK = r" \[required]"
"""Appended to the help of an option the command cannot run without (escaped: the help is Rich markup)."""


def _plain_help_option(option: Any, panel: str | None = None) -> Any:
    """--help without a type label (in `panel`, else the default one)."""
    if option is not None:
        option.metavar = NO_LABEL
        if panel is not None:
            option.rich_help_panel = panel
    return option


class PlainArgument(TyperArgument):
    """A positional argument shown by its metavar: `NAME` in the usage line (Typer writes `{name}`), no `<str>`."""

    def get_usage_pieces(self, ctx: Any) -> list[str]:
        return [self.display_name_raw if self.required else f"[{self.display_name_raw}]"]

    def display_type_rich(self, ctx: Any) -> str | None:
        return None


@contextlib.contextmanager
def _main_flags_only(params: list[Any]) -> Iterator[None]:
    """While --help is drawn, each option shows its main flag (and short form) only: an alias such as --dtype would
    be glued to it (`--precision,--dtype`); the option's help names its aliases instead (`option_help`)."""
    saved = [(p, p.opts) for p in params if not isinstance(p, TyperArgument)]
    for param, opts in saved:
        longs = [o for o in opts if o.startswith("--")]
        param.opts = [o for o in opts if not o.startswith("--") or o == longs[0]]
    try:
        yield
    finally:
        for param, opts in saved:
            param.opts = opts


class Command(TyperCommand):
    """A command whose --help has no type label and sits in the Output panel, next to --quiet and --json; an
    option's alias is named in its help, not glued to its flag; an argument reads `NAME`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if type(param) is TyperArgument:
                param.__class__ = PlainArgument

    def get_help_option(self, ctx: Any) -> Any:
        return _plain_help_option(super().get_help_option(ctx), OUTPUT)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        with _main_flags_only(self.params):
            super().format_help(ctx, formatter)


class Group(TyperGroup):
    """The `bertkit` group (and `bertkit recipes`): its --help without a type label."""

    def get_help_option(self, ctx: Any) -> Any:
        return _plain_help_option(super().get_help_option(ctx))


app = typer.Typer(
    name="bertkit",
    cls=Group,
    help="BERT transfer learning from one CLI: token reports, feature extraction, probes, fine-tuning, benchmarks.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    add_completion=False,
)
log = logging.getLogger("bertkit")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print the results as JSON on stdout.", rich_help_panel=OUTPUT,
                                       metavar=NO_LABEL)]


# ---------------------------------------------------------------- plumbing


def _setup_logging(quiet: bool) -> None:
    """Library code logs through `logging`; here it goes to stderr. Hugging Face's own bars stay off."""
    level = logging.WARNING if quiet else logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("bertkit: %(message)s"))
    handler.addFilter(LOGGED)  # a note logged as it happened is not printed again with the results
    root = logging.getLogger("bertkit")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
    if "transformers" in sys.modules:  # imported already (a test process): set its switches directly
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        return
    # not imported yet, and a refused command never imports it: transformers reads its verbosity from this variable
    # and its bars' switch from huggingface_hub's when it is imported (`transformers.utils.logging`)
    os.environ["TRANSFORMERS_VERBOSITY"] = "error"
    try:
        from huggingface_hub.utils import disable_progress_bars
    except ImportError:
        return
    disable_progress_bars()


def fail(message: str, code: int = 2) -> None:
    """Print one readable paragraph to stderr and exit with `code` (2: a user error)."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, markup=True)
    raise typer.Exit(code)


def user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run a command; a UserError becomes a message and exit code 2, Ctrl-C exit 130 and SIGTERM exit 143 with one
    line saying what a re-run does, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with sigterm_as_interrupt():
                return fn(*args, **kwargs)
        except UserError as exc:
            fail(escape(str(exc)))
        except KeyboardInterrupt as exc:
            err_console.print(escape(interrupted_line(exc)), highlight=False)
            raise typer.Exit(143 if isinstance(exc, Terminated) else 130) from None
        finally:
            runlock.release_all()  # the command ended, however it ended: its run directories are free again

    return wrapper


CLI_ONLY = {
    "quiet": (bool, typer.Option("--quiet", "-q", help="No progress bars; only the final summary.", rich_help_panel=OUTPUT,
                                 metavar=NO_LABEL), False),
    "json_output": (bool, typer.Option("--json", help="Print the results as JSON on stdout.", rich_help_panel=OUTPUT,
                                       metavar=NO_LABEL), False),
}


def option_help(config_cls: type, f: dataclasses.Field) -> str:
    """An option's --help text: its help, its aliases (--help shows the main flag only) and a mark when the command
    cannot run without it."""
    aliases = f.metadata.get("aliases", ())
    also = f" Also {' or '.join(aliases)} (an alias)." if aliases else ""
    return help_text(config_cls, f) + also + (REQUIRED_MARK if f.name in required_options(config_cls) else "")


def _typer_parameter(config_cls: type, f: dataclasses.Field) -> inspect.Parameter:
    """The Typer option of one config field: flag(s), type, default, help and panel from its declaration (an
    advanced option is listed by --help-all only)."""
    base, optional = field_type(f)
    names = flag_names(f)
    annotation: Any = base | None if optional else base
    default = f.default
    if base is tuple:  # a repeatable option
        annotation, default = list[str] | None, None
    elif base is bool and f.default is True:
        names = [f"{names[0]}/--no-{names[0][2:]}", *names[1:]]
    panel = help_panel(config_cls, f)
    option = typer.Option(*names, help=option_help(config_cls, f), rich_help_panel=panel, metavar=NO_LABEL,
                          hidden=panel == ADVANCED)
    return inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[annotation, option])


def _help_all(ctx: typer.Context, value: bool) -> None:
    """--help-all: the help with the Advanced panel too."""
    if not value or ctx.resilient_parsing:
        return
    advanced = [p for p in ctx.command.params if getattr(p, "rich_help_panel", None) == ADVANCED]
    for param in advanced:
        param.hidden = False
    try:
        typer.echo(ctx.get_help(), color=ctx.color)
    finally:
        for param in advanced:
            param.hidden = True
    raise typer.Exit(0)


HELP_ALL = inspect.Parameter(
    "help_all", inspect.Parameter.KEYWORD_ONLY, default=False,
    annotation=Annotated[bool, typer.Option("--help-all", help="Show this message with the Advanced options too, and "
                                            "exit.", rich_help_panel=OUTPUT, metavar=NO_LABEL, is_eager=True,
                                            expose_value=False, callback=_help_all)])


def _epilog(config_cls: type, command: str) -> str | None:
    """The end of --help: the advanced options by name, and how to see them."""
    names = [flag(f.name) for f in help_order(config_cls) if f.name in advanced_options(config_cls)]
    return f"Advanced options (`bertkit {command} --help-all`): {', '.join(names)}." if names else None


def _recipe_parameter(config_cls: type, command: str) -> inspect.Parameter:
    """--recipe: read before the other options, its values become their defaults (typed like the flags)."""

    def use_recipe(ctx: typer.Context, value: str | None) -> str | None:
        if value:
            try:
                values = load_recipe(value, command, config_cls)
            except UserError as exc:
                fail(escape(str(exc)))
            ctx.default_map = {**(ctx.default_map or {}),
                               **{k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}}
        return value

    option = typer.Option("--recipe", help="TOML recipe (path or name in recipes/); CLI flags override it.",
                          rich_help_panel=RUN, is_eager=True, callback=use_recipe, metavar=NO_LABEL)
    return inspect.Parameter("recipe", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[str | None, option])


def config_command(config_cls: type, name: str | None = None) -> Callable[[Callable[..., Any]], Any]:
    """Register `fn(cfg, view)` as a command whose options are generated from `config_cls`'s fields."""

    def register(fn: Callable[..., Any]) -> Any:
        command = name or fn.__name__
        params = [_typer_parameter(config_cls, f) for f in help_order(config_cls)]
        params += [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=d, annotation=Annotated[t, o])
                   for k, (t, o, d) in CLI_ONLY.items()]
        params += [_recipe_parameter(config_cls, command), HELP_ALL]

        def run(**values: Any) -> Any:
            values.pop("help_all", None)  # eager: it printed the help and exited, or was not given
            view = View(values.pop("quiet"), values.pop("json_output"), values.pop("recipe"))
            _setup_logging(view.quiet or view.json)
            return fn(build(config_cls, values), view)

        run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        run.__doc__ = fn.__doc__
        run.__name__ = command
        return app.command(command, cls=Command, epilog=_epilog(config_cls, command))(user_errors(run))

    return register


def _version_callback(value: bool) -> None:
    if value:
        out_console.print(f"bertkit {__version__}")
        raise typer.Exit(0)


@app.callback()
def main(
    version: Annotated[bool, typer.Option("--version", callback=_version_callback, is_eager=True, metavar=NO_LABEL,
                                          help="Show the version and exit.")] = False,
) -> None:
    """bertkit: tokens, embed, probe, finetune, predict, evaluate, bench — the classic BERT workflows."""
    if os.environ.get("BERTKIT_KILL_AT"):  # fault-injection tests only (see bertkit/io/faults.py)
        install_from_env()


# ---------------------------------------------------------------- commands: parse -> commands.<name>.run -> show


@config_command(TokensConfig)
def tokens(cfg: TokensConfig, view: View) -> None:
    """How the tokenizer sees a sentence ([CLS]/[SEP], ids, mask), or a dataset's token-length report."""
    show.show_tokens(tokens_command.run(cfg), cfg, view)


@config_command(EmbedConfig)
def embed(cfg: EmbedConfig, view: View) -> None:
    """Pooled features ([CLS]/mean/max, any layers) for every row, into a resumable on-disk store."""
    show.show_embed(embed_command.run(cfg, progress=view.progress), view)


@config_command(ProbeConfig)
def probe(cfg: ProbeConfig, view: View) -> None:
    """Linear probes on frozen features, per layer and pooling, with baselines and a saved probe (logistic regression;
    ridge for numbers, one-vs-rest for tags)."""
    show.show_probe(probe_command.run(cfg, progress=view.progress), view)


@config_command(FinetuneConfig)
def finetune(cfg: FinetuneConfig, view: View) -> None:
    """Fine-tune a BERT-style model for classification, or a tagger on tagged data (Accelerate; resumable; runs under
    torchrun/accelerate launch)."""
    show_training.show_finetune(finetune_command.run(cfg, progress=not view.quiet), view)


@config_command(PredictConfig)
def predict(cfg: PredictConfig, view: View) -> None:
    """Label sentences (--text) or a file (--data) with a fine-tuned model or a saved probe: labels + probabilities."""
    stream = show.PredictionsJson() if view.json else None  # --json: every row, printed window by window
    result = predict_command.run(cfg, recipe=view.recipe, progress=not view.quiet,
                                  keep=0 if view.json else show.predictions_shown(cfg), on_chunk=stream)
    show.show_predictions(result, cfg, view, stream)


@config_command(EvaluateConfig)
def evaluate(cfg: EvaluateConfig, view: View) -> None:
    """Metrics of a fine-tuned model on labelled data: accuracy, macro-F1, MCC, precision/recall, ROC-AUC."""
    show.show_evaluate(evaluate_command.run(cfg, progress=not view.quiet), cfg, view)


@config_command(ExportConfig)
def export(cfg: ExportConfig, view: View) -> None:
    """A fine-tuned classifier or an encoder to an ONNX folder (int8 by default), kept only if it passes the accuracy
    gate against the PyTorch fp32 model; predict/evaluate/embed take the folder as --model."""
    show_models.show_export(export_command.run(cfg, progress=view.progress), view)


@config_command(DistillConfig)
def distill(cfg: DistillConfig, view: View) -> None:
    """Distil a fine-tuned model into a smaller student (DistilBERT's way), and check the 40/60/97 claims on it."""
    show_training.show_distill(distill_command.run(cfg, progress=not view.quiet), view)


@config_command(SweepConfig)
def sweep(cfg: SweepConfig, view: View) -> None:
    """Hyper-parameter sweep of finetune: a --grid or an Optuna --space, K --seeds, resumable; OUT/best = the best."""
    show_training.show_sweep(sweep_command.run(cfg, progress=view.progress), view)


@config_command(PushConfig)
def push(cfg: PushConfig, view: View) -> None:
    """Upload a saved model folder (with its model card) to the Hugging Face hub; refuses incomplete folders."""
    show_models.show_push(push_command.run(cfg), view)


@config_command(BenchConfig)
def bench(cfg: BenchConfig, view: View) -> None:
    """DistilBERT vs BERT (or any encoders) on your hardware and data: size, latency, throughput, memory, claims."""
    show.show_bench(bench_command.run(cfg), view)


# ---------------------------------------------------------------- recipes

recipes_app = typer.Typer(help="List and show the recipes in recipes/ (use one with `bertkit COMMAND --recipe NAME`).",
                          no_args_is_help=True, cls=Group)
app.add_typer(recipes_app, name="recipes")


@recipes_app.command("list", cls=Command)
@user_errors
def recipes_list(json_output: JsonOpt = False) -> None:
    """Every recipe: name, command(s), what it does, measured result."""
    show_recipes.show_recipes(list_recipes(), json_output)


@recipes_app.command("show", cls=Command)
@user_errors
def recipes_show(name: Annotated[str, typer.Argument(help="Recipe name (or path to a .toml file).", metavar="NAME")]) -> None:
    """Print a recipe file."""
    show_recipes.show_recipe(recipe_path(name, fix="Show one of those names, or give the path of a .toml file"))
