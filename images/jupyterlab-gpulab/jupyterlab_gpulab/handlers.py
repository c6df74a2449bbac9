"""``GET <base_url>gpulab/me``: this server's slice and its user's GPU-hours, from the service."""

from __future__ import annotations

import json
import os

from jupyter_server.base.handlers import APIHandler
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from .summary import summarise

#: Seconds to wait for the gpulab service.
TIMEOUT = 10


class MeHandler(APIHandler):
    @web.authenticated
    async def get(self):
        api = os.environ.get("GPULAB_API_URL", "")
        token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
        if not api or not token:
            self.set_status(503)
            self.finish({"message": "no gpulab service is configured for this server"})
            return
        request = HTTPRequest(
            api.rstrip("/") + "/me",
            headers={"Authorization": f"token {token}", "Accept": "application/json"},
            request_timeout=TIMEOUT,
            connect_timeout=TIMEOUT,
        )
        try:
            response = await AsyncHTTPClient().fetch(request)
            data = json.loads(response.body)
        except HTTPClientError as e:
            self.log.warning("gpulab service answered %s for me", e.code)
            self.set_status(502)
            self.finish({"message": f"the gpulab service answered HTTP {e.code}"})
            return
        except (OSError, ValueError) as e:
            self.log.warning("gpulab service unreachable at %s: %s", api, e)
            self.set_status(502)
            self.finish({"message": "the gpulab service cannot be reached"})
            return
        self.finish(summarise(data, os.environ.get("JUPYTERHUB_SERVER_NAME", ""), os.environ))
