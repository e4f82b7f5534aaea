"""How texts are read into token ids, as options (`TruncationOption`, `LongTextOptions`: the flags of every command
that runs a model on text) and as the settings object those options resolve to and artifacts record (`Reading`)."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from bertkit.encoding.longtext import LONG_TEXT_MODES, TRUNCATIONS, LongText, default_stride
from bertkit.options import MODEL, option

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TruncationOption:
    """Which tokens of an over-long text are kept: every command that runs a model on text."""

    truncation: str = option(LongText.truncation, "Which tokens a text longer than --max-length keeps: head (the first), tail (the "
                             "last), head+tail (the first quarter and the last three quarters of the budget; Sun et "
                             "al. 2019).", panel=MODEL, choices=TRUNCATIONS)


@dataclass(frozen=True)
class LongTextOptions(TruncationOption):
    """Texts longer than the window: cut them (--truncation), or run every window and pool (embed/probe/predict/
    evaluate/export). Unset (None), each reads as the artifact read records it (a model's, a probe's, an export's),
    else the default (`Reading.from_options`)."""

    truncation: str | None = option(None, "Which tokens a text longer than --max-length keeps: head (the first), tail "
                                    "(the last), head+tail (the first quarter and the last three quarters of the "
                                    "budget; Sun et al. 2019). Default: as the model was trained, else head.",
                                    panel=MODEL, choices=TRUNCATIONS)
    long_text: str | None = option(None, "Texts longer than --max-length: cut (see --truncation) or chunk "
                                   "(overlapping windows of --max-length tokens, pooled: features by mean, logits by "
                                   "max; nothing is cut). Default: cut.", panel=MODEL, choices=LONG_TEXT_MODES)
    stride: int | None = option(None, "Tokens neighbouring windows share with --long-text chunk (default: a quarter of "
                                "--max-length).", panel=MODEL, minimum=0)

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


DEFAULT_MAX_LENGTH = 128
READ_AS_SAVED_HELP = (f"Truncate inputs to this many tokens. Default: as the model (or probe) records it, else "
                      f"{DEFAULT_MAX_LENGTH}.")
READ_AS_SAVED_MODEL_HELP = f"Truncate inputs to this many tokens. Default: as the model records it, else {DEFAULT_MAX_LENGTH}."
"""--max-length of a command that reads a fine-tuned model only (evaluate): no probe to record it."""


@dataclass(frozen=True)
class Reading:
    """How texts become a model's inputs: at most `max_length` tokens, and a longer text cut (`truncation` says which
    tokens stay) or read as overlapping windows sharing `stride` tokens (`long_text` chunk). Recorded in every
    artifact made with it (bertkit_model.json, saved probes, store manifests, export folders) and read back from
    there (`over_record`): a model fine-tuned on 16 tokens is read with 16 tokens."""

    max_length: int = DEFAULT_MAX_LENGTH
    long_text: str = LongText.mode
    truncation: str = LongText.truncation
    stride: int | None = None

    KEYS = ("max_length", "long_text", "truncation", "stride")
    """The keys in records; also the option names (--max-length, --long-text, --truncation, --stride)."""

    @classmethod
    def from_options(cls, cfg: Any) -> Reading:
        """The reading a config's options ask for; an option it lacks, or leaves unset (None), takes the default."""
        default = cls()
        return cls(*(_given(cfg, key, getattr(default, key)) for key in cls.KEYS))

    @classmethod
    def from_json(cls, record: Any) -> Reading | None:
        """The reading an artifact records; None when it records none (saved before bertkit recorded it). Long-text
        keys missing from an older record read as the defaults (before any was recorded: head-cut)."""
        if not isinstance(record, dict) or not isinstance(record.get("max_length"), int):
            return None
        default = cls()
        return cls(*(record.get(key, getattr(default, key)) for key in cls.KEYS))

    def to_json(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in self.KEYS}

    @property
    def long_text_settings(self) -> LongText:
        return LongText(self.truncation, self.long_text, self.stride)

    def applied_to(self, cfg: Any) -> Any:
        """`cfg` with this reading's values in its reading options (the resolved config a command runs with)."""
        names = {f.name for f in dataclasses.fields(cfg)}
        return dataclasses.replace(cfg, **{k: v for k, v in self.to_json().items() if k in names})

    def over_record(self, cfg: Any, recorded: Reading | None, what: str) -> tuple[Reading, list[str]]:
        """The reading to run `what` with: each of `cfg`'s reading options that is set wins (a note says so where it
        differs from the record), the others come from the record; no record: the options, defaults for the rest
        (a note when `what` was saved by an older bertkit, `recorded` being then the marker `UNRECORDED`)."""
        if recorded is None:
            return self, []
        if recorded is UNRECORDED:
            note = (f"{what} was saved before bertkit recorded how it reads texts: read with --max-length "
                    f"{self.max_length} (pass --max-length to match its training)")
            return self, [] if _given(cfg, "max_length", None) is not None else [note]
        values, notes = {}, []
        for key in self.KEYS:
            given = _given(cfg, key, None)
            values[key] = given if given is not None else getattr(recorded, key)
            if given is not None and given != getattr(recorded, key):
                notes.append(f"--{key.replace('_', '-')} {given}: {what} records {getattr(recorded, key)} (read with "
                             f"{given}, as asked)")
        return Reading(**values), notes


UNRECORDED = Reading(max_length=-1)
"""The record of an artifact bertkit saved before it recorded its reading (`over_record` notes it)."""


def read_as_recorded(cfg: Any, recorded: Reading | None, what: str) -> Any:
    """`cfg` with its reading options (--max-length, --long-text, --truncation, --stride) resolved against the reading
    `what` records (`Reading.over_record`): an option not given reads as recorded, one given that differs is applied
    and its note logged; no record (None) reads with the options and the defaults."""
    reading, notes = Reading.from_options(cfg).over_record(cfg, recorded, what)
    for note in notes:
        log.warning("%s", note)
    return reading.applied_to(cfg)


def _given(cfg: Any, key: str, default: Any) -> Any:
    value = getattr(cfg, key, None)
    return default if value is None else value
