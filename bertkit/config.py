"""One frozen dataclass per command, plus recipe loading.

Field names are the CLI option names with dashes turned into underscores (`--text-column` -> `text_column`),
so a recipe's keys, the CLI flags and the config fields are one vocabulary. Each `__post_init__` collects
every problem and raises once, naming the flag.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import shlex
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from bertkit.errors import UserError, raise_if_problems

DTYPES = ("auto", "fp32", "bf16", "fp16")
HEADER_MODES = ("auto", "yes", "no")
RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"


def option_fields(config_cls: type) -> set[str]:
    """Config fields that are CLI options (and valid recipe keys): all fields but a class's NOT_OPTIONS."""
    return {f.name for f in fields(config_cls)} - set(getattr(config_cls, "NOT_OPTIONS", ()))


def flag(field_name: str) -> str:
    """The CLI flag for a config field: `text_column` -> `--text-column`."""
    return "--" + field_name.replace("_", "-")


def check_positive(problems: list[str], value: int | float | None, name: str, *, allow_none: bool = True) -> None:
    """Record a problem unless `value` is > 0 (or None where allowed)."""
    if value is None and allow_none:
        return
    if value is None or value <= 0:
        problems.append(f"{flag(name)} must be a positive number, got {value!r}.")


def check_choice(problems: list[str], value: str, name: str, choices: tuple[str, ...]) -> None:
    """Record a problem unless `value` is one of `choices`."""
    if value not in choices:
        problems.append(f"{flag(name)} must be one of {', '.join(choices)}; got {value!r}.")


def check_device(problems: list[str], value: str, *, check_available: bool = True) -> None:
    """Record a problem unless --device names a device (cpu, cuda, cuda:N, mps, auto) that this machine has."""
    if value in ("auto", "cpu"):
        return
    from bertkit.modeling import device_problem  # imports torch: only for a device other than auto/cpu

    problem = device_problem(value, check_available=check_available)
    if problem:
        problems.append(problem)


# ---------------------------------------------------------------- value types (recipes now, CLI values later)

SEED_MAX = 2**32 - 1
"""numpy's (and sklearn's random_state's) largest seed."""
_TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string", tuple: "a list of strings"}
_EXAMPLES = {bool: "true", int: "3", float: "0.5", str: '"text"', tuple: '["first", "second"]'}


def field_type(field: dataclasses.Field) -> tuple[type, bool]:
    """(base type, None allowed) of a config field typed str, int, float, bool or tuple[str, ...] (or `X | None`)."""
    annotation = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
    parts = [part.strip() for part in str(annotation).split("|")]
    optional = "None" in parts
    names = [part for part in parts if part != "None"]
    bases = {"str": str, "int": int, "float": float, "bool": bool}
    if len(names) == 1 and names[0] in bases:
        return bases[names[0]], optional
    if len(names) == 1 and names[0].replace(" ", "") == "tuple[str,...]":
        return tuple, optional
    raise TypeError(f"config field {field.name} has a type check_value does not know: {annotation}")


def _kind_of(value: Any) -> str:
    words = {bool: "a boolean", int: "an integer", float: "a float", str: "a string", list: "a list", dict: "a table"}
    return next((word for kind, word in words.items() if type(value) is kind), type(value).__name__)


def check_value(field: dataclasses.Field, value: Any) -> Any:
    """`value` for config `field`, converted where lossless (int -> float, int -> str, one string -> a 1-tuple).

    Raises TypeError whose message says what the field takes and what it got (the caller names the key or flag).
    ints are accepted for float fields (and for str fields: a column index); bools are never ints.
    """
    base, optional = field_type(field)
    if value is None and optional:
        return None
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if base is bool and isinstance(value, bool):
        return value
    if base is int and is_int:
        return value
    if base is float and (is_int or isinstance(value, float)):
        return float(value)
    if base is str and (isinstance(value, str) or is_int):
        return str(value)
    if base is tuple:
        items = [value] if isinstance(value, str) else value
        if isinstance(items, (list, tuple)) and all(isinstance(item, str) for item in items):
            return tuple(items)
    default = field.default if field.default not in (None, dataclasses.MISSING, ()) else None
    example = repr(default).lower() if isinstance(default, bool) else (
        f'"{default}"' if isinstance(default, str) else str(default) if default is not None else _EXAMPLES[base])
    raise TypeError(f"must be {_TYPE_WORDS[base]} (e.g. {example}), not {value!r} ({_kind_of(value)})")


def check_values(config_cls: type, values: dict[str, Any], where: str) -> dict[str, Any]:
    """Every value type-checked against `config_cls` (see `check_value`); all problems in one UserError."""
    by_name = {f.name: f for f in fields(config_cls)}
    checked, problems = {}, []
    for name, value in values.items():
        try:
            checked[name] = check_value(by_name[name], value)
        except TypeError as exc:
            problems.append(f"{flag(name)[2:]} {exc}")
    if problems:
        raise UserError(f"{where}: {'; '.join(problems)}. Fix the value{'s' if len(problems) > 1 else ''} "
                        f"(a command-line flag overrides a recipe value).")
    return checked


def number_problems(config: Any) -> list[str]:
    """Every float option must be finite (`--lr inf`, `--C nan`); --seed must be a seed numpy accepts."""
    problems = []
    for f in fields(config):
        value = getattr(config, f.name)
        if field_type(f)[0] is float and isinstance(value, float) and not math.isfinite(value):
            problems.append(f"{flag(f.name)} must be a finite number; got {value}. Pass a real number "
                            f"(e.g. {flag(f.name)} {f.default if f.default is not None else 1.0}).")
    seed = getattr(config, "seed", 0)
    if isinstance(seed, int) and not 0 <= seed <= SEED_MAX:
        problems.append(f"--seed must be between 0 and {SEED_MAX} (the seeds numpy accepts); got {seed}. "
                        f"Pass e.g. --seed 42.")
    return problems


@dataclass(frozen=True)
class DataOptions:
    """Where the data comes from and which columns to use; shared by every command that reads a dataset."""

    data: str | None = None
    """Training (or only) data: a .csv/.tsv/.json/.jsonl/.parquet file, or a hub dataset name."""
    dev: str | None = None
    """Dev data: a file, or a split name of the hub dataset given by --data. Omitted: a stratified split of --data."""
    test: str | None = None
    """Test data: a file, or a split name of the hub dataset."""
    data_config: str | None = None
    """Hub dataset configuration name (e.g. `sst2` for `nyu-mll/glue`)."""
    train_split: str = "train"
    """Split of the hub dataset used as training data."""
    text_column: str | None = None
    """Text column: a name, or a 0-based index for headerless files. Default: `sentence`/`text`/first column."""
    text_pair_column: str | None = None
    """Second text column for sentence-pair tasks (encoded as a true pair)."""
    label_column: str | None = None
    """Label column: a name or 0-based index. Labels may be integers or strings."""
    encoding: str = "utf-8"
    """Text encoding of local files."""
    header: str = "auto"
    """Whether local CSV/TSV files have a header row: auto, yes, no."""
    dev_fraction: float = 0.1
    """Share of --data held out (stratified) as dev when --dev is not given."""
    limit: int | None = None
    """Use only the first N rows of each split (quick runs)."""
    seed: int = 42
    """Random seed for splits, sampling and initialisation."""

    def data_problems(self) -> list[str]:
        problems = number_problems(self)
        check_choice(problems, self.header, "header", HEADER_MODES)
        check_positive(problems, self.limit, "limit")
        if math.isfinite(self.dev_fraction) and not 0.0 < self.dev_fraction < 1.0:
            problems.append(f"--dev-fraction must be between 0 and 1 (exclusive); got {self.dev_fraction}.")
        return problems


@dataclass(frozen=True)
class TokensConfig(DataOptions):
    """`bertkit tokens`: how a tokenizer sees a sentence, or the token-length profile of a dataset."""

    model: str = "minilm-offline"
    """Model (tokenizer) name: a hub id, a local folder, or `minilm-offline`."""
    text: str | None = None
    """A sentence to show token by token (instead of --data)."""
    text_pair: str | None = None
    """Optional second sentence, encoded as a pair with --text."""
    max_length: int = 128
    """Max length used to report truncation and padding waste."""
    batch_size: int = 32
    """Batch size used to compute dynamic-padding waste."""
    out: str | None = None
    """Run directory for the report JSON and the histogram PNG."""
    overwrite: bool = False
    """Replace an --out that holds a tokens run with other options (swapped in once the new report is complete)."""
    trust_remote_code: bool = False
    """Allow custom code from the model repository (off by default: it runs arbitrary code)."""

    def __post_init__(self) -> None:
        problems = self.data_problems()
        if (self.text is None) == (self.data is None):
            problems.append("Give exactly one of --text (a sentence) or --data (a dataset).")
        if self.text_pair is not None and self.text is None:
            problems.append("--text-pair needs --text.")
        check_positive(problems, self.max_length, "max_length", allow_none=False)
        check_positive(problems, self.batch_size, "batch_size", allow_none=False)
        raise_if_problems(problems)


POOLS = ("cls", "mean", "max")
COMBINES = ("concat", "mean", "sum")
STORE_DTYPES = ("float32", "float16")


def parse_layers(spec: str | int) -> list[int] | None:
    """`--layers`: `all` -> None; `-1` / `-4,-3,-2,-1` / `0,6` -> list of hidden-state indices.

    Index 0 is the embedding output, 1..L the encoder layers; negative indices count from the last layer.
    Raises ValueError on anything else.
    """
    text = str(spec).strip().lower()
    if text == "all":
        return None
    parts = [p.strip() for p in text.split(",")]
    if not parts or any(not p.lstrip("-").isdigit() for p in parts):
        raise ValueError(spec)
    values = [int(p) for p in parts]
    if len(set(values)) != len(values):
        raise ValueError(spec)
    return values


@dataclass(frozen=True)
class EmbedConfig(DataOptions):
    """`bertkit embed`: pooled encoder features for every row, written to a sharded, resumable store."""

    # embed writes every row of every split it is given and makes no hold-out split, so these
    # DataOptions fields are not options of the command (nor valid recipe keys).
    NOT_OPTIONS = ("seed", "dev_fraction")

    model: str = "minilm-offline"
    """Encoder: a hub id, a local folder, or `minilm-offline`."""
    pool: str = "cls"
    """Pooling over tokens: cls (the [CLS] vector), mean or max (both ignore padding)."""
    layers: str = "-1"
    """Hidden states to pool: -1 (last layer), a list like -4,-3,-2,-1, or all (embeddings + every layer)."""
    combine: str = "concat"
    """How several --layers are combined: concat, mean or sum (`all` + concat keeps a layer axis)."""
    max_length: int = 128
    """Truncate inputs to this many tokens (truncated rows are counted)."""
    batch_size: str = "auto"
    """Rows per batch, or `auto`: a padded-token budget chosen from the model size."""
    dtype: str = "auto"
    """Compute precision: auto (bf16 where the hardware runs it fast, else fp32), fp32, bf16, fp16 (GPU)."""
    store_dtype: str = "float32"
    """Precision of the stored features: float32 or float16 (half the disk)."""
    normalize: bool = False
    """L2-normalise each feature vector (each layer's vector for `--layers all`)."""
    shard_size: int = 2048
    """Rows per shard: the unit of streaming writes and of resume."""
    out: str | None = None
    """Store directory (with --dev/--test: one sub-store per split)."""
    overwrite: bool = False
    """Replace an existing store made with other settings."""
    device: str = "auto"
    """cpu, cuda, cuda:1, mps, or auto."""
    trust_remote_code: bool = False
    """Allow custom code from the model repository (off by default: it runs arbitrary code)."""

    def __post_init__(self) -> None:
        problems = self.data_problems()
        if self.data is None:
            problems.append("--data is required: the file (or hub dataset) whose rows to embed.")
        if not self.out:
            problems.append("--out is required: the directory the feature store is written to.")
        check_choice(problems, self.pool, "pool", POOLS)
        check_choice(problems, self.combine, "combine", COMBINES)
        check_choice(problems, self.dtype, "dtype", DTYPES)
        check_choice(problems, self.store_dtype, "store_dtype", STORE_DTYPES)
        try:
            parse_layers(self.layers)
        except ValueError:
            problems.append(
                f"--layers must be -1, a comma list of distinct layer indices (e.g. -4,-3,-2,-1; 0 = embeddings), "
                f"or all; got {self.layers!r}."
            )
        if str(self.batch_size) != "auto" and (not str(self.batch_size).isdigit() or int(self.batch_size) <= 0):
            problems.append(f"--batch-size must be a positive integer or auto; got {self.batch_size!r}.")
        check_positive(problems, self.max_length, "max_length", allow_none=False)
        check_positive(problems, self.shard_size, "shard_size", allow_none=False)
        check_device(problems, self.device)
        raise_if_problems(problems)

    @property
    def rows_per_batch(self) -> int | None:
        """--batch-size as a number, or None for `auto`."""
        return None if str(self.batch_size) == "auto" else int(self.batch_size)


BEST_METRICS = ("accuracy", "f1", "mcc", "precision", "recall", "roc_auc", "loss")
CLASS_WEIGHTS = ("none", "balanced")


@dataclass(frozen=True)
class FinetuneConfig(DataOptions):
    """`bertkit finetune`: full fine-tuning (BERT paper grid defaults: lr 5e-5, batch 32, 3 epochs, warmup 0.1)."""

    model: str = "minilm-offline"
    """Pretrained encoder to fine-tune: hub id, local folder, or `minilm-offline`."""
    out: str | None = None
    """Run directory: checkpoints, best/ and final/ models, metrics, plots. Re-running resumes it."""
    epochs: int = 3
    """Passes over the training data (BERT paper grid: 2, 3, 4)."""
    lr: float = 5e-5
    """Peak learning rate of AdamW (BERT paper grid: 5e-5, 3e-5, 2e-5; the top of the grid is the default because
    short runs of small encoders such as MiniLM barely move at 2e-5)."""
    batch_size: int = 32
    """Rows per forward pass per process (BERT paper grid: 16, 32); an optimizer step sees
    batch_size x grad_accum x processes rows."""
    grad_accum: int = 1
    """Accumulate gradients over this many batches per optimizer step (a larger effective batch)."""
    warmup_ratio: float = 0.1
    """Share of the optimizer steps with linearly increasing learning rate."""
    weight_decay: float = 0.01
    """AdamW weight decay on weight matrices (never on biases and LayerNorm)."""
    max_grad_norm: float = 1.0
    """Clip the gradient norm to this value (0 turns clipping off)."""
    max_length: int = 128
    """Truncate inputs to this many tokens (batches are padded only to their longest row)."""
    precision: str = "auto"
    """auto (bf16 where the hardware runs it fast, else fp32), fp32, bf16, fp16 (GPU)."""
    eval_every: str = "epoch"
    """Evaluate on dev every N optimizer steps, or `epoch` (the end of every epoch is always evaluated)."""
    early_stopping_patience: int | None = None
    """Stop after this many evaluations without improvement of --metric-for-best."""
    metric_for_best: str = "accuracy"
    """Dev metric that picks the best checkpoint: accuracy, f1, mcc, precision, recall, roc_auc, loss."""
    class_weight: str = "none"
    """`balanced` weighs the loss by inverse class frequency (imbalanced data)."""
    freeze_encoder: bool = False
    """Train only the classification head (the encoder stays frozen)."""
    fast_forward: bool = True
    """BERT/DistilBERT classifiers: compute the last layer only where the logits need it ([CLS]); same logits
    and gradients, ~14% fewer FLOPs on a 6-layer encoder. Off: the model's own `transformers` forward."""
    save_every: int | None = 100
    """Checkpoint every N optimizer steps (and at the end of every epoch) for resuming."""
    overwrite: bool = False
    """Replace an existing --out that holds a different run."""
    trust_remote_code: bool = False
    """Allow custom code from the model repository."""

    def __post_init__(self) -> None:
        problems = self.data_problems()
        if self.data is None:
            problems.append("--data is required: the training file (or hub dataset).")
        if not self.out:
            problems.append("--out is required: the run directory (re-running with the same --out resumes).")
        for name in ("epochs", "lr", "batch_size", "grad_accum", "max_length", "save_every", "early_stopping_patience"):
            check_positive(problems, getattr(self, name), name, allow_none=name in {"save_every", "early_stopping_patience"})
        if math.isfinite(self.warmup_ratio) and not 0.0 <= self.warmup_ratio < 1.0:
            problems.append(f"--warmup-ratio must be in [0, 1); got {self.warmup_ratio}.")
        if self.weight_decay < 0 or self.max_grad_norm < 0:
            problems.append("--weight-decay and --max-grad-norm must be >= 0 (0 turns them off).")
        if self.eval_every != "epoch" and not (str(self.eval_every).isdigit() and int(self.eval_every) > 0):
            problems.append(f"--eval-every must be a positive number of steps or `epoch`; got {self.eval_every!r}.")
        check_choice(problems, self.precision, "precision", DTYPES)
        check_choice(problems, self.metric_for_best, "metric_for_best", BEST_METRICS)
        check_choice(problems, self.class_weight, "class_weight", CLASS_WEIGHTS)
        raise_if_problems(problems)


@dataclass(frozen=True)
class PredictConfig(DataOptions):
    """`bertkit predict`: labels and probabilities from a fine-tuned model (or a saved probe)."""

    # reads one --data file (or --text) and makes no split: these DataOptions fields are not its options.
    NOT_OPTIONS = ("dev", "test", "dev_fraction", "seed")

    model: str | None = None
    """Fine-tuned model folder (e.g. runs/sst2/best)."""
    probe: str | None = None
    """A probe saved by `bertkit probe` (instead of --model)."""
    text: tuple[str, ...] = ()
    """Sentences to classify (repeatable) instead of --data."""
    out: str | None = None
    """CSV file for the predictions (written atomically)."""
    batch_size: int = 64
    """Rows per inference batch (rows are sorted by length; output keeps the input order)."""
    max_length: int = 128
    """Truncate inputs to this many tokens."""
    precision: str = "fp32"
    """fp32, bf16, fp16 (GPU) or auto."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", tuple(self.text or ()))
        problems = self.data_problems()
        if (self.model is None) == (self.probe is None):
            problems.append("Give exactly one of --model (a fine-tuned folder) or --probe (a saved probe).")
        if bool(self.text) == (self.data is not None):
            problems.append("Give exactly one of --text (repeatable) or --data (a file to label).")
        problems += _blank_text_problems(self.text)
        check_positive(problems, self.batch_size, "batch_size", allow_none=False)
        check_positive(problems, self.max_length, "max_length", allow_none=False)
        check_choice(problems, self.precision, "precision", DTYPES)
        raise_if_problems(problems)


def _blank_text_problems(texts: tuple[str, ...]) -> list[str]:
    """--text values that are empty or only invisible characters, refused as the --data path refuses empty cells."""
    from bertkit.data import is_blank_text  # data.py owns what counts as an empty text

    blank = [str(i) for i, text in enumerate(texts, start=1) if is_blank_text(text)]
    if not blank:
        return []
    return [f"--text number {', '.join(blank)} (of {len(texts)}) is empty or only whitespace/invisible characters; "
            f"a model cannot classify an empty text. Drop it or pass a sentence."]


@dataclass(frozen=True)
class EvaluateConfig(DataOptions):
    """`bertkit evaluate`: metrics of a fine-tuned model on labelled data."""

    # reads one --data file (or --text) and makes no split: these DataOptions fields are not its options.
    NOT_OPTIONS = ("dev", "test", "dev_fraction", "seed")

    model: str | None = None
    """Fine-tuned model folder (e.g. runs/sst2/best)."""
    out: str | None = None
    """Run directory for metrics.json, predictions.csv and the confusion-matrix PNG."""
    overwrite: bool = False
    """Replace an --out that holds an evaluate run with other options (swapped in once the new one is complete)."""
    batch_size: int = 64
    """Rows per inference batch."""
    max_length: int = 128
    """Truncate inputs to this many tokens."""
    precision: str = "fp32"
    """fp32, bf16, fp16 (GPU) or auto."""

    def __post_init__(self) -> None:
        problems = self.data_problems()
        if self.model is None:
            problems.append("--model is required: a fine-tuned model folder (e.g. runs/sst2/best).")
        if self.data is None:
            problems.append("--data is required: a labelled file (pass --label-column if it is not `label`).")
        check_positive(problems, self.batch_size, "batch_size", allow_none=False)
        check_positive(problems, self.max_length, "max_length", allow_none=False)
        check_choice(problems, self.precision, "precision", DTYPES)
        raise_if_problems(problems)


@dataclass(frozen=True)
class ProbeConfig(DataOptions):
    """`bertkit probe`: logistic-regression probes on frozen features, per pooling and layer, with baselines."""

    features: str | None = None
    """A store written by `bertkit embed` (with --dev/--test: its split directory). Instead of --data."""
    model: str | None = None
    """Encoder to extract features with (default minilm-offline); with --features, it must match the store's."""
    pool: str | None = None
    """Poolings to compare, comma-separated: cls, mean, max (e.g. cls,mean). Default: cls, or the store's."""
    layers: str | None = None
    """Layers to probe one by one: -1 (last), a list like 0,3,6, or all (embeddings + every layer).
    Default: -1, or every layer in the store."""
    max_length: int = 128
    """Truncate inputs to this many tokens when extracting features."""
    batch_size: int = 64
    """Rows per batch when extracting features."""
    dtype: str = "auto"
    """Extraction precision: auto (bf16 only where the hardware runs it fast), fp32, bf16, fp16 (GPU)."""
    normalize: bool = False
    """L2-normalise features before the probe (extraction option)."""
    C: float | None = None
    """Inverse regularisation strength of the logistic regression (default 1.0 without --cv)."""
    cv: int | None = None
    """Choose C by K-fold cross-validation over --C-grid (stratified folds, in data order)."""
    C_grid: str | None = None
    """C values for --cv, comma-separated, or `alammar` (linspace(0.0001, 100, 20)). Default: 0.001..10."""
    class_weight: str = "none"
    """`balanced` weighs classes by inverse frequency (imbalanced data)."""
    repeats: int = 0
    """Refit the best cell N times on random 80% train subsets; report mean ± std."""
    baselines: bool = True
    """Also score majority class, TF-IDF + LR on the raw text, and the same encoder with random weights."""
    out: str | None = None
    """Run directory: config.json, metrics.json, plots, the saved probe and the cached features."""
    overwrite: bool = False
    """Replace an --out that holds a probe run with other options (swapped in once the new one is complete)."""
    trust_remote_code: bool = False
    """Allow custom code from the model repository."""

    def __post_init__(self) -> None:
        problems = self.data_problems()
        if (self.features is None) == (self.data is None):
            problems.append("Give exactly one of --features (a `bertkit embed` store) or --data (text to extract from).")
        for pool in self.pools:
            check_choice(problems, pool, "pool", POOLS)
        if len(set(self.pools)) != len(self.pools) or not self.pools:
            problems.append(f"--pool must list distinct poolings (cls, mean, max), e.g. cls,mean; got {self.pool!r}.")
        try:
            parse_layers(self.layers if self.layers is not None else "-1")
        except ValueError:
            problems.append(f"--layers must be -1, a comma list of distinct layer indices (0 = embeddings), or all; "
                            f"got {self.layers!r}.")
        for name in ("max_length", "batch_size", "C"):
            check_positive(problems, getattr(self, name), name, allow_none=name == "C")
        if self.cv is not None and self.cv < 2:
            problems.append(f"--cv must be at least 2 (folds); got {self.cv}.")
        if self.C is not None and self.cv is not None:
            problems.append("--C fixes the regularisation and --cv searches for it; give one of them.")
        if self.C_grid is not None:
            if self.cv is None:
                problems.append("--C-grid is searched with cross-validation; add --cv K (e.g. --cv 5).")
            try:
                _ = self.c_values
            except ValueError:
                problems.append(f"--C-grid must be positive finite numbers separated by commas (e.g. 0.01,0.1,1), or "
                                f"alammar; got {self.C_grid!r}.")
        check_choice(problems, self.class_weight, "class_weight", CLASS_WEIGHTS)
        check_choice(problems, self.dtype, "dtype", DTYPES)
        if self.repeats < 0:
            problems.append(f"--repeats must be 0 or more; got {self.repeats}.")
        raise_if_problems(problems)

    @property
    def pools(self) -> list[str]:
        """--pool as a list (default: cls)."""
        return [p.strip() for p in str(self.pool or "cls").split(",") if p.strip()]

    @property
    def c_values(self) -> list[float] | None:
        """--C-grid as numbers (None: the default grid). Raises ValueError on a bad grid."""
        if self.C_grid is None:
            return None
        if self.C_grid.strip().lower() == "alammar":
            return [0.0001 + i * (100 - 0.0001) / 19 for i in range(20)]
        values = [float(v) for v in self.C_grid.split(",") if v.strip()]
        if not values or any(not math.isfinite(v) or v <= 0 for v in values):
            raise ValueError(self.C_grid)
        return values


BENCH_PROTOCOLS = ("standard", "paper")
BENCH_QUALITY = ("none", "probe", "finetune", "probe,finetune")


@dataclass(frozen=True)
class BenchConfig(DataOptions):
    """`bertkit bench`: speed, size, memory and optional quality of several encoders, side by side."""

    models: str | None = None
    """Comma-separated hub ids or folders, e.g. `distilbert-base-uncased,bert-base-uncased`."""
    preset: str | None = None
    """A named comparison instead of --models: `distilbert-vs-bert` (exact default shapes, random init, offline)."""
    random_init: bool = False
    """Build --models from their configs with random weights (speed/size only; quality is meaningless)."""
    protocol: str = "standard"
    """`standard`: latency, throughput, training step; `paper`: CPU, batch 1, one full pass over the data."""
    batch_sizes: str = "1,8,32"
    """Comma-separated batch sizes for the throughput measurement."""
    max_length: int = 128
    """Truncation length, and the width of static padding."""
    train_batch_size: int = 32
    """Batch size of the timed training step (0 skips it)."""
    warmup: int = 1
    """Untimed warm-up iterations per model before each measurement."""
    min_iters: int = 3
    """Minimum timed iterations per measurement and model."""
    min_seconds: float = 2.0
    """Minimum timed seconds per measurement and model."""
    rounds: int = 2
    """Chunks each measurement is split into, alternating models (A B A B) so drift affects both."""
    dtype: str = "auto"
    """Compute dtype: auto (fp32 on CPUs without native bf16), fp32, bf16, fp16 (GPU)."""
    device: str = "auto"
    """cpu, cuda, mps or auto."""
    threads: int | None = None
    """torch intra-op threads (default: torch's choice)."""
    quality: str = "none"
    """Also score each model with `bertkit probe` and/or `bertkit finetune` (none, probe, finetune, probe,finetune)."""
    quality_args: str | None = None
    """Extra arguments passed unchanged to every quality command, e.g. "--epochs 1"."""
    out: str | None = None
    """Output directory for bench.json, bench.md and bench.png."""
    overwrite: bool = False
    """Replace an --out that holds a bench run with other options (swapped in once the new one is complete)."""
    trust_remote_code: bool = False
    """Allow custom code from the model repository (off by default: it runs arbitrary code)."""

    def __post_init__(self) -> None:
        problems = self.data_problems()
        if (self.models is None) == (self.preset is None):
            problems.append("Give exactly one of --models (comma-separated names) or --preset (e.g. distilbert-vs-bert).")
        if self.preset is not None and self.random_init:
            problems.append("--random-init goes with --models; --preset already builds random-init models.")
        if self.models is not None and not self.model_list:
            problems.append("--models is empty; pass comma-separated names, e.g. --models distilbert-base-uncased,bert-base-uncased.")
        check_choice(problems, self.protocol, "protocol", BENCH_PROTOCOLS)
        check_choice(problems, self.dtype, "dtype", DTYPES)
        check_choice(problems, ",".join(self.quality_kinds) or "none", "quality", BENCH_QUALITY)
        try:
            sizes = self.batch_size_list
            if not sizes or min(sizes) <= 0:
                raise ValueError
        except ValueError:
            problems.append(f"--batch-sizes must be comma-separated positive integers, e.g. 1,8,32; got {self.batch_sizes!r}.")
        for name in ("max_length", "min_iters", "rounds", "threads"):
            check_positive(problems, getattr(self, name), name, allow_none=name == "threads")
        if self.min_seconds < 0 or self.warmup < 0 or self.train_batch_size < 0:
            problems.append("--min-seconds, --warmup and --train-batch-size must be >= 0.")
        if self.quality_kinds and self.data is None:
            problems.append("--quality needs labelled --data (and usually --dev); pass them, or drop --quality.")
        check_device(problems, self.device, check_available=self.protocol != "paper")  # paper runs on the CPU
        problems += quality_args_problems([k for k in self.quality_kinds if k in QUALITY_COMMANDS], self.quality_args)
        raise_if_problems(problems)

    @property
    def model_list(self) -> list[str]:
        return [m.strip() for m in (self.models or "").split(",") if m.strip()]

    @property
    def batch_size_list(self) -> tuple[int, ...]:
        return tuple(int(v) for v in str(self.batch_sizes).split(",") if v.strip())

    @property
    def quality_kinds(self) -> list[str]:
        order = ("probe", "finetune")
        asked = {q.strip() for q in str(self.quality).split(",") if q.strip() and q.strip() != "none"}
        return [q for q in order if q in asked] + sorted(asked - set(order))


QUALITY_COMMANDS = ("probe", "finetune")
CLI_ONLY_FLAGS = {"--quiet": False, "-q": False, "--json": False, "--recipe": True}
"""Options every command has that are not config fields -> whether they take a value."""
SET_BY_BENCH = ("--model", "--out", "--features", "--data", "--dev", "--test")
"""Quality-command options `bertkit bench` sets itself, per model (a --quality-args copy would override them)."""


def command_flags(config_cls: type) -> dict[str, bool]:
    """Every option of the command configured by `config_cls` -> whether it takes a value.

    Derived from the config (a field per option; a bool that defaults to true also has --no-NAME) plus
    CLI_ONLY_FLAGS; tests check this against the real Typer command.
    """
    result = dict(CLI_ONLY_FLAGS)
    option_names = option_fields(config_cls)
    for f in fields(config_cls):
        if f.name not in option_names:
            continue
        is_bool = field_type(f)[0] is bool
        result[flag(f.name)] = not is_bool
        if is_bool and f.default is True:
            result["--no-" + flag(f.name)[2:]] = False
    return result


def quality_args_problems(kinds: list[str], quality_args: str | None) -> list[str]:
    """Problems of `bench --quality-args` for the quality commands `kinds`, found before any benchmark runs."""
    if quality_args is None:
        return []
    if not kinds:
        return ["--quality-args is passed to the --quality commands, but --quality is none, so it would be ignored. "
                "Add --quality probe (or finetune), or drop --quality-args."]
    try:
        args = shlex.split(quality_args)
    except ValueError as exc:
        return [f"--quality-args {quality_args!r} cannot be split into arguments ({exc}). Balance the quotes, e.g. "
                f"--quality-args \"--epochs 1 --lr 3e-5\"."]
    problems: list[str] = []
    for kind in kinds:
        problems += _command_args_problems(kind, args)
    return problems


def _command_args_problems(kind: str, args: list[str]) -> list[str]:
    options = command_flags(config_for_command(kind))
    problems, unknown, i = [], [], 0
    while i < len(args):
        token = args[i]
        name = token.split("=", 1)[0]
        if name not in options:
            close = difflib.get_close_matches(name, options, n=1)
            unknown.append(f"{token!r}" + (f" (did you mean {close[0]}?)" if close else ""))
            if token.startswith("-") and "=" not in token and i + 1 < len(args) and not args[i + 1].startswith("-"):
                i += 1  # an unknown option's value is not a second problem
        elif name in SET_BY_BENCH:
            problems.append(f"--quality-args: {name} is set by `bertkit bench` itself for each model; pass the "
                            f"data options to bench directly and drop {name} from --quality-args.")
        elif options[name] and "=" not in token:
            if i + 1 >= len(args):
                problems.append(f"--quality-args: {name} needs a value (e.g. {name} 1).")
            i += 1
        i += 1
    if unknown:
        listed = ", ".join(sorted(o for o in options if o.startswith("--")))
        problems.insert(0, f"--quality-args: `bertkit {kind}` has no option {', '.join(unknown)} (the arguments go "
                           f"to every --quality command). Its options: {listed}.")
    return problems


# ---------------------------------------------------------------- recipes


def recipe_path(name_or_path: str) -> Path:
    """A recipe file: an existing path, or the name of a file in `recipes/` (with or without `.toml`)."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    candidate = RECIPES_DIR / (name_or_path if name_or_path.endswith(".toml") else f"{name_or_path}.toml")
    if candidate.is_file():
        return candidate
    known = ", ".join(sorted(p.stem for p in RECIPES_DIR.glob("*.toml"))) or "(none found)"
    raise UserError(
        f"Recipe {name_or_path!r} not found: it is neither a file nor a recipe name. "
        f"Known recipes: {known}. Pass --recipe with a path to a .toml file or one of those names."
    )


def load_recipe(name_or_path: str, command: str, config_cls: type) -> dict[str, Any]:
    """The `[command]` table of a recipe, keys normalised to field names; unknown keys are an error."""
    path = recipe_path(name_or_path)
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"Recipe {path} is not valid TOML: {exc}. Fix the file or pick another recipe.") from None
    if command not in document:
        tables = ", ".join(f"[{t}]" for t in document) or "none"
        raise UserError(
            f"Recipe {path} has no [{command}] table (it has: {tables}); it is for another command. "
            f"Run `bertkit {next(iter(document), command)} --recipe {name_or_path}` or add a [{command}] table."
        )
    values = {key.replace("-", "_"): value for key, value in document[command].items()}
    valid = option_fields(config_cls)
    unknown = sorted(set(values) - valid)
    if unknown:
        raise UserError(
            f"Recipe {path} [{command}] has unknown keys: {', '.join(unknown)}. "
            f"Valid keys are the options of `bertkit {command}`: {', '.join(sorted(flag(v)[2:] for v in valid))}."
        )
    return check_values(config_cls, values, f"Recipe {path} [{command}] has a value of the wrong type")


def merge_config(config_cls: type, defaults: dict[str, Any], explicit: dict[str, Any], recipe: dict[str, Any]):
    """Build a config with precedence: explicit CLI flag > recipe value > default."""
    values = {f.name: defaults[f.name] for f in fields(config_cls) if f.name in defaults}
    values.update(recipe)
    values.update(explicit)
    try:
        return config_cls(**values)
    except TypeError as exc:  # a recipe value of the wrong shape reaches the dataclass
        raise UserError(f"Invalid configuration: {exc}. Check the recipe's value types.") from None


def config_dict(config: Any) -> dict[str, Any]:
    """The resolved config as a plain dict (for config.json in a run directory)."""
    return dataclasses.asdict(config)


def config_for_command(command: str) -> type:
    """The config class of a command by convention: `finetune` -> `FinetuneConfig`."""
    cls = globals().get(f"{command.capitalize()}Config")
    if cls is None or not dataclasses.is_dataclass(cls):
        raise UserError(f"No command named {command!r} takes recipes. Commands: {', '.join(recipe_commands())}.")
    return cls


def recipe_commands() -> list[str]:
    """Commands that have a config class (and therefore accept --recipe)."""
    return sorted(
        name[: -len("Config")].lower()
        for name, value in globals().items()
        if name.endswith("Config") and dataclasses.is_dataclass(value) and name != "DataOptions"
    )


@dataclass(frozen=True)
class RecipeInfo:
    """One recipe file: its name, the commands it configures, and its header comment."""

    name: str
    path: Path
    commands: tuple[str, ...]
    summary: str
    result: str


def describe_recipe(path: Path) -> RecipeInfo:
    """Name, tables and header comment of a recipe (`# Result:` line = the measured result)."""
    text = path.read_text(encoding="utf-8")
    comments = [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")]
    result = next((c.split(":", 1)[1].strip() for c in comments if c.lower().startswith("result:")), "")
    summary = next((c for c in comments if c and not c.lower().startswith(("result:", "run:", "$"))), "")
    try:
        tables = tuple(tomllib.loads(text))
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"Recipe {path} is not valid TOML: {exc}.") from None
    return RecipeInfo(path.stem, path, tables, summary, result)


def list_recipes() -> list[RecipeInfo]:
    """Every recipe shipped in recipes/, sorted by name."""
    return [describe_recipe(p) for p in sorted(RECIPES_DIR.glob("*.toml"))]
