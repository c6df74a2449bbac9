"""course deadlines, a heartbeat on pre-start records, the config's version of a course

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-08 09:00:00.000000

Additive: a new table ``course_deadlines`` (one row per assignment deadline the service has
collected, so a restarted or second service never collects it twice) and a nullable column
``course_prestarts.heartbeat_at`` (the running pre-start's last sign of life: a service killed
mid pre-start leaves it to age, and the next service resumes the run), and a nullable column
``courses.declared`` (the record as the config last declared it, so page edits of a declared
course survive restarts until the config changes it), and a nullable column
``bookings.server_name`` (a course's seats are for its course servers; NULL: any server, as
before). Existing rows are untouched.
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "course_deadlines",
        sa.Column("course", sa.String(length=40), nullable=False),
        sa.Column("assignment", sa.String(length=100), nullable=False),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("course", "assignment", "due_at", name=op.f("pk_course_deadlines")),
    )
    with op.batch_alter_table("course_prestarts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("courses", schema=None) as batch_op:
        batch_op.add_column(sa.Column("declared", sa.Text(), nullable=True))
    with op.batch_alter_table("bookings", schema=None) as batch_op:
        batch_op.add_column(sa.Column("server_name", sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("bookings", schema=None) as batch_op:
        batch_op.drop_column("server_name")
    with op.batch_alter_table("courses", schema=None) as batch_op:
        batch_op.drop_column("declared")
    with op.batch_alter_table("course_prestarts", schema=None) as batch_op:
        batch_op.drop_column("heartbeat_at")
    op.drop_table("course_deadlines")
