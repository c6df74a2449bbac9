"""gpu_idle_clocks: the culler's "GPU idle since" per open allocation, kept across restarts

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03 11:40:00.000000

Additive: a new, empty ``gpu_idle_clocks`` table (allocation id, idle since). Existing rows are
untouched; a service that upgrades starts every clock afresh, as before.
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gpu_idle_clocks",
        sa.Column("allocation_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("idle_since", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("allocation_id", name=op.f("pk_gpu_idle_clocks")),
    )


def downgrade() -> None:
    op.drop_table("gpu_idle_clocks")
