"""Turning a user's choice into one of their profiles: the spawn form's data, the REST API's
``user_options``, and the default when nothing is chosen.

Pure logic, no I/O. Choices arrive from the spawn form (``{"profile": ["<slug>"]}``, values are
lists of strings; :func:`options_from_form` turns it into ``user_options``) or from the REST API
(``user_options = {"profile": "<slug>"}``, KubeSpawner's convention; ``{}`` picks the default).
Every refusal is a :class:`~.errors.ProfileChoiceError` (HTTP 400) listing what the user may pick.
:mod:`.profiles` re-exports these names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, NoReturn

from .errors import ProfileChoiceError, plain, quoted

if TYPE_CHECKING:
    from .profiles import Profile

__all__ = ["default_profile", "options_from_form", "choose_profile"]


def default_profile(entitled: Sequence[Profile]) -> Profile | None:
    """The entitled profile marked ``default``, else the first entitled one, else ``None``."""
    return next((p for p in entitled if p.default), entitled[0] if entitled else None)


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
) -> dict[str, str]:
    """Form data (``{"profile": ["<slug>"], "_xsrf": […]}``) -> ``user_options`` (``{"profile": slug}``).

    Checks the shape only: exactly one non-empty string. Other fields are ignored; no
    ``profile`` field gives ``{}`` (the default profile). Raises
    :class:`~.errors.ProfileChoiceError` (``bad-choice``), listing ``entitled`` when given.
    """
    if not isinstance(formdata, Mapping):
        _refuse("The spawn form was not understood", entitled)
    if "profile" not in formdata:
        return {}
    values = formdata["profile"]
    if not isinstance(values, (list, tuple)):
        _refuse(
            f"The form field 'profile' should hold a list of values, got {_kind(values)}", entitled
        )
    if not values:
        _refuse("No profile was chosen", entitled)
    if len(values) > 1:
        shown = ", ".join(quoted(v) if isinstance(v, str) else _kind(v) for v in values[:5])
        _refuse(f"Pick exactly one profile; the form sent {len(values)} values ({shown})", entitled)
    value = values[0]
    if not isinstance(value, str):
        _refuse(f"The chosen profile must be a slug, got {_kind(value)}", entitled)
    if not value:
        _refuse("No profile was chosen (the value is empty)", entitled)
    return {"profile": value}


def choose_profile(
    choice: object,
    entitled: Sequence[Profile],
    all_profiles: Iterable[Profile],
    *,
    from_form: bool = False,
) -> Profile:
    """Turn a user's choice into one of ``entitled``; the server-side check for every spawn.

    ``choice`` is ``user_options`` (``{"profile": "<slug>"}``; ``{}`` or ``None`` or a ``None``
    profile: the default profile), or form data when ``from_form`` (see
    :func:`options_from_form`). Raises :class:`~.errors.ProfileChoiceError` (HTTP 400), whose
    message names the bad value (escaped, at most 64 characters) and lists what the user may
    pick, for: not an object, an option other than ``profile``, a value that is not one string,
    an empty value, no choice and no default (``no-profile``), an unknown slug
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
        chosen = default_profile(entitled)
        if chosen is None:
            _refuse("No profile was chosen and there is none you may use", entitled, "no-profile")
        return chosen
    if not isinstance(value, str):
        _refuse(f"'profile' must be one slug (a string), got {_kind(value)}", entitled)
    if not value:
        _refuse("No profile was chosen (the value is empty)", entitled)
    for p in entitled:
        if p.slug == value:
            return p
    for p in all_profiles:
        if p.slug == value:
            whose = (
                f"is for groups {', '.join(map(plain, p.groups))}"
                if p.groups
                else "is not available to you"
            )
            _refuse(f"{quoted(value)} {whose}", entitled, "not-entitled")
    _refuse(f"There is no profile {quoted(value)}", entitled, "unknown-profile")
