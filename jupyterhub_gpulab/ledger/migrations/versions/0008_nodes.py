"""nodes: each host's service state (drained, agent reachable, Swarm engine state) and agent token

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-10 09:00:00.000000

Additive: a new ``nodes`` table with one row per node name the ledger's devices already name
(each in service, no agent, no token). Existing rows are untouched.
"""

from datetime import datetime, timezone

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    nodes = op.create_table(
        "nodes",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("drained", sa.Boolean(), nullable=False),
        sa.Column("drain_reason", sa.String(length=255), nullable=True),
        sa.Column("agent_seen_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("agent_interval_s", sa.Float(), nullable=True),
        sa.Column("agent_version", sa.String(length=32), nullable=True),
        sa.Column("unreachable", sa.Boolean(), nullable=False),
        sa.Column("engine", sa.String(length=16), nullable=True),
        sa.Column("engine_id", sa.String(length=64), nullable=True),
        sa.Column("engine_state", sa.String(length=32), nullable=True),
        sa.Column("engine_availability", sa.String(length=16), nullable=True),
        sa.Column("address", sa.String(length=64), nullable=True),
        sa.Column("hostname", sa.String(length=255), nullable=True),
        sa.Column("cpus", sa.Integer(), nullable=True),
        sa.Column("memory_bytes", sa.BigInteger(), nullable=True),
        sa.Column("token_hash", sa.String(length=64), nullable=True),
        sa.Column("available", sa.Boolean(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_nodes")),
    )
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.create_index("ix_nodes_token_hash", ["token_hash"], unique=True)
    names = [r[0] for r in op.get_bind().execute(sa.text("SELECT DISTINCT node FROM devices"))]
    now = datetime.now(timezone.utc)
    op.bulk_insert(
        nodes,
        [
            {
                "name": n,
                "drained": False,
                "unreachable": False,
                "available": True,
                "updated_at": now,
            }
            for n in names
        ],
    )


def downgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_index("ix_nodes_token_hash")
    op.drop_table("nodes")
