"""device facts for the image gate: compute capability and driver on slices

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 21:00:00.000000

Additive: ``devices.driver_version`` (the host's NVIDIA driver, for people) and two nullable
integer keys on ``slices`` that the claim compares with an image's needs (``cc_key``: compute
capability ``major * 10 + minor``; ``driver_key``: ``major * 10**6 + minor * 10**3 + patch``).
Existing rows get NULL (unknown, so no slice is excluded) until the next inventory read fills
them in.
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


# Plain ADD / DROP COLUMN, never a batch (table copy): other tables' foreign keys reference
# devices and slices, and SQLite (>= 3.35) and PostgreSQL both alter them in place.
COLUMNS = (
    ("devices", sa.Column("driver_version", sa.String(length=32), nullable=True)),
    ("slices", sa.Column("cc_key", sa.Integer(), nullable=True)),
    ("slices", sa.Column("driver_key", sa.BigInteger(), nullable=True)),
)


def upgrade() -> None:
    for table, column in COLUMNS:
        op.add_column(table, column)


def downgrade() -> None:
    for table, column in reversed(COLUMNS):
        op.execute(sa.text(f"ALTER TABLE {table} DROP COLUMN {column.name}"))
