"""The user's-choice half of GPUDockerSpawner: the spawn form, spawn links and the saved choice.

- The form lists the profiles a user may pick, with live capacity and their use of their limit,
  and says when their saved choice no longer applies.
- ``options_from_form`` and ``options_from_query`` only reshape what arrives into
  ``user_options``; ``start()`` judges them with :func:`~jupyterhub_gpulab.lab.choice.choose`, so the
  REST API, the form and a link are refused or accepted alike, counted alike (JupyterHub's spawn
  metric, the ledger's refusals) and logged alike. A link (``GET /hub/spawn?…``) must name its
  profile: a GET never starts the saved or default profile.
- The saved choice is ``last_profile`` (in the server's state). JupyterHub saves each start's
  ``user_options`` as the next default before ``start()`` runs, even a refused request; for a
  gpulab server that copy stays empty (:mod:`.savedoptions`: JupyterHub's save writes nothing;
  :meth:`clear_state` clears a copy saved before), so a start without options always means
  "the profile this server last started with if I may still pick it, else the default".
"""

from __future__ import annotations

import html
import inspect

from jinja2 import TemplateError, TemplateSyntaxError
from tornado.log import app_log
from traitlets import HasTraits, TraitError, Unicode, default, validate

from ..errors import SpawnRefused
from ..lab.choice import (
    choose,
    options_from_form,
    options_from_query,
    saved_choice_notice,
    saved_or_default,
)
from ..lab.images import unservable
from ..lab.policy import PolicyContext
from ..lab.profile import Profile
from ..ledger import aio
from .form import (
    FormRow,
    course_choice,
    form_rows,
    form_template,
    limit_reason,
    render_form,
    usage_note,
    waitlist_href,
)
from .logs import install_refusal_filter
from .runtime import LabRuntime
from .savedoptions import keep_no_options


async def ready_with_notice(spawner, event: dict) -> dict:
    """``progress_ready_hook``: the ready event also says when the saved choice no longer
    applied (``spawner.choice_notice``), on the spawn-pending page and in the progress API."""
    notice = getattr(spawner, "choice_notice", None)
    if not notice:
        return event
    return {
        **event,
        "message": f"{event.get('message', '')}. {notice}".lstrip(". "),
        "html_message": f"{event.get('html_message', '')}<br>{html.escape(notice)}",
    }


def chain_ready_hook(hook):
    """``progress_ready_hook`` that runs an admin's own ``hook`` (may be async), then
    :func:`ready_with_notice`."""
    if hook is None or hook is ready_with_notice:
        return ready_with_notice

    async def chained(spawner, event):
        event = hook(spawner, event)
        if inspect.isawaitable(event):
            event = await event
        return await ready_with_notice(spawner, event)

    return chained


class ProfileFormMixin(HasTraits):
    """Mixed into :class:`~.gpudocker.GPUDockerSpawner`; needs its ``runtime()``, ``entitled()``,
    ``policy_context()``, ``mps``, ``_groups()``, ``user``, ``orm_spawner``, ``user_options``
    and ``last_profile``."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        install_refusal_filter(self.log, app_log)  # app_log: JupyterHub's User.spawn
        keep_no_options(self.orm_spawner)  # JupyterHub's saved options (module docstring)

    @default("options_form")
    def _default_options_form(self):
        return self._render_options_form

    @default("options_from_form")
    def _default_options_from_form(self):
        return self._options_from_form

    @default("progress_ready_hook")
    def _default_progress_ready_hook(self):
        return ready_with_notice

    @validate("progress_ready_hook")
    def _check_progress_ready_hook(self, proposal):
        # an admin's own hook is kept, and the user still hears about their saved choice
        return chain_ready_hook(proposal.value)

    @default("apply_user_options")
    def _default_apply_user_options(self):
        # user_options ({"profile": slug}) are validated and applied in start(), where a refusal
        # keeps its own HTTP status and is recorded for the admin page.
        return lambda spawner, user_options: None

    profile_form_template = Unicode(
        "",
        config=True,
        help="""The spawn form's Jinja2 template: a template string (as kubespawner's), or the
        path of a file holding one (read at each render). Empty: the packaged
        ``jupyterhub_gpulab/spawner/templates/gpulab_form.html``, whose header lists the
        variables (``rows``, ``note``, ``notice``); it may ``{% include %}``
        ``"gpulab_form.html"``. Values are autoescaped. The form must post one radio named
        ``profile`` whose value is a row's ``slug``.
        ``c.GPUDockerSpawner.profile_form_template = "/srv/jupyterhub/gpulab_form.html"``""",
    )

    @validate("profile_form_template")
    def _check_profile_form_template(self, proposal):
        try:
            form_template(proposal.value)
        except OSError as e:
            raise TraitError(
                f"c.GPUDockerSpawner.profile_form_template: cannot read {proposal.value!r} "
                f"({e.strerror}); give a readable file's path or a template string"
            ) from None
        except TemplateSyntaxError as e:
            raise TraitError(
                f"c.GPUDockerSpawner.profile_form_template does not compile: {e.message} "
                f"(line {e.lineno})"
            ) from None
        # a trial render with one sample row: an {% include %} of a missing template, or a
        # filter that fails, shows at config load rather than on a student's spawn page
        sample = FormRow("cpu", "CPU only", "", "No GPU", "CPU only", "", True, None)
        try:
            render_form([sample], "note", notice="notice", template=proposal.value)
        except (TemplateError, TypeError, ValueError) as e:
            raise TraitError(
                f"c.GPUDockerSpawner.profile_form_template does not render: {type(e).__name__}: {e}"
            ) from None
        return proposal.value

    waitlist_url = Unicode(
        "",
        config=True,
        help="""Where the spawn form's "join the waitlist" links: the gpulab service's waitlist
        section. A path without a leading ``/`` is relative to JupyterHub's ``base_url`` (so it
        holds when ``base_url`` is set later in the config). Set by
        :func:`~jupyterhub_gpulab.hub.hubconfig.configure_service`; empty: no link.
        ``c.GPUDockerSpawner.waitlist_url = "services/gpulab/me#my-waitlist"``""",
    )

    def _waitlist_href(self) -> str:
        """:attr:`waitlist_url` as the spawn page links it (``/services/gpulab/me#my-waitlist``)."""
        return waitlist_href(self.waitlist_url, getattr(self.hub, "base_url", None) or "/hub/")

    #: Why the saved choice did not apply to the last start (shown to the user), else ``None``.
    choice_notice: str | None = None

    # -- what arrives ---------------------------------------------------------------------------

    def _options_from_form(self, formdata):
        """``Spawner.options_from_form`` (wired in gpudocker.py): reshaped, judged in start()."""
        return options_from_form(formdata, self.entitled())

    def options_from_query(self, query_data):
        """``GET /hub/spawn?profile=<slug>``: reshaped as the form; raises
        :class:`~jupyterhub_gpulab.errors.ProfileChoiceError` when no profile is named."""
        return options_from_query(query_data, self.entitled())

    def clear_state(self):
        """Also clear JupyterHub's saved copy of the options (module docstring): one saved
        before :func:`~.savedoptions.keep_no_options` held the row (an older gpulab's).

        ``User.spawn`` saves the request's options, commits, calls ``clear_state()`` and commits
        again before ``start()`` (``stop`` too: ``clear_state()`` then a commit), so the clearing
        rides JupyterHub's own commit. Cleared in ``start()`` instead, it stayed uncommitted
        across the start's awaits, where any other request's end (``BaseHandler.finish``: "Rolling
        back dirty objects") rolled it back, bringing a refused request back as the next default
        and reloading every object of the hub's session."""
        super().clear_state()
        orm_spawner = self.orm_spawner
        if orm_spawner is not None and orm_spawner.user_options:
            orm_spawner.user_options = {}

    def _pick_profile(self, rt: LabRuntime, ctx: PolicyContext | None = None) -> Profile:
        """The profile for this start; sets :attr:`choice_notice`. Raises ProfileChoiceError."""
        profile, self.choice_notice = choose(
            self.user_options, self.entitled(rt, ctx), rt.lab.profiles, last=self.last_profile
        )
        if self.choice_notice:
            self.log.info("%s: %s", self._log_name, self.choice_notice)
        return profile

    # -- the form -------------------------------------------------------------------------------

    def _slice_use(
        self, rt: LabRuntime, ctx: PolicyContext, entitled
    ) -> tuple[int, int | None, dict, dict[str, int]] | None:
        """``(slices the user's servers hold, per-user limit, {profile: hold}, {profile: slices
        the user's servers hold for it})`` for the form (holds:
        :meth:`~jupyterhub_gpulab.ledger.Ledger.holds_of`, slices held for the user to take), or
        ``None`` without GPU profiles (blocks: reads the ledger)."""
        if not any(p.wants_gpu for p in entitled):
            return None
        holds = rt.ledger.holds_of(self.user.name)
        mine: dict[str, int] = {}
        for a in rt.ledger.open_allocations(self.user.name):
            if a.hold_until is None:  # a hold is an offer, not a server's slice
                mine[a.profile] = mine.get(a.profile, 0) + 1
        return sum(mine.values()), ctx.user_limit, holds, mine

    def _course_of_server(self, rt: LabRuntime) -> tuple[str, tuple[str, ...]] | None:
        """``(title, profiles)`` of the course this named server is (a server called as a
        course's slug, :mod:`~jupyterhub_gpulab.courses.hubhook`), else ``None``; a course store
        that cannot be read counts as none (blocks: reads the ledger)."""
        if not self.name:
            return None
        from ..courses.store import CourseStore

        try:
            stored = CourseStore(rt.ledger.engine).get(self.name)
        except Exception:  # no course tables (a lab without courses), or a broken record
            self.log.debug("No course read for server %r", self.name, exc_info=True)
            return None
        if stored is None or stored.course.server_name != self.name:
            return None
        return stored.course.title, stored.course.profiles

    async def _render_options_form(self, spawner=None) -> str:
        refused = self._settings_refusal()
        if refused is not None:  # the spawn page says why, as every start would
            raise refused
        rt = self.runtime()
        ctx = self.policy_context(rt)
        entitled = self.entitled(rt, ctx)
        needs = {}
        for p in entitled:
            if p.wants_gpu:
                try:
                    needs[p.slug] = await self.image_requirements(p)
                except SpawnRefused as e:  # mislabelled image: the start will say so
                    self.log.error("%s: %s", p.slug, e.log_message)

        def gate(p):
            need = needs.get(p.slug)
            if need is None:
                return p.slice, None, False
            why = unservable(need, p.slice, rt.lab.inventory.slices)
            return need.restrict(p.slice), why, need.seat_cap

        def build():
            use = self._slice_use(rt, ctx, entitled)
            held, limit, holds, mine = use if use is not None else (0, None, {}, {})
            names = {p.slug: p.display_name for p in entitled}
            # the claim counts holds toward the limit of any other profile (ledger.claim)
            quota_reason = limit_reason(held, limit, [names.get(h, h) for h in holds])
            offered, preselect, course_notice = entitled, None, ""
            course = self._course_of_server(rt)
            if course is not None:
                offered, preselect, course_notice = course_choice(entitled, *course)
            if preselect is None:
                saved = saved_or_default(self.last_profile, entitled)
                preselect = saved.slug if saved else None
            rows = form_rows(
                offered,
                rt.ledger.capacity,
                preselect=preselect,
                quota_reason=quota_reason,
                out_of_service=rt.ledger.out_of_service,
                mps=self.mps,
                reserved=lambda p: rt.ledger.reserved_for_others(
                    p.slice, ctx.groups, p.slug, self.name
                ),
                image_gate=gate,
                held={slug: a.hold_until for slug, a in holds.items()},
                mine=mine,
                inventory=rt.lab.inventory,
            )
            return render_form(
                rows,
                usage_note(held, limit, len(holds)) if use else None,
                notice=course_notice
                or saved_choice_notice(self.last_profile, entitled, rt.lab.profiles),
                template=self.profile_form_template,
                waitlist_url=self._waitlist_href(),
            )

        return await aio.call(build)
