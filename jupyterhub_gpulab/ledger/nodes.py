"""Nodes: the hosts whose GPUs the ledger hands out, and whether each one is in service.

A node is in service (``nodes.available``, :func:`node_in_service`) unless

- an admin drained it (``drained``: no new allocation on any of its GPUs, nor a CPU server placed
  there by an orchestrator; holders keep theirs);
- its node agent stopped reporting (``unreachable``): the gpulab service, which receives the
  reports, marks it so after its timeout (:meth:`NodeRecords.expire_agents`) and back at the next
  report. A node that never had an agent (a single Docker host, whose hub reads its own GPUs) is
  never judged by it;
- the orchestrator that runs its servers says it cannot (``engine_state`` other than ``ready``, or
  ``engine_availability`` other than ``active``: Docker Swarm's node status and availability, as
  the Swarm backend last read them, :meth:`NodeRecords.record_engine`).

Its slices follow: ``slices.available`` is ``present``, and its device not drained, and its node in
service, kept in step by :meth:`NodeRecords._refresh_available` in the transaction that changes
any of the three, so the claim's index of free slices never offers a slice of a node out of
service. Allocations already open on such a node are never closed here: their servers' backend
decides (kept while their tasks run, closed when the orchestrator reports them gone).

A node agent proves who it is with a token of its node (:meth:`NodeRecords.issue_node_token`):
``gpulabnode_`` and 43 random URL-safe characters, stored as its SHA-256 only.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from .. import clock
from ..clock import as_utc
from .schema import devices, nodes, slices

#: What every node agent token starts with (so the service tells it from a hub token at once).
NODE_TOKEN_PREFIX = "gpulabnode_"


def node_in_service(
    drained: bool, unreachable: bool, engine_state: str | None, engine_availability: str | None
) -> bool:
    """The one rule (module docstring): not drained, not unreachable, and, where an orchestrator
    reports the node, ready and active."""
    return (
        not drained
        and not unreachable
        and engine_state in (None, "ready")
        and engine_availability in (None, "active")
    )


def token_hash(token: str) -> str:
    """SHA-256 (hex) of a node token: what the ledger keeps."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Node:
    """One ``nodes`` row (see :data:`~.schema.nodes`)."""

    name: str
    drained: bool
    drain_reason: str | None
    agent_seen_at: datetime | None
    agent_interval_s: float | None
    agent_version: str | None
    unreachable: bool
    engine: str | None
    engine_id: str | None
    engine_state: str | None
    engine_availability: str | None
    address: str | None
    hostname: str | None
    cpus: int | None
    memory_bytes: int | None
    has_token: bool
    available: bool
    updated_at: datetime

    @classmethod
    def from_row(cls, row) -> Node:
        m = dict(row._mapping)
        token = m.pop("token_hash", None)
        for k in ("agent_seen_at", "updated_at"):
            m[k] = as_utc(m[k])
        m["drained"], m["unreachable"] = bool(m["drained"]), bool(m["unreachable"])
        m["available"] = bool(m["available"])
        return cls(has_token=token is not None, **m)

    @property
    def state(self) -> str:
        """``in-service``, ``drained``, ``unreachable`` (its agent stopped reporting) or
        ``engine-<state>`` (the orchestrator's: ``engine-down``, ``engine-pause`` …)."""
        if self.drained:
            return "drained"
        if self.unreachable:
            return "unreachable"
        if self.engine_state not in (None, "ready"):
            return f"engine-{self.engine_state}"
        if self.engine_availability not in (None, "active"):
            return f"engine-{self.engine_availability}"
        return "in-service"

    def why_out(self) -> str | None:
        """Why its slices are not handed out, for people; ``None`` when in service."""
        st = self.state
        if st == "drained":
            return f"drained: {self.drain_reason}" if self.drain_reason else "drained"
        if st == "unreachable":
            seen = f"{self.agent_seen_at:%Y-%m-%d %H:%M:%S} UTC" if self.agent_seen_at else "never"
            return f"its node agent stopped reporting (last report {seen})"
        if st.startswith("engine-"):
            return f"{self.engine or 'its engine'} reports it {st[len('engine-') :]}"
        return None


@dataclass(frozen=True)
class EngineNode:
    """A node as an orchestrator reports it: Swarm's node id, status (``ready``, ``down``,
    ``disconnected``, ``unknown``), availability (``active``, ``pause``, ``drain``), address,
    hostname, CPUs and memory (bytes)."""

    id: str
    state: str
    availability: str
    address: str | None = None
    hostname: str | None = None
    cpus: int | None = None
    memory_bytes: int | None = None


class NodeRecords:
    """Mixed into :class:`~.ledger.Ledger` (uses ``_read``, ``_write``)."""

    # -- reads ------------------------------------------------------------------------------

    def nodes(self) -> list[Node]:
        """Every node, by name."""
        with self._read() as conn:
            return [Node.from_row(r) for r in conn.execute(sa.select(nodes).order_by(nodes.c.name))]

    def node(self, name: str) -> Node | None:
        with self._read() as conn:
            row = conn.execute(sa.select(nodes).where(nodes.c.name == name)).first()
        return Node.from_row(row) if row else None

    # -- the one availability rule, applied -------------------------------------------------

    def _ensure_nodes(self, conn, names: Iterable[str], now: datetime | None = None) -> None:
        """Rows for ``names`` that have none yet (in service)."""
        names = set(names)
        if not names:
            return
        have = set(conn.execute(sa.select(nodes.c.name).where(nodes.c.name.in_(names))).scalars())
        now = now or clock.utcnow()
        for n in sorted(names - have):
            conn.execute(
                nodes.insert().values(
                    name=n, drained=False, unreachable=False, available=True, updated_at=now
                )
            )

    def _forget_empty_nodes(self, conn, names: Iterable[str]) -> None:
        """Delete the rows of ``names`` left with no device, no agent, no orchestrator and no
        token (the old name of a renamed ``c.GPULab.node_name``)."""
        for name in names:
            has_devices = conn.execute(
                sa.select(devices.c.uuid).where(devices.c.node == name).limit(1)
            ).first()
            if has_devices is None:
                conn.execute(
                    nodes.delete().where(
                        nodes.c.name == name,
                        nodes.c.agent_seen_at.is_(None),
                        nodes.c.engine.is_(None),
                        nodes.c.token_hash.is_(None),
                    )
                )

    def _refresh_available(
        self, conn, *, node: str | None = None, device: str | None = None
    ) -> None:
        """Recompute ``available`` of node ``node``'s or device ``device``'s slices (all when
        neither): present, device not drained, node in service."""
        node_out = sa.exists().where(nodes.c.name == slices.c.node, nodes.c.available == sa.false())
        device_out = sa.exists().where(
            devices.c.uuid == slices.c.device_uuid, devices.c.drained == sa.true()
        )
        q = slices.update().values(
            available=sa.and_(slices.c.present == sa.true(), sa.not_(device_out), sa.not_(node_out))
        )
        if node is not None:
            q = q.where(slices.c.node == node)
        if device is not None:
            q = q.where(slices.c.device_uuid == device)
        conn.execute(q)

    def _update_node(self, conn, name: str, now: datetime, **values) -> bool:
        """Write ``values`` on node ``name`` (made if missing) and its ``available`` summary;
        returns whether the summary changed (its slices were refreshed then)."""
        self._ensure_nodes(conn, [name], now)
        row = conn.execute(sa.select(nodes).where(nodes.c.name == name)).one()._mapping
        merged = {**dict(row), **values}
        available = node_in_service(
            bool(merged["drained"]),
            bool(merged["unreachable"]),
            merged["engine_state"],
            merged["engine_availability"],
        )
        conn.execute(
            nodes.update()
            .where(nodes.c.name == name)
            .values(**values, available=available, updated_at=now)
        )
        changed = available != bool(row["available"])
        if changed:
            self._refresh_available(conn, node=name)
        return changed

    # -- admin ------------------------------------------------------------------------------

    def set_node_drained(self, name: str, drained: bool, reason: str | None = None) -> bool:
        """Drain (``True``) or return to service a whole node: none of its slices is handed out
        while drained; holders keep theirs. Returns whether the node exists."""
        with self._write() as conn:
            if conn.execute(sa.select(nodes.c.name).where(nodes.c.name == name)).first() is None:
                return False
            self._update_node(
                conn,
                name,
                clock.utcnow(),
                drained=drained,
                drain_reason=(reason or None) if drained else None,
            )
        return True

    def issue_node_token(self, name: str) -> str:
        """A new token for node ``name``'s agent (made if missing), replacing any earlier one;
        returned once, stored as its hash only."""
        token = NODE_TOKEN_PREFIX + secrets.token_urlsafe(32)
        with self._write() as conn:
            self._update_node(conn, name, clock.utcnow(), token_hash=token_hash(token))
        return token

    def revoke_node_token(self, name: str) -> bool:
        """Forget node ``name``'s token (its agent is refused from now on)."""
        with self._write() as conn:
            res = conn.execute(nodes.update().where(nodes.c.name == name).values(token_hash=None))
        return res.rowcount == 1

    def node_for_token(self, token: str) -> str | None:
        """The node whose agent holds ``token``, or ``None``."""
        if not token.startswith(NODE_TOKEN_PREFIX):
            return None
        digest = token_hash(token)
        with self._read() as conn:
            row = conn.execute(
                sa.select(nodes.c.name, nodes.c.token_hash).where(nodes.c.token_hash == digest)
            ).first()
        if row is None or not hmac.compare_digest(row.token_hash, digest):
            return None
        return row.name

    # -- node agents (the service) ----------------------------------------------------------

    def held_elsewhere(self, node: str, ids) -> dict[str, str]:
        """``{id: other node}`` for the device UUIDs and slice ids among ``ids`` that the ledger
        holds, present, under another node than ``node``: a node agent may not report them
        (a GPU moved to another host is reported gone by its old node's agent first)."""
        ids = list(set(ids))
        if not ids:
            return {}
        with self._read() as conn:
            found = {
                r.uuid: r.node
                for r in conn.execute(
                    sa.select(devices.c.uuid, devices.c.node).where(
                        devices.c.uuid.in_(ids), devices.c.node != node, devices.c.present
                    )
                )
            }
            found.update(
                {
                    r.id: r.node
                    for r in conn.execute(
                        sa.select(slices.c.id, slices.c.node).where(
                            slices.c.id.in_(ids), slices.c.node != node, slices.c.present
                        )
                    )
                }
            )
        return found

    def record_report(
        self,
        name: str,
        *,
        agent_version: str,
        interval_s: float,
        hostname: str | None = None,
        cpus: int | None = None,
        memory_bytes: int | None = None,
        now: datetime | None = None,
    ) -> bool:
        """Node ``name``'s agent reported at ``now``: it is reachable. Returns ``True`` when it
        was unreachable until now (its slices are back in service, unless something else keeps
        them out)."""
        now = now or clock.utcnow()
        with self._write() as conn:
            was = conn.execute(
                sa.select(nodes.c.unreachable).where(nodes.c.name == name)
            ).scalar_one_or_none()
            self._update_node(
                conn,
                name,
                now,
                agent_seen_at=now,
                agent_interval_s=float(interval_s),
                agent_version=agent_version[:32],
                unreachable=False,
                hostname=hostname,
                cpus=cpus,
                memory_bytes=memory_bytes,
            )
        return bool(was)

    def expire_agents(self, timeout_s: float, now: datetime | None = None) -> list[str]:
        """Mark every node whose agent last reported more than ``timeout_s`` seconds before
        ``now`` unreachable (its free slices leave service); returns the names newly marked.
        Nodes without an agent are never marked."""
        now = now or clock.utcnow()
        cutoff = now - timedelta(seconds=timeout_s)
        with self._write() as conn:
            late = list(
                conn.execute(
                    sa.select(nodes.c.name).where(
                        nodes.c.agent_seen_at.is_not(None),
                        nodes.c.agent_seen_at < cutoff,
                        nodes.c.unreachable == sa.false(),
                    )
                ).scalars()
            )
            for name in late:
                self._update_node(conn, name, now, unreachable=True)
        return late

    # -- orchestrators (the Swarm backend) --------------------------------------------------

    def record_engine(self, engine: str, seen: Mapping[str, EngineNode]) -> list[str]:
        """What orchestrator ``engine`` (``"swarm"``) reports of its nodes now, by node name.
        A node of the ledger that ``engine`` ran before and no longer lists gets the state
        ``missing`` (out of service). Returns the names whose service state changed."""
        now = clock.utcnow()
        changed = []
        with self._write() as conn:
            known = {
                r.name: r
                for r in conn.execute(
                    sa.select(
                        nodes.c.name,
                        nodes.c.engine,
                        nodes.c.engine_id,
                        nodes.c.engine_state,
                        nodes.c.engine_availability,
                        nodes.c.address,
                    )
                )
            }
            for name, e in seen.items():
                old = known.get(name)
                new = (engine, e.id, e.state, e.availability, e.address)
                if old is not None and tuple(old[1:]) == new:
                    continue
                values = dict(
                    engine=engine,
                    engine_id=e.id,
                    engine_state=e.state[:32],
                    engine_availability=e.availability[:16],
                    address=e.address,
                )
                if e.hostname:
                    values["hostname"] = e.hostname
                if e.cpus is not None:
                    values.update(cpus=e.cpus, memory_bytes=e.memory_bytes)
                if self._update_node(conn, name, now, **values):
                    changed.append(name)
            for name, old in known.items():
                if name in seen or old.engine != engine or old.engine_state == "missing":
                    continue
                if self._update_node(conn, name, now, engine_state="missing", engine_id=None):
                    changed.append(name)
        return changed
