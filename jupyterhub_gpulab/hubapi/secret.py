"""The secret the hub and the service share: the gpulab service's cookie secret.

The service signs its cookies with it; the hub's course configuration
(:func:`jupyterhub_gpulab.courses.hubhook.configure_courses`) derives each course's pre-start
token (a hub API token) from it, and so does the service, so both agree on the token without
another file. Both processes read it here: the file named by
``c.GPULabService.cookie_secret_file`` (:data:`SECRET_FILE` by default, relative to the working
directory, the hub's), created with mode 0600 when missing.
"""

from __future__ import annotations

import binascii
import logging
import os
import secrets
from pathlib import Path

from ..errors import ConfigError

# the service's logger, as before the secret moved here: whoever creates the file, the log
# line reads the same
log = logging.getLogger("gpulab.service")

#: ``c.GPULabService.cookie_secret_file``'s default (a path relative to the working directory).
SECRET_FILE = "gpulab_cookie_secret"


def secret_file(c) -> str:
    """``c.GPULabService.cookie_secret_file`` of JupyterHub config ``c`` (:data:`SECRET_FILE`
    when unset), read without the service's classes: the hub process imports none of them."""
    from traitlets.config import DeferredConfig

    section = c.GPULabService if "GPULabService" in c else {}
    value = section.get("cookie_secret_file", SECRET_FILE)
    # a path that makes its folder when read (hub/demo.py's StateDir), as the service reads it
    return value.get_value(None) if isinstance(value, DeferredConfig) else value


def read_cookie_secret(path: str | os.PathLike) -> bytes:
    """The secret in ``path`` (hex), created with mode 0600 when missing."""
    path = Path(path).expanduser().resolve()
    try:
        text = path.read_text().strip()
        if text:
            return binascii.a2b_hex(text)
    except FileNotFoundError:
        pass
    except (binascii.Error, ValueError):
        raise ConfigError(
            f"{path} does not hold a hex cookie secret; delete it to make a new one"
        ) from None
    secret = secrets.token_bytes(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(binascii.b2a_hex(secret).decode() + "\n")
    log.info("Wrote a new cookie secret to %s", path)
    return secret
