"""gpu_keeps: each Keep a user clicked on a GPU-idle warning, counted per local day

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03 14:30:00.000000

Additive: a new, empty ``gpu_keeps`` table (user, server, allocation, day, number in the day,
when, until). Nothing else changes; a lab that upgrades has used no keeps yet.
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gpu_keeps",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("user", sa.String(length=255), nullable=False),
        sa.Column("server_name", sa.String(length=255), nullable=False),
        sa.Column("allocation_id", sa.Integer(), nullable=False),
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("until", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gpu_keeps")),
    )
    with op.batch_alter_table("gpu_keeps", schema=None) as batch_op:
        batch_op.create_index("ix_gpu_keeps_allocation_id", ["allocation_id"], unique=False)
        batch_op.create_index("uq_gpu_keeps_user_day_seq", ["user", "day", "seq"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("gpu_keeps", schema=None) as batch_op:
        batch_op.drop_index("uq_gpu_keeps_user_day_seq")
        batch_op.drop_index("ix_gpu_keeps_allocation_id")
    op.drop_table("gpu_keeps")
