"""`bertkit tokens`: the tokenizer made visible — one sentence token by token, or a dataset's length profile."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from bertkit.data.dataset import TextDataset
from bertkit.data.splits import load_splits
from bertkit.encoding.batches import sorted_batches
from bertkit.encoding.encode import encode_for
from bertkit.encoding.longtext import default_stride
from bertkit.io import atomic, ownership, rundir, trail


def explain_sentence(tokenizer: Any, text: str, pair: str | None = None) -> dict[str, Any]:
    """Tokens, ids, special-token positions, attention mask and segment ids for one sentence (or pair)."""
    enc = tokenizer(text, pair, return_token_type_ids=True, return_attention_mask=True)
    ids = enc["input_ids"]
    tokens = tokenizer.convert_ids_to_tokens(ids)
    specials = {
        name: [i for i, t in enumerate(ids) if t == token_id]
        for name, token_id in (
            ("cls", tokenizer.cls_token_id),
            ("sep", tokenizer.sep_token_id),
            ("pad", tokenizer.pad_token_id),
        )
        if token_id is not None
    }
    return {
        "text": text,
        "text_pair": pair,
        "tokens": tokens,
        "input_ids": ids,
        "attention_mask": enc["attention_mask"],
        "token_type_ids": enc.get("token_type_ids"),
        "special_positions": {k: v for k, v in specials.items()},
        "n_tokens": len(ids),
    }


@dataclass
class LengthReport:
    """Token-length statistics of one split and the padding each batching strategy would waste."""

    split: str
    source: str
    rows: int
    min: int
    p50: float
    p95: float
    p99: float
    max: int
    mean: float
    truncated: int
    truncated_share: float
    suggested_max_length: int
    waste_static: float
    """Share of padded token slots that are padding when every row is padded to --max-length."""
    waste_dynamic_random: float
    """... when each batch (random order) is padded to its longest row."""
    waste_dynamic_sorted: float
    """... when batches are formed from length-sorted rows (what bertkit does)."""
    label_counts: dict[str, int] | None
    lengths: list[int]


def padding_waste(lengths: np.ndarray, batches: list[np.ndarray]) -> float:
    """Share of the padded tensor's slots that hold padding, for the given batches."""
    real = sum(int(lengths[b].sum()) for b in batches)
    padded = sum(int(lengths[b].max()) * len(b) for b in batches)
    return 1.0 - real / padded if padded else 0.0


def suggest_max_length(full_lengths: np.ndarray, limit: int) -> int:
    """The smallest multiple of 8 covering 99% of rows, capped at the model's limit."""
    p99 = float(np.percentile(full_lengths, 99))
    return int(min(limit, max(8, int(np.ceil(p99 / 8.0)) * 8)))


def length_report(
    tokenizer: Any, dataset: TextDataset, split: str, max_length: int, batch_size: int, model_limit: int, seed: int
) -> LengthReport:
    """Token-length profile of `dataset` at `max_length` (truncation, suggestion, padding waste)."""
    encoded = encode_for(tokenizer, dataset, max_length).encoded
    full, cut = encoded.full_lengths, encoded.lengths
    rng = np.random.default_rng(seed)
    random_order = rng.permutation(len(cut))
    random_batches = [random_order[i : i + batch_size] for i in range(0, len(cut), batch_size)]
    static = 1.0 - float(cut.sum()) / (len(cut) * max_length)
    labels = None
    if dataset.labels is not None:
        counts: dict[str, int] = {}
        for label in dataset.labels:
            counts[str(label)] = counts.get(str(label), 0) + 1
        labels = dict(sorted(counts.items()))
    return LengthReport(
        split=split,
        source=dataset.source,
        rows=len(full),
        min=int(full.min()),
        p50=float(np.percentile(full, 50)),
        p95=float(np.percentile(full, 95)),
        p99=float(np.percentile(full, 99)),
        max=int(full.max()),
        mean=float(full.mean()),
        truncated=encoded.n_truncated,
        truncated_share=encoded.n_truncated / len(full),
        suggested_max_length=suggest_max_length(full, model_limit),
        waste_static=static,
        waste_dynamic_random=padding_waste(cut, random_batches),
        waste_dynamic_sorted=padding_waste(cut, sorted_batches(cut, batch_size)),
        label_counts=labels,
        lengths=full.tolist(),
    )


CUT_SHARE_TO_SUGGEST = 0.05
"""From this share of cut rows on, the report suggests a way to keep the cut tokens."""


def long_text_note(report: LengthReport, max_length: int, model_limit: int) -> str | None:
    """A suggestion when many rows of a split are cut: a larger --max-length where the model allows one that
    covers them, else reading whole texts in windows (--long-text chunk) or keeping both ends (--truncation)."""
    if report.rows == 0 or report.truncated_share < CUT_SHARE_TO_SUGGEST:
        return None
    cut = (f"{report.split}: {report.truncated:,} of {report.rows:,} rows ({report.truncated_share:.1%}) are longer "
           f"than --max-length {max_length} and get cut.")
    if report.suggested_max_length > max_length and report.p99 <= model_limit:
        return f"{cut} --max-length {report.suggested_max_length} covers 99% of them (model limit {model_limit})."
    return (f"{cut} They are longer than the model reads at once ({model_limit} tokens): keep every token with "
            f"`--long-text chunk --stride {default_stride(max_length)}` (embed, predict, evaluate: overlapping windows, "
            f"pooled), or keep both ends with `--truncation head+tail`.")


# ---------------------------------------------------------------- the `bertkit tokens` command


def run_tokens(cfg: Any) -> dict[str, Any]:
    """`bertkit tokens`: {"sentence": explain_sentence(...)} for --text, else the length report of every split
    (written to --out as tokens.json + token_lengths.png when given)."""
    from bertkit.models import loading as modeling

    tokenizer = modeling.load_tokenizer(cfg.model, cfg.trust_remote_code)
    if cfg.text is not None:
        return {"sentence": explain_sentence(tokenizer, cfg.text, cfg.text_pair)}
    return length_reports(tokenizer, cfg)


def length_reports(tokenizer: Any, cfg: Any) -> dict[str, Any]:
    """The token-length report of --data/--dev/--test; `reports` (LengthReport objects) for the caller's table."""
    from bertkit import plots
    from bertkit.models import loading as modeling

    plan = rundir.inspect_run_dir(cfg.out, "tokens", overwrite=cfg.overwrite, compare=trail.config_compare(vars(cfg)),
                                  inputs=ownership.input_paths(cfg)) if cfg.out else None  # read-only, early
    model_config = modeling.load_config(cfg.model, cfg.trust_remote_code)
    limit = modeling.model_max_length(tokenizer, model_config)
    modeling.check_max_length(cfg.max_length, tokenizer, model_config, cfg.model, pair=cfg.text_pair_column is not None)
    splits = load_splits(cfg, need_labels=cfg.label_column is not None, need_dev=False)
    named = [(name, ds) for name, ds in (("train", splits.train), ("dev", splits.dev), ("test", splits.test)) if ds]
    reports = [length_report(tokenizer, ds, name, cfg.max_length, cfg.batch_size, limit, cfg.seed) for name, ds in named]
    summary: dict[str, Any] = {"model": cfg.model, "max_length": cfg.max_length, "model_limit": limit,
                               "splits": [{k: v for k, v in vars(r).items() if k != "lengths"} for r in reports]}
    if plan is not None:
        run = plan.claim()
        trail.write_run_config(run.path, "tokens", vars(cfg), data_fingerprints={name: ds.fingerprint for name, ds in named})
        atomic.write_json_atomic(run.path / "tokens.json", summary)
        plots.length_histogram({r.split: r.lengths for r in reports}, cfg.max_length, run.path / "token_lengths.png",
                               f"Token lengths ({cfg.model})")
        run.commit()
        summary["outputs"] = {"report": str(run.out / "tokens.json"), "histogram": str(run.out / "token_lengths.png")}
    suggestions = [note for r in reports if (note := long_text_note(r, cfg.max_length, limit))]
    return {**summary, "reports": reports, "notes": [*splits.notes, *suggestions]}
