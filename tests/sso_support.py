"""The SSO tests' real parts: a local OpenID Connect provider (npm's ``oidc-provider`` running
``scripts/idp/local-idp.mjs``), a real hub that logs in through it, and a browser login.

``LocalIdP(workdir, users, redirect_uri, shape=…)`` starts the provider on a free port with
``users`` (account -> claims, written to a file it re-reads at every request:
:meth:`LocalIdP.set_claims` changes a user's groups "at the provider"), serving its endpoints
at the paths the provider ``shape`` uses (``keycloak``, ``entra``, ``okta``, ``auth0``,
``cilogon``, ``oidc``). ``sso_hub`` makes a hub with the gpulab service whose authenticator is
``configure_sso(c, shape, …)`` — the preset an admin uses, only the host is this machine's —
plus the mapping keywords given.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import requests
from cryptography.fernet import Fernet
from hubtools import free_port
from service_support import make_hub, require_or_skip

REPO = Path(__file__).resolve().parents[1]
IDP_SCRIPT = REPO / "scripts" / "idp" / "local-idp.mjs"
CLIENT_ID, CLIENT_SECRET = "jupyterhub", "local-idp-test-secret"
REALM, TENANT = "campus", "3f2c9a1e-7b4d-4e8a-9c61-5d0e2b7a1f30"

#: group policies of the SSO hub: students have a GPU-hour budget, researchers the A40
SSO_POLICIES = {
    "students": {
        "profiles": ["cpu", "mig-small", "shared-seat"],
        "max_slices_per_user": 1,
        "gpu_hours": 5,
        "period": "week",
    },
    "researchers": {"max_slices_per_user": 2},
}


def idp_problem() -> str | None:
    module = os.environ.get("GPULAB_OIDC_PROVIDER_MODULE", "")
    if not module or not Path(module).is_file():
        return "oidc-provider is not installed (scripts/ensure-oidc-provider.sh; run via scripts/test.sh)"
    if subprocess.run(["node", "--version"], capture_output=True).returncode != 0:
        return "node is not installed"
    return None


class LocalIdP:
    """The local provider as a subprocess; see the module docstring."""

    def __init__(self, workdir: Path, users: dict, redirect_uri: str, *, shape: str = "oidc"):
        require_or_skip(idp_problem(), "The local OpenID Connect provider")
        self.port = free_port()
        self.origin = f"http://127.0.0.1:{self.port}"
        self.shape = shape
        #: configure_sso's URL keywords for this shape (as an admin writes them for the real one)
        self.preset_urls = {
            "keycloak": {"issuer": f"{self.origin}/realms/{REALM}"},
            "entra": {"tenant": TENANT, "authority": self.origin},
            "okta": {"issuer": f"{self.origin}/oauth2/default"},
        }.get(shape, {"issuer": self.origin})
        self.users_file = Path(workdir) / "idp-users.json"
        self.users = dict(users)
        self._write()
        self.log_path = Path(workdir) / "idp.log"
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed in stop())
        env = dict(
            os.environ,
            OIDC_PROVIDER_MODULE=os.environ["GPULAB_OIDC_PROVIDER_MODULE"],
            PORT=str(self.port),
            USERS_FILE=str(self.users_file),
            CLIENT_ID=CLIENT_ID,
            CLIENT_SECRET=CLIENT_SECRET,
            REDIRECT_URIS=redirect_uri,
            SHAPE=shape,
            REALM=REALM,
            TENANT=TENANT,
        )
        self.proc = subprocess.Popen(
            ["node", str(IDP_SCRIPT)], stdout=self._log, stderr=subprocess.STDOUT, env=env
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"local-idp exited:\n{self.log_path.read_text()}")
            try:
                url = self.origin + "/.well-known/openid-configuration"
                if requests.get(url, timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                time.sleep(0.2)
        raise TimeoutError(f"local-idp did not answer:\n{self.log_path.read_text()}")

    def _write(self) -> None:
        tmp = self.users_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.users))
        tmp.replace(self.users_file)

    def set_claims(self, user: str, claims: dict) -> None:
        self.users[user] = claims
        self._write()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log.close()


def sso_hub(
    workdir: Path,
    users: dict,
    provider: str = "keycloak",
    *,
    refresh_age: int = 300,
    extra: str = "",
    **mapping,
):
    """``(hub, idp)``: a started hub (gpulab service included) logging in through a new
    :class:`LocalIdP` of ``provider``'s shape serving ``users``, configured by
    ``configure_sso(c, provider, …)``; ``mapping``: its mapping keywords (``rename=`` …);
    ``extra``: more config, after those lines."""
    workdir.mkdir(parents=True, exist_ok=True)
    hub = make_hub(workdir, extra="")  # not started: its URL is the provider's redirect URI
    idp = LocalIdP(workdir, users, f"{hub.url}/hub/oauth_callback", shape=provider)
    kw = "".join(f", {k}={v!r}" for k, v in {**idp.preset_urls, **mapping}.items())
    hub.extra_config += f"""
c.GPULab.group_policies = {SSO_POLICIES!r}
from jupyterhub_gpulab.auth.presets import configure_sso
configure_sso(c, {provider!r}, client_id="{CLIENT_ID}", client_secret="{CLIENT_SECRET}",
              callback_url="{hub.url}/hub/oauth_callback", admin_groups=["gpu-admins"],
              refresh_age={refresh_age}{kw})
{extra}
"""
    hub.env = {"JUPYTERHUB_CRYPT_KEY": Fernet.generate_key().decode()}
    try:
        hub.start()
    except Exception:
        idp.stop()
        raise
    return hub, idp


def browser_login(driver, hub, username: str, next_path: str = "/hub/home") -> None:
    """Log ``username`` in the way a person does: the hub's login button, the provider's
    login page (any password), back to the hub."""
    from selenium.webdriver.common.by import By

    driver.get(f"{hub.url}/hub/logout")
    driver.delete_all_cookies()
    driver.get(f"{hub.url}/hub/login?next={next_path}")
    button = driver.find_elements(By.CSS_SELECTOR, "a[href*='oauth_login']")
    assert button, f"no login button at {driver.current_url}: {driver.page_source[:2000]}"
    button[0].click()
    wait_for(lambda: driver.find_elements(By.NAME, "login"), 30, "the provider's login page")
    driver.find_element(By.NAME, "login").send_keys(username)
    driver.find_element(By.NAME, "password").send_keys("any password")
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for(lambda: driver.current_url.startswith(hub.url), 30, "the way back to the hub")


def wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.3)
