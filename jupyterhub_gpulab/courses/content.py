"""Course content: the shell step that pulls each course repository into the student's home with
nbgitpuller (``gitpuller <repo> <branch> <dir>``) before the notebook server starts, and again on
"Distribute" inside running servers. Pure builders; the hub's hook (:mod:`.hubhook`) and the
service (:mod:`.distribute`) run them.

nbgitpuller's merge rules apply: the first pull clones; later ones keep the student's edits
(their changed files win, a file they deleted comes back, an untracked file in the way of a new
upstream file is renamed with a timestamp, never lost). A repository that cannot be pulled is
reported in ``~/.gpulab/content.log`` and the container log; the server starts anyway.
"""

from __future__ import annotations

import asyncio
import shlex

from .model import ContentSource, Course
from .records import REPO_SCHEMES

__all__ = ["pull_script", "start_command", "check_reachable", "LOG"]

#: Where a course server keeps the last pull's report, relative to the home.
LOG = ".gpulab/content.log"
#: Seconds one repository may take to pull before it is given up for this start.
PULL_TIMEOUT_S = 120


def pull_script(sources: tuple[ContentSource, ...], home: str) -> str:
    """A POSIX shell script pulling ``sources`` into ``home`` (exit status 0 even on failure;
    the report says which failed)."""
    lines = [
        f"cd {shlex.quote(home)} || exit 0",
        "mkdir -p .gpulab",
        f": > {LOG}",
    ]
    for s in sources:
        repo, branch, d = (shlex.quote(x) for x in (s.repo, s.branch, s.dir))
        lines.append(
            f"if timeout {PULL_TIMEOUT_S} gitpuller {repo} {branch} {d} >> {LOG} 2>&1; "
            f'then echo "gpulab: pulled {s.repo} ({s.branch}) into ~/{s.dir}" >> {LOG}; '
            f'else echo "gpulab: could not pull {s.repo} ({s.branch}) into ~/{s.dir}" '
            f"| tee -a {LOG} >&2; fi"
        )
    return "\n".join(lines) + "\n"


def start_command(course: Course, home: str) -> list[str]:
    """The container command of a course server: pull, then run the image's command, which
    DockerSpawner appends (``sh -c '<pull>; exec "$@"' gpulab-course jupyterhub-singleuser …``)."""
    script = pull_script(course.content, home) + 'exec "$@"\n'
    return ["sh", "-c", script, "gpulab-course", "jupyterhub-singleuser"]


async def check_reachable(repo: str, branch: str, timeout_s: float = 20) -> str | None:
    """``None`` when ``git ls-remote`` finds ``branch`` at ``repo`` from this host, else a
    message for the staff (the repository's answer is not echoed). Runs git as a subprocess of
    the event loop, never blocking it; gives up after ``timeout_s`` seconds."""
    try:
        proc = await asyncio.create_subprocess_exec(
            "git", "ls-remote", "--heads", repo, branch,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env={
                "GIT_TERMINAL_PROMPT": "0",
                # the record's schemes only, redirects included (git limits curl's to these)
                "GIT_ALLOW_PROTOCOL": ":".join(REPO_SCHEMES),
                "PATH": "/usr/bin:/bin:/usr/local/bin",
            },
        )  # fmt: skip
    except FileNotFoundError:
        return "git is not installed where the gpulab service runs"
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        return f"the repository {repo} did not answer within {timeout_s:g} s"
    if proc.returncode != 0:
        return f"the repository {repo} cannot be reached or read (git ls-remote failed)"
    if not out.strip():
        return f"the repository {repo} has no branch {branch!r}"
    return None
