"""The rules of the notices the ledger keeps in its ``warnings`` table, and how a notice reads.

One home for the vocabulary that the ledger (waitlist offers), the culler, the spawners, the
courses, the service's pages and the hub's home page (:mod:`jupyterhub_gpulab.hub.announce`) all
use. It lives in the ledger, the lowest of them, so nothing below the hub imports the hub.
"""

from __future__ import annotations

#: Rules of the notices the culler leaves after stopping a server (``culled:gpu-idle``).
NOTICE_PREFIX = "culled:"
#: Rules of the notices a spawner leaves when a server stopped without anyone asking
#: (``stopped:node-lost``: its node went down).
STOPPED_PREFIX = "stopped:"
#: Every notice of a stopped server (``str.startswith`` takes the tuple).
NOTICE_PREFIXES = (NOTICE_PREFIX, STOPPED_PREFIX)
#: Rules of the notices courses leave (``course:roster``: staff added or removed the student);
#: they stay until :data:`~jupyterhub_gpulab.fairuse.cullplan.NOTICE_TTL`, whatever runs.
COURSE_PREFIX = "course:"
#: Rules of the notices the seat guard leaves after ending a process of a running server
#: (``ended:seat-memory``: the seat held more GPU memory than its cap past the grace); like a
#: course's, they stay until :data:`~jupyterhub_gpulab.fairuse.cullplan.NOTICE_TTL`.
ENDED_PREFIX = "ended:"
#: Notices that only age out (their server keeps running).
LASTING_PREFIXES = (COURSE_PREFIX, ENDED_PREFIX)


def kind_of(rule: str) -> str:
    """``warning`` (a server will be stopped), ``stopped`` (a notice that it was) or ``notice``
    (a course's word to the student) for a warning row's ``rule``."""
    if rule.startswith(LASTING_PREFIXES):
        return "notice"
    return "stopped" if rule.startswith(NOTICE_PREFIXES) else "warning"


#: The rule a waitlist offer is shown under (:mod:`~jupyterhub_gpulab.ledger.waitlist`), and
#: the sentence its message ends with: how to take the held slice.
OFFER_RULE = "waitlist-offer"
OFFER_TAKE = "Start your server to take it."


def offer_text(message: str, server_name: str, running: bool) -> str:
    """An offer's ``message`` for a reader whose server ``server_name`` (the one the offer was
    made for) is ``running`` or not: "Start your server" cannot take a slice while that server
    runs, but a named server with the offered profile can (any of the user's servers that
    starts that profile takes the hold)."""
    if not running or OFFER_TAKE not in message:
        return message
    which = f"Your server {server_name!r}" if server_name else "Your default server"
    return message.replace(
        OFFER_TAKE,
        f"{which} is running: start a named server with that profile to take it, or stop "
        f"{'it' if server_name else 'the default one'} and start it again with that profile.",
    )
