"""Tag schemes of tagged corpora: which one a file's tags follow (`detect_scheme`), IOB1 rewritten as IOB2
(`to_iob2`: CoNLL-2003 ships IOB1, and strict entity scoring needs every entity to open with B-), the settings
object the reading records (`TagScheme`), so scoring reads entities the way the file meant them, and --tag-scheme,
the option it is built from (`tag_scheme_option`)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
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


@lru_cache(maxsize=65536)
def split_tag(tag: str) -> tuple[str, str]:
    """(prefix, type): ("B", "PER") for B-PER, ("O", "") for O; L/U as E/S."""
    if tag == OUTSIDE:
        return OUTSIDE, ""
    found = ENTITY_TAG.match(tag)
    if found is None:
        return "", tag
    prefix = {"L": "E", "U": "S"}.get(found.group(1), found.group(1))
    return prefix, found.group(2)


@dataclass
class Sighting:
    """How often something was seen in a corpus's tags, and where first (`line 12: I-PER`)."""

    count: int = 0
    first: str = ""

    def add(self, where: Callable[[int], str], index: int, tag: str) -> None:
        """One more, at word `index` (`where(index)`: its place, e.g. `line 12`) tagged `tag`."""
        if not self.count:
            self.first = f"{where(index)}: {tag!r}"
        self.count += 1


class SchemeEvidence:
    """What the tags read so far say about their scheme, gathered one sentence at a time (files are streamed), with
    where each oddity first is: tags that are neither O nor prefix-type (`malformed_tags`, the first at
    `first_malformed`), entities that open with B-
    after O or another type (IOB2's way: `b_opens`) or with I- (IOB1's way, or a stray I- in IOB2: `i_opens`),
    B-/I- tags no I-/E- of their type follows (`unclosed`: an IOBES entity closes with E-) and E-/S- tags
    (`iobes_tags`)."""

    def __init__(self) -> None:
        self.words = 0
        self.prefixed = 0  # prefix-type tags (B-PER...), O not counted
        self.b_opens, self.i_opens, self.unclosed, self.iobes_tags = Sighting(), Sighting(), Sighting(), Sighting()
        self.malformed_tags: Counter[str] = Counter()
        self.first_malformed = ""

    def add(self, tags: Sequence[str], where: Callable[[int], str] | None = None) -> None:
        """One sentence's tags; `where(i)`: where its word `i` is, for messages (`line 12`)."""
        place = where or (lambda _: "?")
        split = [split_tag(tag) for tag in tags]
        self.words += len(split)
        for i, (prefix, kind) in enumerate(split):
            if prefix == "":
                self.first_malformed = self.first_malformed or f"{place(i)}: {tags[i]!r}"
                self.malformed_tags[tags[i]] += 1
                continue
            if prefix == OUTSIDE:
                continue
            self.prefixed += 1
            before = split[i - 1] if i else (OUTSIDE, "")
            if prefix in ("E", "S"):
                self.iobes_tags.add(place, i, tags[i])
            elif before[1] != kind or before[0] in (OUTSIDE, "E", "S", ""):  # B-/I- opening an entity
                (self.b_opens if prefix == "B" else self.i_opens).add(place, i, tags[i])
            after = split[i + 1] if i + 1 < len(split) else (OUTSIDE, "")
            if prefix in ("B", "I") and (after[0] not in ("I", "E") or after[1] != kind):
                self.unclosed.add(place, i, tags[i])

    @property
    def mostly_entity_tags(self) -> bool:
        """Prefix-type tags are there and O or prefix-type tags are most of the words: the few other tags are
        malformed entity tags, not the plain labels of a POS-like tag set."""
        return bool(self.prefixed) and self.malformed_count < 0.5 * self.words

    @property
    def malformed_count(self) -> int:
        """Words whose tag is neither O nor prefix-type."""
        return sum(self.malformed_tags.values())

    def scheme(self) -> str:
        """IOBES when E-/S- occur; IOB1 when more entities open with I- than with B- after O (IOB1 writes B- only
        between two adjacent entities of one type), else IOB2 (a stray I- does not switch a whole file); none for plain
        labels (POS-like tags, or nothing read); IOB2 for O only."""
        if self.malformed_tags and not self.mostly_entity_tags or not self.words:
            return "none"
        if not self.prefixed:
            return "IOB2" if not self.malformed_tags else "none"
        if self.iobes_tags.count:
            return "IOBES"
        return "IOB1" if self.i_opens.count > self.b_opens.count else "IOB2"


def _counted(counts: Counter[str]) -> str:
    shown = ", ".join(f"{tag!r} ({n})" for tag, n in counts.most_common(5))
    return shown + (" ..." if len(counts) > 5 else "")


def scheme_problem(evidence: SchemeEvidence, declared: str, source: str) -> str | None:
    """Why the tags cannot be read in the `declared` --tag-scheme (auto: the detected one), naming the first line
    that says so and the fix; None when they can."""
    count = evidence.malformed_count
    if count and (declared not in ("auto", "none") or declared == "auto" and evidence.mostly_entity_tags):
        share = f", but --tag-scheme is {declared}" if declared != "auto" else (
            f", but {1 - count / evidence.words:.1%} of the words have entity tags (O, B-PER, I-LOC ...): read as "
            f"plain labels, the file would be scored by word accuracy instead of entity F1")
        return (f"{source} {evidence.first_malformed} is not an entity tag{share}. {count} word(s) have such tags: "
                f"{_counted(evidence.malformed_tags)}. Valid entity tags are O and a prefix (B-, I-, E-, S-), '-' and "
                f"a type (B-PER). Fix those lines, or pass --tag-scheme none to read every tag as a plain label "
                f"(POS-like, scored by word accuracy).")
    if declared in ("IOB1", "IOB2") and evidence.iobes_tags.count:
        return (f"{source} {evidence.iobes_tags.first} is an IOBES tag (E-/S-, or BILOU's L-/U-), but --tag-scheme is "
                f"{declared}. Pass --tag-scheme IOBES (or auto, which reads these tags as IOBES).")
    if declared == "IOBES" and evidence.unclosed.count:
        reading = "" if evidence.iobes_tags.count else " (no E- or S- tag at all: these tags read as IOB2)"
        return (f"{source} {evidence.unclosed.first} opens or continues an entity that no I- or E- of its type "
                f"follows, but --tag-scheme is IOBES, where every entity closes with E- (a one-word entity is S-); "
                f"{evidence.unclosed.count} entit{'y is' if evidence.unclosed.count == 1 else 'ies are'} left "
                f"open{reading}. Pass --tag-scheme IOB2 (or auto), or fix the tags.")
    return None


def scheme_notes(evidence: SchemeEvidence, scheme: str, source: str) -> list[str]:
    """What a person should know of how the tags were read: stray I- tags in an IOB2 file (counted as entities by
    the headline F1, as conlleval counts them, and as none by the strict F1), stray B- tags in an IOB1 file."""
    if scheme == "IOB2" and evidence.i_opens.count:
        n = evidence.i_opens.count
        return [f"{source}: {n} entit{'y opens' if n == 1 else 'ies open'} with I- where IOB2 opens with B- (first at "
                f"{evidence.i_opens.first}); read as IOB2: entity F1 counts {'it' if n == 1 else 'them'} as "
                f"conlleval does (an entity), the strict F1 beside it does not."]
    if scheme == "IOB1" and evidence.b_opens.count:
        return [f"{source}: read as IOB1 (entities open with I-), though {evidence.b_opens.count} open with B- after "
                f"O or another type (first at {evidence.b_opens.first}): each opens an entity either way."]
    return []


def scheme_of_labels(labels: Iterable[str]) -> str:
    """The scheme a tagging model's label set names (its config's id2label, where no record says): IOBES with E-/S-
    tags, IOB2 with B-/I- ones, none for plain labels (POS)."""
    prefixes = {split_tag(label)[0] for label in labels}
    if "" in prefixes or not prefixes - {OUTSIDE}:  # a label that is no entity tag, or only O
        return "none"
    return "IOBES" if prefixes & {"E", "S"} else "IOB2"


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
