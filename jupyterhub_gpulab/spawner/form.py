"""The spawn form: the profiles a user may pick, with live capacity. Plain HTML, no JavaScript.

Pure rendering: :func:`form_rows` turns profiles, capacities and the user's quota into rows;
:func:`render_form` makes the HTML (Jinja2, autoescaped) that JupyterHub places inside its own
``<form>`` on ``/hub/spawn``, from ``templates/gpulab_form.html`` or the admin's
``c.GPUDockerSpawner.profile_form_template``.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, Template

from ..inventory.model import Inventory, SliceRequest, isolation, profile_seat_check
from ..lab.profile import Profile
from ..units import counted, format_bytes, plural


@dataclass(frozen=True)
class FormRow:
    slug: str
    display_name: str
    description: str
    gives: str  # "MIG 1g.10gb — a MIG instance: …"
    capacity: str  # "3 of 14 free", "CPU only"
    limits: str  # "4 CPUs, 16 GiB memory"
    checked: bool
    disabled_reason: str | None  # why it cannot be picked now
    reserved: str | None = None  # "3 of 8 reserved for DL101 until 16:00 UTC"
    seat_check: str | None = None  # shared seats: "framework-capped, host-enforced" or "soft"


def _gives(req: SliceRequest, mps: bool | None, framework_cap: bool = False) -> str:
    if req.kind is None:
        return "No GPU"
    return f"{req.describe()} — {isolation(req.kind, mps, framework_cap)[1]}"


def _limits(p: Profile) -> str:
    parts = []
    if p.cpu_limit:
        parts.append(counted(p.cpu_limit, "CPU"))
    if p.mem_limit:
        parts.append(f"{format_bytes(p.mem_limit)} memory")
    return ", ".join(parts)


def form_rows(
    entitled: Sequence[Profile],
    capacity: Callable[[SliceRequest], tuple[int, int]],
    *,
    preselect: str | None,
    quota_reason: str | None = None,
    out_of_service: Callable[[SliceRequest], int] | None = None,
    mps: bool | None = None,
    reserved: Callable[[Profile], Sequence] | None = None,
    image_gate: Callable[[Profile], tuple[SliceRequest, str | None, bool]] | None = None,
    held: Mapping[str, datetime] | None = None,
    mine: Mapping[str, int] | None = None,
    inventory: Inventory | None = None,
) -> list[FormRow]:
    """One row per entitled profile. ``capacity(request)`` gives ``(free, total)`` in service;
    ``out_of_service(request)`` counts matching slices that are drained; ``quota_reason`` (the
    user holds all the slices they may) disables every GPU profile; ``mps`` (the spawner's
    setting) says whether a seat's caps are enforced (:func:`~..inventory.model.isolation`);
    ``reserved(profile)`` gives the reservations (``Reserved`` notes) that keep free slices of
    it from this user, shown as a badge; a profile whose free slices are all kept is disabled.
    ``image_gate(profile)`` gives ``(request, why, framework_cap)``: the profile's request
    narrowed to the GPUs its image can run on (:mod:`..lab.images`), the sentence why none can
    (the row is then disabled with it), and whether the image caps a seat's memory.

    ``held`` maps the slug of each profile a slice is held for this user (a waitlist offer,
    :meth:`~..ledger.Ledger.holds_of`) to the hold's end (UTC): a claim of that profile takes the
    held slice before it checks anything else, so its row is pickable ("held for you until 01:21
    UTC") and preselected over the saved choice.

    ``mine`` maps a profile's slug to the slices this user's own servers hold for it (holds
    apart): a full profile that the user fills is not offered the waitlist, whose next free
    slice would be their own.

    ``inventory`` (the lab's) says whether the host will check the memory of a shared profile's
    seats: the row's ``seat_check`` (:func:`~..inventory.model.profile_seat_check`; soft
    without it)."""
    rows = []
    for p in entitled:
        reason = note = None
        request, unservable, framework_cap = (
            image_gate(p) if image_gate is not None else (p.slice, None, False)
        )
        if p.slice.kind is None:
            cap = "CPU only"
        elif held and p.slug in held:
            cap = f"held for you until {held[p.slug]:%H:%M} UTC"
        else:
            free, total = capacity(request)
            cap = f"{free} of {total} free"
            kept = list(reserved(p)) if reserved is not None and free else []
            if kept:
                note = "; ".join(n.describe() for n in kept)
                if free <= sum(n.unclaimed for n in kept):
                    free = 0
                    cap = f"0 of {total} free for you"
                    reason = (
                        f"The free ones are reserved for {', '.join(n.holder for n in kept)} "
                        "right now; join the waitlist, try after that time, or pick another "
                        "profile."
                    )
            if unservable:
                cap = "no GPU here runs its image"
                reason = unservable
            elif total == 0 and out_of_service is not None and out_of_service(request):
                cap = "out of service"
                reason = "Out of service for maintenance right now; try again later."
            elif total == 0:
                reason = "This lab has no such GPU slice right now."
            elif free == 0 and reason is None and mine and mine.get(p.slug):
                reason = (
                    f"All taken right now, {mine[p.slug]} by your own "
                    f"{plural(mine[p.slug], 'server')}: stop it to use it here, or pick "
                    "another profile."
                )
            elif free == 0 and reason is None:
                reason = "All taken right now; join the waitlist or try again later."
            elif quota_reason:
                reason = quota_reason
        rows.append(
            FormRow(
                slug=p.slug,
                display_name=p.display_name,
                description=p.description,
                gives=_gives(p.slice, mps, framework_cap),
                capacity=cap,
                limits=_limits(p),
                checked=False,
                disabled_reason=reason,
                reserved=note,
                seat_check=profile_seat_check(inventory or Inventory(), request, framework_cap),
            )
        )
    # preselect: a held profile, else the requested slug if pickable, else the first pickable row
    pickable = [r for r in rows if r.disabled_reason is None]
    target = next((r for r in pickable if held and r.slug in held), None) or next(
        (r for r in pickable if r.slug == preselect), pickable[0] if pickable else None
    )
    return [FormRow(**{**r.__dict__, "checked": r is target}) for r in rows]


#: The packaged spawn form (``templates/gpulab_form.html``); its header lists the variables.
DEFAULT_TEMPLATE = "gpulab_form.html"
TEMPLATES = Path(__file__).parent / "templates"

# autoescaped, for the packaged file and for an admin's template string alike; an admin's
# template may {% include %} the packaged one (it defines no blocks to extend)
_env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=True)


def _is_path(source: str) -> bool:
    return "\n" not in source and not any(c in source for c in "{}<>")


@lru_cache(maxsize=8)
def _compile(source: str) -> Template:
    return _env.from_string(source)


def form_template(source: str = "") -> Template:
    """The spawn form's template: the packaged one for ``""``, the file at ``source`` when it is
    a path (one line, no ``{``/``<``; read at each call, so edits show without a restart), else
    ``source`` itself as a Jinja2 template string (as kubespawner's ``profile_form_template``).

    Raises ``OSError`` for a path that cannot be read and ``jinja2.TemplateSyntaxError`` for a
    template that does not compile."""
    if not source:
        return _env.get_template(DEFAULT_TEMPLATE)
    if _is_path(source):
        source = Path(source).expanduser().read_text()
    return _compile(source)


def render_form(
    rows: Sequence[FormRow],
    note: str | None = None,
    *,
    notice: str | None = None,
    template: str = "",
    waitlist_url: str = "",
) -> str:
    """The form's HTML; every value is escaped. ``note`` is one line above the choices, such as
    the user's use of their slice limit; ``notice`` a warning above it, such as why the saved
    choice no longer applies; ``template``: an admin's template (see :func:`form_template`),
    else the packaged one; ``waitlist_url``: where a user joins the waitlist (the gpulab page's
    waitlist section), which the words "join the waitlist" of a reason link to (no link: ``""``)."""
    return form_template(template).render(
        rows=rows, note=note, notice=notice, waitlist_url=waitlist_url
    )


def course_choice(
    entitled: Sequence[Profile], title: str, profiles: Sequence[str]
) -> tuple[list[Profile], str | None, str]:
    """The form of a course's server (a named server called as a course): the hub's course
    hook starts it with one of the course's ``profiles`` whatever else is picked, so the form
    offers those alone (of the ones ``entitled``, in the course's order), preselects the first,
    and says why. ``(profiles to offer, slug to preselect, notice)``; a course whose profiles the
    user may not pick keeps ``entitled`` (the start then says why)."""
    by_slug = {p.slug: p for p in entitled}
    offered = [by_slug[s] for s in profiles if s in by_slug]
    if not offered:
        return list(entitled), None, ""
    names = ", ".join(p.display_name for p in offered)
    return (
        offered,
        offered[0].slug,
        f"This is your server for the course {title}: it starts with the course's "
        f"{plural(len(offered), 'profile')} ({names}).",
    )


def waitlist_href(url: str, hub_base: str = "/hub/") -> str:
    """``c.GPUDockerSpawner.waitlist_url`` as the spawn page links it: a path without a leading
    ``/`` (``"services/gpulab/me#my-waitlist"``) joins JupyterHub's base_url, which is the hub's
    ``hub_base`` (``"/jh/hub/"``) without its ``hub/``: ``"/jh/services/gpulab/me#my-waitlist"``."""
    if not url or url.startswith(("/", "http://", "https://")):
        return url
    return posixpath.dirname(hub_base.rstrip("/")).rstrip("/") + "/" + url


def usage_note(held: int, limit: int | None, holds: int = 0) -> str:
    """``"You hold 1 of the 2 GPU slices your groups allow at once."``: ``held`` counts the
    user's servers' slices; ``holds`` the slices held for them to take (waitlist offers), which
    the claim counts toward ``limit`` too."""
    if limit is None:
        note = f"You hold {counted(held, 'GPU slice')}."
    else:
        note = f"You hold {held} of the {counted(limit, 'GPU slice')} your groups allow at once."
    if holds:
        one = holds == 1
        note += f" {holds} more {'is' if one else 'are'} held for you to take" + (
            f" ({'it counts' if one else 'they count'} toward that limit)." if limit else "."
        )
    return note


def limit_reason(held: int, limit: int | None, holds: Sequence[str] = ()) -> str | None:
    """Why GPU profiles (other than those in ``holds``) cannot be picked: the user's servers hold
    ``held`` slices and ``holds`` names the profiles a slice is held for them for; the claim
    counts both toward ``limit`` (``None``: no limit, or still room)."""
    if limit is None or held + len(holds) < limit:
        return None
    if not holds:
        return (
            f"You hold {counted(held, 'GPU slice')}, the most your groups allow "
            "at once; stop a server first."
        )
    names = ", ".join(repr(h) for h in holds)
    return (
        f"The slice held for you ({names}) counts toward your limit of {limit}; start that "
        "profile to take it, or leave the waitlist"
        + (" or stop a server" if held else "")
        + " first."
    )
