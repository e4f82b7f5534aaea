"""The manifests of the embedding stores, each kind a pair: written by `store_manifest` / `word_store_manifest`
(the finished store's record in the current layout, with its family and seal) and read by `read_store_manifest` /
`read_manifest` (checked against the seal, in the current layout); older layouts are read by `migrated_store_manifest`
/ `migrated_word_store_manifest`, the one place each kind's older layouts are understood. The stores themselves
(`features/store.py`, `features/word_store.py`) write their arrays and call these for their manifest.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bertkit.encoding.reading import Reading
from bertkit.errors import UserError
from bertkit.features.words import word_pooling_from_json
from bertkit.io import digests
from bertkit.io.ownership import SPLIT_NAMES
from bertkit.io.record_format import FAMILY, RecordKind, RecordProblem, checked_version, sealed, upgrade

MANIFEST = "manifest.json"
IDENTITY = "identity.json"
STORE_RECORD = RecordKind("bertkit-store", current=2, sealed_since=2, family_since=2)
"""Layout 1 (`bertkit-store/1`): no family, no seal, maybe no long-text keys (stores made before them read their
texts head-cut). Layout 2: the family (a sentence store's: sentences) and the seal."""
WORD_STORE_RECORD = RecordKind("bertkit-word-store", current=3, sealed_since=3, family_since=3)
"""Layout 1: the word settings before they were `Reading` and `Pooling` (reading {word_pool, max_length, stride},
layers {layers, combine}). Layout 2: `reading` and `pooling`. Layout 3: the family and the seal."""
READABLE_FORMATS = tuple(f"{WORD_STORE_RECORD.name}/{v}" for v in range(1, WORD_STORE_RECORD.current + 1))
"""The word store formats this bertkit reads."""


# ---------------------------------------------------------------- a sentence store's manifest


def not_a_store_message(root: Path) -> str:
    """Why `root` holds no finished store: an unfinished one (re-run), or none at all."""
    if (root / IDENTITY).is_file() or any((root / n / IDENTITY).is_file() for n in SPLIT_NAMES):
        return (
            f"{root} is an unfinished embedding store (a run was interrupted). Re-run the same `bertkit embed` "
            f"command to finish it."
        )
    return (
        f"{root} is not a bertkit embedding store (no {MANIFEST}). Pass the --out directory of a finished "
        f"`bertkit embed` run."
    )


def store_manifest(manifest: dict[str, Any], family: str = "sentences") -> dict[str, Any]:
    """A finished store's manifest.json as written: `manifest` (provenance, identity, shape, digests) in the current
    layout, of `family`, sealed. `read_store_manifest` reads it back."""
    return sealed(manifest, STORE_RECORD, family)


def read_store_manifest(root: Path) -> dict[str, Any]:
    """The manifest of the store in `root`, checked against its seal, in the current layout; a UserError naming it
    when it is missing (an unfinished store, or none), unreadable, edited or damaged since, or of another format."""
    if not (root / MANIFEST).is_file():
        raise UserError(not_a_store_message(root))
    try:
        manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{root / MANIFEST} is not valid JSON ({exc}). Rebuild the store with --overwrite.") from None
    try:
        return migrated_store_manifest(manifest)
    except RecordProblem as exc:
        raise UserError(f"Store {root} is damaged: its {MANIFEST}: {exc}. Re-run the `bertkit embed` command that "
                        f"made it, with --overwrite, to rebuild it.") from None


def migrated_store_manifest(manifest: Any) -> dict[str, Any]:
    """A sentence store's manifest in the current layout, from any layout this bertkit reads (a `RecordProblem` for
    one it cannot trust). The only place layout 1 is understood: its family is sentences, and long-text keys it lacks
    are those its texts were read with (head-cut)."""
    version = checked_version(manifest, STORE_RECORD, unversioned=None)
    return upgrade(manifest, STORE_RECORD, version, {1: _store_layout_2})


def _store_layout_2(manifest: dict[str, Any]) -> dict[str, Any]:
    """Layout 1 -> 2."""
    return {**Reading().long_text_json(), **manifest, FAMILY: "sentences"}


# ---------------------------------------------------------------- a word store's manifest


def word_store_manifest(manifest: dict[str, Any], family: str = "words") -> dict[str, Any]:
    """A finished word store's manifest.json as written: `manifest` in the current layout, of `family`, sealed."""
    return sealed(manifest, WORD_STORE_RECORD, family)


def read_manifest(root: Path) -> dict[str, Any]:
    """The manifest of the word store in `root`, checked against its seal, in the current layout; a UserError naming
    it when it is missing (an unfinished store, or none), unreadable, edited or damaged since, or another format."""
    if not (root / MANIFEST).is_file():
        unfinished = (root / IDENTITY).is_file()
        raise UserError(f"{root} is an unfinished word store (a run was interrupted). Re-run the same `bertkit embed` "
                        f"command to finish it." if unfinished else f"{root} is not a bertkit word store (no "
                        f"{MANIFEST}). Pass the --out directory (or OUT/train) of a finished `bertkit embed` run on "
                        f"tagged data.")
    try:
        manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{root / MANIFEST} is not valid JSON ({exc}). Rebuild the store with --overwrite.") from None
    if not isinstance(manifest, dict) or manifest.get("format") not in READABLE_FORMATS:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise UserError(f"{root} has format {found!r}; a word store has {WORD_STORE_RECORD.format!r}. Pass a word store, or rebuild "
                        f"it with `bertkit embed --overwrite`.")
    try:
        return migrated_word_store_manifest(manifest)
    except RecordProblem as exc:
        raise UserError(f"Word store {root} is damaged: its {MANIFEST}: {exc}. Re-run the `bertkit embed` command "
                        f"that made it, with --overwrite, to rebuild it.") from None


def migrated_word_store_manifest(manifest: dict[str, Any]) -> dict[str, Any]:
    """A word store's manifest in the current layout, from any layout this bertkit reads (a `RecordProblem` for one
    it cannot trust). The only place the older manifests are understood (their identities: `current_identity`)."""
    version = checked_version(manifest, WORD_STORE_RECORD, unversioned=None)
    return upgrade(manifest, WORD_STORE_RECORD, version, {1: _word_store_layout_2, 2: _word_store_layout_3})


def _word_store_layout_2(manifest: dict[str, Any]) -> dict[str, Any]:
    """Layout 1 -> 2: its reading {word_pool, max_length, stride} read sentences in windows cut at the head; its
    `layers` {layers, combine} are the pooling, `all` being the encoder layers it recorded (`n_layers`)."""
    reading = manifest.get("reading")
    if isinstance(reading, dict):
        reading = {**reading, "long_text": "chunk", "truncation": reading.get("truncation", "head")}
    n_layers = manifest.get("n_layers") if isinstance(manifest.get("n_layers"), int) else None
    try:
        pooling = word_pooling_from_json(manifest.get("layers") or {}, n_layers).to_json()
    except UserError as exc:
        raise RecordProblem(f"its layers {manifest.get('layers')!r} are not a word pooling ({exc})") from None
    return {**{k: v for k, v in manifest.items() if k != "layers"}, "reading": reading, "pooling": pooling}


def _word_store_layout_3(manifest: dict[str, Any]) -> dict[str, Any]:
    """Layout 2 -> 3: the family (a word store's: words)."""
    return {**manifest, FAMILY: "words"}


def verify_recorded_files(root: Path, manifest: dict[str, Any], noun: str, broken: str,
                          files: tuple[str, ...] | None = None) -> None:
    """Every file `manifest` records digests of (exactly `files` where given) against the size and sha256 recorded
    as it was written. A manifest without valid digests is damaged: the error names the store as `noun` and says
    what a changed file means (`broken`); both end with the command that rebuilds it."""
    records = manifest.get("digests")
    if (not isinstance(records, dict) or (files is not None and set(records) != set(files))
            or not all(digests.is_record(r) for r in records.values())):
        raise UserError(f"{noun} {root} is damaged: the digests in its {MANIFEST} are not valid. Re-run `bertkit "
                        f"embed` with --overwrite to rebuild it.")
    problems = digests.records_problems(root, records)
    if problems:
        detail = "; ".join(f"{name}: {why}" for name, why in problems)
        raise UserError(f"{noun} {root} is damaged: {detail}, so {broken}. Re-run the `bertkit embed` command that "
                        f"made it, with --overwrite, to rebuild it.")
