"""Records as an older bertkit wrote them, made from ones this bertkit wrote: the tests of the migrations read them."""

from __future__ import annotations

from typing import Any

from bertkit.io.record_format import FAMILY, FORMAT, SEAL, record_digest


def unsealed(record: dict[str, Any], layout: str | None) -> dict[str, Any]:
    """`record` as a layout before records carried a family and a seal: `layout` its format (None: no format, as
    config.json and export_report.json had none)."""
    older = {k: v for k, v in record.items() if k not in (FORMAT, FAMILY, SEAL)}
    return older if layout is None else {FORMAT: layout, **older}


def resealed(record: dict[str, Any]) -> dict[str, Any]:
    """`record`, changed by a test, sealed again: as a writer that wrote these values would have sealed them (its
    other checks are then what must catch what is wrong with it)."""
    body = {k: v for k, v in record.items() if k != SEAL}
    return {**body, SEAL: record_digest(body)}
