"""The tagging group of a fine-tuning run (`TaggingOptions`: --tag-scheme, --label-all-pieces; a tagger's --stride is
in its reading group, `encoding.reading.WindowOptions`), declared once for every command that fine-tunes a tagger
(`bertkit finetune`, `bertkit sweep`, whose trials are fine-tuning runs, and `bertkit distill` with a tagging
teacher; the words family, `bertkit.families.words`, refuses what a tagger does not read), and how a tagger reads its
words (`TAGGER_WORD_POOL`)."""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.data.tagged import unseen_tags_option
from bertkit.data.tagscheme import tag_scheme_option
from bertkit.options import MODEL, option

TAGGER_WORD_POOL = "first"
"""How a tagger reads a word: its first piece's logits (it is trained there), recorded in its reading."""


@dataclass(frozen=True)
class TaggingOptions:
    """How a tagger (fine-tuning on tagged data, `bertkit.training.tagging`) reads its tags and is taught them."""

    ADVANCED_OPTIONS = ("tag_scheme", "label_all_pieces", "unseen_tags")

    tag_scheme: str = tag_scheme_option()
    label_all_pieces: bool = option(False, "Tagged data: learn every word piece's tag, not only each word's first "
                                    "piece's (run_ner's --label_all_tokens; a B- word's later pieces learn its I- "
                                    "tag). Scores are per word, from the first piece, either way.", panel=MODEL,
                                    families=("words",))
    unseen_tags: str = unseen_tags_option()
