"""A waitlist offer tells its reader how to take the held slice: "Start your server" while that
server already runs is a dead end, so the hub's banner and the gpulab page say to start a named
server with the profile (or restart the running one with it). Engine-free: a real SQLite ledger
and the hub's announcement callable, with JupyterHub's ``User`` reduced to its spawners."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace

from html_support import parse_html
from traitlets.config import Config

from jupyterhub_gpulab.hub.announce import HomeAnnouncement
from jupyterhub_gpulab.ledger import Ledger
from jupyterhub_gpulab.ledger.notices import OFFER_RULE
from jupyterhub_gpulab.service.web.usageview import warnings_view

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=timezone.utc)
OFFER = (
    "Your turn: a GPU slice (NVIDIA A40) is held for you for profile 'a40' until 12:05 UTC. "
    "Start your server to take it."
)


def user(name: str, **servers: bool):
    """A JupyterHub ``User`` as the announcement reads it: ``spawners`` by name (``default``:
    the default server), each ``active`` or not."""
    spawners = {
        ("" if n == "default" else n): SimpleNamespace(active=a) for n, a in servers.items()
    }
    return SimpleNamespace(name=name, spawners=spawners)


def banner(tmp_path, reader, server_name: str = "") -> str:
    c = Config()
    c.GPULab.db_url = f"sqlite:///{tmp_path / 'gpulab.sqlite'}"
    ledger = Ledger(c.GPULab.db_url)
    try:
        ledger.set_warning("ann", server_name, OFFER_RULE, OFFER, NOW)
        return parse_html(HomeAnnouncement(c, "../services/gpulab/me")(reader)).text()
    finally:
        ledger.close()


def test_an_offer_to_a_user_whose_default_server_is_stopped_says_start_your_server(tmp_path):
    text = banner(tmp_path, user("ann", default=False))
    assert "Start your server to take it." in text
    assert banner(tmp_path, user("ann")) == text  # never started


def test_while_the_default_server_runs_the_offer_says_start_a_named_server(tmp_path):
    text = banner(tmp_path, user("ann", default=True))
    assert "Start your server to take it." not in text
    assert "Your default server is running: start a named server with that profile" in text
    assert "held for you for profile 'a40' until 12:05 UTC" in text  # the offer itself stays


def test_an_offer_for_a_named_server_that_runs_names_it(tmp_path):
    text = banner(tmp_path, user("ann", default=False, train=True), server_name="train")
    assert "Your server 'train' is running" in text
    # another running server does not change an offer for a stopped one
    assert "Start your server" in banner(tmp_path, user("ann", default=True, train=False), "train")


def test_the_gpulab_page_says_the_same_from_the_hubs_list_of_servers():
    w = SimpleNamespace(user="ann", server_name="", rule=OFFER_RULE, message=OFFER, due_at=NOW)
    [running] = warnings_view([w], running={""})
    [stopped] = warnings_view([w], running=set())
    assert "start a named server" in running["message"]
    assert stopped["message"] == OFFER
    other = SimpleNamespace(**{**w.__dict__, "rule": "gpu-idle"})
    assert warnings_view([other], running={""})[0]["message"] == OFFER  # only offers change


def waitlist_section(servers) -> str:
    from jupyterhub_gpulab.service.web.application import jinja_env

    data = {
        "waitlist": [
            {"id": 1, "profile": "a40", "state": "offered", "position": 0,
             "estimate_min": None, "offer_until": NOW.isoformat()}
        ],
        "preemptions": [], "profiles": [], "servers": servers,
    }  # fmt: skip
    html = (
        jinja_env()
        .get_template("gpulab_waitlist.html")
        .render(data=data, base_url="/hub/", service_prefix="/services/gpulab/", xsrf_form="")
    )
    return " ".join(parse_html(html).find("div", data_profile="a40").text().split())


def test_the_gpulab_pages_offer_says_how_to_take_it_while_the_default_server_runs():
    running = waitlist_section([{"name": "", "state": "running"}])
    assert "your default server is running, so start a named server with that profile" in running
    for servers in ([{"name": "", "state": "stopped"}, {"name": "x", "state": "running"}], []):
        assert "start your server to take it" in waitlist_section(servers)
