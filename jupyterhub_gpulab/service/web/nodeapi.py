"""The nodes of a lab of several hosts, in the JSON API::

    POST   nodes/<node>/report   a node agent's report (its node token, not a hub token)
    GET    nodes                 every node: service state, agent, engine, GPUs   (read)
    POST   nodes/<node>/drain    drain a whole node ({"reason": "…"})              (admin)
    DELETE nodes/<node>/drain    return it to service                             (admin)
    POST   nodes/<node>/token    a new agent token for the node (shown once)      (admin)
    DELETE nodes/<node>/token    revoke the node's agent token                    (admin)

A report is authenticated by the node's own token (``Authorization: token gpulabnode_…``,
:mod:`jupyterhub_gpulab.ledger.nodes`), never by a hub token, and only for the node the token
was made for; the hub is not asked about it. Its body must match the ``NodeReport`` schema
(:data:`~.nodeschemas.NODE_REPORT`, also in the OpenAPI document: every count bounded, every UUID
in NVML's exact form, :mod:`.inputs`); anything else is a 400 naming the first problem, and
nothing is recorded.
"""

from __future__ import annotations

from jsonschema import Draft202012Validator

from ...ledger import NODE_TOKEN_PREFIX, aio
from .. import actions
from ..nodes import InventoryError
from . import inputs
from .base import APIHandler, refuse
from .nodeschemas import NODE_REPORT
from .views import node_view

_REPORT = Draft202012Validator(NODE_REPORT)


def report_problem(body: dict) -> str | None:
    """The first way ``body`` breaks the ``NodeReport`` schema, for the agent; ``None``."""
    errors = sorted(_REPORT.iter_errors(body), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    e = errors[0]
    where = "/".join(str(p) for p in e.absolute_path) or "the body"
    if e.validator in ("maxItems", "maxProperties"):  # not the whole oversized value
        return f"{where}: {len(e.instance)} entries, more than the {e.validator_value} allowed"
    if e.validator == "pattern" and list(e.absolute_path)[-1:] == ["container"]:
        return f"{where}: {inputs.shown(e.instance)} is not a 64-hex Docker container id"[:300]
    if e.validator == "pattern":  # every other pattern of the report is a GPU or MIG UUID
        return f"{where}: {inputs.shown(e.instance)} is {inputs.NVML_UUID_FORM}"[:300]
    return f"{where}: {e.message}"[:300]


class NodeReportAPI(APIHandler):
    """``POST nodes/<node>/report`` from that node's agent."""

    _node: str | None = None

    async def resolve_user(self) -> None:
        # a node agent's token is the ledger's, not the hub's: never sent to the hub
        self.current_user = None
        scheme, _, token = self.request.headers.get("Authorization", "").partition(" ")
        token = token.strip()
        if scheme.lower() in ("token", "bearer") and token.startswith(NODE_TOKEN_PREFIX):
            self._node = await aio.call(self.state.ledger.node_for_token, token)

    async def post(self, node: str):
        node = inputs.node_name(node)
        if self._node is None:
            raise refuse(
                403,
                "Not a node agent: send 'Authorization: token <node token>' (on the hub host, "
                f"`gpulab node-token {node}` makes one).",
            )
        if self._node != node:
            raise refuse(403, f"This token is node {self._node}'s, not {inputs.shown(node)}'s.")
        body = self.json_body(NODE_REPORT["properties"].keys())
        problem = report_problem(body)
        if problem:
            raise refuse(400, f"The report does not match its schema: {problem}")
        try:
            answer = await aio.call(self.settings["gpulab_nodes"].receive, node, body)
        except InventoryError as e:
            raise refuse(400, "The report is inconsistent: " + "; ".join(e.errors)[:500]) from None
        self.write_json(answer)


class NodesAPI(APIHandler):
    async def get(self):
        self.require(read=True)
        found = await aio.call(self.state.ledger.nodes)
        self.write_json({"nodes": [node_view(n) for n in found]})


class NodeDrainAPI(APIHandler):
    async def post(self, node: str):
        self.require(admin=True)
        node = inputs.node_name(node)
        reason = inputs.drain_reason(self.json_body({"reason"}).get("reason", ""))
        await self.run(actions.drain_node(self.state, node, reason, by=self.who))

    async def delete(self, node: str):
        self.require(admin=True)
        self.json_body()
        await self.run(actions.undrain_node(self.state, inputs.node_name(node), by=self.who))


class NodeTokenAPI(APIHandler):
    async def post(self, node: str):
        self.require(admin=True)
        node = inputs.node_name(node)
        self.json_body()
        token = await actions.issue_node_token(self.state, node, by=self.who)
        self.write_json(
            {
                "status": 201,
                "message": f"A new agent token for node {node}; it is shown only now. Any "
                "earlier token of this node is refused from now on.",
                "node": node,
                "token": token,
            },
            201,
        )

    async def delete(self, node: str):
        self.require(admin=True)
        self.json_body()
        await self.run(actions.revoke_node_token(self.state, inputs.node_name(node), by=self.who))


def node_handlers(api: str) -> list[tuple]:
    node = r"(?P<node>[^/]+)"
    return [
        (api + r"nodes", NodesAPI),
        (api + r"nodes/" + node + r"/report", NodeReportAPI),
        (api + r"nodes/" + node + r"/drain", NodeDrainAPI),
        (api + r"nodes/" + node + r"/token", NodeTokenAPI),
    ]
