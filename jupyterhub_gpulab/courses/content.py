"""Course content: the shell step that pulls each course repository into the student's home with
nbgitpuller (``gitpuller <repo> <branch> <dir>``) before the notebook server starts, and again on
"Distribute" inside running servers. Pure builders; the hub's hook (:mod:`.hubhook`) and the
service (:class:`.manager.CourseManager`) run them. Every path is relative to the home, wherever
the home is mounted.

nbgitpuller's merge rules apply: the first pull clones; later ones keep the student's edits
(their changed files win, a file they deleted comes back, an untracked file in the way of a new
upstream file is renamed with a timestamp, never lost). Two cases nbgitpuller cannot merge are
handled before it runs, by moving the student's folder aside as ``~/<dir>_backup_<UTC
yyyymmddHHMMSS>`` (nbgitpuller's own ``--backup`` naming) and cloning the new version:

- **history rewritten**: the instructor force-pushed (a new root commit, an amended or dropped
  commit, another repository at the same folder): the upstream commit the student's copy was
  pulled from is no longer an ancestor of the repository's branch (no common ancestor at all,
  where the copy has no upstream ref). nbgitpuller's merge would fail with exit 128 at every
  start;
- **not a clone**: ``~/<dir>`` exists and is no git repository (the student made that folder).

Before anything else the script asks the repository for the branch (``git ls-remote``) from
the container, where the pull runs: that is the reachability check that counts (the hub's host
may reach what containers cannot, e.g. ``git://127.0.0.1``). A repository that cannot be pulled
is reported and the server starts anyway.

What each pull leaves in the home: ``~/.gpulab/content.log`` (everything git and nbgitpuller
printed) and ``~/.gpulab/content.status``, one line per source, tab-separated::

    <state> <dir> <UTC time> <backup folder or empty> <one-line reason or empty>

``state``: ``pulled``, ``kept`` (pulled, the student's previous copy kept in the backup
folder; the reason says why) or ``failed`` (the reason is git's last ``fatal:``/``error:``
line, at most 300 characters). :mod:`.contentstatus` reads it for the course page and the API.
"""

from __future__ import annotations

import asyncio
import shlex

from .model import ContentSource, Course
from .records import REPO_SCHEMES

__all__ = ["pull_script", "start_command", "check_reachable", "LOG", "STATUS"]

#: Where a course server keeps the last pull's output, relative to the home.
LOG = ".gpulab/content.log"
#: Where it keeps the last pull's one-line-per-source status (module docstring), relative to
#: the home.
STATUS = ".gpulab/content.status"
#: Seconds one repository may take to pull before it is given up for this start.
PULL_TIMEOUT_S = 120
#: Seconds the branch lookup (``git ls-remote``) and the history check's fetch may take.
ASK_TIMEOUT_S = 30

#: The shell functions of the pull (POSIX sh; git, awk, timeout, date: in every course image).
#: ``_gpulab_pull REPO BRANCH DIR`` pulls one source and appends its status line.
_FUNCTIONS = r"""
export GIT_TERMINAL_PROMPT=0
_gpulab_reason() {
  awk '/^(fatal|error|ERROR):/ {l=$0; n=NR; next}
       n && NR==n+1 && !/^\$ / {l=l" "$0}
       NF {last=$0}
       END {print (l != "" ? l : last)}' "$1" | tr '\t\r' '  ' | cut -c1-300
}
_gpulab_keep() {
  [ -e "$3" ] || return 0
  why=
  if [ ! -d "$3/.git" ]; then
    why="not a clone of the repository"
  else
    git -C "$3" remote set-url origin "$1" >> "$out" 2>&1
    old=$(git -C "$3" rev-parse -q --verify "refs/remotes/origin/$2^{commit}")
    if timeout @ASK@ git -C "$3" fetch -q -- "$1" "$2" >> "$out" 2>&1; then
      if [ -n "$old" ]; then
        git -C "$3" merge-base --is-ancestor "$old" FETCH_HEAD
      else
        git -C "$3" merge-base HEAD FETCH_HEAD > /dev/null
      fi
      [ $? = 1 ] && why="history rewritten"
    fi
  fi
  [ -n "$why" ] || return 0
  ts=$(date -u +%Y%m%d%H%M%S)
  backup="$3_backup_$ts"; n=0
  while [ -e "$backup" ]; do n=$((n+1)); backup="$3_backup_$ts.$n"; done
  if mv -- "$3" "$backup"; then
    note=$why
    echo "gpulab: $why: your copy of ~/$3 kept in ~/$backup" >> "$out"
    return 0
  fi
  backup=; reason="$why, and ~/$3 could not be moved aside"
  return 1
}
_gpulab_pull() {
  out=.gpulab/content.out; : > "$out"; state=failed; backup=; note=; reason=
  timeout @ASK@ git ls-remote --heads -- "$1" "$2" > .gpulab/content.heads 2>> "$out"
  rc=$?
  if [ $rc = 124 ]; then
    reason="the repository did not answer within @ASK@ s"
  elif [ $rc != 0 ]; then
    reason="cannot read the repository: $(_gpulab_reason "$out")"
  elif [ ! -s .gpulab/content.heads ]; then
    reason="the repository has no branch $2"
  elif _gpulab_keep "$@"; then
    timeout @PULL@ gitpuller "$1" "$2" "$3" >> "$out" 2>&1
    rc=$?
    if [ $rc = 0 ]; then
      state=pulled; [ -n "$backup" ] && state=kept && reason=$note
    elif [ $rc = 124 ]; then
      reason="the pull took longer than @PULL@ s"
    else
      reason=$(_gpulab_reason "$out")
    fi
  fi
  cat "$out" >> @LOG@
  if [ $state = failed ]; then
    echo "gpulab: could not pull $1 ($2) into ~/$3: $reason" | tee -a @LOG@ >&2
  else
    echo "gpulab: pulled $1 ($2) into ~/$3" >> @LOG@
  fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$state" "$3" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    "$backup" "$reason" >> @STATUS@.new
  rm -f "$out" .gpulab/content.heads
}
"""


def pull_script(sources: tuple[ContentSource, ...], home: str) -> str:
    """A POSIX shell script pulling ``sources`` into ``home`` (module docstring: the history
    check, the backup, the status file). Exit status 0 even on failure; the status file says
    which source failed and why."""
    functions = (
        _FUNCTIONS.replace("@ASK@", str(ASK_TIMEOUT_S))
        .replace("@PULL@", str(PULL_TIMEOUT_S))
        .replace("@LOG@", LOG)
        .replace("@STATUS@", STATUS)
    )
    lines = [
        f"cd {shlex.quote(home)} || exit 0",
        "mkdir -p .gpulab",
        f": > {LOG}",
        f"rm -f {STATUS}",  # read while this pull runs, the last start's would pass for this one
        f": > {STATUS}.new",
        functions.strip(),
    ]
    for s in sources:
        lines.append("_gpulab_pull " + " ".join(shlex.quote(x) for x in (s.repo, s.branch, s.dir)))
    lines.append(f"mv -f {STATUS}.new {STATUS}")
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
