"""The problem families bertkit knows, in the order they are asked (the most particular first; sentences, which
reads any table of text, last), and the one question every command asks: `family_of` its data, model, probe or
store. Adding a family = its module and one line in `FAMILIES` (or `register` at run time, as a test family does)."""

from __future__ import annotations

from typing import Any, ClassVar

from bertkit.errors import UserError
from bertkit.families.base import FAMILIES, Family, family_of
from bertkit.families.sentences import SENTENCES
from bertkit.families.spans import SPANS
from bertkit.families.words import WORDS

FAMILIES[:] = [SPANS, WORDS, SENTENCES]  # asked in order (SQuAD sets by their content first); the last one reads
# whatever the others do not


def register(family: Family, *, before: str | None = None) -> None:
    """Add `family` (ahead of the family named `before`, default: ahead of the last, which reads the rest)."""
    names = [f.name for f in FAMILIES]
    if family.name in names:
        raise ValueError(f"a family named {family.name!r} is registered already")
    FAMILIES.insert(names.index(before) if before is not None else len(FAMILIES) - 1, family)


def unregister(name: str) -> None:
    FAMILIES[:] = [f for f in FAMILIES if f.name != name]


def family_named(name: str) -> Family:
    """The family a record names (`"family": "words"`)."""
    for family in FAMILIES:
        if family.name == name:
            return family
    raise UserError(f"No problem family named {name!r}: bertkit knows {', '.join(f.name for f in FAMILIES)}. The "
                    f"record naming it was made by a newer bertkit: upgrade bertkit to read it.")


def cached_family(cfg: Any, **sources: Any) -> Family:
    """`family_of(**sources)` for a command's config, asked once: kept on the (frozen) config, so its checks and its
    run ask the same family without reading the data or the model's record again."""
    family = cfg.__dict__.get("_family")
    if family is None:
        family = family_of(**sources)
        object.__setattr__(cfg, "_family", family)
    return family


class ReadsItsData:
    """A training command's config whose problem family is its --data's (`finetune`, `sweep`): the family asked once
    (`family`), and the options it does not read refused with the config's other problems (`COMMAND`: the command's
    name, for the family's messages)."""

    COMMAND: ClassVar[str] = ""

    def problems(self) -> list[str]:
        return super().problems() + self.family.refused_options(self, self.COMMAND, self.inputs.data)  # type: ignore[misc]

    @property
    def family(self) -> Family:
        """The problem family of --data (`bertkit.families`), asked once."""
        return cached_family(self, data=self.inputs, task=self.inputs.task)  # type: ignore[attr-defined]
