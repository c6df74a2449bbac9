"""lab identity, and other labs' containers seen on our GPUs

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02 10:00:00.000000

Gives the ledger its lab id: one ``lab`` row with a random uuid, made here once, so a ledger
upgraded from 0002 and a fresh one both have exactly one. Existing rows are untouched.
"""

import uuid
from datetime import datetime, timezone

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    lab = op.create_table(
        "lab",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_lab_one_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lab")),
    )
    op.bulk_insert(
        lab,
        [
            {
                "id": 1,
                "uuid": str(uuid.uuid4()),
                "name": None,
                "created_at": datetime.now(timezone.utc),
            }
        ],
    )
    op.create_table(
        "foreign_containers",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("node", sa.String(length=255), nullable=False),
        sa.Column("container_id", sa.String(length=128), nullable=False),
        sa.Column("container_name", sa.String(length=255), nullable=False),
        sa.Column("lab_uuid", sa.String(length=36), nullable=True),
        sa.Column("lab_name", sa.String(length=64), nullable=True),
        sa.Column("user", sa.String(length=255), nullable=True),
        sa.Column("devices", sa.Text(), nullable=False),
        sa.Column("attached_by", sa.String(length=64), nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_foreign_containers")),
    )
    with op.batch_alter_table("foreign_containers", schema=None) as batch_op:
        batch_op.create_index("ix_foreign_containers_node", ["node"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("foreign_containers", schema=None) as batch_op:
        batch_op.drop_index("ix_foreign_containers_node")
    op.drop_table("foreign_containers")
    op.drop_table("lab")
