"""``GET /services/gpulab/metrics``: the service's Prometheus metrics
(:mod:`jupyterhub_gpulab.service.metrics`), for tokens holding ``custom:gpulab:metrics`` (which
``custom:gpulab:read`` and ``custom:gpulab:admin`` imply), as the hub's ``/hub/metrics`` needs
``read:metrics``. Refusals are JSON ``{"status", "message"}`` (403), as the API's.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST

from ...hub.hubconfig import METRICS_SCOPE, access_scope
from ...ledger import aio
from .base import JSONHandler, refuse


class MetricsHandler(JSONHandler):
    async def get(self):
        if self.current_user is None:
            raise refuse(
                403,
                "Not authenticated: send 'Authorization: Bearer <JupyterHub token>' with a token "
                f"holding {METRICS_SCOPE} and access to this service ({access_scope('gpulab')}; "
                "configure_prometheus grants both). A token with only read:metrics scrapes "
                "/hub/metrics, not this.",
            )
        if METRICS_SCOPE not in self.scopes and not self.can_read:
            raise refuse(403, f"This needs the scope {METRICS_SCOPE}.")
        body = await aio.call(self.settings["gpulab_metrics"].render)
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.finish(body)
