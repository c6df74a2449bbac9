"""The JSON API under ``/services/gpulab/api/`` (described by ``api/openapi.json``)::

    GET    inventory                  nodes, devices, slices, live utilisation   (read)
    POST   inventory/refresh          re-read the inventory, sync the ledger     (admin)
    GET    allocations                open allocations, server state, activity   (read)
    DELETE allocations/<id>           release an allocation                      (admin)
    GET    usage                      per group: held vs limits; refusals, 24 h;
                                      GPU-hours per group, and per user a page at a
                                      time (?start=&end=&offset=&limit=)     (read)
    GET    usage.csv                  GPU-hours as CSV (?start=&end=, ISO dates)  (read)
    POST   devices/<uuid>/drain       drain a device ({"reason": "…"})           (admin)
    DELETE devices/<uuid>/drain       return it to service                       (admin)
    DELETE users/<user>/server        stop a server through the hub              (admin)
    DELETE users/<user>/servers/<n>   stop a named server through the hub        (admin)
    GET    me                         my servers, slices, limits, capacity       (any user)
    POST   users/<me>/server[s/<n>]/keep, …/move-to-cpu: see keepapi     (own server)
    GET, POST users/<me>/server[s/<n>]/interaction: see presenceapi    (own server)
    GET    waitlist, POST waitlist, DELETE waitlist/<profile>, GET bookings: see queueapi
    GET    nodes, POST nodes/<node>/report, …/drain, …/token: see nodeapi
    GET    openapi.json               this API's OpenAPI 3.1 document            (public)

(read) needs ``custom:gpulab:read``, (admin) ``custom:gpulab:admin`` (JupyterHub admins hold
it). Errors are ``{"status": <code>, "message": "…"}``.
"""

from __future__ import annotations

from ..._version import __version__
from ...fairuse.accounting import to_csv
from ...ledger import aio, listing
from .. import actions
from . import inputs, paging
from .admindata import period_sums, usage_summary, users_usage_rows
from .base import APIHandler, refuse
from .data import admin_data, allocations_page, usage_data, user_data
from .keepapi import keep_handlers
from .nodeapi import node_handlers
from .openapi import openapi
from .presenceapi import presence_handlers
from .queueapi import queue_handlers
from .usageview import USER_SORTS, usage_view, user_hours_page


class RootAPI(APIHandler):
    def get(self):
        base = self.prefix + "api/"
        self.write_json(
            {
                "version": __version__,
                "openapi": base + "openapi.json",
                "endpoints": [
                    base + p for p in ("inventory", "allocations", "usage", "usage.csv", "me")
                ],
            }
        )


class OpenAPIDoc(APIHandler):
    """The OpenAPI document: public, like JupyterHub's own REST API description."""

    def get(self):
        self.write_json(openapi(self.prefix))


class InventoryAPI(APIHandler):
    async def get(self):
        self.require(read=True)
        data = await admin_data(self.state, self.hub, parts=("inventory",))
        self.write_json(data["inventory"])


class InventoryRefreshAPI(APIHandler):
    async def post(self):
        self.require(admin=True)
        self.json_body()  # no fields: a malformed or unexpected body changes nothing
        await self.run(actions.refresh_inventory(self.state, by=self.who))


class AllocationsAPI(APIHandler):
    """Open allocations a page at a time (:mod:`.paging`: ``offset``, ``limit``, ``sort``, and
    the filters of :data:`~...ledger.listing.FILTERS`)."""

    async def get(self):
        self.require(read=True)
        paginated = paging.accepts_pagination(self.request.headers.get("Accept"))
        page = self.page(listing.SORTS, listing.FILTERS, paginated=paginated,
                         choices={"kind": listing.KINDS}, others=())  # fmt: skip
        rows, total, hub = await allocations_page(self.state, self.hub, page)
        url = self.request.full_url()
        if paginated:
            self.write_json({**paging.paginated_model(rows, page, total, url), "hub": hub})
        else:
            self.write_json({"allocations": rows, "hub": hub,
                             "_pagination": paging.pagination(page, total, url)})  # fmt: skip


class AllocationAPI(APIHandler):
    async def delete(self, allocation_id: str):
        self.require(admin=True)
        aid = inputs.allocation_id(allocation_id)
        self.json_body()
        await self.run(actions.release(self.state, self.hub, aid, by=self.who))


class UsageAPI(APIHandler):
    """Held slices per group, refusals, and the period's GPU-hours with its users a page at a
    time (:mod:`.paging`: ``offset``, ``limit``, ``sort`` of :data:`~.usageview.USER_SORTS`,
    most GPU-hours first by default, the ``user`` filter; ``gpu_hours.rows`` of those users:
    the CSV has them all). A campus has tens of thousands of users."""

    async def get(self):
        self.require(read=True)
        start, end = self.period()
        paginated = paging.accepts_pagination(self.request.headers.get("Accept"))
        page = self.page(USER_SORTS, ("user",), paginated=paginated,
                         default_sort="-gpu_hours", others=("start", "end"))  # fmt: skip
        # the database's sums for every user, the CSV's rows for the page's users only: at
        # 5,000 users reading every allocation and the whole inventory took 0.6 s an answer
        body = await usage_summary(self.state)
        sums = await aio.call(period_sums, self.state, start, end)
        gpu_hours = usage_view(sums, self.state.lab.tz)
        by_user, _, total = user_hours_page(sums, gpu_hours, page)
        gpu_hours["rows"] = await users_usage_rows(
            self.state, start, end, [u["user"] for u in by_user]
        )
        body["gpu_hours"] = gpu_hours
        url = self.request.full_url()
        if paginated:  # JupyterHub's model: the page's users are the items
            del gpu_hours["by_user"]
            self.write_json({**paging.paginated_model(by_user, page, total, url), **body})
        else:
            gpu_hours["by_user"] = by_user
            self.write_json({**body, "_pagination": paging.pagination(page, total, url)})


class UsageCSV(APIHandler):
    """The period's GPU-hours per user, group, profile and slice kind, as a CSV download."""

    async def get(self):
        self.require(read=True)
        self.only_arguments("start", "end", what="this download")
        start, end = self.period()
        u, view = await usage_data(self.state, start, end)
        name = f"gpulab-usage-{view['period']['start_date']}-{view['period']['end_date']}.csv"
        self.set_header("Content-Type", "text/csv; charset=UTF-8")
        self.set_header("Content-Disposition", f'attachment; filename="{name}"')
        self.finish(to_csv(u.rows))


class DrainAPI(APIHandler):
    async def post(self, uuid: str):
        self.require(admin=True)
        uuid = inputs.device_uuid(uuid)
        reason = inputs.drain_reason(self.json_body({"reason"}).get("reason", ""))
        await self.run(actions.drain(self.state, uuid, reason, by=self.who))

    async def delete(self, uuid: str):
        self.require(admin=True)
        self.json_body()
        await self.run(actions.undrain(self.state, inputs.device_uuid(uuid), by=self.who))


class ServerAPI(APIHandler):
    """``DELETE users/<user>/server`` or ``users/<user>/servers/<name>``: stop through the hub."""

    async def delete(self, user: str, name: str = ""):
        self.require(admin=True)
        user = inputs.name(user, "user name")
        name = inputs.name(name or "", "server name", empty=True)
        self.json_body()
        try:
            message, done = await actions.stop_server(self.state, self.hub, user, name, by=self.who)
        except actions.ActionError as e:
            raise refuse(e.status, e.message) from None
        status = 200 if done else 202
        self.write_json({"status": status, "message": message}, status)


class MeAPI(APIHandler):
    async def get(self):
        self.require()
        self.write_json(await user_data(self.state, self.hub, self.current_user))


class NotFoundAPI(APIHandler):
    def prepare(self):
        raise refuse(404, f"No such endpoint: {inputs.shown(self.request.path, 200)}")


def api_handlers(prefix: str) -> list[tuple]:
    api = prefix + "api/"
    user = r"(?P<user>[^/]+)"
    return [
        (api + r"?", RootAPI),
        (api + r"openapi\.json", OpenAPIDoc),
        (api + r"inventory", InventoryAPI),
        (api + r"inventory/refresh", InventoryRefreshAPI),
        (api + r"allocations", AllocationsAPI),
        (api + r"allocations/(?P<allocation_id>[^/]+)", AllocationAPI),
        (api + r"usage", UsageAPI),
        (api + r"usage\.csv", UsageCSV),
        (api + r"devices/(?P<uuid>[^/]+)/drain", DrainAPI),
        (api + r"users/" + user + r"/server", ServerAPI),
        (api + r"users/" + user + r"/servers/(?P<name>[^/]*)", ServerAPI),
        (api + r"me", MeAPI),
        *keep_handlers(api),
        *presence_handlers(api),
        *queue_handlers(api),
        *node_handlers(api),
        (api + r".*", NotFoundAPI),
    ]
