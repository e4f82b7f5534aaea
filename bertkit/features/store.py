"""Embedding stores on disk: shards while writing, one memory-mappable array when done, plus a manifest.

Layout of a complete store (a directory)::

    manifest.json    provenance + identity + shapes + the size and sha256 of the two arrays (`digests`, taken as
                     they are written), format `bertkit-store/2`, the family (`sentences`) and the sha256 of the
                     manifest itself (`record_sha256`); written last, so its presence means "complete"
    features.npy     float32/float16, shape (n, dim) or (n, layers, dim); plain .npy, `numpy.load(mmap_mode="r")`
    labels.npy       int64 label ids (only when the data had labels; the mapping is in the manifest)

Reading verifies (`open`): the manifest against its seal (an edited one is refused; `read_store_manifest`, which
reads an older layout through `migrated_store_manifest`), each array against its record (one streaming pass; a
manifest without the digests is damaged, not older), and, for a split store, that every split was made by the same feature function
(model, revision, pooling, layers, precision, ...: `identity.split_differences`), so a probe never fits on one
split and scores another.

While a run is in progress the directory holds ``identity.json`` (what the store is being made from) and
``shards/shard-NNNNN.npy`` + ``shard-NNNNN.json``: shard k holds rows ``[k*S, (k+1)*S)`` of the input in the
original order. Every file is written atomically (temp file + fsync + rename), a shard only once it is
complete, so a process killed at any point leaves only whole shards behind; a re-run skips them. When every
shard exists the shards are streamed into ``features.npy`` (bounded memory), the manifest is written, and the
shards are removed. The result is byte-identical whether or not the run was interrupted.

With ``--dev``/``--test``, ``bertkit embed`` writes one complete store per split (``OUT/train``, ``OUT/dev``,
``OUT/test``) and an ``OUT/splits.json`` index; `open_splits` reads either shape.

Fault points for the reliability tests (bertkit/io/faults.py): "embed.shard" counts shards written by this process
(`BERTKIT_FAIL_AFTER_SHARDS=k` fails after k of them; `BERTKIT_FAIL_SIGNAL=KILL` SIGKILLs instead), plus the named
kill points `embed.shard.before_rename` and `embed.finalize.before_manifest`. None is active in normal use.
"""

from __future__ import annotations

import io
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.data.labels import LabelMap
from bertkit.errors import UserError
from bertkit.features.identity import identity_mismatch, split_differences
from bertkit.features.settings import STORE_DTYPES
from bertkit.features.store_manifests import (
    IDENTITY,
    MANIFEST,
    STORE_RECORD,
    not_a_store_message,
    read_store_manifest,
    store_manifest,
    verify_recorded_files,
)
from bertkit.io import digests, disk, faults
from bertkit.io.atomic import atomic_path, write_json_atomic
from bertkit.io.ownership import SPLIT_NAMES, remove_recorded
from bertkit.io.record import make_dirs

log = logging.getLogger(__name__)

FORMAT = STORE_RECORD.format
FEATURES = "features.npy"
LABELS = "labels.npy"
SHARDS = "shards"
SPLITS_INDEX = "splits.json"
FAIL_HOOK_ENV = faults.FAIL_AFTER_SHARDS_ENV  # the test suites' names for the counted fault point "embed.shard"
FAIL_SIGNAL_ENV = faults.FAIL_SIGNAL_ENV


# ---------------------------------------------------------------- reading


@dataclass
class Store:
    """A complete store opened for reading; `features` is memory-mapped (nothing is loaded until indexed)."""

    path: Path
    features: np.ndarray
    labels: np.ndarray | None
    label_map: LabelMap | None
    manifest: dict[str, Any]

    def __len__(self) -> int:
        return int(self.features.shape[0])

    @property
    def dim(self) -> int:
        return int(self.features.shape[-1])

    @property
    def layer_names(self) -> list[str] | None:
        """For `--layers all` stores: names of the layer axis (`embeddings`, `layer 1`, ...)."""
        return self.manifest.get("layer_names")


def open(path: str | Path, verify: bool = True) -> Store:  # noqa: A001 - `bertkit.store.open` reads like `numpy.load`
    """Open a complete store; a split store (OUT with train/dev/test) opens its `train` part. `verify`: check the
    arrays against the manifest's digests first (one streaming pass; off only for a store this process just wrote)."""
    root = Path(path).expanduser()
    if not (root / MANIFEST).is_file() and (root / "train" / MANIFEST).is_file():
        root = root / "train"
    manifest = read_store_manifest(root)
    if verify:
        verify_arrays(root, manifest)
    try:
        features = np.load(root / FEATURES, mmap_mode="r")
        labels = np.load(root / LABELS) if (root / LABELS).is_file() else None
    except (ValueError, OSError, EOFError) as exc:  # truncated or overwritten array files
        raise UserError(
            f"Store {root} is damaged: {FEATURES}/{LABELS} cannot be read ({exc}). "
            f"Re-run `bertkit embed` with --overwrite to rebuild it."
        ) from None
    expected = tuple(manifest["shape"])
    if features.shape != expected:
        raise UserError(
            f"Store {root} is damaged: {FEATURES} has shape {features.shape} but the manifest says {expected}. "
            f"Re-run `bertkit embed` with --overwrite to rebuild it."
        )
    label_map = LabelMap.from_json(manifest["label_map"]) if manifest.get("label_map") else None
    return Store(root, features, labels, label_map, manifest)


def open_splits(path: str | Path) -> dict[str, Store]:
    """{split name: Store}: the sub-stores of a split store (all made by the same feature function:
    `split_differences`), or {"train": store} for a single store."""
    root = Path(path).expanduser()
    if (root / MANIFEST).is_file():
        return {"train": open(root)}
    names = [n for n in SPLIT_NAMES if (root / n / MANIFEST).is_file()]
    index = root / SPLITS_INDEX
    if index.is_file():
        names = _read_splits_index(index)
    if not names:
        raise UserError(not_a_store_message(root))
    missing = [n for n in names if not (root / n / MANIFEST).is_file()]
    if missing:
        raise UserError(f"Store {root} is damaged: {SPLITS_INDEX} lists the split(s) {', '.join(missing)}, which have "
                        f"no {MANIFEST}. Re-run the `bertkit embed` command that made it, with --overwrite.")
    manifests = {name: read_store_manifest(root / name) for name in names}
    differences = split_differences(manifests)
    if differences:
        raise UserError(
            f"The splits of store {root} were not made the same way, so features of one cannot be scored against "
            f"another:\n  " + "\n  ".join(differences) + f"\nEvery split of a store must share model, pooling, layers "
            f"and precision. Re-embed all of them in one run: `bertkit embed --data TRAIN --dev DEV [--test TEST] "
            f"--out {root} --overwrite`."
        )
    return {name: open(root / name) for name in names}


def _read_splits_index(index: Path) -> list[str]:
    try:
        names = json.loads(index.read_text(encoding="utf-8"))["splits"]
    except (OSError, ValueError, KeyError, TypeError):
        names = None
    if not isinstance(names, list) or not all(n in SPLIT_NAMES for n in names):
        raise UserError(f"{index} is damaged: it does not list the store's splits (of {', '.join(SPLIT_NAMES)}). "
                        f"Re-run the `bertkit embed` command that made the store, with --overwrite.")
    return names


def verify_arrays(root: Path, manifest: dict[str, Any]) -> None:
    """features.npy and labels.npy against the size and sha256 the manifest recorded as they were written; a manifest
    without them is damaged (bertkit records them in every store it makes)."""
    verify_recorded_files(root, manifest, "Store", "its features are not the ones it recorded")


# ---------------------------------------------------------------- writing


def shard_ranges(n_rows: int, shard_size: int) -> list[tuple[int, int]]:
    """Shard k covers rows [k*S, min((k+1)*S, n)) of the input, in the original order."""
    return [(start, min(start + shard_size, n_rows)) for start in range(0, n_rows, shard_size)]


class ShardedWriter:
    """What both stores' writers share: a claimed --out folder written in numbered parts (`ranges`, shards of rows or
    chunks of sentences) after an identity file, each part committed by its array's atomic rename, the finished
    store's manifest written last. `status` and `prepare` start or resume it; a store with other settings is
    refused. A writer says what it is (`what`: "an embedding store"; `unfinished`: "an unfinished ..."), how its two identities read and how two
    differ, and what its finished files need on disk."""

    what = "a store"
    unfinished = "an unfinished store"

    def __init__(self, path: str | Path, identity: dict[str, Any], n_items: int, part_size: int) -> None:
        self.path = Path(path).expanduser()
        self.identity = identity
        self.ranges = shard_ranges(n_items, part_size)
        self.written_here = 0

    def finished_identity(self) -> dict[str, Any]:
        """The identity the manifest of a finished store in `path` records."""
        raise NotImplementedError

    def unfinished_identity(self) -> dict[str, Any] | None:
        """The identity an unfinished store in `path` was started with (None: none was)."""
        if not (self.path / IDENTITY).is_file():
            return None
        try:
            return dict(json.loads((self.path / IDENTITY).read_text(encoding="utf-8")))
        except (ValueError, TypeError, UnicodeDecodeError):
            return {"unreadable": True}

    def differences(self, old: dict[str, Any]) -> list[str]:
        """`key: old -> new` lines for the settings `old` and this writer's identity do not share."""
        raise NotImplementedError

    def final_bytes(self) -> int:
        """What the finished store's files need on disk (a disk-full message asks for it)."""
        return disk.MARGIN_BYTES

    def status(self) -> str:
        """'complete' (same identity, finished), 'partial' (same identity, unfinished) or 'new' (empty dir)."""
        if (self.path / MANIFEST).is_file():
            self.check_identity(self.finished_identity(), self.what)
            remove_work_files(self.path)  # a run killed right after its manifest left them behind
            return "complete"
        old = self.unfinished_identity()
        if old is not None:
            self.check_identity(old, self.unfinished)
            return "partial"
        return "new"

    def check_identity(self, old: dict[str, Any], what: str) -> None:
        differences = self.differences(old)
        if differences:
            raise UserError(f"--out {self.path} already holds {what} made with different settings:\n  "
                            + "\n  ".join(differences) + "\nUse a new --out directory, re-run with the store's "
                            "settings, or pass --overwrite to replace it.")

    def prepare(self, create: bool = True) -> str:
        """Start or resume in a claimed run directory (`rundir.claim_run_dir`); the status before this call
        ('new'/'partial'/'complete'). Only the process that `create`s writes the folder (others write parts)."""
        status = self.status()
        if status != "complete" and create:  # (temp files a killed run left: removed by the claim, by record)
            try:
                make_dirs(self.path / SHARDS)
                if status == "new":
                    write_json_atomic(self.path / IDENTITY, self.identity)
            except OSError as exc:
                if disk.is_disk_full(exc):
                    raise disk.full_error(self.path, self.final_bytes()) from None
                raise UserError(f"Cannot write to --out {self.path} ({exc.strerror or exc}). Choose a directory you "
                                f"can write to.") from None
        return status

    def commit_array(self, path: Path, array: np.ndarray) -> None:
        """A part's array, saved atomically (its presence commits the part), then counted (the fault points)."""
        with atomic_path(path) as tmp:
            with tmp.open("wb") as handle:
                np.save(handle, array)
            faults.kill_point("embed.shard.before_rename")
        self.written_here += 1
        faults.fail_point("embed.shard", self.written_here)


class StoreWriter(ShardedWriter):
    """Writes one store: `prepare` (identity check, resume), `write_shard` per shard, `finalize` at the end.

    Several processes may write disjoint shards of the same store (multi-process runs); only one of them
    (rank 0) calls `prepare(..., create=True)` and `finalize`.
    """

    what = "an embedding store"
    unfinished = "an unfinished embedding store"

    def __init__(self, path: str | Path, identity: dict[str, Any], n_rows: int, shard_size: int,
                 row_shape: tuple[int, ...], store_dtype: str):
        if store_dtype not in STORE_DTYPES:
            raise UserError(f"--store-dtype must be one of {', '.join(STORE_DTYPES)}; got {store_dtype!r}.")
        super().__init__(path, identity, n_rows, shard_size)
        self.n_rows = n_rows
        self.shard_size = shard_size
        self.row_shape = tuple(row_shape)
        self.dtype = np.dtype(store_dtype)

    def finished_identity(self) -> dict[str, Any]:
        return read_store_manifest(self.path).get("identity", {})

    def differences(self, old: dict[str, Any]) -> list[str]:
        return identity_mismatch(old, self.identity)

    def final_bytes(self) -> int:
        return disk.with_margin(self.features_bytes())

    def features_bytes(self) -> int:
        """Size of the finished features.npy (the shards hold as much again until the merge removes them)."""
        return int(np.prod((self.n_rows, *self.row_shape))) * self.dtype.itemsize

    def shard_file(self, k: int) -> Path:
        return self.path / SHARDS / f"shard-{k:05d}.npy"

    def shard_meta_file(self, k: int) -> Path:
        return self.path / SHARDS / f"shard-{k:05d}.json"

    def shard_done(self, k: int) -> bool:
        """A shard is complete when its metadata and its array exist and the array has the expected shape."""
        meta, array = self.shard_meta_file(k), self.shard_file(k)
        if not (meta.is_file() and array.is_file()):
            return False
        start, end = self.ranges[k]
        try:
            found = np.load(array, mmap_mode="r")
            json.loads(meta.read_text(encoding="utf-8"))
        except (ValueError, OSError, json.JSONDecodeError):
            return False
        return found.shape == (end - start, *self.row_shape) and found.dtype == self.dtype

    def pending_shards(self, rank: int = 0, world: int = 1) -> list[int]:
        """Shards this process (rank of world) still has to write."""
        return [k for k in range(len(self.ranges)) if k % world == rank and not self.shard_done(k)]

    def write_shard(self, k: int, features: np.ndarray, meta: dict[str, Any]) -> None:
        """Write shard k atomically (metadata first, the array last: the array's presence commits the shard)."""
        start, end = self.ranges[k]
        expected = (end - start, *self.row_shape)
        if features.shape != expected:
            raise ValueError(f"shard {k}: features shape {features.shape}, expected {expected}")
        array = np.ascontiguousarray(features, dtype=self.dtype)
        with disk.writing(self.path / SHARDS, disk.with_margin(array.nbytes)):
            write_json_atomic(self.shard_meta_file(k), {"shard": k, "rows": [start, end], **meta})
            self.commit_array(self.shard_file(k), array)

    def all_shards_done(self) -> bool:
        return all(self.shard_done(k) for k in range(len(self.ranges)))

    def shard_metas(self) -> list[dict[str, Any]]:
        return [json.loads(self.shard_meta_file(k).read_text(encoding="utf-8")) for k in range(len(self.ranges))]

    def finalize(self, manifest: dict[str, Any], labels: np.ndarray | None, family: str = "sentences") -> Store:
        """Merge the shards into features.npy, write labels and the manifest (last; of `family`), remove the
        shards."""
        missing = [k for k in range(len(self.ranges)) if not self.shard_done(k)]
        if missing:
            raise RuntimeError(f"cannot finalize {self.path}: shards {missing[:10]} are missing")
        shape = (self.n_rows, *self.row_shape)
        need = disk.with_margin(self.features_bytes() + 8 * self.n_rows)
        with disk.writing(self.path, need):  # features, labels and the manifest
            with atomic_path(self.path / FEATURES) as tmp:
                records = {FEATURES: self._merge_shards(tmp, shape)}
            if labels is not None:
                with atomic_path(self.path / LABELS) as tmp:
                    with tmp.open("wb") as handle:
                        hashing = digests.HashingWriter(handle)
                        np.save(hashing, np.asarray(labels, dtype=np.int64))
                records[LABELS] = hashing.record()
            full = {**manifest, "identity": self.identity, "shape": list(shape), "store_dtype": str(self.dtype),
                    "files": {"features": FEATURES, "labels": LABELS if labels is not None else None},
                    "digests": records}
            faults.kill_point("embed.finalize.before_manifest")
            write_json_atomic(self.path / MANIFEST, store_manifest(full, family))
        remove_work_files(self.path)
        return open(self.path, verify=False)  # its digests were taken from these very bytes, just now

    def _merge_shards(self, target: Path, shape: tuple[int, ...]) -> dict[str, Any]:
        """features.npy at `target` with plain writes: the .npy header of the whole array, then each shard's bytes
        in order, copied in blocks (no mapping whose dirty pages would grow the process's memory with the rows).
        The bytes are those `np.lib.format.open_memmap` + assigning every shard made. Returns their record (size,
        sha256), hashed as they are copied."""
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {"descr": np.lib.format.dtype_to_descr(self.dtype),
                                                      "fortran_order": False, "shape": shape})
        with target.open("wb") as out:
            out.write(header.getvalue())
            out.truncate(len(header.getvalue()) + self.features_bytes())
        disk.preallocate(target)  # a full disk is ENOSPC now, not half-way through the copy
        with target.open("r+b") as out:
            out.seek(len(header.getvalue()))
            hashing = digests.HashingWriter(out, written_before=header.getvalue())
            for k, (start, end) in enumerate(self.ranges):
                with self.shard_file(k).open("rb") as shard:
                    copy_npy_data(shard, hashing, (end - start, *self.row_shape), self.dtype)
        return hashing.record()


def remove_work_files(path: Path) -> None:
    """A finished store's shards and identity (the sentence and the word store's): only what the run's record says
    bertkit wrote (`ownership.remove_recorded`)."""
    for work in (path / SHARDS, path / IDENTITY):
        kept = remove_recorded(work)
        if kept:
            log.warning("kept %s: it holds what bertkit did not write (%s)", work, kept[:5])


def copy_npy_data(source: Any, out: Any, shape: tuple[int, ...], dtype: np.dtype, block: int = 1 << 24) -> None:
    """Append the data bytes of the .npy file open in `source` (C order, `shape` and `dtype` checked) to `out`."""
    version = np.lib.format.read_magic(source)
    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    found_shape, fortran, found_dtype = read_header(source)
    if tuple(found_shape) != tuple(shape) or found_dtype != dtype or (fortran and len(shape) > 1):
        raise ValueError(f"{source.name}: {found_shape} {found_dtype}, expected {shape} {dtype} in C order")
    left = int(np.prod(shape)) * dtype.itemsize
    while left:
        data = source.read(min(block, left))
        if not data:
            raise ValueError(f"{source.name} is truncated")
        out.write(data)
        left -= len(data)


def run_differences(root: Path, identities: dict[str, dict[str, Any]], split_layout: bool) -> list[str]:
    """What differs between the store(s) in `root` and the stores a run would write (empty: the same run).

    `identities` maps each split to its identity; with `split_layout` each split is a store in `root/<split>`."""
    single = (root / MANIFEST).is_file() or (root / IDENTITY).is_file()
    split = [n for n in SPLIT_NAMES if (root / n).is_dir()]
    if (split_layout and single) or (not split_layout and split):
        have, want = ("a single store", "one store per split") if single else ("one store per split", "a single store")
        return [f"layout: {have} -> {want} (--dev/--test decide)"]
    extra = [n for n in split if n not in identities]
    differences = [f"splits: {split} -> {list(identities)}"] if extra else []
    for name, identity in identities.items():
        path = root / name if split_layout else root
        old = _stored_identity(path)
        if old is not None:
            prefix = f"{name} " if split_layout else ""
            differences += [prefix + line for line in identity_mismatch(old, identity)]
    return differences


def _stored_identity(path: Path) -> dict[str, Any] | None:
    """The identity a (complete or unfinished) store in `path` was made with; None when there is none."""
    if (path / MANIFEST).is_file():
        return dict(read_store_manifest(path).get("identity", {}))
    if (path / IDENTITY).is_file():
        try:
            return dict(json.loads((path / IDENTITY).read_text(encoding="utf-8")))
        except (json.JSONDecodeError, UnicodeDecodeError, TypeError, ValueError):
            return {"unreadable": True}
    return None


def write_splits_index(root: Path, splits: list[str]) -> None:
    with disk.reported(root, disk.MARGIN_BYTES):
        write_json_atomic(root / SPLITS_INDEX, {"format": FORMAT, "splits": splits})


def store_size_bytes(path: Path) -> int:
    """Bytes on disk under `path` (a store or a split store)."""
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())
