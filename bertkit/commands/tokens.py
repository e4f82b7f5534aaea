"""`bertkit tokens`: how a tokenizer sees a sentence ([CLS]/[SEP], ids, mask), or the token-length profile of a
dataset with truncation and padding waste (`bertkit.encoding.report` computes it)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bertkit.data.options import DataOptions, config_problems
from bertkit.encoding.reading import max_length_option
from bertkit.errors import raise_if_problems
from bertkit.models.compute import TRUST_HELP
from bertkit.models.metadata import read_as_saved
from bertkit.models.preflight import check_inputs
from bertkit.options import DATA, MODEL, OUTPUT, Config, config_dict, group, option, overwrite_option

if TYPE_CHECKING:
    from bertkit.encoding.report import LengthReport, SentenceTokens


@dataclass(frozen=True)
class TokensConfig(Config):
    """`bertkit tokens`: how a tokenizer sees a sentence, or the token-length profile of a dataset."""

    ADVANCED_OPTIONS = ("trust_remote_code",)

    model: str = option("minilm-offline", "Model (tokenizer): a hub id, a local folder, or `minilm-offline`.",
                        panel=MODEL)
    inputs: DataOptions = group(DataOptions)
    text: str | None = option(None, "A sentence to show token by token (instead of --data).", panel=DATA)
    text_pair: str | None = option(None, "Second sentence, encoded as a pair with --text.", panel=DATA)
    max_length: int | None = max_length_option()
    batch_size: int = option(32, "Batch size for the padding-waste estimate.", above=0)
    out: str | None = option(None, "Run directory for tokens.json and the histogram PNG.", panel=OUTPUT)
    overwrite: bool = overwrite_option("a tokens run")
    trust_remote_code: bool = option(False, TRUST_HELP, panel=MODEL)

    def __post_init__(self) -> None:
        problems = config_problems(self)
        if (self.text is None) == (self.inputs.data is None):
            problems.append("Give exactly one of --text (a sentence) or --data (a dataset).")
        if self.text_pair is not None and self.text is None:
            problems.append("--text-pair needs --text.")
        raise_if_problems(problems)


@dataclass(frozen=True)
class TokensOutputs:
    """--out: the length report and the histogram."""

    report: str
    histogram: str


@dataclass(frozen=True)
class TokensResult:
    """A sentence's tokens (`sentence`), or every split's length report (`reports`) and where it went."""

    sentence: SentenceTokens | None = None
    """--text: tokens, ids, mask, token types and special positions (`encoding.report.explain_sentence`)."""
    model: str | None = None
    max_length: int | None = None
    model_limit: int | None = None
    reports: tuple[LengthReport, ...] = ()
    """Per split: rows, length percentiles, truncated rows, suggested max length, padding waste, and the length
    counts the histogram draws."""
    notes: tuple[str, ...] = ()
    outputs: TokensOutputs | None = None

    @property
    def splits(self) -> list[dict[str, object]]:
        """The reports as tokens.json and --json write them (`splits`): without the length counts."""
        return [{k: v for k, v in vars(r).items() if k != "length_counts"} for r in self.reports]

    def to_json(self) -> dict[str, object]:
        """The length report's --json object (tokens.json's keys, then the files written)."""
        outputs = dataclasses.asdict(self.outputs) if self.outputs is not None else {}
        return {"model": self.model, "max_length": self.max_length, "model_limit": self.model_limit,
                "splits": self.splits, "outputs": outputs}


def run(cfg: TokensConfig) -> TokensResult:
    """The sentence's tokens for --text, else the length report of every split (tokens.json + token_lengths.png in
    --out when given)."""
    check_inputs(cfg, need_labels=False, models=(cfg.model,), data_fields=())  # before transformers is imported
    cfg = read_as_saved(cfg)  # truncation and padding waste at the window the model records (else 128)
    if cfg.inputs.data is not None:  # a refused --out (read-only look), then the data files, as the report orders them
        from bertkit.io import ownership, rundir, trail

        if cfg.out:
            rundir.inspect_run_dir(cfg.out, "tokens", overwrite=cfg.overwrite,
                                   compare=trail.config_compare(config_dict(cfg)),
                                   inputs=ownership.input_paths(cfg))
        check_inputs(cfg, need_labels=cfg.inputs.label_column is not None)
    from bertkit.models import loading

    tokenizer = loading.load_tokenizer(cfg.model, cfg.trust_remote_code)
    if cfg.text is not None:
        from bertkit.encoding.report import explain_sentence

        return TokensResult(sentence=explain_sentence(tokenizer, cfg.text, cfg.text_pair))
    return _length_reports(tokenizer, cfg)


def _length_reports(tokenizer: Any, cfg: TokensConfig) -> TokensResult:
    from bertkit import plots
    from bertkit.data.splits import load_splits
    from bertkit.encoding.report import length_report, long_text_note
    from bertkit.io import atomic, ownership, rundir, trail
    from bertkit.models import loading

    plan = rundir.inspect_run_dir(cfg.out, "tokens", overwrite=cfg.overwrite,
                                  compare=trail.config_compare(config_dict(cfg)),
                                  inputs=ownership.input_paths(cfg)) if cfg.out else None  # read-only, early
    model_config = loading.load_config(cfg.model, cfg.trust_remote_code)
    limit = loading.model_max_length(tokenizer, model_config)
    loading.check_max_length(cfg.max_length, tokenizer, model_config, cfg.model,
                             pair=cfg.inputs.text_pair_column is not None)
    splits = load_splits(cfg.inputs, need_labels=cfg.inputs.label_column is not None, need_dev=False)
    named = [(name, ds) for name, ds in (("train", splits.train), ("dev", splits.dev), ("test", splits.test)) if ds]
    reports = [length_report(tokenizer, ds, name, cfg.max_length, cfg.batch_size, limit, cfg.inputs.seed,
                             cfg.inputs.cache_dir)
               for name, ds in named]
    notes = (*splits.notes, *[note for r in reports if (note := long_text_note(r, cfg.max_length, limit))])
    result = TokensResult(model=cfg.model, max_length=cfg.max_length, model_limit=limit, reports=tuple(reports),
                          notes=notes)
    if plan is not None:
        run_dir = plan.claim()
        trail.write_run_config(run_dir.path, "tokens", config_dict(cfg),
                               data_fingerprints={name: ds.fingerprint for name, ds in named})
        atomic.write_json_atomic(run_dir.path / "tokens.json", {"model": cfg.model, "max_length": cfg.max_length,
                                                                "model_limit": limit, "splits": result.splits})
        plots.length_histogram({r.split: r.length_counts for r in reports}, cfg.max_length,
                               run_dir.path / "token_lengths.png", f"Token lengths ({cfg.model})")
        run_dir.commit()
        result = dataclasses.replace(result, outputs=TokensOutputs(str(run_dir.out / "tokens.json"),
                                                                   str(run_dir.out / "token_lengths.png")))
    return result
