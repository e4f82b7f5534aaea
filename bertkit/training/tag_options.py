"""The tagging group of a fine-tuning run (`TaggingOptions`: --tag-scheme, --label-all-pieces; a tagger's --stride is
in its reading group, `encoding.reading.WindowOptions`) and the tagging checks (`tagging_problems`), declared once
for every command that fine-tunes a tagger (`bertkit finetune`, `bertkit sweep`, whose trials are fine-tuning runs,
and `bertkit distill` with a tagging teacher), and how a tagger reads its words (`TAGGER_WORD_POOL`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bertkit.data.tagged import may_be_tagged
from bertkit.data.tagscheme import tag_scheme_option
from bertkit.encoding.reading import Reading
from bertkit.options import MODEL, all_fields, flag, option, value

TAGGER_WORD_POOL = "first"
"""How a tagger reads a word: its first piece's logits (it is trained there), recorded in its reading."""
NOT_FOR_WORDS = ("text_pair_column", "label_sep", "dev_fraction", "task_preset", "metric", "calibrate", "threshold",
                 "truncation")
"""The options the tagging path does not read (given: refused, naming them)."""


@dataclass(frozen=True)
class TaggingOptions:
    """How a tagger (fine-tuning on tagged data, `bertkit.training.tagging`) reads its tags and is taught them."""

    ADVANCED_OPTIONS = ("tag_scheme", "label_all_pieces")

    tag_scheme: str = tag_scheme_option()
    label_all_pieces: bool = option(False, "Tagged data: learn every word piece's tag, not only each word's first "
                                    "piece's (run_ner's --label_all_tokens; a B- word's later pieces learn its I- "
                                    "tag). Scores are per word, from the first piece, either way.", panel=MODEL)


def tagging_problems(cfg: Any) -> list[str]:
    """The tagging checks of a fine-tuning run's config: on tagged data (`cfg.reads_words`) the tagging path's
    refusals (`word_problems`); on rows of text, any tagging option given."""
    if cfg.reads_words:
        return word_problems(cfg)
    given = {"tag_scheme": (cfg.tagging.tag_scheme, "auto"), "label_all_pieces": (cfg.tagging.label_all_pieces, False),
             "stride": (cfg.reading.stride, None)}
    return [f"{flag(name)} applies to tagged data (one tag per word); {cfg.inputs.data} is read as rows of text. Pass "
            f"a CoNLL-style file (.iob2, .conll) or --task tags, or drop {flag(name)}."
            for name, (asked, default) in given.items() if asked != default]


def word_problems(cfg: Any) -> list[str]:
    """The tagging path's refusals: a tagged --dev is needed (no hold-out is made), both look tagged, and the
    options it does not read are not given."""
    problems = []
    data = cfg.inputs
    if data.dev is None:
        problems.append("Fine-tuning a tagger needs --dev (tagged dev data: a file, or a split of the hub dataset "
                        "--data); no dev split is held out of tagged data. Pass --dev dev.iob2 (hub: --dev "
                        "validation).")
    for path in dict.fromkeys((data.data, data.dev)):
        if path is not None and not may_be_tagged(path):
            problems.append(f"--task tags reads one tag per word, but {path} does not look like a tagged corpus. "
                            f"Valid: a CoNLL-style column file (a word and its tag per line, a blank line between "
                            f"sentences), JSON lines or parquet with token and tag lists, or a hub dataset. Pass "
                            f"such data, or drop --task tags to fine-tune on rows of text.")
    defaults = {f.name: f.default for f in all_fields(type(cfg))}
    defaults["truncation"] = Reading.truncation  # as a --model records it: head, what windows of words keep
    given = [name for name in NOT_FOR_WORDS if value(cfg, name) not in (defaults[name], None)
             and (value(cfg, name) or defaults[name])]
    return problems + [f"{flag(name)} does not apply to fine-tuning on tagged data (one tag per word). Drop "
                       f"{flag(name)}." for name in given]
