"""Tag schemes of tagged corpora: which one a file's tags follow (`detect_scheme`), IOB1 rewritten as IOB2
(`to_iob2`: CoNLL-2003 ships IOB1, and strict entity scoring needs every entity to open with B-), the settings
object the reading records (`TagScheme`), so scoring reads entities the way the file meant them, and --tag-scheme,
the option it is built from (`tag_scheme_option`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from bertkit.errors import UserError
from bertkit.options import DATA, option

SCHEMES = ("auto", "IOB1", "IOB2", "IOBES", "none")
"""As given (--tag-scheme): auto detects; none means tags are plain labels (POS), scored by token accuracy."""
SCORED_SCHEMES = ("IOB2", "IOBES", "none")
"""What scoring sees: IOB1 is rewritten to IOB2 on reading."""

ENTITY_TAG = re.compile(r"^([BIESLU])[-_](.+)$")
"""An entity tag: a prefix, - or _, a type (B-PER, I_ORG, S-LOC). BILOU's L/U read as IOBES's E/S."""
OUTSIDE = "O"


def tag_scheme_option() -> Any:
    """--tag-scheme, declared here once for every command that reads tagged data (`bertkit embed`, `bertkit probe`,
    `bertkit finetune`, `bertkit bench`): the scheme `data.tagged.TaggedColumns` reads the tags in, resolved to the
    `TagScheme` a corpus records."""
    return option("auto", "Tagged data: the tags' scheme (IOB1 is read as IOB2; none: plain labels such as POS, scored "
                  "by token accuracy). auto detects it.", panel=DATA, choices=SCHEMES,
                  families=("words",))


@dataclass(frozen=True)
class TagScheme:
    """How a corpus's tags name entities: `source` as the file has them, `name` as they are scored (IOB1 is read
    as IOB2). Recorded with everything made from the corpus, so the scores of a probe read the same entities."""

    name: str = "none"
    source: str = "none"

    def __post_init__(self) -> None:
        if self.name not in SCORED_SCHEMES or self.source not in SCHEMES[1:]:
            raise UserError(f"Tag scheme {self.source!r} read as {self.name!r} is not one bertkit knows: schemes are "
                            f"{', '.join(SCHEMES[1:])}. Pass --tag-scheme with one of them (or auto).")

    @property
    def has_entities(self) -> bool:
        """Whether tags mark entity spans (scored by entity F1) rather than plain labels (token accuracy)."""
        return self.name != "none"

    @classmethod
    def read_as(cls, source: str) -> TagScheme:
        """The scheme a file in `source` is scored with."""
        return cls("IOB2" if source == "IOB1" else source, source)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source}

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> TagScheme:
        return cls(str(record.get("name", "none")), str(record.get("source", record.get("name", "none"))))


def is_entity_tag(tag: str) -> bool:
    return tag == OUTSIDE or ENTITY_TAG.match(tag) is not None


def split_tag(tag: str) -> tuple[str, str]:
    """(prefix, type): ("B", "PER") for B-PER, ("O", "") for O; L/U as E/S."""
    if tag == OUTSIDE:
        return OUTSIDE, ""
    found = ENTITY_TAG.match(tag)
    if found is None:
        return "", tag
    prefix = {"L": "E", "U": "S"}.get(found.group(1), found.group(1))
    return prefix, found.group(2)


class SchemeEvidence:
    """What the tags read so far say about their scheme, gathered one sentence at a time (files are streamed)."""

    def __init__(self) -> None:
        self.plain = False  # a tag that is not O nor prefix-type: plain labels
        self.prefixes: set[str] = set()
        self.opens_with_inside = False  # an I- that no B-/I- of its type precedes: IOB1

    def add(self, tags: Sequence[str]) -> None:
        previous = ""
        for tag in tags:
            prefix, kind = split_tag(tag)
            if prefix == "":
                self.plain = True
                return
            self.prefixes.add(prefix)
            if prefix == "I" and previous not in (f"B-{kind}", f"I-{kind}"):
                self.opens_with_inside = True
            previous = f"{prefix}-{kind}" if prefix in ("B", "I") else ""

    def scheme(self) -> str:
        """IOBES when E-/S- occur, IOB1 when an entity opens with I-, IOB2 for other prefix-type tags, else none."""
        if self.plain or self.prefixes <= {OUTSIDE}:
            return "none" if self.plain or not self.prefixes else "IOB2"
        if self.prefixes & {"E", "S"}:
            return "IOBES"
        return "IOB1" if self.opens_with_inside else "IOB2"


def detect_scheme(sentences_tags: Iterable[Sequence[str]]) -> str:
    """The scheme the tag sequences follow (see `SchemeEvidence.scheme`)."""
    evidence = SchemeEvidence()
    for tags in sentences_tags:
        evidence.add(tags)
    return evidence.scheme()


def to_iob2(tags: Sequence[str]) -> list[str]:
    """IOB1 -> IOB2: an I-X that does not continue an X entity opens one, so it becomes B-X (IOB1 writes B- only
    between two adjacent entities of one type, which IOB2 writes the same way)."""
    out: list[str] = []
    previous = OUTSIDE
    for tag in tags:
        prefix, kind = split_tag(tag)
        if prefix == "I" and previous not in (f"B-{kind}", f"I-{kind}"):
            tag = f"B-{kind}"
        out.append(tag)
        previous = tag
    return out


def canonical_tags(tags: Sequence[str]) -> list[str]:
    """Entity tags spelled as seqeval reads them: prefix, '-', type (I_ORG -> I-ORG; BILOU's L-/U- -> E-/S-)."""
    out = []
    for tag in tags:
        prefix, kind = split_tag(tag)
        out.append(f"{prefix}-{kind}" if prefix not in ("", OUTSIDE) else tag)
    return out


def normalised_tags(tags: Sequence[str], scheme: TagScheme) -> list[str]:
    """Tags as scored: entity tags in canonical spelling, IOB1 rewritten as IOB2; plain labels as read."""
    if not scheme.has_entities:
        return list(tags)
    tags = canonical_tags(tags)
    return to_iob2(tags) if scheme.source == "IOB1" else tags
