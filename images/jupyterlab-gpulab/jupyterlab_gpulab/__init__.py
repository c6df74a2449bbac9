"""JupyterLab's status bar entry for jupyterhub-gpulab (server side).

The single-user server asks the gpulab service (``$GPULAB_API_URL``, set by the spawner) for
its user's record (``GET me``) with the server's own ``$JUPYTERHUB_API_TOKEN`` (which
``configure_service`` lets reach the service: ``access:services!service=gpulab``), so no token
reaches the browser. ``GET <base_url>gpulab/me`` answers the status bar with
:func:`~.summary.summarise`'s line: the slice this server holds (kind, memory, isolation) and
the GPU-hours left, and, while the culler's GPU-idle warning for this server stands, that
warning with **Keep** and **Move to CPU** (``POST <base_url>gpulab/keep`` / ``move-to-cpu``).
The page also reports its user's last keystroke, click or scroll (``POST
<base_url>gpulab/interaction``, at most about once a minute), so the culler can tell a user at
the keyboard from a tab left open.
"""

from .handlers import ActionHandler, InteractionHandler, MeHandler

__version__ = "0.1.0"


def _jupyter_labextension_paths():
    return [{"src": "labextension", "dest": "jupyterlab-gpulab"}]


def _jupyter_server_extension_points():
    return [{"module": "jupyterlab_gpulab"}]


def _load_jupyter_server_extension(serverapp):
    from jupyter_server.utils import url_path_join

    base = serverapp.web_app.settings["base_url"]
    serverapp.web_app.add_handlers(
        ".*$",
        [
            (url_path_join(base, "gpulab", "me"), MeHandler),
            (url_path_join(base, "gpulab", "(keep|move-to-cpu)"), ActionHandler),
            (url_path_join(base, "gpulab", "interaction"), InteractionHandler),
        ],
    )
