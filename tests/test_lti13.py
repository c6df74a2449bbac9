"""A course launched from an LMS through LTI 1.3, against a real hub: the test plays the LMS
(platform) with an RSA key made here and its JWKS served on a local port, and sends a real signed
launch through ltiauthenticator's login initiation and callback. The learner lands in the
course's roster group and on their course server, an instructor in the staff groups; a forged
launch and a malformed roles claim are refused and create no user."""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import jwt
import pytest
import requests
from cryptography.hazmat.primitives.asymmetric import rsa
from hubtools import Hub, free_port

pytestmark = [pytest.mark.sso]

CLIENT_ID = "gpulab-tool-1"
DEPLOYMENT = "deployment-1"
LTI = "https://purl.imsglobal.org/spec/lti/claim/"
ROLE = "http://purl.imsglobal.org/vocab/lis/v2/membership#"
COURSE_CONTEXT = "moodle-course-42"


class Platform:
    """The LMS side: an RSA signing key, its JWKS on ``/jwks``, and signed launches."""

    def __init__(self):
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = uuid.uuid4().hex
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        body = json.dumps({"keys": [{**jwk, "kid": self.kid, "alg": "RS256", "use": "sig"}]})

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                self.send_response(200 if self.path == "/jwks" else 404)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *a):
                pass

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.issuer = f"http://127.0.0.1:{self.port}"

    def id_token(self, nonce: str, target: str, roles, context: str | None, email: str, key=None):
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "aud": CLIENT_ID,
            "sub": email.split("@")[0] + "-lms-id",
            "iat": now,
            "exp": now + 300,
            "nonce": nonce,
            "email": email,
            LTI + "message_type": "LtiResourceLinkRequest",
            LTI + "version": "1.3.0",
            LTI + "deployment_id": DEPLOYMENT,
            LTI + "target_link_uri": target,
            LTI + "resource_link": {"id": "notebook-link-1"},
            LTI + "roles": roles,
        }
        if context:
            claims[LTI + "context"] = {"id": context, "label": "ML101", "title": "Machine learning"}
        return jwt.encode(claims, key or self.key, "RS256", headers={"kid": self.kid})

    def launch(self, hub: Hub, email: str, roles, context=COURSE_CONTEXT, key=None):
        """The browser's part of a launch: login initiation, then the signed id_token posted
        back. Returns the callback's response (not followed)."""
        s, url, form = self.signed_launch(hub, email, roles, context, key)
        return s.post(url, data=form, allow_redirects=False)

    def signed_launch(self, hub: Hub, email: str, roles, context=COURSE_CONTEXT, key=None):
        """Login initiation, then the launch the LMS would post: ``(browser session with the
        hub's state cookies, callback URL, form)``."""
        s = requests.Session()
        target = f"{hub.url}/hub"
        r = s.post(
            f"{hub.url}/hub/lti13/oauth_login",
            data={"iss": self.issuer, "login_hint": email, "target_link_uri": target,
                  "client_id": CLIENT_ID, "lti_deployment_id": DEPLOYMENT},
            allow_redirects=False,
        )  # fmt: skip
        assert r.status_code == 302, r.text
        auth = urlparse(r.headers["Location"])
        assert auth.netloc == f"127.0.0.1:{self.port}"  # sent to the platform's authorize URL
        q = {k: v[0] for k, v in parse_qs(auth.query).items()}
        token = self.id_token(q["nonce"], target, roles, context, email, key)
        return s, q["redirect_uri"], {"id_token": token, "state": q["state"]}

    def stop(self):
        self.server.shutdown()


@pytest.fixture(scope="module")
def lms(tmp_path_factory):
    platform = Platform()
    hub = Hub(
        tmp_path_factory.mktemp("lti-hub"),
        f"""
c.JupyterHub.authenticator_class = "gpulab-lti13"
c.GPULabLTI13Authenticator.issuer = "{platform.issuer}"
c.GPULabLTI13Authenticator.authorize_url = "{platform.issuer}/auth"
c.GPULabLTI13Authenticator.jwks_endpoint = "{platform.issuer}/jwks"
c.GPULabLTI13Authenticator.client_id = ["{CLIENT_ID}"]
c.GPULabLTI13Authenticator.context_groups = {{"{COURSE_CONTEXT}": "ml101"}}
c.Authenticator.allow_all = True
""",
    )
    hub.start()
    try:
        yield platform, hub
    finally:
        hub.stop()
        platform.stop()


def test_learner_launch_lands_in_the_course_group_and_on_the_course_server(lms):
    platform, hub = lms
    r = platform.launch(hub, "lea@uni.example", [ROLE + "Learner"])
    assert r.status_code == 302, r.text
    assert r.headers["Location"] == "/hub/spawn/lea@uni.example/ml101"
    assert sorted(hub.user_model("lea@uni.example")["groups"]) == ["ml101", "students"]


def test_instructor_launch_gets_the_staff_groups(lms):
    platform, hub = lms
    r = platform.launch(hub, "ian@uni.example", [ROLE + "Instructor", ROLE + "Mentor"])
    assert r.status_code == 302, r.text
    assert sorted(hub.user_model("ian@uni.example")["groups"]) == ["ml101-staff", "staff"]


@pytest.mark.parametrize(
    "role",
    [
        pytest.param(ROLE + "TeachingAssistant", id="membership#TeachingAssistant"),
        pytest.param(
            "http://purl.imsglobal.org/vocab/lis/v2/membership/Instructor#TeachingAssistant",
            id="the LTI 1.3 sub-role",
        ),
    ],
)
def test_a_teaching_assistant_launch_is_staff_of_the_course(lms, role):
    platform, hub = lms
    email = f"tia-{len(role)}@uni.example"
    r = platform.launch(hub, email, [role])
    assert r.status_code == 302, r.text
    assert sorted(hub.user_model(email)["groups"]) == ["ml101-staff", "staff"]


def test_a_context_not_listed_gives_no_course_group(lms):
    platform, hub = lms
    r = platform.launch(hub, "nia@uni.example", [ROLE + "Learner"], context="other-course")
    assert r.status_code == 302 and r.headers["Location"] in ("/hub/spawn", "/hub/home")
    assert hub.user_model("nia@uni.example")["groups"] == ["students"]


def test_a_launch_signed_with_another_key_is_refused(lms):
    platform, hub = lms
    forged = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    r = platform.launch(hub, "mallory@uni.example", [ROLE + "Instructor"], key=forged)
    assert r.status_code in (400, 401), r.status_code
    assert hub.api("GET", "/users/mallory@uni.example").status_code == 404


def test_a_malformed_roles_claim_is_a_clear_403(lms):
    platform, hub = lms
    r = platform.launch(hub, "odd@uni.example", {"Learner": True})
    assert r.status_code == 403
    assert "in a form this hub cannot read" in r.text
    assert hub.api("GET", "/users/odd@uni.example").status_code == 404


def test_a_replayed_launch_is_refused(lms):
    """An attacker who captured a launch (the signed id_token, the state and the browser's
    state cookies) posts it again: the nonce was used, so no second login."""
    platform, hub = lms
    s, url, form = platform.signed_launch(hub, "rex@uni.example", [ROLE + "Learner"])
    captured = s.cookies.copy()
    first = s.post(url, data=form, allow_redirects=False)
    assert first.status_code == 302, first.text
    replay = requests.post(url, data=form, cookies=captured, allow_redirects=False)
    assert replay.status_code == 400, replay.status_code
    assert "already used" in replay.text
    assert not any(c.name.startswith("jupyterhub-session") for c in replay.cookies)


def test_seen_nonces_forget_a_nonce_once_its_token_expired():
    from jupyterhub_gpulab.auth.lti import SeenNonces

    seen = SeenNonces(max_entries=3)
    assert seen.first_use("a", 1000, now=900) and not seen.first_use("a", 1000, now=950)
    assert seen.first_use("a", 2000, now=1100)  # expired (exp + 60 s leeway): a new launch
    for n in "bcd":
        assert seen.first_use(n, 5000, now=1200)
    assert not seen.first_use("d", 5000, now=1300)
