"""reservations, the waitlist and preemptions

Revision ID: 0005
Revises: 0003
Create Date: 2026-12-01 08:30:00.000000

Additive: two nullable columns on ``allocations`` (``booking_id``: the reservation an allocation
is one of; ``hold_until``: a waitlist hold no server uses yet) and three new tables. Existing rows
are untouched (no booking, no hold). The course issue's 0004 goes between 0003 and this one at
merge: re-chain ``down_revision`` then.
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def _request_columns():
    return [
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("mig_profile", sa.String(length=32), nullable=True),
        sa.Column("min_memory_bytes", sa.BigInteger(), nullable=False),
        sa.Column("model", sa.String(length=64), nullable=True),
    ]


def upgrade() -> None:
    with op.batch_alter_table("allocations", schema=None) as batch_op:
        batch_op.add_column(sa.Column("booking_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("hold_until", sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index(
            "ix_allocations_open_booking",
            ["booking_id"],
            unique=False,
            sqlite_where=sa.text("ended_at IS NULL"),
            postgresql_where=sa.text("ended_at IS NULL"),
        )

    op.create_table(
        "bookings",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("holder", sa.String(length=64), nullable=False),
        sa.Column("ref", sa.String(length=128), nullable=True),
        sa.Column("groups", sa.JSON(), nullable=False),
        sa.Column("profile", sa.String(length=64), nullable=False),
        *_request_columns(),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("starts_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ends_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("lead_s", sa.Integer(), nullable=False),
        sa.Column("grace_s", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_bookings")),
    )
    with op.batch_alter_table("bookings", schema=None) as batch_op:
        batch_op.create_index("ix_bookings_ends_at", ["ends_at"], unique=False)
        batch_op.create_index("ix_bookings_ref", ["ref"], unique=False)

    op.create_table(
        "waitlist",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("user", sa.String(length=255), nullable=False),
        sa.Column("server_name", sa.String(length=255), nullable=False),
        sa.Column("profile", sa.String(length=64), nullable=False),
        *_request_columns(),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("allocation_id", sa.Integer(), nullable=True),
        sa.Column("offer_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("joined_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_waitlist")),
    )
    with op.batch_alter_table("waitlist", schema=None) as batch_op:
        batch_op.create_index("ix_waitlist_state_profile", ["state", "profile"], unique=False)

    op.create_table(
        "preemptions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("user", sa.String(length=255), nullable=False),
        sa.Column("server_name", sa.String(length=255), nullable=False),
        sa.Column("allocation_id", sa.Integer(), nullable=True),
        sa.Column("for_user", sa.String(length=255), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_preemptions")),
    )
    with op.batch_alter_table("preemptions", schema=None) as batch_op:
        batch_op.create_index("ix_preemptions_user", ["user"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("preemptions", schema=None) as batch_op:
        batch_op.drop_index("ix_preemptions_user")
    op.drop_table("preemptions")
    with op.batch_alter_table("waitlist", schema=None) as batch_op:
        batch_op.drop_index("ix_waitlist_state_profile")
    op.drop_table("waitlist")
    with op.batch_alter_table("bookings", schema=None) as batch_op:
        batch_op.drop_index("ix_bookings_ref")
        batch_op.drop_index("ix_bookings_ends_at")
    op.drop_table("bookings")
    with op.batch_alter_table("allocations", schema=None) as batch_op:
        batch_op.drop_index("ix_allocations_open_booking")
        batch_op.drop_column("hold_until")
        batch_op.drop_column("booking_id")
