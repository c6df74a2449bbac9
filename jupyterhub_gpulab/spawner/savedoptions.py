"""JupyterHub's saved copy of a server's options: never written for a gpulab server.

JupyterHub's ``User.spawn`` saves each start's ``user_options`` on the server's database row as
its next default (``orm_spawner.user_options = options``, then a commit) before ``start()`` runs,
a refused request's too. gpulab's saved choice is ``last_profile`` in the server's state
(:mod:`.formmixin`), so that copy must stay empty: a start without options must never bring back
a refused request. Cleared after JupyterHub had written it, each start with options cost the
hub's database one more writing commit than plain DockerSpawner (JupyterHub's save, an UPDATE
and its journal's fsyncs, on the hub's event loop), where a bare hub's identical save writes
nothing: under a burst of 40 spawns over 4 free slices that was the largest part of gpulab's
cost over the bare hub (issue 21 item 6).

:func:`keep_no_options` makes JupyterHub's save on a gpulab server's row keep it empty (a
SQLAlchemy attribute event on JupyterHub's ``orm.Spawner``, for the rows of gpulab's spawners
while they have a server, :func:`_keep_empty`): the save leaves the row unchanged, and its
commit writes nothing.
"""

from __future__ import annotations

import threading
import weakref

import sqlalchemy as sa
from jupyterhub import orm
from sqlalchemy.orm.attributes import set_committed_value

#: the database rows (``orm.Spawner``) of gpulab's servers in this process
_rows: weakref.WeakSet = weakref.WeakSet()
_lock = threading.Lock()
_listening = False


def _keep_empty(target, value, oldvalue, initiator):
    """``orm.Spawner.user_options``' set event: while a gpulab server's row has a server (from
    the top of ``User.spawn``, where JupyterHub saves the options, until the server stops) it
    keeps an empty copy as it is (``NULL``, a row that never held options, or ``{}``), and a copy
    an older gpulab left becomes ``{}``. A stopped server's row stores ``value``: JupyterHub 6
    creates a named server with its options (``PUT …/servers/<name>``) or sets them for its next
    start (``PATCH``), and the start without options that follows runs them (``User.spawn``
    reads them before ``clear_state()`` clears them). Any other row stores ``value``."""
    if target not in _rows or target.server is None:
        return value
    return None if oldvalue is None else {}


def keep_no_options(orm_spawner) -> None:
    """From now on, ``orm_spawner.user_options`` (a gpulab server's row) holds no options
    whatever is assigned to it (:func:`_keep_empty`); ``None`` or anything that is not
    JupyterHub's ``orm.Spawner`` (a spawner built outside a hub, e.g. by ``gpulab names``):
    nothing."""
    global _listening
    if not isinstance(orm_spawner, orm.Spawner):
        return
    with _lock:
        if not _listening:
            # active_history: the row's copy as stored, loaded if a rollback expired it
            sa.event.listen(
                orm.Spawner.user_options, "set", _keep_empty, retval=True, active_history=True
            )
            _listening = True
    if "user_options" not in sa.inspect(orm_spawner).dict:
        # a row that never held options reads as NULL without being loaded; a set would then
        # count its old value unknown, and write: record what it stores as its loaded value
        set_committed_value(orm_spawner, "user_options", orm_spawner.user_options)
    _rows.add(orm_spawner)
