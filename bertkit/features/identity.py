"""A store's identity: the settings that make its features what they are (`bertkit.features.sentence_embed.store_identity`
builds it; the store's manifest keeps it). Compared with the next run's (a resume must match, `identity_mismatch`) and
across the splits of one store (train, dev and test must be features of the same function, `split_differences`)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from bertkit.encoding.reading import Reading
from bertkit.errors import UserError
from bertkit.features.settings import Pooling

IDENTITY_DEFAULTS = Reading().long_text_json()
"""Identity keys added after stores were first written, with the value every store made before had: such a store
still resumes (and counts as complete) under the same settings."""

ADDED_UNKNOWN = ("encoder_sha256",)
"""Identity keys added later whose value older stores never knew: compared only where both identities have one (an
older unfinished store still resumes; from then on a changed encoder is refused)."""

SHARED_SETTINGS = ("model", "revision", "backend", *Pooling.KEYS, "dtype", "store_dtype",
                   "max_length", *Reading.LONG_TEXT_KEYS)
"""The identity keys every split of one store must agree on."""


def identity_mismatch(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The settings that differ between two identities, as `key: old -> new` lines."""
    old = {**IDENTITY_DEFAULTS, **old} if old else old
    if old and all(key in old for key in Pooling.KEYS):  # written as given before Pooling.to_json: "-4, -3", "ALL"
        with contextlib.suppress(UserError):  # a pooling this bertkit cannot read is listed as it differs
            old = {**old, **Pooling.from_json(old).to_json()}
    keys = sorted(set(old) | set(new))
    unknown = {k for k in ADDED_UNKNOWN if old and old.get(k) is None}
    return [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys if old.get(k) != new.get(k) and k not in unknown]


def split_differences(manifests: dict[str, dict[str, Any]]) -> list[str]:
    """`key: split value, split value` lines for the feature settings the splits of one store (their manifests, by
    split name) do not share; empty when they agree."""
    names = list(manifests)
    identities = {n: {**IDENTITY_DEFAULTS, **(manifests[n].get("identity") or {})} for n in names}
    lines = []
    for key in SHARED_SETTINGS:
        values = {n: identities[n].get(key) for n in names}
        if key == "model" and len({identities[n].get("revision") for n in names}) == 1:
            continue  # the same weights named by two paths (./tiny, /abs/tiny) are the same model
        if len({json.dumps(v, sort_keys=True) for v in values.values()}) > 1:
            lines.append(f"{key}: " + ", ".join(f"{n} {values[n]!r}" for n in names))
    return lines
