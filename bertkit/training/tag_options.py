"""A fine-tuning run's options on rows of text or on tagged data: the tagging options (--tag-scheme,
--label-all-pieces, --stride) and their checks (`TaggingOptions`), declared once for every command that fine-tunes a tagger
(`bertkit finetune`, and `bertkit sweep`, whose trials are fine-tuning runs: `FinetuneRunOptions`), and how a tagger
reads its words (`TAGGER_WORD_POOL`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from bertkit.data.options import reads_tagged
from bertkit.data.tagged import may_be_tagged
from bertkit.data.tagscheme import TagSchemeOption
from bertkit.encoding.reading import Reading
from bertkit.errors import UserError, raise_if_problems
from bertkit.options import flag
from bertkit.training.options import FinetuneOptions, TagTrainingOptions

TAGGER_WORD_POOL = "first"
"""How a tagger reads a word: its first piece's logits (it is trained there), recorded in its reading."""


@dataclass(frozen=True)
class TaggingOptions(TagSchemeOption, TagTrainingOptions):
    """The options of fine-tuning on tagged data, and their checks, for the fine-tuning options they extend: on
    tagged data (--task tags, or a CoNLL-style --data) the run trains a tagger and refuses what it does not read; on
    rows of text the tagging options are refused."""

    READS_WORDS = True
    NOT_FOR_WORDS = ("text_pair_column", "label_sep", "dev_fraction", "task_preset", "metric", "calibrate",
                     "threshold", "truncation")
    """The options the tagging path does not read (given: refused, naming them)."""

    def __post_init__(self) -> None:
        problems = []
        try:
            super().__post_init__()
        except UserError as exc:
            problems.append(str(exc))
        problems += self.word_problems() if self.reads_words else [
            f"{flag(name)} applies to tagged data (one tag per word); {self.data} is read as rows of text. Pass a "
            f"CoNLL-style file (.iob2, .conll) or --task tags, or drop {flag(name)}."
            for name, unset in (("tag_scheme", "auto"), ("label_all_pieces", False), ("stride", None))
            if getattr(self, name) != unset]
        raise_if_problems(problems)

    @property
    def reads_words(self) -> bool:
        """Whether this run trains a tagger: --task tags, or --data a tagged corpus (`data.options.reads_tagged`)."""
        return reads_tagged(self.task, self.data, self.data_config, self.train_split)

    def word_problems(self) -> list[str]:
        """The tagging path's refusals: a tagged --dev is needed (no hold-out is made), both look tagged, and the
        options it does not read are not given."""
        problems = []
        if self.dev is None:
            problems.append("Fine-tuning a tagger needs --dev (tagged dev data: a file, or a split of the hub dataset "
                            "--data); no dev split is held out of tagged data. Pass --dev dev.iob2 (hub: --dev "
                            "validation).")
        for path in dict.fromkeys((self.data, self.dev)):
            if path is not None and not may_be_tagged(path):
                problems.append(f"--task tags reads one tag per word, but {path} does not look like a tagged corpus. "
                                f"Valid: a CoNLL-style column file (a word and its tag per line, a blank line between "
                                f"sentences), JSON lines or parquet with token and tag lists, or a hub dataset. Pass "
                                f"such data, or drop --task tags to fine-tune on rows of text.")
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        defaults["truncation"] = Reading.truncation  # as a --model records it: head, what windows of words keep
        given = [name for name in self.NOT_FOR_WORDS if getattr(self, name) not in (defaults[name], None)
                 and (getattr(self, name) or defaults[name])]
        return problems + [f"{flag(name)} does not apply to fine-tuning on tagged data (one tag per word). Drop "
                           f"{flag(name)}." for name in given]


@dataclass(frozen=True)
class FinetuneRunOptions(TaggingOptions, FinetuneOptions):
    """One fine-tuning run, of a classifier on rows of text or (on tagged data) of a tagger: what `bertkit finetune`
    takes, and what each trial of a sweep is (`training.space.finetune_config`)."""
