"""Open allocations a page at a time, filtered and sorted in the database: the admin page's
table and ``GET api/allocations`` at 10,000 open allocations read one page, not all of them;
and the admin page's other whole-lab reads (:func:`devices_page`, :func:`slice_totals`,
:func:`open_slice_presence`), which read the devices shown and counts, not every slice.

Sort fields (:data:`SORTS`) and exact-match filters (:data:`FILTERS`) are the columns an admin
narrows a busy lab by; ties are broken by allocation id, so pages never overlap or skip a row
while nothing changes.
"""

from __future__ import annotations

from collections.abc import Mapping

import sqlalchemy as sa

from .models import Allocation
from .schema import allocations, devices, slices

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


def devices_page(ledger, *, offset: int, limit: int) -> tuple[list[dict], list[dict], dict, dict]:
    """``(devices, slices, per_node, holders)``: device rows ``[offset, offset + limit)`` in the
    admin page's order (nodes by name as Python sorts them, each node's devices by index), the
    slice rows of those devices (by node, device index and rank, as
    :meth:`~.queries.LedgerQueries.slices` orders them), ``{node: devices}`` of the whole lab,
    and ``{allocation id: user}`` of the shown slices' holders."""
    with ledger._read() as conn:
        per_node = dict(
            conn.execute(sa.select(devices.c.node, sa.func.count()).group_by(devices.c.node)).all()
        )
        rows, seen = [], 0
        for node in sorted(per_node):
            lo, hi = max(0, offset - seen), max(0, offset + limit - seen)
            n = per_node[node]
            seen += n
            if lo >= min(hi, n):
                continue
            q = sa.select(devices).where(devices.c.node == node).order_by(devices.c.index)
            rows += [dict(r._mapping) for r in conn.execute(q.offset(lo).limit(hi - lo))]
        uuids = [d["uuid"] for d in rows]
        found = []
        if uuids:
            q = (
                sa.select(slices)
                .where(slices.c.device_uuid.in_(uuids))
                .order_by(slices.c.node, slices.c.device_index, slices.c.rank)
            )
            found = [dict(r._mapping) for r in conn.execute(q)]
        held = sorted({s["held_by"] for s in found if s["held_by"] is not None})
        holders = {}
        if held:
            q = sa.select(allocations.c.id, allocations.c.user).where(allocations.c.id.in_(held))
            holders = dict(conn.execute(q).all())
    return rows, found, per_node, holders


def slice_totals(ledger) -> dict[str, int]:
    """``{"slices", "free", "held", "out_of_service"}`` over every device's slices, counted by
    the database (the rule of :func:`~..service.web.views.inventory_view`'s totals: held when
    an allocation holds it, else free when available, else out of service)."""
    free = sa.and_(slices.c.held_by.is_(None), slices.c.available == sa.true())
    q = sa.select(
        sa.func.count(),
        sa.func.count(slices.c.held_by),
        sa.func.coalesce(sa.func.sum(sa.case((free, 1), else_=0)), 0),
    ).select_from(slices.join(devices, devices.c.uuid == slices.c.device_uuid))
    with ledger._read() as conn:
        total, held, n_free = conn.execute(q).one()
    return {"slices": total, "free": n_free, "held": held, "out_of_service": total - held - n_free}


def open_slice_presence(ledger) -> list[tuple[int, str, str | None, bool | None]]:
    """``(allocation id, slice id, slice's node, slice present)`` of every open allocation, one
    narrow row each (``None`` node and presence where the ledger has no such slice): what the
    vanished-slice alert needs, without reading whole allocations and slices."""
    q = (
        sa.select(allocations.c.id, allocations.c.slice_id, slices.c.node, slices.c.present)
        .select_from(allocations.outerjoin(slices, slices.c.id == allocations.c.slice_id))
        .where(allocations.c.ended_at.is_(None))
    )
    with ledger._read() as conn:
        return [tuple(r) for r in conn.execute(q)]


def open_allocations_by_id(ledger, ids) -> tuple[list[Allocation], dict[str, dict]]:
    """``(allocations, slices)``: the open allocations among ``ids``, oldest first, and their
    slice rows (dicts, by id), in two statements."""
    ids = sorted(set(ids))
    if not ids:
        return [], {}
    q = (
        sa.select(allocations)
        .where(allocations.c.id.in_(ids), allocations.c.ended_at.is_(None))
        .order_by(allocations.c.id)
    )
    with ledger._read() as conn:
        rows = [Allocation.from_row(r) for r in conn.execute(q)]
        wanted = sorted({a.slice_id for a in rows})
        found = conn.execute(sa.select(slices).where(slices.c.id.in_(wanted))) if wanted else []
        by_id = {r.id: dict(r._mapping) for r in found}
    return rows, by_id


def open_uncharged(ledger) -> int:
    """Open allocations charged to no group (the admin page's groups table lists them)."""
    q = sa.select(sa.func.count()).where(
        allocations.c.ended_at.is_(None), allocations.c.charge_group.is_(None)
    )
    with ledger._read() as conn:
        return conn.execute(q).scalar_one()
