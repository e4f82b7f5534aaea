"""How texts are read into token ids, as an option group (`ReadingOptions`, `LongTextOptions`: the `reading` group of
every command that runs a model on text; --max-length declared once in `max_length_option`, --word-pool in
`word_pool_option`) and as the one settings object those options resolve to, the library takes and artifacts record
(`Reading`: window, cut or windows, stride, and for sentences given as words the word pooling)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from bertkit.data.tagged import unseen_tags_option
from bertkit.data.tagscheme import tag_scheme_option
from bertkit.encoding.longtext import LONG_TEXT_MODES, TRUNCATIONS, default_stride
from bertkit.errors import UserError
from bertkit.options import MODEL, all_fields, option, replaced

log = logging.getLogger(__name__)

WORD_POOLS = ("first", "last", "first_last", "mean")
"""--word-pool's values (Flair's choices; the first is the default): a word's vector from its pieces' first, last,
both (concatenated) or their mean (`features.pooling.pool_word_vectors`)."""
SPECIAL_TOKENS = 2
"""[CLS] and [SEP] around every window of words."""


DEFAULT_MAX_LENGTH = 128
"""The window of a model that records none (a hub id, the packaged encoder): BERT fine-tuning's usual 128."""
QUESTION_MAX_LENGTH = 384
"""The window of questions on passages (the spans family) where no model records one: run_qa.py's 384, which holds
a question and most of a SQuAD paragraph."""
DOC_STRIDE = 128
"""Tokens neighbouring windows of one passage share where no model records it (run_qa.py's --doc_stride)."""
FAMILY_MAX_LENGTH = {"spans": QUESTION_MAX_LENGTH}
"""A problem family's window where neither the options nor a record say (others: `DEFAULT_MAX_LENGTH`)."""


def max_length_help(reads: str = "the model (or probe, export)") -> str:
    """--max-length's help, for a command that `reads` a model (evaluate: a fine-tuned model only, no probe)."""
    return (f"Truncate inputs to this many tokens. Default: as {reads} records it, else {DEFAULT_MAX_LENGTH} "
            f"({QUESTION_MAX_LENGTH} for questions on passages).")


def doc_stride_option() -> Any:
    """--doc-stride, declared here once for every command that reads questions on passages (finetune and sweep in
    their reading group, predict and evaluate in their answers group): unset (None), as the model records it, else
    `DOC_STRIDE`."""
    return option(None, f"Questions on passages: tokens neighbouring windows of a passage longer than --max-length "
                  f"share (run_qa.py's --doc_stride). Default: as the model records it, else {DOC_STRIDE}.",
                  panel=MODEL, minimum=0, families=("spans",))


def max_length_option() -> Any:
    """--max-length, declared here once with one meaning for every command that reads text: unset (None), it is what
    the model (probe, export) read records (`read_as_recorded`), else `DEFAULT_MAX_LENGTH`. (A field: in the reading
    group, or a command's own where it is the only reading option, as in `tokens` and `bench`.)"""
    return option(None, max_length_help(), panel=MODEL, above=0)


@dataclass(frozen=True)
class ReadingOptions:
    """The window and which tokens of an over-long text it keeps: the reading group of every command that runs a
    model on text."""

    max_length: int | None = max_length_option()
    truncation: str | None = option(None, "Which tokens a text longer than --max-length keeps: head (the first), tail "
                                    "(the last), head+tail (the first quarter and the last three quarters of the "
                                    "budget; Sun et al. 2019). Default: as the model was trained, else head.",
                                    panel=MODEL, choices=TRUNCATIONS, families=("sentences",))


@dataclass(frozen=True)
class WindowOptions(ReadingOptions):
    """The reading group of fine-tuning (`bertkit finetune`, `sweep`, `distill`): the window, the cut of an over-long
    text, and for a tagger (its sentences read as windows of words) the windows' overlap."""

    ADVANCED_OPTIONS = ("stride",)

    stride: int | None = option(None, "Tagged data: word pieces neighbouring windows of a sentence longer than "
                                "--max-length share (default: a quarter of --max-length). Recorded in the model: "
                                "predict and evaluate read in the same windows.", panel=MODEL, minimum=0,
                                families=("words",))
    doc_stride: int | None = doc_stride_option()


@dataclass(frozen=True)
class LongTextOptions(ReadingOptions):
    """Texts longer than the window: cut them (--truncation), or run every window and pool (embed/probe/predict/
    evaluate/export). Unset (None), each reads as the artifact read records it (a model's, a probe's, an export's),
    else the default (`Reading.from_options`)."""

    long_text: str | None = option(None, "Texts longer than --max-length: cut (see --truncation) or chunk "
                                   "(overlapping windows of --max-length tokens, pooled: features by mean, logits by "
                                   "max; nothing is cut). Default: cut.", panel=MODEL, choices=LONG_TEXT_MODES,
                                   families=("sentences",))
    stride: int | None = option(None, "Tokens neighbouring windows share with --long-text chunk (default: a quarter of "
                                "--max-length).", panel=MODEL, minimum=0, families=("sentences", "words"))

    def long_text_problems(self) -> list[str]:
        """--stride only with chunking, and smaller than the text part of a window (it would never move on)."""
        if self.stride is None:
            return []
        if self.long_text != "chunk":
            return [f"--stride is the overlap of --long-text chunk windows, but --long-text is "
                    f"{self.long_text or 'cut'}. Add --long-text chunk, or drop --stride."]
        window = getattr(self, "max_length", 0)
        if isinstance(self.stride, int) and isinstance(window, int) and self.stride >= window - 2:
            return [f"--stride {self.stride} must be smaller than the window: --max-length {window} leaves {window - 2} "
                    f"text tokens next to [CLS] and [SEP], and windows sharing {self.stride} of them never move on. "
                    f"Pass a smaller --stride (e.g. --stride {default_stride(window)}) or a larger --max-length."]
        return []


def word_pool_option() -> Any:
    """--word-pool, declared here once for every command that reads tagged data (`bertkit embed`, `bertkit probe`):
    unset (None), the word path reads `WORD_POOLS[0]` (`Reading.of_words`); the sentence path refuses it."""
    return option(None, "Tagged data: a word's vector from its word pieces: first (default, BERT's NER choice), last, "
                  "first_last (concatenated) or mean.", panel=MODEL, choices=WORD_POOLS,
                  families=("words",))



@dataclass(frozen=True)
class TaggedReadingOptions:
    """How a command that writes or probes word vectors reads tagged data (`bertkit embed`, `bertkit probe`): a word's
    vector from its pieces (--word-pool), the tags' scheme and what becomes of a dev or test tag training never has.
    Flags stay flat (--word-pool, --tag-scheme, --unseen-tags); sentence data refuses them (each is the words
    family's)."""

    ADVANCED_OPTIONS = ("tag_scheme", "unseen_tags")

    word_pool: str | None = word_pool_option()
    tag_scheme: str = tag_scheme_option()
    unseen_tags: str = unseen_tags_option()

@dataclass(frozen=True)
class Reading:
    """How texts become a model's inputs: at most `max_length` tokens, and a longer text cut (`truncation` says which
    tokens stay) or read as overlapping windows sharing `stride` tokens (`long_text` chunk; None: `default_stride`).
    The one settings object for it: a command builds it once from its options and the record of what it reads
    (`over_record`), the library takes it (`encoding.encode.encode_for`, feature extraction, classifier logits), and
    every artifact made with it records it (bertkit_model.json, saved probes, store manifests, export folders): a
    model fine-tuned on 16 tokens is read with 16 tokens.

    Sentences given as words (tagged data, `of_words`) are read the same way, as windows (`long_text` chunk) of
    `max_length` tokens sharing `stride` pieces, cut at word boundaries (`encoding.words.align_words`), each word's
    vector pooled from its pieces by `word_pool`; a sentence reading has no `word_pool` (None) and records none."""

    max_length: int = DEFAULT_MAX_LENGTH
    long_text: str = LONG_TEXT_MODES[0]
    truncation: str = TRUNCATIONS[0]
    stride: int | None = None
    word_pool: str | None = None
    """Sentences of words: how a word's vector comes from its pieces (`WORD_POOLS`); None: texts, not words."""

    KEYS = ("max_length", "long_text", "truncation", "stride", "word_pool")
    """The keys in records; also the option names (--max-length, --long-text, --truncation, --stride, --word-pool)."""
    LONG_TEXT_KEYS = ("truncation", "long_text", "stride")
    """The long-text keys (this order) in store manifests and identities, probe.json and feature-cache keys, which
    record the window under `max_length` beside them."""

    @classmethod
    def from_options(cls, cfg: Any) -> Reading:
        """The reading a config's options ask for; an option it lacks, or leaves unset (None), takes the default (the
        window: its problem family's, `FAMILY_MAX_LENGTH`)."""
        default = cls(max_length=FAMILY_MAX_LENGTH.get(family_name(cfg), DEFAULT_MAX_LENGTH))
        return cls(*(_given(cfg, key, getattr(default, key)) for key in cls.KEYS))

    @classmethod
    def of_words(cls, word_pool: str | None = None, max_length: int | None = None,
                 stride: int | None = None) -> Reading:
        """How sentences given as words are read (unset values: the defaults): windows of `max_length` tokens
        sharing `stride` pieces (None: a quarter of the window), a word longer than a window keeping its first
        pieces (head), and each word's vector pooled from its pieces by `word_pool`."""
        return cls(max_length or DEFAULT_MAX_LENGTH, "chunk", TRUNCATIONS[0], stride, word_pool or WORD_POOLS[0])

    @classmethod
    def from_json(cls, record: Any) -> Reading | None:
        """The reading an artifact records; None when it records none (saved before bertkit recorded it)."""
        if not isinstance(record, dict) or not isinstance(record.get("max_length"), int):
            return None
        return cls.from_record(record)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Reading:
        """The reading a manifest, saved probe or feature-cache key records beside its other settings: keys missing
        from an older record read as the defaults (before any long-text key was recorded: head-cut; no window: 128)."""
        default = cls()
        values = {key: record.get(key, getattr(default, key)) for key in cls.KEYS}
        if not isinstance(values["max_length"], int):
            values["max_length"] = default.max_length
        if values["word_pool"] is not None and "long_text" not in record:  # an older word reading (word_pool,
            values["long_text"] = "chunk"  # max_length, stride): its sentences were read in windows
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        """The record: every key, `word_pool` only for words (a sentence reading records what it always did)."""
        return {key: getattr(self, key) for key in self.KEYS if key != "word_pool" or self.word_pool is not None}

    def long_text_json(self) -> dict[str, Any]:
        """{truncation, long_text, stride}: what store identities, manifests and saved probes record beside
        `max_length`."""
        return {key: getattr(self, key) for key in self.LONG_TEXT_KEYS}

    @property
    def chunked(self) -> bool:
        return self.long_text == "chunk"

    @property
    def window_stride(self) -> int:
        """The windows' overlap: --stride, or `default_stride` of the window when not given."""
        return default_stride(self.max_length) if self.stride is None else self.stride

    @property
    def reads_words(self) -> bool:
        """Whether this reads sentences given as words (tagged data), one vector per word."""
        return self.word_pool is not None

    @property
    def word_budget(self) -> int:
        """Word pieces a window of words holds next to [CLS] and [SEP]."""
        return self.max_length - SPECIAL_TOKENS

    def word_problems(self) -> list[str]:
        """How this reading cannot read words (empty: it can): a known word pooling, windows with room for words
        next to [CLS] and [SEP], and an overlap that moves on (the sentence windows' rule, `long_text_problems`)."""
        problems = []
        if self.word_pool not in WORD_POOLS:
            problems.append(f"--word-pool {self.word_pool!r} is not a word pooling: valid are {', '.join(WORD_POOLS)}. "
                            f"Pass one of them.")
        if isinstance(self.max_length, bool) or not isinstance(self.max_length, int) or self.max_length < 4:
            problems.append(f"--max-length {self.max_length} leaves no room for words next to [CLS] and [SEP]: "
                            f"valid is 4 or more. Pass a larger --max-length (e.g. 128).")
        elif self.stride is not None and not 0 <= self.stride < self.word_budget:
            problems.append(f"--stride {self.stride} must be between 0 and {self.word_budget - 1}: windows of "
                            f"--max-length {self.max_length} hold {self.word_budget} pieces, and sharing all of them "
                            f"never moves on. Pass a smaller --stride (e.g. {default_stride(self.max_length)}).")
        return problems

    @classmethod
    def record_problems(cls, record: Any) -> list[str]:
        """How a recorded reading is damaged (empty: it is not): a record bertkit wrote has a positive whole
        `max_length` and known values; a key an older record lacks is not a problem (it reads as the default)."""
        if not isinstance(record, dict):
            return [f"its reading is {type(record).__name__}, not an object"]
        problems = []
        length, stride = record.get("max_length", DEFAULT_MAX_LENGTH), record.get("stride")
        if isinstance(length, bool) or not isinstance(length, int) or length < 1:
            problems.append(f"reading.max_length is {length!r}, not a positive whole number")
        for key, valid in (("truncation", TRUNCATIONS), ("long_text", LONG_TEXT_MODES)):
            if key in record and record[key] not in valid:
                problems.append(f"reading.{key} is {record[key]!r}, not one of {', '.join(valid)}")
        if stride is not None and (isinstance(stride, bool) or not isinstance(stride, int) or stride < 0):
            problems.append(f"reading.stride is {stride!r}, not a whole number of tokens")
        elif stride is not None and not problems and record.get("long_text") == "chunk" \
                and stride >= length - SPECIAL_TOKENS:
            problems.append(f"reading.stride {stride} is not smaller than the {length - SPECIAL_TOKENS} tokens a "
                            f"window of reading.max_length {length} holds beside [CLS] and [SEP]")
        if record.get("word_pool") not in (None, *WORD_POOLS):
            problems.append(f"reading.word_pool is {record['word_pool']!r}, not one of {', '.join(WORD_POOLS)}")
        return problems

    def known(self) -> bool:
        """Whether truncation, long_text and word_pool are values this bertkit knows (a saved file may say anything)."""
        return (self.truncation in TRUNCATIONS and self.long_text in LONG_TEXT_MODES
                and self.word_pool in (None, *WORD_POOLS))

    def applied_to(self, cfg: Any) -> Any:
        """`cfg` with this reading's values in its reading options (the resolved config a command runs with): those
        its problem family reads (an option declared for other families, such as a tagger's --stride on rows of
        text or --truncation on tagged data, is not read from a record)."""
        family = family_name(cfg)
        names = {f.name for f in all_fields(type(cfg))
                 if not f.metadata.get("families") or family in f.metadata["families"]}
        return replaced(cfg, **{k: v for k, v in self.to_json().items() if k in names})

    def over_record(self, cfg: Any, recorded: Reading | None, what: str) -> tuple[Reading, list[str]]:
        """The reading to run `what` with: each of `cfg`'s reading options that is set wins (a note says so where it
        differs from the record), the others come from the record; no record (None: not saved by bertkit, or before
        it recorded readings): the options, defaults for the rest. A recorded stride the given window cannot hold is
        refused naming the record, never blamed on a --stride the user did not give."""
        if recorded is None:
            return self, []
        values, notes = {}, []
        for key in self.KEYS:
            given = _given(cfg, key, None)
            values[key] = given if given is not None else getattr(recorded, key)
            if given is not None and given != getattr(recorded, key):
                notes.append(f"--{key.replace('_', '-')} {given}: {what} records {getattr(recorded, key)} (read with "
                             f"{given}, as asked)")
        merged = Reading(**values)
        if _given(cfg, "stride", None) is None and merged.stride is not None and merged.chunked \
                and merged.stride >= merged.word_budget:
            raise UserError(f"{what} records stride {merged.stride} (the word pieces its windows share), which windows "
                            f"of --max-length {merged.max_length} ({merged.word_budget} pieces beside [CLS] and "
                            f"[SEP]) cannot share. Pass a smaller --stride too (e.g. --stride "
                            f"{default_stride(merged.max_length)}), or a --max-length above {merged.stride + 2}.")
        return merged, notes


def read_as_recorded(cfg: Any, recorded: Reading | None, what: str) -> Any:
    """`cfg` with its reading options (--max-length, --long-text, --truncation, --stride) resolved against the reading
    `what` records (`Reading.over_record`): an option not given reads as recorded, one given that differs is applied
    and its note logged; no record (None) reads with the options and the defaults."""
    reading, notes = Reading.from_options(cfg).over_record(cfg, recorded, what)
    for note in notes:
        log.warning("%s", note)
    return reading.applied_to(cfg)


def family_name(cfg: Any) -> str:
    """The problem family a command's config reads (`cfg.family`, asked once by the command: `bertkit.families`); a
    run's own config (a sweep's trial) says whether it reads words or questions."""
    family = getattr(cfg, "family", None)
    if family is not None:
        return str(family.name)
    if getattr(cfg, "reads_words", False):
        return "words"
    return "spans" if getattr(cfg, "reads_questions", False) else "sentences"


def _given(cfg: Any, key: str, default: Any) -> Any:
    given = getattr(reading_options(cfg), key, None)
    return default if given is None else given


def reading_options(cfg: Any) -> Any:
    """The options a config reads texts by: its reading group (`ReadingOptions`), or where --max-length is its only
    reading option (tokens, bench) the config itself; a reading group is its own."""
    return getattr(cfg, "reading", cfg)
