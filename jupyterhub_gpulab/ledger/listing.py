"""Open allocations a page at a time, filtered and sorted in the database: the admin page's
table and ``GET api/allocations`` at 10,000 open allocations read one page, not all of them.

Sort fields (:data:`SORTS`) and exact-match filters (:data:`FILTERS`) are the columns an admin
narrows a busy lab by; ties are broken by allocation id, so pages never overlap or skip a row
while nothing changes.
"""

from __future__ import annotations

from collections.abc import Mapping

import sqlalchemy as sa

from .models import Allocation
from .schema import allocations, slices

#: ``sort=`` fields: allocation columns (``kind``: the slice's).
SORTS = {
    "id": allocations.c.id,
    "user": allocations.c.user,
    "server_name": allocations.c.server_name,
    "profile": allocations.c.profile,
    "node": allocations.c.node,
    "charge_group": allocations.c.charge_group,
    "slice_id": allocations.c.slice_id,
    "started_at": allocations.c.started_at,
}
#: exact-match filters: ``user``, ``profile``, ``node``, ``group`` (the charge group), ``kind``
#: (``gpu``, ``mig``, ``shared``: the slice's).
FILTERS = {
    "user": allocations.c.user,
    "profile": allocations.c.profile,
    "node": allocations.c.node,
    "group": allocations.c.charge_group,
    "kind": slices.c.kind,
}


#: the values of the ``kind`` filter
KINDS = ("gpu", "mig", "shared")


def open_allocations_page(
    ledger,
    *,
    offset: int,
    limit: int,
    sort: str = "id",
    descending: bool = False,
    filters: Mapping[str, str] | None = None,
) -> tuple[list[Allocation], int, dict[str, dict]]:
    """``(allocations, total, slices)``: open allocations ``[offset, offset + limit)`` of those
    matching ``filters`` (``{name in FILTERS: value}``), sorted by ``sort`` (a key of
    :data:`SORTS`), ``total`` of them matching, and the slice rows (dicts, by id) of the page's
    allocations. Two statements and a slice lookup, whatever the size of the lab. Raises
    ``KeyError`` for an unknown sort or filter name (the caller checked them)."""
    where = [allocations.c.ended_at.is_(None)]
    join = False
    for name, value in (filters or {}).items():
        where.append(FILTERS[name] == value)
        join = join or name == "kind"
    source = (
        allocations.join(slices, slices.c.id == allocations.c.slice_id) if join else allocations
    )
    key = SORTS[sort]
    order = (key.desc(), allocations.c.id.desc()) if descending else (key, allocations.c.id)
    q = sa.select(allocations).select_from(source).where(*where).order_by(*order)
    count = sa.select(sa.func.count()).select_from(source).where(*where)
    with ledger._read() as conn:
        total = conn.execute(count).scalar_one()
        rows = [Allocation.from_row(r) for r in conn.execute(q.offset(offset).limit(limit))]
        ids = sorted({a.slice_id for a in rows})
        found = conn.execute(sa.select(slices).where(slices.c.id.in_(ids))) if ids else []
        by_id = {r.id: dict(r._mapping) for r in found}
    return rows, total, by_id
