"""The gpulab service's course pages and API without a hub process or an engine: the service's
real Tornado application (:func:`~jupyterhub_gpulab.service.web.application.make_app`, the real
:class:`~jupyterhub_gpulab.courses.manager.CourseManager` of
:func:`~jupyterhub_gpulab.service.app.make_course_manager`, a real SQLite ledger) listening in the
test's own event loop, in front of :class:`StandInHub`: the few JupyterHub REST API routes the
service calls (who a token is, users, groups, starting and stopping named servers), answered from
dicts, so the service's real ``HubClient`` and JupyterHub's real ``HubOAuth`` talk HTTP to it.

The engine seam (the manager's ``backend``) is a stand-in a test sets where it needs one
(Distribute, Collect); nothing here reaches Docker.

    lab = await course_lab(tmp_path, courses=[{"slug": "ml101", ...}],
                           users={"ta1": ["ml101-staff"], "stu1": ["ml101"]})
    code, body = await lab.api("ta1", "GET", "courses/ml101")
    page = await lab.form("ta1", "ml101", "add", {"user": "stu2"})   # the page it lands on
"""

from __future__ import annotations

import asyncio
import html
import json
import re
import socket
from dataclasses import dataclass, field
from urllib.parse import unquote, urlencode

from jupyterhub.services.auth import HubOAuth
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.httpserver import HTTPServer
from traitlets.config import Config

from jupyterhub_gpulab import clock
from jupyterhub_gpulab.backends.base import Server as EngineServer
from jupyterhub_gpulab.courses.storage import LocalFolders
from jupyterhub_gpulab.hub.hubconfig import ADMIN_SCOPE
from jupyterhub_gpulab.hubapi.client import HubClient
from jupyterhub_gpulab.lab.config import GPULab
from jupyterhub_gpulab.ledger import Ledger
from jupyterhub_gpulab.service.app import make_course_manager
from jupyterhub_gpulab.service.state import LabState
from jupyterhub_gpulab.service.web.application import make_app
from jupyterhub_gpulab.spawner import container as ct

PREFIX = "/services/gpulab/"
ACCESS = "access:services!service=gpulab"
SERVICE_TOKEN = "service-token"
PROFILES = [{"slug": "cpu", "display_name": "CPU", "image": "lab:1", "default": True}]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _iso(t) -> str:
    return t.isoformat().replace("+00:00", "Z")


@dataclass
class StandInHub:
    """A JupyterHub's REST API as far as the service uses it for courses, kept in dicts.

    ``users``: name -> groups; ``admins``: who holds gpulab's admin scope; ``servers``: name ->
    {server name -> the hub's server model}; ``refuse``: name -> list of ``(status, message)``
    answers its next starts get (popped one per start; a refused start changes nothing);
    ``fail_spawn``: names whose start is accepted but whose server vanishes while starting;
    ``start_s``: seconds a start stays pending before it is ready. ``calls``: every request
    as ``(method, path)``."""

    users: dict[str, set[str]] = field(default_factory=dict)
    admins: set[str] = field(default_factory=set)
    servers: dict[str, dict[str, dict]] = field(default_factory=dict)
    refuse: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    fail_spawn: set[str] = field(default_factory=set)
    start_s: float = 0.05
    calls: list[tuple[str, str]] = field(default_factory=list)
    groups: set[str] = field(default_factory=set)
    #: ``False``: the service's token may not list users (403), as a course token of old
    listing: bool = True
    #: name -> ``(status, message)`` every stop of their server gets
    refuse_stop: dict[str, tuple[int, str]] = field(default_factory=dict)

    def __post_init__(self):
        self.groups |= {g for gs in self.users.values() for g in gs}

    def token_of(self, name: str) -> str:
        return f"token-{name}"

    def model(self, name: str, *, scopes=()) -> dict:
        return {
            "kind": "user",
            "name": name,
            "admin": name in self.admins,
            "groups": sorted(self.users[name]),
            "servers": self.servers.get(name, {}),
            "scopes": list(scopes),
        }

    def group(self, name: str) -> dict:
        return {"name": name, "users": sorted(u for u, g in self.users.items() if name in g)}

    def running(self, user: str, server: str) -> bool:
        return bool(self.servers.get(user, {}).get(server, {}).get("ready"))

    def run(self, user: str, server: str) -> None:
        """``user``'s server ``server`` running now (as if started earlier)."""
        now = _iso(clock.utcnow())
        self.servers.setdefault(user, {})[server] = {
            "name": server, "ready": True, "pending": None, "started": now,
            "last_activity": now, "url": f"/user/{user}/{server}/",
            "user_options": {"profile": "cpu"},
        }  # fmt: skip

    def app(self) -> web.Application:
        hub = self

        class Handler(web.RequestHandler):
            def check_xsrf_cookie(self):
                pass

            def prepare(self):
                hub.calls.append((self.request.method, unquote(self.request.path)))
                header = self.request.headers.get("Authorization", "")
                self.token = header.split(" ", 1)[1] if " " in header else ""

            def answer(self, status: int, body=None):
                self.set_status(status)
                if body is None:
                    return self.finish()
                self.set_header("Content-Type", "application/json")
                self.finish(json.dumps(body))

            def fail(self, status: int, message: str):
                self.answer(status, {"status": status, "message": message})

            def body(self) -> dict:
                return json.loads(self.request.body) if self.request.body else {}

        class Me(Handler):
            def get(self):
                if self.token == SERVICE_TOKEN:
                    return self.answer(200, {"kind": "service", "name": "gpulab", "scopes": []})
                for name in hub.users:
                    if hub.token_of(name) == self.token:
                        scopes = [ACCESS] + ([ADMIN_SCOPE] if name in hub.admins else [])
                        return self.answer(200, hub.model(name, scopes=scopes))
                self.fail(403, "Invalid token")

        class Users(Handler):
            def get(self):
                if not hub.listing:
                    return self.fail(403, "Action is not authorized with current scopes")
                active = [hub.model(u) for u in sorted(hub.users) if hub.servers.get(u)]
                self.answer(200, {"items": active, "_pagination": {"next": None}})

        class OneUser(Handler):
            def get(self, name):
                name = unquote(name)
                if name not in hub.users:
                    return self.fail(404, f"No such user {name}")
                self.answer(200, hub.model(name))

        class Server(Handler):
            def post(self, name, server):
                name, server = unquote(name), unquote(server)
                if name not in hub.users:
                    return self.fail(404, f"No such user {name}")
                mine = hub.servers.setdefault(name, {})
                if server in mine:
                    state = "is pending" if mine[server]["pending"] else "is already running"
                    return self.fail(400, f"{name}'s server {server} {state}")
                if hub.refuse.get(name):
                    return self.fail(*hub.refuse[name].pop(0))
                now = _iso(clock.utcnow())
                mine[server] = {
                    "name": server, "ready": False, "pending": "spawn", "started": now,
                    "last_activity": now, "url": f"/user/{name}/{server}/",
                    "user_options": self.body(),
                }  # fmt: skip
                asyncio.get_running_loop().call_later(hub.start_s, hub._started, name, server)
                self.answer(202)

            def delete(self, name, server):
                name, server = unquote(name), unquote(server)
                if name not in hub.users:
                    return self.fail(404, f"No such user {name}")
                if name in hub.refuse_stop:
                    return self.fail(*hub.refuse_stop[name])
                hub.servers.get(name, {}).pop(server, None)
                if not hub.servers.get(name):
                    hub.servers.pop(name, None)
                self.answer(204)

        class Group(Handler):
            def get(self, name):
                name = unquote(name)
                if name not in hub.groups:
                    return self.fail(404, f"No such group {name}")
                self.answer(200, hub.group(name))

            def post(self, name):
                name = unquote(name)
                if name in hub.groups:
                    return self.fail(409, f"Group {name} already exists")
                hub.groups.add(name)
                self.answer(201, hub.group(name))

        class Members(Handler):
            def post(self, name):
                name = unquote(name)
                hub.groups.add(name)
                for u in self.body().get("users", []):
                    hub.users.setdefault(u, set()).add(name)
                self.answer(200, hub.group(name))

            def delete(self, name):
                name = unquote(name)
                for u in self.body().get("users", []):
                    hub.users.get(u, set()).discard(name)
                self.answer(200, hub.group(name))

        api = "/hub/api/"
        return web.Application(
            [
                (api + "user", Me),
                (api + "users", Users),
                (api + "users/([^/]+)", OneUser),
                (api + "users/([^/]+)/servers/([^/]*)", Server),
                (api + "groups/([^/]+)", Group),
                (api + "groups/([^/]+)/users", Members),
            ]
        )

    def _started(self, name: str, server: str) -> None:
        model = self.servers.get(name, {}).get(server)
        if model is None:
            return
        if name in self.fail_spawn:
            self.servers[name].pop(server)
            if not self.servers[name]:
                self.servers.pop(name)
            return
        model.update(ready=True, pending=None)


class LabBackend:
    """The engine seam (the course manager's ``backend``) as the course actions use it: the
    hub's running course servers listed as containers carrying the course's label, each one's
    content status (``status``: user -> the file's bytes) and pulls (``pulled``), the
    repository check's answers (``repos``: repo -> ``(exit code, stdout, stderr)``; a repo not
    there has every branch), and folders for collect and return. ``not_course``: users whose
    server of the course's name was not started as a course server (no label)."""

    network = "bridge"

    def __init__(self, hub: StandInHub, root):
        self.hub, self.files = hub, LocalFolders(str(root))
        self.status: dict[str, bytes] = {}
        self.pulled: list[str] = []
        self.repos: dict[str, tuple] = {}
        self.not_course: set[str] = set()

    def servers(self, server_name=None, lab_id=None):
        out = []
        for user in sorted(self.hub.servers):
            if not self.hub.running(user, server_name):
                continue
            course = None if user in self.not_course else server_name
            labels = ct.labels(allocation_id=None, user=user, server_name=server_name,
                               profile="cpu", slice_id=None, node="", lab="lab",
                               course=course)  # fmt: skip
            started = self.hub.servers[user][server_name]["started"]
            out.append(EngineServer(f"{user}-{started}", user, "", labels))
        return out

    def exec_run(self, server, cmd, user=""):
        self.pulled.append(server.user)
        return 0, b""

    def get_file(self, server, path, max_bytes):
        return self.status.get(server.user)

    def run_once(self, image, cmd, **kw):
        return self.repos.get(cmd[-2], (0, "abc\trefs/heads/main\n", ""))

    def storage(self, image, near=None):
        return self.files


class CourseLab:
    """The service's app and its stand-in hub, listening on this loop (:func:`course_lab`)."""

    def __init__(self, hub: StandInHub, ledger: Ledger, manager, state, hub_port, port):
        self.hub, self.ledger, self.courses, self.state = hub, ledger, manager, state
        self.engine: LabBackend = manager.backend
        self.url = f"http://127.0.0.1:{port}{PREFIX}"
        self.hub_port = hub_port
        self.http = AsyncHTTPClient()
        self._servers: list[HTTPServer] = []

    async def request(self, who: str | None, method: str, path: str, body=None, *,
                      headers=None, form: dict | None = None):  # fmt: skip
        """``(status, headers, text)`` of ``method`` on the service's ``path`` as ``who``
        (their token in the header; ``None``: nobody)."""
        h = dict(headers or {})
        if who is not None:
            h["Authorization"] = f"token {self.hub.token_of(who)}"
        if form is not None:
            body = urlencode(form, doseq=True)
            h.setdefault("Content-Type", "application/x-www-form-urlencoded")
        elif body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            h.setdefault("Content-Type", "application/json")
        if body is None and method in ("POST", "PUT"):
            body = b""
        r = await self.http.fetch(
            HTTPRequest(
                self.url + path,
                method=method,
                headers=h,
                body=body,
                follow_redirects=False,
                request_timeout=30,
            ),  # fmt: skip
            raise_error=False,
        )
        return r.code, r.headers, (r.body or b"").decode()

    async def api(self, who: str | None, method: str, path: str, body=None, **kw):
        """``(status, JSON body)`` of the course API (``api/courses…``)."""
        code, _, text = await self.request(who, method, "api/" + path, body, **kw)
        return code, json.loads(text) if text else None

    async def page(self, who: str, path: str, cookie: str = "") -> str:
        """A page's text as ``who`` sees it (HTML entities unescaped; ``cookie`` sent along)."""
        code, _, text = await self.request(who, "GET", path, headers={"Cookie": cookie})
        assert code == 200, (code, text[:500])
        return html.unescape(text)

    async def form(self, who: str, slug: str, action: str, data: dict | None = None,
                   path: str | None = None) -> str:  # fmt: skip
        """Post a course page's form as ``who``; the page it redirects back to (with its
        message), as they see it."""
        code, headers, text = await self.request(
            who, "POST", path or f"courses/{slug}/actions/{action}", form=data or {}
        )
        assert code == 302, (code, text[:500])
        cookies = "; ".join(c.split(";", 1)[0] for c in headers.get_list("Set-Cookie"))
        location = headers["Location"]
        assert location.startswith(PREFIX), location
        return await self.page(who, location[len(PREFIX) :], cookie=cookies)

    def stop(self) -> None:
        for s in self._servers:
            s.stop()
        self.ledger.close()


def flash(page: str) -> str:
    """The message a page shows after a form (its flash), whitespace folded."""
    m = re.search(r'<div class="alert alert-(\w+)[^"]*"[^>]*>(.*?)</div>', page, re.S)
    assert m, "the page shows no message"
    return m.group(1) + ": " + " ".join(re.sub(r"<[^>]+>", " ", m.group(2)).split())


async def course_lab(tmp_path, *, courses: list[dict], users: dict[str, list[str]],
                     admins=("admin",), extra: dict | None = None,
                     db_url: str | None = None) -> CourseLab:  # fmt: skip
    """The lab of ``courses`` (``c.GPULabCourses.courses``; ``extra``: more GPULabCourses
    settings), its hub knowing ``users`` (name -> groups) and ``admins`` (who hold
    ``custom:gpulab:admin``), the courses declared as at the service's start; its ledger on
    ``db_url`` (default: a SQLite file in ``tmp_path``)."""
    hub = StandInHub(users={u: set(g) for u, g in users.items()}, admins=set(admins))
    for a in admins:
        hub.users.setdefault(a, set())
    ledger = Ledger(db_url or f"sqlite:///{tmp_path / 'gpulab.sqlite'}")
    config = Config()
    config.GPULab.profiles = PROFILES
    config.GPULabCourses.courses = courses
    config.GPULabCourses.prestart_backoff = 0.01
    config.GPULabCourses.ready_timeout = 10
    for k, v in (extra or {}).items():
        setattr(config.GPULabCourses, k, v)
    gpulab = GPULab(config=config, node_name="node-a", inventory=[])
    state = LabState(gpulab, ledger)
    state.sync()
    hub_port, port = _free_port(), _free_port()
    client = HubClient(f"http://127.0.0.1:{hub_port}/hub/api", SERVICE_TOKEN, timeout=10)
    secret = b"s" * 32
    manager = make_course_manager(gpulab, ledger, client, state.lab, secret)
    manager.secret = None  # no course token on this hub: pre-start uses the service's
    manager.backend = LabBackend(hub, tmp_path / "volumes")
    auth = HubOAuth(
        api_url=f"http://127.0.0.1:{hub_port}/hub/api", api_token=SERVICE_TOKEN,
        oauth_client_id="service-gpulab", base_url=PREFIX, hub_prefix="/hub/",
        oauth_redirect_uri=PREFIX + "oauth_callback", access_scopes={ACCESS},
        cache_max_age=0,
    )  # fmt: skip
    app = make_app(state, client, auth, cookie_secret=secret, prefix=PREFIX, courses=manager)
    lab = CourseLab(hub, ledger, manager, state, hub_port, port)
    for application, p in ((hub.app(), hub_port), (app, port)):
        server = HTTPServer(application)
        server.listen(p, "127.0.0.1")
        lab._servers.append(server)
    await manager.declare()
    return lab
