"""Bounds on everything a caller sends the service: path ids, names, form fields, JSON bodies.

Each check returns the clean value or raises an HTTP 4xx whose message says what is accepted
(:func:`refuse`). Text a caller sent is quoted back cut short (:func:`shown`), so no message,
log line or flash cookie grows with the input. The limits follow the ledger's columns, so a value
that passes can be stored and looked up without a database error.
"""

from __future__ import annotations

import re

from tornado import web

#: Allocation ids are the ledger's SQL ``INTEGER`` (32-bit on PostgreSQL).
MAX_ID = 2**31 - 1
#: User and server names (JupyterHub's and the ledger's columns hold 255 characters).
MAX_NAME = 255
#: A device UUID (the ledger's ``devices.uuid``).
MAX_UUID = 96
#: A drain reason (the ledger's ``devices.drain_reason``).
MAX_REASON = 255
#: The largest byte count a caller may report (memory of a host or a GPU, bytes in use): 2**53,
#: 8 PiB, the largest integer a JSON number carries exactly; far inside the ledger's 64-bit
#: ``BIGINT`` columns, so a report never overflows them.
MAX_BYTES = 2**53
#: The most CPUs a node may report (the ledger's ``nodes.cpus`` is an SQL ``INTEGER``).
MAX_CPUS = 65536
#: The largest MIG placement rank (NVML's start slot of a GPU instance: 0 to 7 today).
MAX_RANK = 1023
#: A GPU or MIG device UUID exactly as NVML prints it (the node report's JSON Schema patterns):
#: ``GPU-`` or ``MIG-`` and 8-4-4-4-12 lower-case hexadecimal digits, or a MIG device of drivers before R470,
#: ``MIG-GPU-<uuid>/<GPU instance>/<compute instance>``. Nothing around it (no spaces, no
#: newline: ``(?![\s\S])`` is the end of the text in both ECMA and Python regular expressions,
#: where ``$`` also matches before a final newline), ASCII ``-`` only (not U+2010), so one
#: device never reads as two.
_HEX_UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
NVML_GPU_UUID = rf"^GPU-{_HEX_UUID}(?![\s\S])"
NVML_MIG_UUID = rf"^MIG-(?:{_HEX_UUID}|GPU-{_HEX_UUID}/[0-9]{{1,2}}/[0-9]{{1,2}})(?![\s\S])"
NVML_UUID = rf"{NVML_GPU_UUID}|{NVML_MIG_UUID}"
#: What a UUID that is not NVML's is told.
NVML_UUID_FORM = (
    "not a UUID as NVML prints it: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (or MIG-…) in "
    "lower-case hexadecimal digits and ASCII hyphens, nothing around it"
)
#: The largest request body (JSON or form) a handler reads, in bytes; larger ones are a 413.
MAX_BODY = 64 * 1024
#: The largest roster CSV upload (bytes): :data:`~...courses.roster.MAX_CSV_USERS` names of up to
#: :data:`MAX_NAME` characters, a line each (5,000 × 256 ≈ 1.3 MB), and a header.
MAX_CSV_BODY = 2 * 1024 * 1024
#: The HTTP server's own limit (bytes). Bodies are streamed (at most MAX_BODY bytes are kept),
#: so one up to this size is read, dropped and answered with a 413 and a message; a larger one
#: makes the server close the connection.
MAX_BODY_READ = 1024**3


def refuse(status: int, message: str) -> web.HTTPError:
    """An HTTP error whose ``message`` is shown to the caller (and logged verbatim)."""
    return web.HTTPError(status, "%s", message)


def shown(text: object, limit: int = 60) -> str:
    """``text`` quoted for a message: its ``repr``, cut to about ``limit`` characters."""
    s = text if isinstance(text, str) else str(text)
    if len(s) <= limit:
        return repr(s)
    return f"{s[:limit]!r}… ({len(s)} characters)"


def whole_number(text: object, what: str, low: int, high: int) -> int:
    """A whole number from ``low`` to ``high`` written in ASCII digits (``what`` names it in the
    400): ``str.isdigit`` alone lets ``"²"`` through to a ``ValueError`` in ``int()``."""
    t = text.strip() if isinstance(text, str) else ""
    if t.isascii() and t.isdigit() and len(t) <= len(str(high)) and low <= int(t) <= high:
        return int(t)
    raise refuse(400, f"{what} must be a whole number from {low} to {high}, not {shown(text)}.")


def json_value(text: str | bytes, where: str = "the body"):
    """``text`` parsed as JSON; ``ValueError`` (never ``RecursionError``: ``[[[[…`` nested
    deeper than the parser's stack) when it is not JSON; a 400 for ``NaN``/``Infinity``
    (:func:`no_constant`) and for a string no page or database can hold (:func:`storable`;
    ``where`` names the value in its message)."""
    import json

    try:
        value = json.loads(text, parse_constant=no_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    return storable(value, where)


#: What no stored string may hold: NUL (PostgreSQL's text refuses it) and the lone surrogates
#: U+D800 to U+DFFF a JSON ``\ud800`` escape gives (no UTF-8 encodes them: SQLite, and every
#: page that shows them, fail on them).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
#: A lone surrogate (a page shows one stored before they were refused as U+FFFD).
UNSTORABLE_SURROGATE = re.compile("[\ud800-\udfff]")


def storable(value, where: str):
    """``value`` (a string, or the lists and objects of a JSON body: keys too) when none of its
    strings holds a NUL or a lone surrogate; otherwise a 400 naming the field (``where`` is the
    whole value: ``"the body"``, ``"form field 'title'"``), so nothing half-readable is stored.
    Every request body becomes values through here: JSON in :func:`json_value`, form fields in
    ``BaseHandler.ready``."""
    todo = [(value, where)]
    while todo:  # a loop, not recursion: a body may be nested as deep as the parser allows
        v, at = todo.pop()
        if isinstance(v, str):
            bad = _UNSTORABLE.search(v)
            if bad:
                what = "a NUL character" if bad.group() == "\x00" else "a lone surrogate"
                raise refuse(
                    400,
                    f"{at[:1].upper()}{at[1:]} holds {what} (U+{ord(bad.group()):04X}), which "
                    "the lab can neither store nor show; send the text without it. Nothing was "
                    "changed.",
                )
        elif isinstance(v, dict):
            for k, item in v.items():
                todo.append((k, f"a field name in {at}"))
                field = f"field {shown(k, 40)}" if at == "the body" else f"{at}[{shown(k, 40)}]"
                todo.append((item, field))
        elif isinstance(v, list):
            todo.extend((item, f"{at}[{i}]") for i, item in enumerate(v))
    return value


def allocation_id(text: str) -> int:
    """An allocation id from a path or form field: a whole number from 1 to :data:`MAX_ID`."""
    t = (text or "").strip()
    if t.isascii() and t.isdigit() and len(t) <= len(str(MAX_ID)) and 1 <= int(t) <= MAX_ID:
        return int(t)
    raise refuse(400, f"{shown(text)} is not an allocation id: a whole number from 1 to {MAX_ID}.")


def device_uuid(text: str) -> str:
    """A device UUID as the ledger stores it (``GPU-…``): printable, at most :data:`MAX_UUID`."""
    t = (text or "").strip()
    if t and len(t) <= MAX_UUID and t.isprintable():
        return t
    raise refuse(
        400, f"{shown(text)} is not a device UUID (printable, at most {MAX_UUID} characters)."
    )


def no_constant(name: str) -> float:
    """``json.loads``'s ``parse_constant``: refuse ``NaN``, ``Infinity`` and ``-Infinity``
    (Python's JSON reader takes them; JSON has no such numbers and no bound compares with NaN)."""
    raise refuse(400, f"The body is not valid JSON: {name} is not a number JSON has.")


def name(text: str, what: str, *, empty: bool = False) -> str:
    """A user or server name (``what`` says which): printable, at most :data:`MAX_NAME`
    characters; empty only where ``empty`` (the default server)."""
    if (text or empty) and len(text) <= MAX_NAME and text.isprintable():
        return text
    raise refuse(400, f"{shown(text)} is not a {what} (printable, at most {MAX_NAME} characters).")


def drain_reason(value: object) -> str:
    """A drain reason: a string of at most :data:`MAX_REASON` characters (stripped)."""
    if not isinstance(value, str):
        raise refuse(400, "'reason' must be a string.")
    reason = value.strip()
    if len(reason) > MAX_REASON:
        raise refuse(
            400,
            f"A drain reason has at most {MAX_REASON} characters; this one has {len(reason)}.",
        )
    return reason


def body_size(size: int, limit: int = MAX_BODY) -> None:
    """Refuse (413) a request body larger than ``limit`` bytes (:data:`MAX_BODY`)."""
    if size > limit:
        raise refuse(413, f"The request body has {size} bytes; the service reads at most {limit}.")


#: A node name: a hostname's characters (the Swarm node's hostname, by default).
NODE_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")


def node_name(text: str) -> str:
    """A node name: 1 to :data:`MAX_NAME` of a hostname's characters (letters, digits, ``.``,
    ``-``, ``_``), starting with a letter or digit."""
    t = text or ""
    if t and len(t) <= MAX_NAME and set(t) <= NODE_NAME_CHARS and t[0].isalnum():
        return t
    raise refuse(
        400,
        f"{shown(text)} is not a node name (a hostname: letters, digits, '.', '-', '_', at most "
        f"{MAX_NAME} characters).",
    )
