"""What every record bertkit keeps about an artifact carries, and how a reader checks it before trusting a value in it:
its format (a kind and a layout version, `bertkit-model/2`), the problem family that made it (`family`: sentences, a
label per text; words, a tag per word) and its seal (`record_sha256`).

The seal is the sha256 of the record's own canonical JSON (sorted keys, the values as they read back) without the seal,
kept in the record. A record's file digests vouch for the artifact's other files (weights, arrays); the seal vouches
for the record itself: an edited `tag_scheme`, `task` or `reading.max_length`, a flipped byte in a manifest, a record
half-written by another tool are refused on read, naming the file. It protects against edits and damage, not against
a forger: whoever edits a record and computes the sha256 again, or rewrites it in an older, unsealed layout, gets it
read. A record of a layout made before the seal (or before the family) is read as it is, by its kind's migration; one
that claims such a layout while carrying a seal or a family was edited, and is refused.

Each record kind's module owns its `RecordKind` and its one migration function (`migrated_*`: any readable layout to
the current one, through `upgrade` and the kind's steps), the only place its older layouts are understood; this module
only measures, compares and steps (no message wording: a kind's module words its refusal, `RecordProblem` says why).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.io.atomic import to_json

FAMILY_NAME = re.compile(r"[a-z][a-z0-9_]*")
"""What a family's name looks like (sentences, words): the records check its form; which families exist is the
registry's (`bertkit.families.registry.family_named`, which refuses one this bertkit does not know), so a new family
adds no name here."""
FORMAT, FAMILY, SEAL = "format", "family", "record_sha256"
"""The keys every current record carries: its layout, its family, its seal."""


class RecordProblem(ValueError):
    """Why a record cannot be trusted (damaged, edited, or made by a newer bertkit); the kind's module words the
    message around it (which file, the fix)."""


@dataclass(frozen=True)
class RecordKind:
    """A kind of record and its layouts: `name/current` is written now; layouts from `sealed_since` on carry the seal,
    from `family_since` on the family (a layout before them is read by the kind's migration)."""

    name: str
    current: int
    sealed_since: int
    family_since: int

    @property
    def format(self) -> str:
        return f"{self.name}/{self.current}"

    def version_of(self, record: Mapping[str, Any], unversioned: int | None = 1) -> int:
        """The layout `record` says it has (`format`); a record without one has layout `unversioned` (records made
        before formats: config.json, export_report.json), or is refused (None)."""
        found = record.get(FORMAT)
        if found is None and unversioned is not None:
            return unversioned
        name, _, number = str(found).rpartition("/")
        if name != self.name or not number.isdigit() or int(number) < 1:
            raise RecordProblem(f"its format is {found!r}, not a {self.name} layout (this bertkit writes "
                                f"{self.format})")
        if int(number) > self.current:
            raise RecordProblem(f"its format {found} is newer than the {self.format} this bertkit reads: it was made "
                                f"by a newer bertkit (upgrade bertkit to read it)")
        return int(number)


def record_digest(record: Mapping[str, Any]) -> str:
    """sha256 of the record's canonical JSON without its seal: keys sorted, as `json.dumps` writes what was read."""
    body = {key: value for key, value in record.items() if key != SEAL}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode("utf-8")).hexdigest()


def sealed(record: Mapping[str, Any], kind: RecordKind, family: str) -> dict[str, Any]:
    """`record` in the current layout of `kind`: its format first, its `family` (checked: a family's name), its seal
    last, computed over the values as they will read back (numpy scalars, paths and tuples as JSON writes them)."""
    if not FAMILY_NAME.fullmatch(str(family)):
        raise ValueError(f"family {family!r} is not a family's name")
    rest = {k: v for k, v in record.items() if k not in (FORMAT, FAMILY, SEAL)}
    body = json.loads(to_json({FORMAT: kind.format, FAMILY: family, **rest}))
    return {**body, SEAL: record_digest(body)}


def checked_version(record: Any, kind: RecordKind, unversioned: int | None = 1) -> int:
    """The layout of `record` once what it claims is checked (a `RecordProblem` says why not): a JSON object of a
    layout this bertkit reads; from `sealed_since` on, its seal matching its content; from `family_since` on, a known
    family; before them, neither key (an older layout holding them was edited into one)."""
    if not isinstance(record, dict):
        raise RecordProblem(f"it is {type(record).__name__}, not a JSON object")
    version = kind.version_of(record, unversioned)
    if version >= kind.sealed_since:
        if not isinstance(record.get(SEAL), str):
            raise RecordProblem(f"it has no {SEAL}, the sha256 of its content every {kind.name}/{version} record "
                                f"carries")
        if record[SEAL] != record_digest(record):
            raise RecordProblem(f"its content does not match the sha256 it was written with ({SEAL}): it was edited "
                                f"or damaged since")
    if version >= kind.family_since and not FAMILY_NAME.fullmatch(str(record.get(FAMILY))):
        raise RecordProblem(f"its family is {record.get(FAMILY)!r}, not a problem family's name")
    newer = [key for key, since in ((SEAL, kind.sealed_since), (FAMILY, kind.family_since))
             if version < since and key in record]
    if newer:
        raise RecordProblem(f"it says it has layout {version} of {kind.name}, made before records carried "
                            f"{' and '.join(newer)}, yet it holds {' and '.join(newer)}: it was edited since")
    return version


Step = Callable[[dict[str, Any]], dict[str, Any]]
"""One migration step: a record of layout v to layout v + 1 (a kind's steps: {v: step})."""


def upgrade(record: Mapping[str, Any], kind: RecordKind, version: int, steps: Mapping[int, Step]) -> dict[str, Any]:
    """`record`, of layout `version` (checked: `checked_version`), in the current layout: each step from its version on
    applied in turn; the result says the current format and carries no seal (it is not what the file holds)."""
    current = dict(record)
    for step in range(version, kind.current):
        current = steps[step](current)
    current.pop(SEAL, None)
    return {**current, FORMAT: kind.format}


def read_record_file(file: Path, migrate: Callable[[Any], dict[str, Any]],
                     refused: Callable[[str], Exception]) -> dict[str, Any]:
    """The record in `file`, parsed and migrated to the current layout by its kind's `migrate`; what stops it (not
    JSON, a `RecordProblem`) raised as `refused(why)`, the kind's own wording of the refusal."""
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise refused(f"not valid JSON: {exc}") from None
    try:
        return migrate(record)
    except RecordProblem as exc:
        raise refused(str(exc)) from None
