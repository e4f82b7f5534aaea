"""`bertkit probe --features DIR` on a word store (`bertkit embed` on tagged data, with train and dev): its settings
read from its manifests (the `Reading`, the `Pooling`, the tag scheme and columns, the encoder and its depth, the
precision its words were read in) and checked against the flags before any vector is read (a --word-pool,
--max-length or --stride other than the store's is refused: its vectors cannot be read again; --model must be the
encoder it records); every file verified against its digests as it is opened (`features.word_store`).

The table (`words_run.table_rows`) is limited to what the store holds (`features.word_layers.store_gives`): a
store of single states (`--layers all`, a list concatenated, one layer) gives each of its states apart and every
combination of them (the paper's rows, from a store of `--layers all`); a store of layers summed or averaged gives
its own row only. Without --layers/--combine the rows it cannot give are skipped and named in a note; asked for
with them, they are refused with the fix. Each row's vectors are read one block of columns at a time
(`StoreLayers`) and probed as the words path probes them (`words_run.probe_word_table`). The baselines that need
words and tags only come from the stored sentences; the random-init encoder needs the encoder the store records
(its config and tokenizer; --model can point to the same weights elsewhere): computed where it can be read here,
else the note says why not."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bertkit.data.tagged import TaggedSentence
from bertkit.data.tagscheme import OUTSIDE, TagScheme
from bertkit.encoding.reading import Reading
from bertkit.errors import UserError
from bertkit.features.settings import Pooling
from bertkit.features.word_layers import StoreLayers, store_gives, stored_states
from bertkit.features.word_store import (
    WordStore,
    open_word_store,
    read_manifest,
    recorded_settings,
    word_store_splits,
)
from bertkit.models.compute import Compute
from bertkit.options import all_fields, flag, value
from bertkit.probe.fit import DEFAULT_C
from bertkit.probe.words_run import (
    WordProbeRun,
    probe_word_table,
    random_encoder_row,
    table_rows,
    with_random_encoder,
)

STORE_OPTIONS = ("features", "task", "seed", "max_length", "stride", "model", "layers", "batch_size", "precision", "C",
                 "baselines", "out", "overwrite", "trust_remote_code", "word_pool", "combine", "limit", "cache_dir")
"""The options `bertkit probe` takes with a word store; the data options are the store's (its words, tags, columns
and scheme were read when it was embedded)."""
SAME_IN_SPLITS = ("model", "revision", "reading", "pooling", "layers", "n_layers", "width", "precision", "scheme",
                  "columns")
"""What the train and dev stores must share for one probe to be fitted on one and scored on the other."""
EMBED_BOTH = "bertkit embed --task tags --data TRAIN --dev DEV --out {root} --layers all"


def word_store_problems(cfg: Any) -> list[str]:
    """`bertkit probe --features` on a word store (`cfg`: the probe's config): no option the store fixed already."""
    defaults = {f.name: f.default for f in all_fields(type(cfg))}
    given = [name for name, default in defaults.items() if name not in STORE_OPTIONS
             and value(cfg, name) != default and (value(cfg, name) or default)]
    return [f"{flag(name)} does not apply with --features {cfg.features} (a word store: its words, tags, columns and "
            f"dev split were read when it was embedded). Drop {flag(name)}"
            + (", or drop --features to read --data now." if name in ("data", "dev") else ".") for name in given]


def read_store_manifests(root: Path) -> dict[str, dict[str, Any]]:
    """{split: manifest} of the word store in `root`, train and dev present and made the same way (cheap: no vector
    is read)."""
    splits = word_store_splits(root)
    if not splits:
        raise UserError(f"--features {root} is not a word store (no finished `bertkit embed` store on tagged data in "
                        f"it or in its train/ folder). Pass the --out of `{EMBED_BOTH.format(root='OUT')}`.")
    if "dev" not in splits:
        raise UserError(f"The word store {root} has no dev split, and a word probe is scored on dev words. Embed "
                        f"train and dev in one run: `{EMBED_BOTH.format(root=root)} --overwrite`.")
    manifests = {name: read_manifest(path) for name, path in splits.items() if name in ("train", "dev")}
    differ = [key for key in SAME_IN_SPLITS if manifests["train"].get(key) != manifests["dev"].get(key)]
    if differ:
        raise UserError(f"The train and dev splits of the word store {root} were not made the same way ("
                        f"{', '.join(differ)} differ), so a probe fitted on one cannot be scored on the other. "
                        f"Embed both in one run: `{EMBED_BOTH.format(root=root)} --overwrite`.")
    return manifests


def check_reading_flags(cfg: Any, stored: Reading, root: Path) -> None:
    """--word-pool, --max-length and --stride made the vectors: given, they must be the store's."""
    asked = {"word_pool": cfg.tagged.word_pool, "max_length": cfg.reading.max_length, "stride": cfg.reading.stride}
    clashes = [f"{flag(name)} {value} (the store: {getattr(stored, name)})" for name, value in asked.items()
               if value is not None and value != getattr(stored, name)]
    if clashes:
        raise UserError(f"The word store {root} was read with other settings than {', '.join(clashes)}; its vectors "
                        f"are probed as they were made. Drop those flags, or embed again with them (`bertkit embed "
                        f"--task tags ... --overwrite`), or probe --data to read the words now.")


def check_store_model(cfg: Any, manifest: dict[str, Any], root: Path) -> None:
    """--model given with a word store: the encoder the store records (its revision)."""
    from bertkit.models import loading

    if cfg.model is None:
        return
    loading.check_model_folder(cfg.model)
    if loading.model_revision(cfg.model) != manifest.get("revision"):
        raise UserError(f"The word store {root} was made by model {manifest.get('model')!r} (revision "
                        f"{manifest.get('revision')}), not by --model {cfg.model} "
                        f"({loading.model_revision(cfg.model)}). Drop --model to probe the store with the model it "
                        f"records, or embed again with `bertkit embed --task tags --model {cfg.model}`.")


def describe_store(stored: Pooling, n_layers: int) -> str:
    """What a store's vectors are, in words, for messages."""
    indices = stored.resolve(n_layers)
    option = f"--layers {stored.layers_option}" + (f" --combine {stored.combine}" if len(indices) > 1 else "")
    if stored_states(stored, n_layers):
        return f"hidden state{'s' * (len(indices) > 1)} {', '.join(map(str, indices))} ({option})"
    how = {"sum": "summed", "mean": "averaged"}.get(stored.combine, stored.combine)
    return f"one vector per word, hidden states {', '.join(map(str, indices))} {how} ({option})"


def store_rows(layers: str | None, combine: str | None, stored: Pooling, n_layers: int,
               root: Path) -> tuple[list[tuple[str, Pooling]], list[str]]:
    """The rows of the table (`table_rows`) the store gives, and a note naming the ones it cannot. Asked for with
    --layers/--combine, a row it cannot give is refused; by default it is skipped, and a store of one combination
    the table lacks gives its own row."""
    rows = table_rows(layers, combine, n_layers)
    kept = [(label, spec) for label, spec in rows if store_gives(stored, n_layers, spec)]
    skipped = [label for label, spec in rows if (label, spec) not in kept]
    holds = describe_store(stored, n_layers)
    if skipped and (layers is not None or combine is not None):
        raise UserError(f"--layers/--combine ask for rows the word store {root} cannot give ({', '.join(skipped)}): "
                        f"it holds {holds}. Ask for rows it holds, drop --layers/--combine to probe what it holds, or "
                        f"embed with `bertkit embed --task tags --layers all` for every row.")
    if not kept:
        kept = [(stored.label, stored)]
    note = (f"{len(skipped)} of the table's rows skipped: the word store holds {holds}, so it cannot give "
            f"{', '.join(skipped)}. For every row, probe a store of `bertkit embed --task tags --layers all`.")
    return kept, [note] if skipped else []


def stored_sentences(store: WordStore, limit: int | None) -> list[TaggedSentence]:
    """The store's sentences (its first `limit`), words and tags as they were read when it was embedded."""
    n = store.n_sentences if limit is None else min(limit, store.n_sentences)
    return [TaggedSentence(store.words[s], store.tags[s]) for s in range(n)]


def check_stored_tags(train: Sequence[TaggedSentence], dev: Sequence[TaggedSentence], root: Path,
                      scheme: TagScheme, limit: int | None = None) -> None:
    """A dev tag the train split never has cannot be predicted, and a dev split of entity tags without any entity
    (in the sentences probed: the first `limit`, --limit) leaves entity F1 undefined (as `data.tagged.check_dev_tags`
    says of files)."""
    seen = {tag for s in train for tag in s.tags}
    dev_tags = {tag for s in dev for tag in s.tags}
    unseen = sorted(dev_tags - seen)
    if unseen:
        raise UserError(f"The dev split of the word store {root} has tags its train split never has: "
                        f"{', '.join(unseen[:10])}. A probe predicts only training tags. Embed training data with "
                        f"these tags (or with more sentences: --limit), or embed again with --unseen-tags drop or "
                        f"--unseen-tags O (a training tag to read them as).")
    if scheme.has_entities and dev_tags <= {OUTSIDE}:
        which = f"its first {limit:,} sentences (--limit {limit})" if limit is not None else "its sentences"
        raise UserError(f"The dev split of the word store {root} holds no entity in {which} (every tag is O): entity "
                        f"F1 is undefined on it, so it cannot score the rows or choose the best. Embed dev data with "
                        f"entities (`bertkit embed --task tags --data TRAIN --dev DEV --out {root} --overwrite`, --dev "
                        f"a file with entities){', or pass a larger --limit' if limit is not None else ''}, or embed "
                        f"with --tag-scheme none to score the tags by word accuracy.")


def store_compute(cfg: Any, manifest: dict[str, Any], root: Path) -> tuple[Compute, Compute, list[str]]:
    """(the precision the store's words were read in, the compute a random-init pass runs in, notes): --precision
    auto takes the store's where this CPU runs it natively; an explicit one that differs applies to that pass and
    says so."""
    recorded = Compute.from_json({"device": "cpu", "precision": manifest.get("precision")}) or Compute()
    compute, notes = Compute.over_record("cpu", cfg.precision, recorded, f"the word store {root}")
    if not cfg.fit.baselines and cfg.precision not in ("auto", recorded.precision):
        notes = [f"--precision {cfg.precision} applies to nothing here: the store's vectors were read in "
                 f"{recorded.precision}, and with --no-baselines no encoder runs."]
    elif not cfg.fit.baselines:
        notes = []
    return recorded, compute, notes


def random_encoder_note(cfg: Any, manifest: dict[str, Any], model: str) -> str | None:
    """Why the random-init encoder cannot be built from the model the store records (None: it can)."""
    from bertkit.models import loading

    if cfg.model is not None:
        return None  # checked against the store already
    try:
        loading.check_model_folder(model)
        changed = loading.model_revision(model) != manifest.get("revision")
    except (UserError, OSError, ValueError) as exc:
        return (f"random-init encoder baseline skipped: the model the store records, {model}, cannot be read here "
                f"({str(exc).splitlines()[0][:200]}). Pass --model with the same model to compute it.")
    if changed:
        return (f"random-init encoder baseline skipped: the model folder {model} has changed since the store was "
                f"made (revision {manifest.get('revision')}). Pass --model with the model the store was made by.")
    return None


def run_word_store_probe(cfg: Any, say: Callable[[str], None] | None = None) -> WordProbeRun:
    """The word table on the store `cfg.features` (`cfg`: the probe's config): settings read and checked, splits
    opened and verified, one row's vectors in memory at a time, baselines as the store allows."""
    root = Path(cfg.features).expanduser()
    manifests = read_store_manifests(root)
    manifest = manifests["train"]
    reading, stored = recorded_settings(manifest)
    check_reading_flags(cfg, reading, root)
    check_store_model(cfg, manifest, root)
    n_layers = int(manifest["n_layers"])
    rows, notes = store_rows(cfg.layers, cfg.combine, stored, n_layers, root)
    recorded, compute, compute_notes = store_compute(cfg, manifest, root)
    splits = word_store_splits(root)
    train_store, dev_store = (open_word_store(splits[name]) for name in ("train", "dev"))  # every file verified
    train, dev = (stored_sentences(store, cfg.inputs.limit) for store in (train_store, dev_store))
    scheme = TagScheme(train_store.scheme, train_store.scheme)
    check_stored_tags(train, dev, root, scheme, cfg.inputs.limit)
    if say is not None:
        say(f"word store {root}: {len(train):,} train / {len(dev):,} dev sentences, tags {scheme.name}; "
            f"{len(rows)} rows")
    C = cfg.fit.C or DEFAULT_C
    with StoreLayers.of(train_store, len(train)) as train_layers, StoreLayers.of(dev_store, len(dev)) as dev_layers:
        table, best = probe_word_table(train_layers, dev_layers, train, dev, scheme, rows, C, cfg.inputs.seed,
                                       cfg.fit.baselines,
                                       say)
    model = cfg.model or train_store.model
    skipped = random_encoder_note(cfg, manifest, model) if cfg.fit.baselines else None
    notes += [skipped] if skipped else compute_notes
    if cfg.fit.baselines and skipped is None:
        from bertkit.models import loading

        tokenizer = loading.load_tokenizer(model, cfg.trust_remote_code)
        random_row = random_encoder_row(model, tokenizer, train, dev, scheme, table.best(), reading, cfg.batch_size,
                                        C, cfg.inputs.seed, cfg.trust_remote_code, compute, cfg.inputs.cache_dir)
        table, warning = with_random_encoder(table, random_row)
        notes += list(warning)
    return WordProbeRun(train_store.model, train_store.revision, str(train_store.path), str(dev_store.path),
                        train_store.columns, reading, C, {"train": len(train), "dev": len(dev)}, table, tuple(notes),
                        best_probe=best, compute=recorded, features=str(root),
                        encoder_sha256=(manifest.get("identity") or {}).get("encoder_sha256"))
