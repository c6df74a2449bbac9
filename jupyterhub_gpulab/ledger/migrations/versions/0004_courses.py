"""courses, their audit trail and pre-start records

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 08:30:00.000000

Additive: three new tables (jupyterhub_gpulab/courses/store.py); nothing existing changes.
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "courses",
        sa.Column("slug", sa.String(length=40), nullable=False),
        sa.Column("record", sa.Text(), nullable=False),
        sa.Column("origin", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_by", sa.String(length=255), nullable=False),
        sa.PrimaryKeyConstraint("slug", name=op.f("pk_courses")),
    )
    op.create_table(
        "course_audit",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("who", sa.String(length=255), nullable=False),
        sa.Column("course", sa.String(length=40), nullable=False),
        sa.Column("action", sa.String(length=32), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_course_audit")),
    )
    with op.batch_alter_table("course_audit", schema=None) as batch_op:
        batch_op.create_index("ix_course_audit_course", ["course"], unique=False)
    op.create_table(
        "course_prestarts",
        sa.Column("course", sa.String(length=40), nullable=False),
        sa.Column("session_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("course", "session_start", name=op.f("pk_course_prestarts")),
    )


def downgrade() -> None:
    op.drop_table("course_prestarts")
    with op.batch_alter_table("course_audit", schema=None) as batch_op:
        batch_op.drop_index("ix_course_audit_course")
    op.drop_table("course_audit")
    op.drop_table("courses")
