"""Campus SSO end to end: a real browser logs in through a real OpenID Connect provider (npm's
``oidc-provider``, started here) to a real hub whose ``GPULabOAuthenticator`` maps the provider's
group claims, and the gpulab rules follow the mapped groups.

- A Keycloak-shaped student (``/students``) lands in ``students``: the student profiles and the
  GPU-hour budget on ``/services/gpulab/me``; a researcher sees the research profile; an admin
  group makes a hub admin.
- A user whose groups change at the provider gets the new groups and policy after the refresh
  age, without logging in again.
- The Entra ID overage marker and a malformed group claim are a clear 403 login page (never a
  500), and such a user gets no groups at all (is not even created).
- Every provider shape (Keycloak's full paths above; Entra ID object ids in the ID token, Okta,
  Auth0's namespaced claim, CILogon's ``isMemberOf``) logs in through its own preset
  (``configure_sso(c, "<provider>", …)``, the call an admin writes) against the local provider
  serving that provider's endpoint paths and claims.
- A missing or malformed user-name claim is the same clear 403, not oauthenticator's 500.
"""

from __future__ import annotations

import re
import time

import pytest
import requests
from service_support import PREFIX, user_token
from sso_support import browser_login, sso_hub, wait_for

pytestmark = [pytest.mark.sso, pytest.mark.browser]

REFRESH_AGE = 3
ENTRA_STUDENTS = "6a1f0b6e-3d2c-4a57-9d1e-0c7a3f1b2e4d"
ENTRA_RESEARCHERS = "0b7c2d3e-4f5a-4b6c-8d7e-9f0a1b2c3d4e"

USERS = {
    "ana": {"preferred_username": "ana", "groups": ["/students", "/library"]},
    "rui": {"preferred_username": "rui", "groups": ["/researchers"]},
    "kim": {"preferred_username": "kim", "groups": ["/gpu-admins"]},
    "eve": {
        "preferred_username": "eve",
        "_claim_names": {"groups": "src1"},
        "_claim_sources": {"src1": {"endpoint": "https://graph.microsoft.com/v1.0/users/eve"}},
    },
    "mal": {"preferred_username": "mal", "groups": {"students": True}},
    "big": {"preferred_username": "big", "groups": [f"/g{i}" for i in range(6000)]},
    "nou": {"name": "No Username", "groups": ["/students"]},
    "lst": {"preferred_username": ["lst", "kim"], "groups": ["/gpu-admins"]},
    "lea": {"preferred_username": "lea", "groups": ["/students", "/ml101"]},
    "ian": {"preferred_username": "ian", "groups": ["/ml101-staff"]},
}
#: a course whose roster and staff are groups of the identity provider
COURSE = """
c.GPULabCourses.courses = [{"slug": "ml101", "title": "Machine learning", "roster_group": "ml101",
                            "staff_group": "ml101-staff", "profiles": ["cpu"]}]
from jupyterhub_gpulab.courses.hubhook import configure_courses
configure_courses(c)
"""


@pytest.fixture(scope="module")
def sso(tmp_path_factory):
    hub, idp = sso_hub(tmp_path_factory.mktemp("sso-hub"), USERS, "keycloak",
                       refresh_age=REFRESH_AGE, extra=COURSE)  # fmt: skip
    try:
        yield hub, idp
    finally:
        hub.stop()
        idp.stop()


def groups_of(hub, name: str) -> list[str]:
    return sorted(hub.user_model(name)["groups"])


def me_page(browser, hub) -> str:
    from selenium.webdriver.common.by import By

    browser.get(hub.url + PREFIX + "me")
    wait_for(lambda: browser.find_elements(By.ID, "my-budget"), 30, "the user page")
    return browser.find_element(By.TAG_NAME, "body").text


def test_student_logs_in_and_gets_student_profiles_and_budget(sso, browser):
    hub, _ = sso
    browser_login(browser, hub, "ana")
    assert groups_of(hub, "ana") == ["library", "students"]
    assert hub.user_model("ana")["admin"] is False
    page = me_page(browser, hub)
    assert "of 5 GPU-hours used this week (students)" in page
    assert "PyTorch (1g.5gb MIG slice)" in page and "PyTorch (full A40)" not in page


def test_researcher_gets_the_research_profile_and_admin_group_makes_an_admin(sso, browser):
    hub, _ = sso
    browser_login(browser, hub, "rui")
    assert groups_of(hub, "rui") == ["researchers"]
    page = me_page(browser, hub)
    assert "PyTorch (full A40)" in page and "No GPU-hour budget applies to you" in page
    browser_login(browser, hub, "kim")
    assert hub.user_model("kim")["admin"] is True


def test_group_change_at_the_provider_applies_after_the_refresh_age(sso, browser):
    hub, idp = sso
    idp.set_claims("ana", {"preferred_username": "ana", "groups": ["/students"]})
    browser_login(browser, hub, "ana")
    assert groups_of(hub, "ana") == ["students"]
    idp.set_claims("ana", {"preferred_username": "ana", "groups": ["/researchers"]})
    time.sleep(REFRESH_AGE + 0.5)
    browser.get(hub.url + "/hub/home")  # her next request, no new login
    wait_for(lambda: groups_of(hub, "ana") == ["researchers"], 15, "ana's refreshed groups")
    assert "No GPU-hour budget applies to you" in me_page(browser, hub)
    assert "/hub/login" not in browser.current_url


@pytest.mark.parametrize(
    "user, says",
    [
        pytest.param("eve", "more groups than your identity provider", id="entra-overage"),
        pytest.param("mal", "in a form this hub cannot read", id="malformed-claim"),
        pytest.param("big", "in a form this hub cannot read", id="oversized-claim"),
        pytest.param("nou", "no usable user name", id="no-username-claim"),
        pytest.param("lst", "no usable user name", id="username-claim-a-list"),
    ],
)
def test_unreadable_claims_are_a_clear_login_error(sso, browser, user, says):
    from selenium.webdriver.common.by import By

    hub, _ = sso
    browser_login(browser, hub, user)
    text = wait_for(lambda: browser.find_element(By.TAG_NAME, "body").text, 10, "the error page")
    assert "403" in text and says in text, text
    assert "Login refused" in text and "login refused:" not in text  # the log's detail stays there
    assert not re.search(r"\b500\b", text) and "Internal Server Error" not in text
    assert hub.api("GET", f"/users/{user}").status_code == 404  # no user, no groups


@pytest.mark.parametrize(
    "shape, claims, kw, username, expected",
    [
        pytest.param(
            "entra",
            {"preferred_username": "sam@uni.example", "groups": [ENTRA_STUDENTS, "0000-unknown"]},
            {"rename": {ENTRA_STUDENTS: "students"}},
            "sam@uni.example", ["students"], id="entra-object-ids",
        ),
        pytest.param(
            "okta", {"preferred_username": "sam", "groups": ["students", "Everyone"]}, {},
            "sam", ["Everyone", "students"], id="okta",
        ),
        pytest.param(
            "auth0",
            {"nickname": "sam", "https://uni.example/groups": ["researchers"]},
            {"claim": "https://uni.example/groups"},
            "sam", ["researchers"], id="auth0-namespaced",
        ),
        pytest.param(
            "cilogon",
            {"eppn": "sam@uni.example", "isMemberOf": ["CO:COU:students:members:all", "CO:x"]},
            {},
            "sam@uni.example", ["students"], id="cilogon-ismemberof",
        ),
    ],
)  # fmt: skip
def test_each_provider_shape_logs_in_through_its_preset(
    tmp_path, browser, shape, claims, kw, username, expected
):
    hub, idp = sso_hub(tmp_path / shape, {"sam": claims}, shape, **kw)
    try:
        browser_login(browser, hub, "sam")
        assert groups_of(hub, username) == expected
    finally:
        hub.stop()
        idp.stop()


def test_a_group_edited_in_the_hub_is_overwritten_by_the_provider(sso, browser):
    """Why gpulab never edits groups the provider owns: JupyterHub 6 accepts the edit (its
    check of managed groups in the group API is deprecated since 5.3), and the next refresh puts
    the provider's groups back."""
    hub, idp = sso
    idp.set_claims("ana", {"preferred_username": "ana", "groups": ["/students"]})
    browser_login(browser, hub, "ana")
    hub.api("POST", "/groups", json={"groups": ["ml101"]})
    r = hub.api("POST", "/groups/ml101/users", json={"users": ["ana"]})
    assert r.status_code == 200 and groups_of(hub, "ana") == ["ml101", "students"]
    time.sleep(REFRESH_AGE + 0.5)
    browser.get(hub.url + "/hub/home")
    wait_for(lambda: groups_of(hub, "ana") == ["students"], 15, "the provider's groups back")


def test_entra_groups_from_the_id_token_refresh_through_the_refresh_token(tmp_path, browser):
    """Entra ID's shape end to end: object ids in the ID token (not userinfo), renamed; a
    change at the provider arrives with the ID token the refresh token buys; the overage
    marker in the ID token is the login error."""
    users = {
        "sam": {"preferred_username": "sam", "groups": [ENTRA_STUDENTS]},
        "big": {"preferred_username": "big", **USERS["eve"]},
    }
    hub, idp = sso_hub(
        tmp_path / "entra",
        users,
        "entra",
        refresh_age=REFRESH_AGE,
        rename={ENTRA_STUDENTS: "students", ENTRA_RESEARCHERS: "researchers"},
    )
    try:
        browser_login(browser, hub, "sam")
        assert groups_of(hub, "sam") == ["students"]
        idp.set_claims("sam", {"preferred_username": "sam", "groups": [ENTRA_RESEARCHERS]})
        time.sleep(REFRESH_AGE + 0.5)
        browser.get(hub.url + "/hub/home")
        wait_for(lambda: groups_of(hub, "sam") == ["researchers"], 15, "sam's refreshed groups")
        browser_login(browser, hub, "big")
        assert "more groups than your identity provider" in browser.page_source
        assert hub.api("GET", "/users/big").status_code == 404
    finally:
        hub.stop()
        idp.stop()


def test_check_auth_reads_the_claims_of_a_test_login(sso, browser, capsys, monkeypatch):
    """An admin logs in as a test user, then asks what that login gave and why."""
    from jupyterhub_gpulab.cli import main

    hub, idp = sso
    idp.set_claims("ana", {"preferred_username": "ana", "groups": ["/students", "/a/b"]})
    browser_login(browser, hub, "ana")
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", hub.token)
    args = ["check-auth", "-f", str(hub.config_path), "--hub-url", hub.url + "/hub/api"]
    assert main([*args, "--hub-user", "ana"]) == 0
    out = capsys.readouterr().out
    assert "groups:   students" in out and "dropped '/a/b'" in out
    assert "budget:   5 GPU-hours per week (students)" in out
    assert main([*args, "--hub-user", "nobody"]) == 2
    assert "no user 'nobody'" in capsys.readouterr().err


def test_a_course_roster_from_the_provider_is_shown_and_never_edited(sso, browser):
    """The course's roster group comes from the provider: the course page says so and offers
    no roster edits, and the API refuses them (409) without touching the group."""
    from selenium.webdriver.common.by import By

    hub, _ = sso
    browser_login(browser, hub, "lea")
    browser_login(browser, hub, "ian", PREFIX + "courses/ml101")
    browser.get(hub.url + PREFIX + "courses/ml101")
    wait_for(lambda: browser.find_elements(By.ID, "roster-source"), 30, "the course page")
    source = browser.find_element(By.ID, "roster-source").text
    assert "come from the identity provider" in source and "change them there" in source
    assert "lea" in browser.find_element(By.ID, "roster").text
    assert not browser.find_elements(By.ID, "add") and not browser.find_elements(By.ID, "csv-file")
    browser.get(hub.url + "/hub/token")  # the hub's cookies (path /hub/) are visible here
    wait_for(lambda: browser.get_cookie("_xsrf"), 30, "the hub's token page")
    session = requests.Session()  # ian's browser login, for a token of his own
    for c in browser.get_cookies():
        session.cookies.set(c["name"], c["value"], path=c.get("path", "/"))
    token = user_token(hub, session, "ian")
    r = requests.post(hub.url + PREFIX + "api/courses/ml101/roster",
                      headers={"Authorization": f"token {token}"},
                      json={"add": ["kim"], "remove": ["lea"]}, timeout=30)  # fmt: skip
    assert r.status_code == 409 and "identity provider" in r.json()["message"], r.text
    view = requests.get(hub.url + PREFIX + "api/courses/ml101",
                        headers={"Authorization": f"token {token}"}, timeout=30).json()  # fmt: skip
    assert view["roster_source"]["editable"] is False
    assert [row["user"] for row in view["roster"]] == ["lea"]
    assert groups_of(hub, "lea") == ["ml101", "students"]
