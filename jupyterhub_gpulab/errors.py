"""The error types gpulab raises: configuration problems and refused spawns.

Two families, kept apart because they reach different people:

- :class:`ConfigError` is for the **admin**: raised while loading ``jupyterhub_config.py`` values
  (profiles, group policies). It collects *every* problem so one restart shows them all.
- :class:`SpawnRefused` is for the **user**: a spawn that cannot proceed for a policy reason (a bad
  profile choice, a quota, no free slice, no GPU runtime). It is a JupyterHub
  :class:`jupyterhub.spawner.SpawnException` (JupyterHub >= 6), so JupyterHub shows its message,
  sets its HTTP status, records ``reason`` in the ``jupyterhub_server_spawn_duration_seconds``
  metric with ``status="failure"``, logs no traceback, and does *not* count it towards
  ``Spawner.consecutive_failure_limit``.

How JupyterHub 6.1.1 turns a :class:`SpawnRefused` into a response (read from its source):

==========================================  =====================================================
Where it is raised                          What the user gets
==========================================  =====================================================
``Spawner.options_from_query`` (a link,     ``SpawnHandler._get`` catches it: the form is shown
``GET /hub/spawn?…`` naming no profile)     with ``status_code`` and the message (when the
                                            spawner has a form). gpulab's ``options_from_form``
                                            only reshapes: the form's choice is judged in
                                            ``start()``, as the API's (row below).
``apply_user_options`` / ``start()``        ``handlers/base.py`` ``spawn_single_user`` re-raises
within ``slow_spawn_timeout`` (10 s) of     it: ``POST /hub/api/users/:name/server[s/:server]``
the REST call                               answers ``status_code`` with JSON
                                            ``{"status": status_code, "message": <message>}``
                                            (``apihandlers/base.py`` ``write_error``); a form
                                            spawn failing within 1 s re-renders the form with
                                            ``status_code`` and the message.
``start()`` after that                      The REST call has already answered 202; the
                                            progress stream (``/hub/api/users/:name/server/
                                            progress``) sends ``{"failed": true, "message":
                                            "Spawn failed: <message>"}`` and
                                            ``/hub/spawn-pending/:name`` answers
                                            ``status_code`` with the message on its page.
==========================================  =====================================================

The message reaches those pages through ``jupyterhub_message`` (JupyterHub's
``utils.format_exception`` reads it; without it the form would show ``"400
SpawnException(reason=…): …"`` and the spawn-pending page would show nothing). Messages are plain
text: templates escape them and the progress page inserts them with jQuery ``.text()``.

Reasons and their HTTP statuses (:data:`STATUS_BY_REASON`):

- 400 ``bad-choice``, ``unknown-profile``, ``not-entitled``, ``no-profile``: the request itself is
  wrong; the message lists what the user may pick (:class:`ProfileChoiceError`).
- 403 ``not-in-course``: a course's server (a named server called as the course), started by
  someone neither on its roster nor on its staff (:mod:`jupyterhub_gpulab.courses.hubhook`).
- 429 ``quota``: the user (or their group) holds as many slices as allowed; stopping
  a server fixes it. 429 is what JupyterHub itself answers for ``active_server_limit``.
- 503 ``no-free-slice``: every slice of that kind is held; try later or pick another profile.
- 503 ``gpu-runtime-missing``: the host cannot attach GPUs (no NVIDIA Container Toolkit); the admin
  must fix the host.
- 500 ``misconfigured``: the gpulab configuration is invalid; the admin must fix it.

Only the last two need an administrator (:data:`ADMIN_REASONS`, :attr:`SpawnRefused.needs_admin`):
they are logged at ERROR. Every other refusal is routine (the user was told and can act) and is
logged at INFO, without a traceback (:mod:`jupyterhub_gpulab.spawner.logs`).
"""

from __future__ import annotations

from collections.abc import Iterable

from .units import counted

try:  # JupyterHub >= 6
    from jupyterhub.spawner import SpawnException
except ImportError:  # pragma: no cover - JupyterHub 5 has no SpawnException
    from tornado import web

    class SpawnException(web.HTTPError):  # type: ignore[no-redef]
        """Stand-in with JupyterHub 6's constructor, for JupyterHub 5."""

        def __init__(self, message, *, reason, log_message="", message_html="", status_code=400):
            super().__init__(status_code, None, reason=reason)
            self.message = message
            self.log_message = log_message or message
            self.message_html = message_html


__all__ = [
    "ConfigError",
    "StatusError",
    "SpawnRefused",
    "ProfileChoiceError",
    "STATUS_BY_REASON",
    "ADMIN_REASONS",
    "plain",
    "quoted",
]


class ConfigError(ValueError):
    """One or more problems in gpulab configuration.

    ``errors`` holds every problem found, one line each, each naming where it is
    (``"profiles[2] ('pytorch'): …"``) and how to fix it. ``str(err)`` joins them under a header.
    """

    def __init__(self, errors: str | Iterable[str]):
        self.errors: list[str] = [errors] if isinstance(errors, str) else list(errors)
        if not self.errors:
            raise ValueError("ConfigError needs at least one problem")
        n = len(self.errors)
        header = f"{counted(n, 'problem')} in gpulab configuration:"
        super().__init__("\n".join([header, *(f"- {e}" for e in self.errors)]))


class StatusError(Exception):
    """A request refused or failed with an HTTP ``status`` (int) and a ``message`` safe to show
    the caller (plain text, no token or secret). The service's actions and its hub client raise
    subclasses; its handlers answer ``{"status": status, "message": message}``."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


#: HTTP status for each refusal reason gpulab uses; see the module docstring for why.
STATUS_BY_REASON: dict[str, int] = {
    "bad-choice": 400,
    "unknown-profile": 400,
    "not-entitled": 400,
    "no-profile": 400,
    "not-in-course": 403,
    "quota": 429,
    "no-free-slice": 503,
    "gpu-runtime-missing": 503,
    "misconfigured": 500,
}

#: Refusals an administrator must act on (the host, the configuration); the rest are routine.
ADMIN_REASONS = frozenset({"gpu-runtime-missing", "misconfigured"})


class SpawnRefused(SpawnException):
    """A spawn refused for a reason the user (or admin) can act on.

    ``message`` is shown to the user as plain text, so it must hold no secrets and say what to
    do; ``log_message`` (default: ``message``) goes to the hub log only. ``reason`` is a short
    machine label from :data:`STATUS_BY_REASON`; ``status_code`` defaults to that table's entry.
    Raises ``ValueError`` for a ``reason`` outside the table unless ``status_code`` is given.
    """

    def __init__(
        self,
        message: str,
        *,
        reason: str,
        status_code: int | None = None,
        log_message: str = "",
        message_html: str = "",
    ):
        if status_code is None:
            try:
                status_code = STATUS_BY_REASON[reason]
            except KeyError:
                raise ValueError(
                    f"unknown refusal reason {reason!r}; use one of {sorted(STATUS_BY_REASON)} "
                    "or pass status_code"
                ) from None
        super().__init__(
            message,
            reason=reason,
            log_message=log_message,
            message_html=message_html,
            status_code=status_code,
        )

    @property
    def needs_admin(self) -> bool:
        """Whether an administrator must act (:data:`ADMIN_REASONS`); else the refusal is routine."""
        return self.reason in ADMIN_REASONS

    @property
    def jupyterhub_message(self) -> str:
        """What JupyterHub's pages and progress stream show (``utils.format_exception``)."""
        return self.message

    @property
    def jupyterhub_html_message(self) -> str | None:
        """HTML for JupyterHub's pages, only when one was given (else the text is escaped)."""
        return self.message_html or None


class ProfileChoiceError(SpawnRefused):
    """The user's profile choice is empty, malformed, unknown or not theirs: HTTP 400.

    The message names the bad value (escaped, truncated) and lists what the user may pick.
    """

    def __init__(self, message: str, *, reason: str = "bad-choice", log_message: str = ""):
        if STATUS_BY_REASON.get(reason) != 400:
            raise ValueError(f"{reason!r} is not a profile-choice reason")
        super().__init__(message, reason=reason, log_message=log_message)


# Never echoed as-is in a user-facing message: markup brackets (and, inside quotes, the quote and
# the backslash, so the quoting stays unambiguous). Unprintable characters are escaped too.
_MARKUP = frozenset("<>")
_IN_QUOTES = frozenset("<>'\\")


def _escape(text: str, unsafe: frozenset[str]) -> str:
    out = []
    for ch in text:
        if ch not in unsafe and ch.isprintable():
            out.append(ch)
            continue
        o = ord(ch)
        out.append(f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}")
    return "".join(out)


def plain(text: str) -> str:
    """Admin-written ``text`` (display names, group names) safe to show anywhere: ``<``, ``>``
    and unprintable characters become backslash escapes (``"<b>"`` -> ``"\\x3cb\\x3e"``)."""
    return _escape(text, _MARKUP)


def quoted(value: str, limit: int = 64) -> str:
    """A value a user sent, for a message: cut to ``limit`` characters (then ``…``), with markup,
    quotes, backslashes and unprintable characters escaped, in single quotes:
    ``quoted("<x>") == "'\\x3cx\\x3e'"``."""
    cut = _escape(value[:limit], _IN_QUOTES)
    return f"'{cut}…'" if len(value) > limit else f"'{cut}'"
