"""Courses launched from an LMS (Moodle, Canvas): ``ltiauthenticator``'s LTI 1.3 tool, with
gpulab groups from the launch.

Runs in the hub (``c.JupyterHub.authenticator_class = "gpulab-lti13"``; ``pip install
'jupyterhub-gpulab[lti]'``). ``ltiauthenticator`` does the LTI 1.3 OIDC launch: login initiation
(``/hub/lti13/oauth_login``), the signed ``id_token`` posted to ``/hub/lti13/oauth_callback``,
its signature checked against the platform's JWKS, its issuer, audience, nonce and state. This
class adds the groups (``manage_groups`` on: the launch owns them):

- **the LMS role** (claim ``https://purl.imsglobal.org/spec/lti/claim/roles``, URIs) through the
  same ``group_*`` settings as SSO (:class:`~.oidc.MappingTraits`); by default a ``Learner`` of
  the context lands in ``students``, an ``Instructor``/``TeachingAssistant`` (also as LTI 1.3's
  sub-role ``membership/Instructor#TeachingAssistant``)/``ContentDeveloper``/``Administrator`` in
  ``staff``;
- **the course**: the launch's context id (the LMS course) is looked up in ``context_groups``; a
  learner gets that group (a course's roster group), staff get it with ``staff_suffix``
  (``ml101-staff``). A context not listed gets no course group (and a log line naming its id, so
  the admin can add it).

The launch then lands on the user's **course server**: ``/hub/spawn/<user>/<course group>`` (a
named server named after the course; needs ``c.JupyterHub.allow_named_servers``), unless the
launch's ``target_link_uri`` names another page (``…/hub/…?next=/hub/home``), or
``land_on_course_server`` is off. LMS-side registration: the docs' admin guide, "LTI 1.3".
"""

from __future__ import annotations

import threading
import time

from ltiauthenticator.lti13.auth import LTI13Authenticator
from ltiauthenticator.lti13.handlers import LTI13CallbackHandler
from tornado.web import HTTPError
from traitlets import Bool, Dict, Instance, Unicode, default

from .groupmap import claim_value, valid_group_name
from .oidc import MappingTraits

__all__ = ["GPULabLTI13Authenticator", "ROLES_CLAIM", "CONTEXT_CLAIM"]

ROLES_CLAIM = "https://purl.imsglobal.org/spec/lti/claim/roles"
CONTEXT_CLAIM = "https://purl.imsglobal.org/spec/lti/claim/context"
_MEMBERSHIP = "http://purl.imsglobal.org/vocab/lis/v2/membership#"
_INSTITUTION = "http://purl.imsglobal.org/vocab/lis/v2/institution/person#"
STAFF_ROLES = ("Instructor", "TeachingAssistant", "ContentDeveloper", "Administrator")
#: LIS v2 sub-roles of Instructor that are staff: LTI 1.3 names a teaching assistant
#: ``…/membership/Instructor#TeachingAssistant`` (Canvas, Moodle), not ``…/membership#…``
_INSTRUCTOR_SUBROLE = "http://purl.imsglobal.org/vocab/lis/v2/membership/Instructor#"
STAFF_SUBROLES = ("TeachingAssistant",)


class SeenNonces:
    """The nonces of the launches this hub accepted, each kept until its ``id_token`` expires
    (at most ``max_age_s``), so a launch is accepted once (IMS Security Framework 5.1.3: the tool
    should check it has not received the nonce before). ltiauthenticator checks the nonce
    against a browser cookie only, which a replay carries along. Kept in the hub's memory: a
    hub restart forgets them (the id_token's ``exp``, minutes, still bounds a replay)."""

    def __init__(self, max_age_s: float = 86400, max_entries: int = 100_000):
        self.max_age_s, self.max_entries = max_age_s, max_entries
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def first_use(self, nonce: str, expires: object, now: float | None = None) -> bool:
        """``True`` the first time ``nonce`` is offered (and remember it until ``expires``,
        seconds since the epoch), ``False`` for every later offer before then."""
        now = time.time() if now is None else now
        until = now + self.max_age_s
        if isinstance(expires, (int, float)) and not isinstance(expires, bool):
            until = min(until, float(expires) + 60)  # PyJWT's leeway is smaller
        with self._lock:
            if len(self._seen) >= self.max_entries:
                self._seen = {n: t for n, t in self._seen.items() if t > now}
                while len(self._seen) >= self.max_entries:  # the oldest first
                    self._seen.pop(next(iter(self._seen)))
            seen = self._seen.get(nonce)
            if seen is not None and seen > now:
                return False
            self._seen[nonce] = until
            return True


class CourseLandingCallbackHandler(LTI13CallbackHandler):
    """ltiauthenticator's callback, refusing a replayed launch (:class:`SeenNonces`) and
    landing on the course server the launch named."""

    def check_nonce(self, id_token) -> None:
        super().check_nonce(id_token)
        if not self.authenticator.seen_nonces.first_use(id_token.get("nonce"), id_token.get("exp")):
            self.log.warning("LTI launch refused: its nonce was used by an earlier launch (replay)")
            raise HTTPError(
                400, "This launch was already used. Open the tool again from your course's page."
            )

    def get_next_url(self, user=None):
        landing = getattr(self, "gpulab_course_server", None)
        chosen = super().get_next_url(user)
        base = self.hub.base_url
        is_default = chosen.rstrip("/") in {(base + p).rstrip("/") for p in ("", "home", "spawn")}
        if landing and user is not None and is_default:
            return f"{self.hub.base_url}spawn/{user.name}/{landing}"
        return chosen


class GPULabLTI13Authenticator(MappingTraits, LTI13Authenticator):
    """LTI 1.3 launches with gpulab groups and the course landing (module docstring)."""

    callback_handler = CourseLandingCallbackHandler

    context_groups = Dict(
        value_trait=Unicode(),
        config=True,
        help="""LMS context (course) id -> gpulab group (a course's roster group).

        The context id is the ``id`` of the launch's ``…/claim/context`` (Moodle: the course id;
        Canvas: the course's opaque context id; both show in the hub log at the first launch).
        Example: ``c.GPULabLTI13Authenticator.context_groups = {"42": "ml101"}``
        """,
    )
    staff_suffix = Unicode(
        "-staff",
        config=True,
        help="""Appended to the course group for the context's staff (``ml101-staff``).

        Example: ``c.GPULabLTI13Authenticator.staff_suffix = "-instructors"``
        """,
    )
    land_on_course_server = Bool(
        True,
        config=True,
        help="""After a launch from a listed course, go to the user's course server
        (``/hub/spawn/<user>/<course group>``) unless the launch names another page.

        Example: ``c.GPULabLTI13Authenticator.land_on_course_server = False``
        """,
    )

    seen_nonces = Instance(SeenNonces, args=(), help="The launches' nonces already accepted.")

    @default("manage_groups")
    def _manage_groups_default(self):
        return True

    @default("group_claim")
    def _group_claim_default(self):
        return ROLES_CLAIM

    @default("group_rename")
    def _group_rename_default(self):
        roles = {f"{_MEMBERSHIP}Learner": "students", f"{_INSTITUTION}Student": "students"}
        roles.update({f"{_MEMBERSHIP}{r}": "staff" for r in STAFF_ROLES})
        roles.update({f"{_INSTRUCTOR_SUBROLE}{r}": "staff" for r in STAFF_SUBROLES})
        roles.update({f"{_INSTITUTION}Faculty": "staff"})
        return roles

    def mapping_problems(self) -> list[str]:
        out = super().mapping_problems()
        for ctx, group in self.context_groups.items():
            for g in (group, group + self.staff_suffix):
                if not valid_group_name(g):
                    out.append(
                        f"c.{type(self).__name__}.context_groups[{ctx!r}]: {g!r} is not a valid "
                        "group name"
                    )
        return out

    def _course(self, claims) -> tuple[str | None, str | None]:
        """``(context id, course group)`` of a launch; the group is None when not listed."""
        ctx = claim_value(claims, CONTEXT_CLAIM)
        if not isinstance(ctx, dict) or not isinstance(ctx.get("id"), str):
            return None, None
        return ctx["id"], self.context_groups.get(ctx["id"])

    def _with_course(self, groups: list[str], claims) -> tuple[list[str], str | None, str | None]:
        """``(groups + the course group, context id, course group)``: a learner gets the course
        group, staff (mapped to ``staff``) the course group with :attr:`staff_suffix`."""
        context_id, course = self._course(claims)
        out = set(groups)
        if course:
            out.add(course + self.staff_suffix if "staff" in out else course)
        return sorted(out), context_id, course

    def launch_groups(self, username: str, claims) -> tuple[list[str], str | None]:
        """``(groups, course group)`` of a verified launch; :class:`LoginRefused` for a
        malformed roles claim."""
        groups, context_id, course = self._with_course(self.map_claims(username, claims), claims)
        if context_id is not None and course is None:
            self.log.info(
                "LTI launch of %s from context %r, which c.%s.context_groups does not list",
                username,
                context_id,
                type(self).__name__,
            )
        return groups, course

    def explain(self, claims) -> dict:
        """For ``gpulab check-auth``: what a launch with these id_token ``claims`` gives
        (:class:`ClaimError` as the launch would)."""
        name = self.get_username(claims)
        mapped = self.group_mapping.map(claims)
        groups, context_id, course = self._with_course(mapped.groups, claims)
        return {
            "username": name,
            "groups": groups,
            "dropped": [list(d) for d in mapped.dropped],
            "admin": name in self.admin_users,
            "allowed": True,
            "course": (
                f"context {context_id!r} -> {course or '(not in context_groups)'}"
                if context_id
                else None
            ),
        }

    async def authenticate(self, handler, data=None):
        """ltiauthenticator's model (name, the launch as auth_state) plus ``groups``."""
        model = await super().authenticate(handler, data)
        groups, course = self.launch_groups(model["name"], data or {})
        model["groups"] = groups
        server = self.course_server(course) if course else None
        if server and self.land_on_course_server and handler is not None:
            handler.gpulab_course_server = server
        return model

    def course_server(self, course_group: str) -> str | None:
        """The named server a launch of the course whose (roster) group is ``course_group``
        lands on: the group's name, which is the course's slug and server name when the
        course keeps its default roster group. ``None``: land on the default page."""
        return course_group
