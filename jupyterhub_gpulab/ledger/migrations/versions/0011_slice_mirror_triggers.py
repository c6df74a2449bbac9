"""slice_mirror_triggers: the database keeps ``slices.held_by`` in step with the open allocation;
indexes of open allocations skip rows that have no booking or no charged group

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07 00:45:00.000000

- Two triggers on ``allocations`` keep the ``held_by`` mirror in the statement that changes the
  allocation: ``tr_allocations_open_holds_slice`` marks the slice held by a new open allocation
  (and refuses it, as a constraint, when another one holds the slice), and
  ``tr_allocations_close_frees_slice`` clears the mark when the allocation holding the slice
  closes (``ended_at`` set). A claim writes one statement instead of two, a release one instead
  of two, and no code path can open or close an allocation and leave the mirror behind.
  Existing rows are untouched: every slice's mirror is already right (the ledger wrote it in the
  same transaction until now).
- ``ix_allocations_open_booking`` and ``ix_allocations_open_group`` index only open rows that
  *have* a booking / a charged group: the claim counts them by value (``booking_id = :b``), never
  by ``NULL``, and a walk-in's claim and release no longer write two index pages it is not in.
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

#: (trigger, its PostgreSQL function, event, condition, SQLite body, PostgreSQL body)
_OPENS = "NEW.ended_at IS NULL"
_CLOSES = "OLD.ended_at IS NULL AND NEW.ended_at IS NOT NULL"
_HOLD = "UPDATE slices SET held_by = NEW.id WHERE id = NEW.slice_id AND held_by IS NULL"
_FREE = "UPDATE slices SET held_by = NULL WHERE id = NEW.slice_id AND held_by = NEW.id"
#: the refusal of a second holder, as the unique index's (an ``IntegrityError`` to the ledger)
_HELD = "gpulab: slice is held by another open allocation"
TRIGGERS = (
    (
        "tr_allocations_open_holds_slice", "gpulab_open_holds_slice", "INSERT", _OPENS,
        f"SELECT RAISE(ABORT, '{_HELD}') FROM slices"
        " WHERE id = NEW.slice_id AND held_by IS NOT NULL; " + _HOLD + ";",
        _HOLD + "; IF NOT FOUND THEN RAISE EXCEPTION '%', "
        f"'{_HELD}' USING ERRCODE = 'unique_violation'; END IF;",
    ),
    (
        "tr_allocations_close_frees_slice", "gpulab_close_frees_slice", "UPDATE OF ended_at",
        _CLOSES, _FREE + ";", _FREE + ";",
    ),
)  # fmt: skip

#: (index, column) whose partial ``WHERE`` gains ``<column> IS NOT NULL``
_SKIPPING_NULLS = (
    ("ix_allocations_open_booking", "booking_id"),
    ("ix_allocations_open_group", "charge_group"),
)


def _reindex(where) -> None:
    with op.batch_alter_table("allocations", schema=None) as batch_op:
        for name, column in _SKIPPING_NULLS:
            batch_op.drop_index(name)
            clause = sa.text(where(column))
            batch_op.create_index(
                name, [column], unique=False, sqlite_where=clause, postgresql_where=clause
            )


def upgrade() -> None:
    _reindex(lambda column: f"ended_at IS NULL AND {column} IS NOT NULL")
    postgres = op.get_bind().dialect.name == "postgresql"
    for name, function, event, when, sqlite_body, postgres_body in TRIGGERS:
        if postgres:
            op.execute(
                f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$ "
                f"BEGIN {postgres_body} RETURN NULL; END $$"
            )
            op.execute(
                f"CREATE TRIGGER {name} AFTER {event} ON allocations FOR EACH ROW "
                f"WHEN ({when}) EXECUTE FUNCTION {function}()"
            )
        else:
            op.execute(
                f"CREATE TRIGGER {name} AFTER {event} ON allocations FOR EACH ROW "
                f"WHEN {when} BEGIN {sqlite_body} END"
            )


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for name, function, *_ in TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {name}" + (" ON allocations" if postgres else ""))
        if postgres:
            op.execute(f"DROP FUNCTION IF EXISTS {function}()")
    _reindex(lambda column: "ended_at IS NULL")
