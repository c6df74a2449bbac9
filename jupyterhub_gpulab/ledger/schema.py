"""The ledger's tables (SQLAlchemy Core), shared by the hub's spawner and the gpulab service.

Invariant 1 of the design lives here, in the database itself: the partial unique index
``uq_allocations_open_slice`` allows at most one *open* allocation (``ended_at IS NULL``) per slice,
whatever process, thread or hub replica writes. ``slices.held_by`` mirrors the open allocation so
the search for a free slice walks an index of free slices only (``ix_slices_free``) and stays
O(log n) in a nearly full lab. Two triggers (migration 0011, its docstring) keep it in the
statement that opens or closes the allocation; Alembic's models carry no triggers, so a later
migration that rebuilds ``allocations`` on SQLite (batch "move and copy") must make them again.

The ``lab`` table holds the lab's identity: one row, written once by migration 0003, whose
``uuid`` every container of this lab carries as a label. Two labs (two ledgers) may share one
Docker engine; each touches only containers labelled with its own id.

The ``nodes`` table (0008) holds each host's service state; a node out of service makes its
slices unavailable (``slices.available``), so the claim's index of free slices never offers them.

Migrations live in ``migrations/`` (Alembic); change a table there and here together.
"""

from __future__ import annotations

import sqlalchemy as sa

# Deterministic constraint names keep Alembic migrations clean (as jupyterhub/orm.py does).
metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(column_0_label)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

UTC_DATETIME = sa.DateTime(timezone=True)

devices = sa.Table(
    "devices",
    metadata,
    sa.Column("uuid", sa.String(96), primary_key=True),
    sa.Column("node", sa.String(255), nullable=False, default="local"),
    sa.Column("index", sa.Integer, nullable=False),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("memory_bytes", sa.BigInteger, nullable=False),
    sa.Column("compute_capability", sa.String(16), nullable=True),
    sa.Column("mig_enabled", sa.Boolean, nullable=False, default=False),
    sa.Column("vgpu_type", sa.String(64), nullable=True),
    # the host's NVIDIA driver, "580.65.06" (0006); None: unknown
    sa.Column("driver_version", sa.String(32), nullable=True),
    # present: seen in the latest inventory read; drained: an admin took it out of service.
    sa.Column("present", sa.Boolean, nullable=False, default=True),
    sa.Column("drained", sa.Boolean, nullable=False, default=False),
    sa.Column("drain_reason", sa.String(255), nullable=True),
    sa.Column("updated_at", UTC_DATETIME, nullable=False),
)

# The hosts the ledger's devices are on (migration 0008): one row per node name, made when a hub
# syncs its own inventory or a node agent first reports. ``available`` is the one summary the
# slices follow (``slices.available`` is false on a node that is not): not ``drained`` by an admin,
# not ``unreachable`` (its agent stopped reporting: the service judges, :mod:`..service.nodes`),
# and, where an orchestrator runs it, ``engine_state`` "ready" with ``engine_availability``
# "active" (Docker Swarm's node status and availability, as the Swarm backend last read them).
# ``token_hash``: SHA-256 (hex) of the node agent's token; the token itself is never stored.
nodes = sa.Table(
    "nodes",
    metadata,
    sa.Column("name", sa.String(255), primary_key=True),
    sa.Column("drained", sa.Boolean, nullable=False, default=False),
    sa.Column("drain_reason", sa.String(255), nullable=True),
    sa.Column("agent_seen_at", UTC_DATETIME, nullable=True),
    sa.Column("agent_interval_s", sa.Float, nullable=True),
    sa.Column("agent_version", sa.String(32), nullable=True),
    sa.Column("unreachable", sa.Boolean, nullable=False, default=False),
    sa.Column("engine", sa.String(16), nullable=True),
    sa.Column("engine_id", sa.String(64), nullable=True),
    sa.Column("engine_state", sa.String(32), nullable=True),
    sa.Column("engine_availability", sa.String(16), nullable=True),
    sa.Column("address", sa.String(64), nullable=True),
    sa.Column("hostname", sa.String(255), nullable=True),
    sa.Column("cpus", sa.Integer, nullable=True),
    sa.Column("memory_bytes", sa.BigInteger, nullable=True),
    sa.Column("token_hash", sa.String(64), nullable=True),
    sa.Column("available", sa.Boolean, nullable=False, default=True),
    sa.Column("updated_at", UTC_DATETIME, nullable=False),
)
sa.Index("ix_nodes_token_hash", nodes.c.token_hash, unique=True)

slices = sa.Table(
    "slices",
    metadata,
    sa.Column("id", sa.String(128), primary_key=True),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("device_uuid", sa.String(96), sa.ForeignKey("devices.uuid"), nullable=False),
    sa.Column("node", sa.String(255), nullable=False, default="local"),
    sa.Column("device_index", sa.Integer, nullable=False),
    sa.Column("device_name", sa.String(255), nullable=False),
    sa.Column("memory_bytes", sa.BigInteger, nullable=False),
    sa.Column("visible_id", sa.String(128), nullable=False),
    sa.Column("share", sa.Float, nullable=False, default=1.0),
    sa.Column("mig_profile", sa.String(32), nullable=True),
    sa.Column("seat", sa.Integer, nullable=True),
    sa.Column("seats", sa.Integer, nullable=True),
    sa.Column("rank", sa.Integer, nullable=False, default=0),
    # present: in the latest inventory read (a MIG instance vanishes when the layout changes);
    # available = present and its device not drained; both kept in step by the ledger.
    sa.Column("present", sa.Boolean, nullable=False, default=True),
    sa.Column("available", sa.Boolean, nullable=False, default=True),
    # The open allocation holding this slice (mirror of allocations; see module docstring).
    sa.Column("held_by", sa.Integer, nullable=True),
    # Its device's compute capability and driver as sortable keys (inventory.model.cc_key,
    # driver_key; 0006), compared with an image's needs at claim time; None: unknown.
    sa.Column("cc_key", sa.Integer, nullable=True),
    sa.Column("driver_key", sa.BigInteger, nullable=True),
)

sa.Index(
    "ix_slices_free",
    slices.c.kind,
    slices.c.available,
    slices.c.mig_profile,
    slices.c.rank,
    slices.c.id,
    sqlite_where=slices.c.held_by.is_(None),
    postgresql_where=slices.c.held_by.is_(None),
)
sa.Index("ix_slices_device_uuid", slices.c.device_uuid)

allocations = sa.Table(
    "allocations",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("slice_id", sa.String(128), sa.ForeignKey("slices.id"), nullable=False),
    sa.Column("user", sa.String(255), nullable=False),
    sa.Column("server_name", sa.String(255), nullable=False, default=""),
    sa.Column("profile", sa.String(64), nullable=False),
    sa.Column("node", sa.String(255), nullable=False, default="local"),
    # The group whose group-wide cap this allocation counts against (None: no group cap).
    sa.Column("charge_group", sa.String(255), nullable=True),
    sa.Column("share", sa.Float, nullable=False, default=1.0),
    sa.Column("container_id", sa.String(128), nullable=True),
    sa.Column("container_name", sa.String(255), nullable=True),
    sa.Column("started_at", UTC_DATETIME, nullable=False),
    sa.Column("ended_at", UTC_DATETIME, nullable=True),
    sa.Column("end_reason", sa.String(64), nullable=True),
    # The booking (course session) this allocation is one of the reserved slices of (migration
    # 0005); None for an allocation outside any reservation.
    sa.Column("booking_id", sa.Integer, nullable=True),
    # Set while the allocation is a waitlist hold: a slice kept for a queued user until this time,
    # no server on it yet; cleared when their server takes it (0005).
    sa.Column("hold_until", UTC_DATETIME, nullable=True),
)

sa.Index(
    "uq_allocations_open_slice",
    allocations.c.slice_id,
    unique=True,
    sqlite_where=allocations.c.ended_at.is_(None),
    postgresql_where=allocations.c.ended_at.is_(None),
)
sa.Index(
    "ix_allocations_open_user",
    allocations.c.user,
    sqlite_where=allocations.c.ended_at.is_(None),
    postgresql_where=allocations.c.ended_at.is_(None),
)
# counted by value, never by NULL: rows without one stay out (0011; a walk-in writes neither)
_OPEN_GROUP = sa.and_(allocations.c.ended_at.is_(None), allocations.c.charge_group.is_not(None))
_OPEN_BOOKING = sa.and_(allocations.c.ended_at.is_(None), allocations.c.booking_id.is_not(None))
sa.Index(
    "ix_allocations_open_group",
    allocations.c.charge_group,
    sqlite_where=_OPEN_GROUP,
    postgresql_where=_OPEN_GROUP,
)
sa.Index("ix_allocations_started_at", allocations.c.started_at)
sa.Index(
    "ix_allocations_open_booking",
    allocations.c.booking_id,
    sqlite_where=_OPEN_BOOKING,
    postgresql_where=_OPEN_BOOKING,
)

# Reservations (migration 0005): ``count`` slices satisfying the profile's slice request, held for
# members of ``groups`` (a JSON list: a course's roster and staff) from ``lead_s`` seconds before
# ``starts_at`` until ``ends_at``; what members have not claimed by ``starts_at + grace_s``
# returns to everyone. ``holder`` names the booking for people (a course slug); ``ref`` is the
# booker's own key for the session (re-booking the same ref replaces it). The request columns
# copy :class:`~..inventory.model.SliceRequest` so the claim can match slices without profiles.
bookings = sa.Table(
    "bookings",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("holder", sa.String(64), nullable=False),
    sa.Column("ref", sa.String(128), nullable=True),
    sa.Column("groups", sa.JSON, nullable=False),
    sa.Column("profile", sa.String(64), nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("mig_profile", sa.String(32), nullable=True),
    sa.Column("min_memory_bytes", sa.BigInteger, nullable=False, default=0),
    sa.Column("model", sa.String(64), nullable=True),
    sa.Column("count", sa.Integer, nullable=False),
    sa.Column("starts_at", UTC_DATETIME, nullable=False),
    sa.Column("ends_at", UTC_DATETIME, nullable=False),
    sa.Column("lead_s", sa.Integer, nullable=False, default=0),
    sa.Column("grace_s", sa.Integer, nullable=False, default=0),
    sa.Column("created_at", UTC_DATETIME, nullable=False),
    # the seats are for members' servers of this name (a course's named server; 0007), any
    # server when NULL: a roster member's other servers count as anyone's
    sa.Column("server_name", sa.String(255), nullable=True),
)
sa.Index("ix_bookings_ends_at", bookings.c.ends_at)
sa.Index("ix_bookings_ref", bookings.c.ref)

# The waitlist (0005): users queued for a profile, served first by ``priority`` (high first) then
# by ``id`` (first come). ``state``: waiting, offered (``allocation_id`` is a hold until
# ``offer_until``), served, lapsed (the offer ran out), left, refused (policy said no at offer).
waitlist = sa.Table(
    "waitlist",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("user", sa.String(255), nullable=False),
    sa.Column("server_name", sa.String(255), nullable=False, default=""),
    sa.Column("profile", sa.String(64), nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("mig_profile", sa.String(32), nullable=True),
    sa.Column("min_memory_bytes", sa.BigInteger, nullable=False, default=0),
    sa.Column("model", sa.String(64), nullable=True),
    sa.Column("priority", sa.Integer, nullable=False, default=0),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("allocation_id", sa.Integer, nullable=True),
    sa.Column("offer_until", UTC_DATETIME, nullable=True),
    sa.Column("message", sa.Text, nullable=True),
    sa.Column("joined_at", UTC_DATETIME, nullable=False),
    sa.Column("updated_at", UTC_DATETIME, nullable=False),
)
sa.Index("ix_waitlist_state_profile", waitlist.c.state, waitlist.c.profile)

# Preemptions (0005): a server stopped so a higher-priority queued user gets its slice; shown to
# the user who lost it.
preemptions = sa.Table(
    "preemptions",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("at", UTC_DATETIME, nullable=False),
    sa.Column("user", sa.String(255), nullable=False),
    sa.Column("server_name", sa.String(255), nullable=False, default=""),
    sa.Column("allocation_id", sa.Integer, nullable=True),
    sa.Column("for_user", sa.String(255), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
)
sa.Index("ix_preemptions_user", preemptions.c.user)

# Spawns refused for policy or capacity, for the admin page ("refusals in the last 24 hours").
refusals = sa.Table(
    "refusals",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("at", UTC_DATETIME, nullable=False),
    sa.Column("user", sa.String(255), nullable=False),
    sa.Column("profile", sa.String(64), nullable=True),
    sa.Column("reason", sa.String(64), nullable=False),
    sa.Column("message", sa.Text, nullable=False),
)
sa.Index("ix_refusals_at", refusals.c.at)

# Servers the culler will stop unless their condition clears (shown on the hub's home page and
# the user's gpulab page). One row per (user, server, rule); written by the gpulab service.
warnings = sa.Table(
    "cull_warnings",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("user", sa.String(255), nullable=False),
    sa.Column("server_name", sa.String(255), nullable=False, default=""),
    sa.Column("rule", sa.String(32), nullable=False),
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("due_at", UTC_DATETIME, nullable=False),
    sa.Column("created_at", UTC_DATETIME, nullable=False),
)
sa.Index("ix_cull_warnings_user", warnings.c.user)

# The culler's GPU-idle clock: since when each open allocation's GPU has been idle, so a
# restarted service (whose utilisation history starts empty) keeps counting instead of starting
# over. One row per allocation; written by the gpulab service each cull round (migration 0009).
idle_clocks = sa.Table(
    "gpu_idle_clocks",
    metadata,
    sa.Column("allocation_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("idle_since", UTC_DATETIME, nullable=False),
)

# Keeps (0010): each time a user clicked Keep on a GPU-idle warning (fairuse/keeps.py), which
# postpones that allocation's gpu-idle cull to ``until``. ``day`` is the local date (quota time
# zone) the keep counts in and ``seq`` its number that day: unique per (user, day, seq), so two
# clicks at once cannot both take the last keep of an allowance.
keeps = sa.Table(
    "gpu_keeps",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("user", sa.String(255), nullable=False),
    sa.Column("server_name", sa.String(255), nullable=False, default=""),
    sa.Column("allocation_id", sa.Integer, nullable=False),
    sa.Column("day", sa.String(10), nullable=False),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("at", UTC_DATETIME, nullable=False),
    sa.Column("until", UTC_DATETIME, nullable=False),
)
sa.Index("uq_gpu_keeps_user_day_seq", keeps.c.user, keeps.c.day, keeps.c.seq, unique=True)
sa.Index("ix_gpu_keeps_allocation_id", keeps.c.allocation_id)

# This ledger's lab: exactly one row (id 1), created by migration 0003 with a random uuid. The
# uuid labels every container the lab starts; the name is c.GPULab.lab_name, for people.
lab = sa.Table(
    "lab",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("uuid", sa.String(36), nullable=False),
    sa.Column("name", sa.String(64), nullable=True),
    sa.Column("created_at", UTC_DATETIME, nullable=False),
    sa.CheckConstraint("id = 1", name="one_row"),
)

# Running containers that are not this lab's but hold a GPU of its inventory (another lab on the
# same Docker engine, or a container started by hand), as the hub's latest look at the engine
# on ``node`` found them; the admin page shows them. Rewritten for a node at every look.
foreign_containers = sa.Table(
    "foreign_containers",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("node", sa.String(255), nullable=False),
    sa.Column("container_id", sa.String(128), nullable=False),
    sa.Column("container_name", sa.String(255), nullable=False),
    # the other lab's id and name from its labels (None: not a gpulab container)
    sa.Column("lab_uuid", sa.String(36), nullable=True),
    sa.Column("lab_name", sa.String(64), nullable=True),
    sa.Column("user", sa.String(255), nullable=True),
    # the ids of this lab's devices and MIG instances it holds, space-separated
    sa.Column("devices", sa.Text, nullable=False),
    sa.Column("attached_by", sa.String(64), nullable=False),
    sa.Column("seen_at", UTC_DATETIME, nullable=False),
)
sa.Index("ix_foreign_containers_node", foreign_containers.c.node)

# -- courses (jupyterhub_gpulab/courses/store.py; migration 0004) ------------------------------
# A course record: the JSON of courses.model.Course.to_dict(); origin "config" (declared in
# c.GPULab.courses, re-read at every start) or "admin" (made in the service).
courses = sa.Table(
    "courses",
    metadata,
    sa.Column("slug", sa.String(40), primary_key=True),
    sa.Column("record", sa.Text, nullable=False),
    sa.Column("origin", sa.String(16), nullable=False),
    sa.Column("created_at", UTC_DATETIME, nullable=False),
    sa.Column("updated_at", UTC_DATETIME, nullable=False),
    sa.Column("updated_by", sa.String(255), nullable=False),
    # the record as c.GPULabCourses.courses last declared it (0007): the config is applied again
    # only when it changes, so edits made on the course page survive restarts
    sa.Column("declared", sa.Text, nullable=True),
)

# Every change to a course, its roster, content, sessions, and every start all / collect /
# return: who, when, what (detail: JSON).
course_audit = sa.Table(
    "course_audit",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("at", UTC_DATETIME, nullable=False),
    sa.Column("who", sa.String(255), nullable=False),
    sa.Column("course", sa.String(40), nullable=False),
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("detail", sa.Text, nullable=False),
)
sa.Index("ix_course_audit_course", course_audit.c.course)

# One row per session whose pre-start ran, so a restarted service does not start it again.
course_prestarts = sa.Table(
    "course_prestarts",
    metadata,
    sa.Column("course", sa.String(40), primary_key=True),
    sa.Column("session_start", UTC_DATETIME, primary_key=True),
    sa.Column("started_at", UTC_DATETIME, nullable=False),
    sa.Column("finished_at", UTC_DATETIME, nullable=True),
    sa.Column("summary", sa.Text, nullable=False, default=""),
    # the running pre-start's last sign of life (0007): a run whose heartbeat ages past a few
    # check intervals was cut off (its service killed) and is resumed by the next pass
    sa.Column("heartbeat_at", UTC_DATETIME, nullable=True),
)

# One row per assignment deadline the service collected (0007), so a restarted service, or a
# second one, never collects the same deadline twice.
course_deadlines = sa.Table(
    "course_deadlines",
    metadata,
    sa.Column("course", sa.String(40), primary_key=True),
    sa.Column("assignment", sa.String(100), primary_key=True),
    sa.Column("due_at", UTC_DATETIME, primary_key=True),
    sa.Column("started_at", UTC_DATETIME, nullable=False),
    sa.Column("finished_at", UTC_DATETIME, nullable=True),
    sa.Column("summary", sa.Text, nullable=False, default=""),
)
