"""Container names: deterministic, DNS-safe, at most 63 characters, never shared.

Pure functions. ``container_name(prefix, user, server)`` is ``{prefix}-{user}`` or
``{prefix}-{user}--{server}`` with both parts escaped by :func:`escape_part` (lowercase letters and
digits kept, every other character, ``-`` included, written as ``-XX`` per UTF-8 byte). Escaped
parts never contain ``--`` and never end in ``-``, so a name that fits splits back into exactly one
(user, server) pair: the separator is the first ``--`` after ``{prefix}-``. (A part that starts
with an escaped character puts a ``-`` next to the one before it: ``_alice`` on server ``lab`` is
``jupyter--5falice--lab``: counting ``--`` does not tell a cut name from one that fits.)

A longer name is cut and given ``--h--`` and 12 hex digits of a SHA-256 over the full name. No
name that fits contains ``--h--`` (an escaped part would have to hold ``--`` or start with ``-h``,
and every ``-`` in one starts ``-XX``), so a cut name never equals a name that fits, whatever a
user picks as their name; two long names share one only on a 48-bit hash collision.
"""

from __future__ import annotations

import hashlib
import re

MAX_LENGTH = 63  # a DNS label, and Docker's hostname limit
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_PREFIX = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


def escape_part(text: str) -> str:
    """Injective, DNS-safe escaping: ``"Alice.B"`` → ``"-41lice-2e-42"``; ``""`` → ``""``."""
    out = []
    for ch in text:
        if ch in _SAFE:
            out.append(ch)
        else:
            out.extend(f"-{b:02x}" for b in ch.encode("utf-8"))
    return "".join(out)


def check_prefix(prefix: str) -> str:
    """Return ``prefix`` if it can start a DNS label (``jupyter``, ``gpulab-lab1``), else raise
    ``ValueError`` saying the accepted form."""
    if not _PREFIX.match(prefix) or len(prefix) > 24:
        raise ValueError(
            f"container prefix {prefix!r} must be 1-24 lowercase letters, digits and single '-', "
            "starting with a letter, e.g. 'jupyter'"
        )
    return prefix


def container_name(prefix: str, user: str, server_name: str = "") -> str:
    """The container name for ``user``'s server ``server_name`` (``""``: the default server)."""
    full = f"{prefix}-{escape_part(user)}"
    if server_name:
        full += f"--{escape_part(server_name)}"
    if len(full) <= MAX_LENGTH:
        return full
    # over the escaped form, which is injective; "user\0server" was not (NUL may be in either)
    digest = hashlib.sha256(full.encode()).hexdigest()[:12]
    tail = f"--h--{digest}"
    head = full[: MAX_LENGTH - len(tail)].rstrip("-")
    return head + tail
