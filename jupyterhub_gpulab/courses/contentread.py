"""Course content in the lab's servers, from the service: read a course server's content status
(:mod:`.contentstatus`) out of its running container, and ask a repository for a branch from a
short-lived container of the course's image on the lab's network, where the pulls run. Both go
through the lab's backend (:mod:`jupyterhub_gpulab.backends`: on a Swarm, the engine of the node
that runs the server). Blocking: the service calls these in a thread."""

from __future__ import annotations

from .content import STATUS
from .contentstatus import MAX_STATUS_BYTES, SourceStatus, one_line, parse_status
from .records import REPO_SCHEMES

__all__ = ["status_in", "ask_in_container"]


def status_in(backend, server, home: str) -> tuple[SourceStatus, ...]:
    """The sources of ``<home>/.gpulab/content.status`` in running ``server`` (a
    :class:`~..backends.Server` of ``backend``; blocking), ``()`` when the file is absent, not
    a regular file, or longer than :data:`MAX_STATUS_BYTES`."""
    data = backend.get_file(server, f"{home}/{STATUS}", MAX_STATUS_BYTES)
    if data is None:
        return ()
    return parse_status(data.decode("utf-8", "replace"))


def ask_in_container(
    backend, image: str, repo: str, branch: str, timeout_s: float = 30
) -> str | None:
    """``None`` when ``git ls-remote`` in a container of ``image`` on the lab's network (the
    backend's) finds ``branch`` at ``repo``, else one line for the staff saying why (git's
    last error line, never a traceback). The container runs as the image's user with the
    record's schemes only, and is removed, also after ``timeout_s`` seconds. Raises
    :class:`~..backends.EngineError` when the engine cannot run it (no engine, no image, no
    such network): the caller decides what then."""
    code, out, err = backend.run_once(
        image,
        ["git", "ls-remote", "--heads", "--", repo, branch],
        environment={"GIT_TERMINAL_PROMPT": "0", "GIT_ALLOW_PROTOCOL": ":".join(REPO_SCHEMES)},
        labels={"org.jupyter.gpulab.helper": "courses"},
        mem_limit="256m",
        timeout_s=timeout_s,
    )
    if code is None:  # the engine's wait timed out: the repository did not answer
        return f"the repository {repo} did not answer the course's servers within {timeout_s:g} s"
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
