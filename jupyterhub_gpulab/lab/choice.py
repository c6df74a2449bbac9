"""Turning a user's choice into one of their profiles: the spawn form's data, a spawn link's
query, the REST API's ``user_options``, and what "no choice" means.

Pure logic, no I/O. Choices arrive from the REST API (``user_options = {"profile": "<slug>"}``,
KubeSpawner's convention), from the spawn form (``{"profile": ["<slug>"]}``, values are lists of
strings) or from a link (``GET /hub/spawn?profile=<slug>``). :func:`options_from_form` and
:func:`options_from_query` only reshape form and query data into ``user_options``; one check,
:func:`choose_profile` (run by the spawner's ``start()``), decides for all three, so a form, a
link and the API are refused or accepted alike. Every refusal is a
:class:`~..errors.ProfileChoiceError` (HTTP 400) listing what the user may pick.

No choice (``{}``, ``None`` or ``{"profile": None}``) means the profile this server last started
with (``last``) if the user may still pick it, else the default profile; when the last one no
longer applies (renamed, removed, the user's groups changed) the user is told why
(:func:`saved_choice_notice`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, NoReturn

from ..errors import ProfileChoiceError, plain, quoted

if TYPE_CHECKING:
    from .profile import Profile

__all__ = [
    "JUPYTERHUB_FIELDS",
    "default_profile",
    "saved_or_default",
    "options_from_form",
    "options_from_query",
    "choose",
    "choose_profile",
    "saved_choice_notice",
]

#: Form and query fields that belong to JupyterHub, not to the user's options.
JUPYTERHUB_FIELDS = frozenset({"_xsrf"})


def default_profile(entitled: Sequence[Profile]) -> Profile | None:
    """The entitled profile marked ``default``, else the first entitled one, else ``None``.
    The one default rule: the spawn form's preselection, a start with no choice, and the
    culler's limits for a server whose profile is unknown all use it."""
    return next((p for p in entitled if p.default), entitled[0] if entitled else None)


def saved_or_default(last: str, entitled: Sequence[Profile]) -> Profile | None:
    """What a start with no choice runs: ``last`` (the slug this server last started with) if
    it names an entitled profile, else :func:`default_profile` (``None``: nothing entitled).
    The spawn form preselects the same one (when it can be picked now)."""
    return next((p for p in entitled if last and p.slug == last), None) or default_profile(entitled)


def _menu(entitled: Sequence[Profile] | None) -> str:
    if entitled is None:
        return ""
    if not entitled:
        return " You may not pick any profile: ask an administrator to add you to a group that may."
    items = ", ".join(f"'{p.slug}' ({plain(p.display_name)})" for p in entitled)
    return f" You may pick: {items}."


def _refuse(
    problem: str, entitled: Sequence[Profile] | None, reason: str = "bad-choice"
) -> NoReturn:
    raise ProfileChoiceError(f"{problem}.{_menu(entitled)}", reason=reason)


def _kind(value: object) -> str:
    """A user's value described without echoing it: ``'a list'``, ``'a number'`` …"""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return f"the text {quoted(value)}"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return f"a {type(value).__name__}"


def options_from_form(
    formdata: Mapping[str, object], entitled: Sequence[Profile] | None = None
) -> dict[str, object]:
    """Form data (``{"profile": ["<slug>"], "_xsrf": […]}``) -> ``user_options`` as the REST API
    takes them (``{"profile": "<slug>"}``), judging nothing.

    A field sent once becomes its value; a field sent several times (or with no value) stays a
    list, which :func:`choose_profile` refuses; JupyterHub's own fields
    (:data:`JUPYTERHUB_FIELDS`) are dropped; an uploaded file (``<field>_file``) becomes ``None``.
    Other fields are kept, so that :func:`choose_profile` refuses them exactly as it refuses
    them from the API. Raises :class:`~..errors.ProfileChoiceError` (``bad-choice``, listing
    ``entitled`` when given) only for data JupyterHub never sends: not a mapping, or a field
    whose value is not a list.
    """
    if not isinstance(formdata, Mapping):
        _refuse("The spawn form was not understood", entitled)
    options: dict[str, object] = {}
    for key, values in formdata.items():
        if key in JUPYTERHUB_FIELDS:
            continue
        if not isinstance(values, (list, tuple)):
            name = quoted(key) if isinstance(key, str) else _kind(key)
            _refuse(
                f"The form field {name} should hold a list of values, got {_kind(values)}", entitled
            )
        kept = [v if isinstance(v, str) else None for v in values]
        options[key] = kept[0] if len(kept) == 1 else kept
    return options


def options_from_query(
    query: Mapping[str, object], entitled: Sequence[Profile] | None = None
) -> dict[str, object]:
    """A spawn link's query (``GET /hub/spawn?profile=<slug>``, or ``?opt-profile=<slug>``;
    JupyterHub strips ``opt-``, ``next`` and ``display_name``) -> ``user_options``.

    As :func:`options_from_form`, and a link must name its profile: a GET is a link anyone can
    send (from another site too), so it never starts the saved or default profile. Raises
    :class:`~..errors.ProfileChoiceError` (``bad-choice``) when ``profile`` is missing; JupyterHub
    then shows the spawn form with the message and starts nothing.
    """
    options = options_from_form(query, entitled)
    if "profile" not in options:
        given = next((k for k in options if isinstance(k, str)), None)
        _refuse(
            "A link that starts a server must name its profile (?profile=slug)"
            + (f"; this one names only {quoted(given)}" if given else ""),
            entitled,
        )
    return options


def _whose(p: Profile) -> str:
    """Why ``p`` is not the user's: ``"is for groups a, b"`` or ``"is not available to you"``."""
    return (
        f"is for groups {', '.join(map(plain, p.groups))}"
        if p.groups
        else "is not available to you"
    )


def _no_longer_applies(last: str, all_profiles: Iterable[Profile]) -> str:
    """``"Your saved choice 'x' no longer applies (there is no such profile any more)"``."""
    found = next((p for p in all_profiles if p.slug == last), None)
    why = f"it {_whose(found)}" if found else "there is no such profile any more"
    return f"Your saved choice {quoted(last)} no longer applies ({why})"


def saved_choice_notice(
    last: str, entitled: Sequence[Profile], all_profiles: Iterable[Profile]
) -> str | None:
    """What the spawn form tells a user whose last profile ``last`` they may no longer pick
    (``None`` when it still applies or there is none)."""
    if not last or any(p.slug == last for p in entitled):
        return None
    return f"{_no_longer_applies(last, all_profiles)}; pick another below."


def _saved_or_default(
    last: str, entitled: Sequence[Profile], all_profiles: Iterable[Profile]
) -> tuple[Profile, str | None]:
    chosen = saved_or_default(last, entitled)
    if chosen is None:
        _refuse("No profile was chosen and there is none you may use", entitled, "no-profile")
    if not last or chosen.slug == last:
        return chosen, None
    return chosen, (
        f"{_no_longer_applies(last, all_profiles)}, so this server starts with the default, "
        f"{quoted(chosen.slug)} ({plain(chosen.display_name)})."
    )


def choose(
    choice: object,
    entitled: Sequence[Profile],
    all_profiles: Iterable[Profile],
    *,
    last: str = "",
    from_form: bool = False,
) -> tuple[Profile, str | None]:
    """Turn a user's choice into one of ``entitled``; the server-side check for every spawn.

    ``choice`` is ``user_options`` (``{"profile": "<slug>"}``), or form data when ``from_form``
    (see :func:`options_from_form`). No choice (``{}``, ``None``, ``{"profile": None}``) means
    ``last`` (the slug this server last started with) if it is in ``entitled``, else the default
    profile. Returns ``(profile, notice)``: ``notice`` is ``None``, or, when ``last`` no longer
    applies and the default was taken instead, a sentence for the user saying so.

    Raises :class:`~..errors.ProfileChoiceError` (HTTP 400), whose message names the bad value
    (escaped, at most 64 characters) and lists what the user may pick, for: not an object, an
    option other than ``profile``, a value that is not one string (a list: "pick exactly one"),
    an empty value, no choice and nothing the user may pick (``no-profile``), an unknown slug
    (``unknown-profile``), a profile of other groups (``not-entitled``).
    """
    if from_form:
        choice = options_from_form(choice, entitled)
    if choice is None:
        choice = {}
    if not isinstance(choice, Mapping):
        _refuse(
            f"Options must be an object with one key, 'profile', got {_kind(choice)}",
            entitled,
        )
    unknown = [k for k in choice if k != "profile"]
    if unknown:
        key = unknown[0]
        _refuse(
            f"Unknown option {quoted(key) if isinstance(key, str) else _kind(key)}; the only option is 'profile'",
            entitled,
        )
    value = choice.get("profile")
    if value is None:
        return _saved_or_default(last, entitled, all_profiles)
    if isinstance(value, (list, tuple)) and not value:
        _refuse("No profile was chosen", entitled)
    if isinstance(value, (list, tuple)) and len(value) > 1:
        shown = ", ".join(quoted(v) if isinstance(v, str) else _kind(v) for v in value[:5])
        _refuse(f"Pick exactly one profile; got {len(value)} values ({shown})", entitled)
    if not isinstance(value, str):
        _refuse(f"'profile' must be one slug (a string), got {_kind(value)}", entitled)
    if not value:
        _refuse("No profile was chosen (the value is empty)", entitled)
    for p in entitled:
        if p.slug == value:
            return p, None
    for p in all_profiles:
        if p.slug == value:
            _refuse(f"{quoted(value)} {_whose(p)}", entitled, "not-entitled")
    _refuse(f"There is no profile {quoted(value)}", entitled, "unknown-profile")


def choose_profile(
    choice: object,
    entitled: Sequence[Profile],
    all_profiles: Iterable[Profile],
    *,
    last: str = "",
    from_form: bool = False,
) -> Profile:
    """:func:`choose` without the notice: the profile only (same arguments and refusals)."""
    return choose(choice, entitled, all_profiles, last=last, from_form=from_form)[0]
