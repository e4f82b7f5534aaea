"""What `bertkit evaluate` prints for a tagging model under its headline scores: for entity tags the entity report
counted as conlleval counts (seqeval's default mode: an I- after O opens an entity; per type, micro and macro
averages, and the strict micro average beside them), the entity errors (each predicted entity counted once, and the gold
entities no prediction overlaps) and the confusion of entity types; for plain tags (POS) the per-tag scores and the
confusion of tags. A confusion too wide for a terminal is shown as its largest off-diagonal cells."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape

from bertkit.cli.output import out_console, table

if TYPE_CHECKING:
    from collections.abc import Mapping

    from bertkit.commands.evaluate import EvaluateResult
    from bertkit.scoring.entities import TypeScore
    from bertkit.scoring.tag_report import Confusion, EntityErrors

MATRIX_LABELS = 12
"""A confusion with more labels than this is listed as its largest off-diagonal cells instead of a matrix."""
CONFUSED_SHOWN = 15
"""How many off-diagonal cells that list shows."""


def show_tag_report(result: EvaluateResult) -> None:
    """The report tables of a tagging model's evaluation (entity or plain tags)."""
    if result.per_type:
        out_console.print(table("per entity type (conlleval counting; strict: seqeval's strict mode)",
                                ["type", "precision", "recall", "F1", "gold", "predicted"], entity_report_rows(result)))
    mistakes = result.mistakes
    if mistakes is None:
        return
    if mistakes.errors is not None:
        gold = int(result.metrics.score("entities") or 0)
        out_console.print(table("entity errors (conlleval counting; each predicted entity counted once, by its first "
                                "kind)",
                                ["kind", "entities", "share"], error_rows(mistakes.errors, gold)))
        out_console.print(false_counts_line(mistakes.errors, gold), highlight=False)
    if mistakes.per_tag is not None:
        out_console.print(table("per tag (words)", ["tag", "precision", "recall", "F1", "gold", "predicted"],
                                per_tag_rows(mistakes.per_tag)))
    what = "entity types, paired by the same boundaries; none: no entity there" if mistakes.errors is not None \
        else "tags, over words"
    out_console.print(confusion_table(mistakes.confusion, what))


def entity_report_rows(result: EvaluateResult) -> list[list[object]]:
    """The entity report: a row per entity type, then the micro and macro averages (conlleval counting), and the
    strict micro average."""
    rows: list[list[object]] = [[escape(name), r["precision"], r["recall"], r["f1"], r["support"], r["predicted"]]
                                for name, r in result.per_type.items()]
    scores = result.metrics
    rows.append(["micro avg", scores.score("precision"), scores.score("recall"), scores.score("f1"),
                 scores.value("entities"), scores.value("predicted_entities")])
    rows.append(["macro avg", scores.score("macro_precision"), scores.score("macro_recall"), scores.score("macro_f1"),
                 None, None])
    if scores.score("f1_strict") is not None:  # the other counting, named: strict entities only
        rows.append(["micro avg, strict", scores.score("precision_strict"), scores.score("recall_strict"),
                     scores.score("f1_strict"), scores.value("entities"), None])
    return rows


def _share(count: int, total: int, of: str) -> str:
    return f"{count / total:.1%} of {total:,} {of}" if total else "-"


def error_rows(errors: EntityErrors, gold: int) -> list[list[object]]:
    """(kind, entities, share): the predicted entities by kind, then the missed gold ones."""
    kinds = [("correct", errors.correct), ("wrong type (same boundaries)", errors.wrong_type),
             ("wrong boundary (same type)", errors.wrong_boundary),
             ("wrong type and boundary", errors.wrong_type_and_boundary),
             ("spurious (overlaps no gold)", errors.spurious)]
    rows: list[list[object]] = [[kind, count, _share(count, errors.predicted, "predicted")] for kind, count in kinds]
    return [*rows, ["missed (no prediction overlaps)", errors.missed, _share(errors.missed, gold, "gold")]]


def false_counts_line(errors: EntityErrors, gold: int) -> str:
    """How seqeval's false positives and negatives split into the error kinds (two lines)."""
    false_negatives = gold - errors.correct
    return (f"false positives {errors.false_positives:,} = {errors.wrong_type:,} wrong type + "
            f"{errors.wrong_boundary:,} wrong boundary + {errors.wrong_type_and_boundary:,} both + "
            f"{errors.spurious:,} spurious\nfalse negatives {false_negatives:,} = {errors.missed:,} missed + "
            f"{false_negatives - errors.missed:,} overlapped by a wrong prediction")


def per_tag_rows(per_tag: Mapping[str, TypeScore]) -> list[list[object]]:
    return [[escape(tag), r.precision, r.recall, r.f1, r.support, r.predicted] for tag, r in per_tag.items()]


def confusion_table(confusion: Confusion, what: str) -> object:
    """The confusion as a matrix (rows = gold), or its largest off-diagonal cells when it has many labels."""
    labels = [escape(label) for label in confusion.labels]
    if len(labels) <= MATRIX_LABELS:
        return table(f"confusion of {what} (rows = gold, columns = predicted)", ["gold \\ predicted", *labels],
                     [[labels[i], *row] for i, row in enumerate(confusion.counts)])
    cells = sorted(((count, i, j) for i, row in enumerate(confusion.counts) for j, count in enumerate(row)
                    if i != j and count), key=lambda cell: (-cell[0], cell[1], cell[2]))
    return table(f"most confused of {len(labels)} {what} (largest {CONFUSED_SHOWN} off-diagonal cells)",
                 ["gold", "predicted", "count"], [[labels[i], labels[j], count] for count, i, j in
                                                  cells[:CONFUSED_SHOWN]])
