"""Course content on the engine, from the service: read a course server's content status
(:mod:`.contentstatus`) out of its running container through Docker's archive API, and ask a
repository for a branch from a short-lived container of the course's image on the lab's
network, where the pulls run. Blocking (docker-py): the service calls these in a thread."""

from __future__ import annotations

import contextlib
import io
import tarfile

from docker.errors import DockerException

from .content import STATUS
from .contentstatus import MAX_STATUS_BYTES, SourceStatus, one_line, parse_status
from .records import REPO_SCHEMES
from .storage import DockerVolumes

__all__ = ["status_in", "ask_in_container"]


def status_in(client, container, home: str) -> tuple[SourceStatus, ...]:
    """The sources of ``<home>/.gpulab/content.status`` in running ``container`` (docker-py
    ``client``; blocking), ``()`` when the file is absent. At most :data:`MAX_STATUS_BYTES`
    are read; the HTTP response is closed at once (:meth:`.storage.DockerVolumes._archive`)."""
    buf = bytearray()
    try:
        with DockerVolumes(client, image="")._archive(container, f"{home}/{STATUS}") as res:
            for chunk in res.iter_content(4096):
                buf += chunk
                if len(buf) > MAX_STATUS_BYTES + 1024:  # one header block, padding
                    break
    except FileNotFoundError:
        return ()
    try:
        with tarfile.open(fileobj=io.BytesIO(bytes(buf))) as tar:
            member = tar.next()
            if member is None or not member.isfile():  # a link or a folder: not ours
                return ()
            data = tar.extractfile(member).read(MAX_STATUS_BYTES)
    except tarfile.TarError:  # cut short: more than a status file holds
        return ()
    return parse_status(data.decode("utf-8", "replace"))


def ask_in_container(
    client, image: str, network: str, repo: str, branch: str, timeout_s: float = 30
) -> str | None:
    """``None`` when ``git ls-remote`` in a container of ``image`` on Docker network
    ``network`` finds ``branch`` at ``repo``, else one line for the staff saying why (git's
    last error line, never a traceback). The container runs as the image's user with the
    record's schemes only, and is removed, also after ``timeout_s`` seconds. Raises
    ``docker.errors.DockerException`` when the engine cannot run it (no engine, no image, no
    such network): the caller decides what then."""
    c = client.containers.create(  # not run(): that would pull a missing image
        image,
        ["git", "ls-remote", "--heads", "--", repo, branch],
        entrypoint=[],
        network=network,
        environment={"GIT_TERMINAL_PROMPT": "0", "GIT_ALLOW_PROTOCOL": ":".join(REPO_SCHEMES)},
        labels={"org.jupyter.gpulab.helper": "courses"},
        mem_limit="256m",
    )
    try:
        c.start()
        try:
            code = c.wait(timeout=timeout_s).get("StatusCode", 1)
        except Exception:  # the engine's wait timed out: the repository did not answer
            return (
                f"the repository {repo} did not answer the course's servers within {timeout_s:g} s"
            )
        out = c.logs(stdout=True, stderr=False).decode("utf-8", "replace")
        err = c.logs(stdout=False, stderr=True).decode("utf-8", "replace")
    finally:
        with contextlib.suppress(DockerException):
            c.remove(force=True)
    if code == 127:
        return f"the course's image {image} has no git: its servers cannot pull {repo}"
    if code != 0:
        return f"the repository {repo} cannot be reached or read from the course's servers ({_why(err, code)})"
    if not out.strip():
        return f"the repository {repo} has no branch {branch!r}"
    return None


def _why(err: str, code: int) -> str:
    """git's last ``fatal:``/``error:`` line of ``err`` with the line after it (where git puts
    the cause: ``errno=Connection refused``), else its last line, as one short line."""
    lines = [x for x in err.splitlines() if x.strip()]
    at = [i for i, x in enumerate(lines) if x.startswith(("fatal:", "error:"))]
    if not at:
        return one_line(lines[-1] if lines else f"git exit status {code}")
    return one_line(" ".join(lines[at[-1] : at[-1] + 2]))
