"""cull warnings

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 17:22:39.484749
"""

from alembic import op
import sqlalchemy as sa


revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table(
        "cull_warnings",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("user", sa.String(length=255), nullable=False),
        sa.Column("server_name", sa.String(length=255), nullable=False),
        sa.Column("rule", sa.String(length=32), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cull_warnings")),
    )
    with op.batch_alter_table("cull_warnings", schema=None) as batch_op:
        batch_op.create_index("ix_cull_warnings_user", ["user"], unique=False)


def downgrade() -> None:

    with op.batch_alter_table("cull_warnings", schema=None) as batch_op:
        batch_op.drop_index("ix_cull_warnings_user")

    op.drop_table("cull_warnings")
