"""Pure parts of the service: what the pages and API show, the hub config it adds, the OpenAPI
document and the cookie secret."""

from __future__ import annotations

import os
import stat
import sys
from datetime import datetime, timedelta, timezone

import pytest
from traitlets.config import Config

from jupyterhub_gpulab.hub.hubconfig import configure_service
from jupyterhub_gpulab.hubapi.secret import read_cookie_secret, secret_file
from jupyterhub_gpulab.hubapi.servers import HubServer, hub_time
from jupyterhub_gpulab.lab.policy import GroupPolicy, PolicyContext, user_limit
from jupyterhub_gpulab.lab.profiles import load_profiles
from jupyterhub_gpulab.ledger import Allocation
from jupyterhub_gpulab.service.web import inputs, views
from jupyterhub_gpulab.service.web.api import api_handlers
from jupyterhub_gpulab.service.web.grants import RoleGrants
from jupyterhub_gpulab.service.web.openapi import openapi

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=timezone.utc)
GiB = 2**30


def alloc(aid, user, slice_id, *, server="", group=None, started=NOW - timedelta(hours=2)):
    return Allocation(
        id=aid, slice_id=slice_id, user=user, server_name=server, profile="p", node="n",
        charge_group=group, share=1.0, container_id=None, container_name=None,
        started_at=started, ended_at=None, end_reason=None,
    )  # fmt: skip


def slice_row(sid, kind="gpu", *, device="GPU-1", index=0, name="NVIDIA A40", mem=48 * GiB, **kw):
    row = {
        "id": sid, "kind": kind, "device_uuid": device, "node": "n", "device_index": index,
        "device_name": name, "memory_bytes": mem, "mig_profile": None, "seat": None, "seats": None,
        "share": 1.0, "available": True, "held_by": None,
    }  # fmt: skip
    row.update(kw)
    return row


# -- allocations --------------------------------------------------------------------------------


def test_allocation_without_a_server_on_the_hub_is_stale_but_a_newer_one_is_not():
    servers = {("ann", ""): HubServer("ann", "", "running", hub_time("2026-03-02T11:59:00Z"))}
    rows = views.allocation_view(
        [
            alloc(1, "ann", "GPU-1"),
            alloc(2, "bob", "GPU-2"),
            alloc(3, "cy", "GPU-3", started=NOW + timedelta(seconds=1)),  # claimed after we asked
        ],
        {s: slice_row(s) for s in ("GPU-1", "GPU-2", "GPU-3")},
        {"GPU-1", "GPU-2", "GPU-3"},
        "n",
        {},
        servers,
        NOW,
        NOW + timedelta(seconds=5),
    )
    by_user = {r["user"]: r for r in rows}
    assert by_user["ann"]["server"] == "running" and not by_user["ann"]["stale"]
    assert by_user["ann"]["last_activity"] == "2026-03-02T11:59:00Z"
    assert by_user["bob"]["server"] == "not running" and by_user["bob"]["stale"]
    assert not by_user["cy"]["stale"]
    assert by_user["ann"]["held_seconds"] == 2 * 3600 + 5


def test_when_the_hub_cannot_be_asked_nothing_is_called_stale():
    rows = views.allocation_view(
        [alloc(1, "ann", "GPU-1")],
        {"GPU-1": slice_row("GPU-1")},
        {"GPU-1"},
        "n",
        {},
        None,
        None,
        NOW,
    )
    assert rows[0]["server"] == "unknown" and not rows[0]["stale"]


def test_allocation_on_a_slice_missing_from_the_inventory_is_flagged_vanished():
    rows = views.allocation_view(
        [alloc(1, "ann", "MIG-old")],
        {"MIG-old": slice_row("MIG-old", "mig", mig_profile="1g.5gb")},
        {"MIG-new"},
        "n",
        {},
        {},
        NOW,
        NOW,
    )
    assert rows[0]["vanished"]
    assert rows[0]["slice"] == "MIG 1g.5gb on GPU 0 (NVIDIA A40)"


# -- inventory ----------------------------------------------------------------------------------


def test_inventory_groups_devices_by_node_and_counts_slices():
    devices = [
        {"uuid": "GPU-1", "node": "n", "index": 0, "name": "Tesla T4", "memory_bytes": 16 * GiB,
         "compute_capability": "7.5", "mig_enabled": False, "vgpu_type": None, "present": True,
         "drained": True, "drain_reason": "fan"},
    ]  # fmt: skip
    seats = [
        slice_row(f"GPU-1/seat-{i}", "shared", name="Tesla T4", mem=4 * GiB, seat=i, seats=4,
                  held_by=7 if i == 0 else None, available=False)
        for i in range(4)
    ]  # fmt: skip
    inv = views.inventory_view(
        devices, seats, {s["id"] for s in seats}, "n", {}, "no NVML on this host"
    )
    [device] = inv["nodes"][0]["devices"]
    assert device["drained"] and device["drain_reason"] == "fan"
    assert device["layout"] == "4 shared seats of 4 GiB"
    assert {s["isolation"] for s in device["slices"]} == {"soft"}
    assert inv["totals"] == {"slices": 4, "free": 0, "held": 1, "out_of_service": 3}
    assert inv["nvml"]["available"] is False


# -- groups and the user page --------------------------------------------------------------------


def test_group_usage_against_caps_marks_full_groups():
    policies = {
        "students": GroupPolicy("students", max_slices=2, max_slices_per_user=1),
        "researchers": GroupPolicy("researchers", max_slices_per_user=4, priority=10),
    }
    rows = views.group_view(
        policies,
        {"students": 2, "old-course": 1},
        [alloc(1, "a", "x"), alloc(2, "b", "y", group="students")],
    )
    by_group = {r["group"]: r for r in rows}
    assert by_group["students"]["held"] == 2 and by_group["students"]["full"]
    assert by_group["researchers"]["held"] == 0 and not by_group["researchers"]["full"]
    assert not by_group["old-course"]["configured"]
    assert by_group[None]["held"] == 1  # charged to no group cap


def test_the_default_policy_shows_its_limits_not_no_policy():
    # a new user's trial: "(default) (no policy) … no limit" while default_policy held users in
    # no group to one slice and to two profiles
    default = GroupPolicy("(default)", max_slices_per_user=1, profiles=("tensorflow-seat", "cpu"))
    rows = views.group_view({}, {"(default)": 1}, uncharged=0, default=default)
    [row] = rows
    assert row["group"] == "(default)" and row["configured"] and row["held"] == 1
    assert row["max_slices_per_user"] == 1 and row["profiles"] == ["tensorflow-seat", "cpu"]
    # with nothing held under it yet, it is listed too: the admin sees the rule before it binds
    assert [r["group"] for r in views.group_view({}, {}, uncharged=0, default=default)] == [
        "(default)"
    ]


@pytest.mark.parametrize(
    "limits, expected",
    [
        pytest.param([1, 3], 3, id="most-generous"),
        pytest.param([1, None], None, id="one-unlimited"),
        pytest.param([], None, id="no-policy"),
    ],
)
def test_user_limit_is_the_most_generous_of_their_policies(limits, expected):
    policies = [GroupPolicy(f"g{i}", max_slices_per_user=n) for i, n in enumerate(limits)]
    assert user_limit(policies) == expected


def test_user_view_shows_slice_isolation_limits_and_capacity():
    profiles = load_profiles(
        [
            {"slug": "cpu", "display_name": "CPU", "image": "x"},
            {"slug": "seat", "display_name": "Seat", "image": "x", "slice": {"kind": "shared"}},
            {"slug": "mig", "display_name": "MIG", "image": "x", "slice": {"kind": "mig", "mig_profile": "1g.5gb"}},
        ]
    )  # fmt: skip
    slices = {
        "GPU-1/seat-0": slice_row(
            "GPU-1/seat-0", "shared", name="Tesla T4", mem=4 * GiB, seat=0, seats=4
        ),
        "MIG-1": slice_row("MIG-1", "mig", name="NVIDIA A100", mem=5 * GiB, mig_profile="1g.5gb"),
    }
    data = views.user_view(
        user="ann",
        ctx=PolicyContext.of(
            ["students"],
            False,
            {"students": GroupPolicy("students", max_slices_per_user=2, max_slices=10)},
        ),
        servers=[HubServer("ann", "", "running"), HubServer("ann", "train", "running")],
        allocations=[alloc(1, "ann", "GPU-1/seat-0"), alloc(2, "ann", "MIG-1", server="train")],
        slices_by_id=slices,
        utilisation={},
        entitled=profiles,
        capacity={"seat": (3, 4), "mig": (0, 2)},
        open_by_group={"students": 5},
    )
    by_server = {s["name"]: s["slice"] for s in data["servers"]}
    assert by_server[""]["isolation"] == "soft" and by_server[""]["gpu_model"] == "Tesla T4"
    assert (
        by_server["train"]["isolation"] == "hard" and by_server["train"]["memory_bytes"] == 5 * GiB
    )
    assert data["limits"]["held"] == 2 and data["limits"]["max_slices_per_user"] == 2
    assert data["limits"]["policies"][0]["group_held"] == 5
    free = {p["slug"]: (p["free"], p["total"]) for p in data["profiles"]}
    assert free == {"cpu": (None, None), "seat": (3, 4), "mig": (0, 2)}


# -- hub config ---------------------------------------------------------------------------------


def existing_config() -> Config:
    c = Config()
    c.JupyterHub.services = [{"name": "tests", "api_token": "t"}]
    c.JupyterHub.load_roles = [{"name": "tests", "services": ["tests"], "scopes": ["list:users"]}]
    c.JupyterHub.custom_scopes = {"custom:other:x": {"description": "x"}}
    return c


def test_configure_service_adds_service_scopes_and_roles_keeping_what_was_there(tmp_path):
    c = existing_config()
    configure_service(c, config_file=tmp_path / "jupyterhub_config.py", url="http://127.0.0.1:9999",
                      admin_groups=["gpu-admins"], reader_groups=["instructors"])  # fmt: skip

    names = [s["name"] for s in c.JupyterHub.services]
    assert names == ["tests", "gpulab"]
    svc = c.JupyterHub.services[1]
    assert svc["command"] == [sys.executable, "-m", "jupyterhub_gpulab.service", "--config",
                              str(tmp_path / "jupyterhub_config.py"),
                              "--hub-pid", str(os.getpid())]  # fmt: skip
    assert svc["url"] == "http://127.0.0.1:9999"
    assert set(svc["oauth_client_allowed_scopes"]) == {"custom:gpulab:admin", "custom:gpulab:read"}
    assert set(c.JupyterHub.custom_scopes) == {
        "custom:other:x",
        "custom:gpulab:admin",
        "custom:gpulab:read",
        "custom:gpulab:metrics",
    }
    assert c.JupyterHub.custom_scopes["custom:gpulab:admin"]["subscopes"] == ["custom:gpulab:read"]
    assert c.JupyterHub.custom_scopes["custom:gpulab:read"]["subscopes"] == [
        "custom:gpulab:metrics"
    ]
    roles = {r["name"]: r for r in c.JupyterHub.load_roles}
    assert set(roles) == {"tests", "gpulab-admin", "gpulab-reader", "gpulab-service"}
    assert roles["gpulab-admin"]["groups"] == ["gpu-admins"]
    assert roles["gpulab-reader"]["groups"] == ["instructors"]
    assert {"admin:servers", "list:users", "read:users:activity", "read:groups"} <= set(
        roles["gpulab-service"]["scopes"]
    )
    assert roles["gpulab-service"]["services"] == ["gpulab"]
    assert "access:services!service=gpulab" in c.JupyterHub.extra_user_scopes


def test_jupyterhub_admins_get_the_gpulab_admin_role():
    c = existing_config()
    c.Authenticator.admin_users.add("Boss")  # extended in place: a lazy config value
    configure_service(c, admin_groups="gpu-admins")
    roles = {r["name"]: r for r in c.JupyterHub.load_roles}
    assert roles["gpulab-admin"]["users"] == ["Boss"]
    assert roles["gpulab-admin"]["groups"] == ["gpu-admins"]

    named = Config()
    named.Authenticator.admin_users = {"root"}
    configure_service(named, admin_users=["ann"])
    assert {r["name"]: r for r in named.JupyterHub.load_roles}["gpulab-admin"]["users"] == ["ann"]


def test_a_login_asks_for_the_gpulab_scopes_the_configs_roles_grant():
    c = Config()
    c.Authenticator.admin_users = {"Boss"}
    configure_service(c, admin_groups=["gpu-admins"], reader_groups=["instructors"])
    c.JupyterHub.load_roles.append(
        {"name": "ta", "scopes": ["custom:gpulab:read", "list:users"], "users": ["tim"]}
    )
    grants = RoleGrants.from_config(c)
    assert grants.for_user("boss") == {"custom:gpulab:admin"}  # names as the hub normalises
    assert grants.for_user("ann", ["gpu-admins"]) == {"custom:gpulab:admin"}
    assert grants.for_user("ivy", ["instructors", "x"]) == {"custom:gpulab:read"}
    assert grants.for_user("tim") == {"custom:gpulab:read"}
    assert grants.for_user("sam", ["students"]) == set()

    c.JupyterHub.extra_user_scopes = {"custom:gpulab:read", "access:services!service=gpulab"}
    assert RoleGrants.from_config(c).for_user("sam") == {"custom:gpulab:read"}
    redefined = Config(c)
    redefined.JupyterHub.load_roles = [*c.JupyterHub.load_roles, {"name": "user", "scopes": []}]
    assert RoleGrants.from_config(redefined).for_user("sam") == set()  # as JupyterHub does
    c.Authenticator.manage_roles = True  # roles come from the authenticator: ask for all
    assert RoleGrants.from_config(c).for_user("sam") == {
        "custom:gpulab:admin",
        "custom:gpulab:read",
    }


@pytest.mark.parametrize(
    "text",
    [str(2**63), str(2**31), "-1", "0", "", "1.5", "1e3", "٣", " ", "9" * 5000],
)
def test_an_allocation_id_out_of_range_or_malformed_is_a_400(text):
    with pytest.raises(inputs.web.HTTPError) as e:
        inputs.allocation_id(text)
    assert e.value.status_code == 400 and "2147483647" in e.value.args[0]
    assert len(e.value.args[0]) < 200


def test_inputs_at_their_limits_pass():
    assert inputs.allocation_id(str(2**31 - 1)) == 2**31 - 1
    assert inputs.allocation_id(" 7 ") == 7
    assert inputs.drain_reason(" " + "r" * 255 + " ") == "r" * 255
    assert inputs.device_uuid("MIG-" + "a" * 92) == "MIG-" + "a" * 92
    assert inputs.name("", "server name", empty=True) == ""
    for bad in (lambda: inputs.drain_reason("r" * 256), lambda: inputs.drain_reason(3),
                lambda: inputs.device_uuid("G" * 97), lambda: inputs.device_uuid("GPU-\n1"),
                lambda: inputs.name("", "user name"), lambda: inputs.name("u" * 256, "user name")):  # fmt: skip
        with pytest.raises(inputs.web.HTTPError) as e:
            bad()
        assert e.value.status_code == 400
    with pytest.raises(inputs.web.HTTPError) as e:
        inputs.body_size(inputs.MAX_BODY + 1)
    assert e.value.status_code == 413


def test_configure_service_extends_a_redefined_user_role():
    c = existing_config()
    c.JupyterHub.load_roles = [{"name": "user", "scopes": ["self", "custom:other:x"]}]
    configure_service(c)
    [user] = [r for r in c.JupyterHub.load_roles if r["name"] == "user"]
    assert user["scopes"] == ["self", "custom:other:x", "access:services!service=gpulab"]


def test_configure_service_refuses_a_second_service_of_the_same_name():
    c = existing_config()
    configure_service(c)
    with pytest.raises(ValueError, match="already"):
        configure_service(c)


def test_an_unmanaged_service_has_no_command_but_its_token():
    c = Config()
    configure_service(c, managed=False, api_token="s3cret")
    [svc] = c.JupyterHub.services
    assert "command" not in svc and svc["api_token"] == "s3cret"


# -- OpenAPI and the cookie secret ----------------------------------------------------------------


def test_openapi_documents_every_api_route():
    doc = openapi("/services/gpulab/")
    documented = {"/services/gpulab/api" + p for p in doc["paths"]}
    from jupyterhub_gpulab.service.web.courseapi import course_handlers

    routes = set()
    handlers = api_handlers("/services/gpulab/") + course_handlers("/services/gpulab/")
    for pattern, _ in handlers:
        path = pattern.replace("(?P<allocation_id>[^/]+)", "{id}").replace(
            "(?P<uuid>[^/]+)", "{uuid}"
        )
        path = path.replace("(?P<user>[^/]+)", "{user}").replace("(?P<name>[^/]*)", "{name}")
        path = path.replace("(?P<profile>[^/]+)", "{profile}").replace("(?P<node>[^/]+)", "{node}")
        path = path.replace("/(?P<slug>[a-z][a-z0-9-]{1,39})", "/{slug}")
        path = path.replace("\\.", ".").replace("api/?", "api/")
        if path.endswith("api/.*"):  # the catch-all: a 404 for any other path
            continue
        routes.add(path)
    assert routes == documented
    assert doc["servers"] == [{"url": "/services/gpulab/api"}]


def test_cookie_secret_is_created_private_and_kept(tmp_path):
    path = tmp_path / "gpulab_cookie_secret"
    first = read_cookie_secret(path)
    assert len(first) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_cookie_secret(path) == first


def test_the_hub_reads_the_cookie_secret_file_the_service_writes(tmp_path):
    # The hub derives each course's pre-start token from this file without loading the
    # service's classes; both must name the same file, set or not.
    from jupyterhub_gpulab.service.app import GPULabService

    c = Config()
    assert secret_file(c) == GPULabService(config=c).cookie_secret_file == "gpulab_cookie_secret"
    c.GPULabService.cookie_secret_file = str(tmp_path / "kept")
    assert secret_file(c) == GPULabService(config=c).cookie_secret_file == str(tmp_path / "kept")


# -- one wording for a slice: the spawn progress, the form, the user and admin pages ------------


def test_a_slice_reads_the_same_in_the_progress_the_form_and_the_pages():
    # The pages described a seat without its compute share and a whole GPU without its memory,
    # and the form said a seat's caps hold even where the host runs no MPS.
    from jupyterhub_gpulab.inventory.model import Slice, SliceKind, SliceRequest, isolation
    from jupyterhub_gpulab.spawner.form import form_rows

    made = {
        "gpu": Slice("GPU-1", SliceKind.GPU, "GPU-1", 2, "NVIDIA A40", 48 * GiB, "GPU-1"),
        "mig": Slice(
            "MIG-1", SliceKind.MIG, "GPU-2", 0, "NVIDIA A100", 5 * GiB, "MIG-1",
            share=1 / 7, mig_profile="1g.5gb",
        ),
        "shared": Slice(
            "GPU-3/seat-1", SliceKind.SHARED, "GPU-3", 1, "Tesla T4", 4 * GiB, "GPU-3",
            share=0.25, seat=1, seats=4,
        ),
    }  # fmt: skip
    for kind, s in made.items():
        row = slice_row(
            s.id, kind, device=s.device_uuid, index=s.device_index, name=s.device_name,
            mem=s.memory_bytes, mig_profile=s.mig_profile, seat=s.seat, seats=s.seats, share=s.share,
        )  # fmt: skip
        page = views.my_slice(alloc(1, "ann", s.id), row, {})
        level, sentence = isolation(kind)
        # the user page (my_slice) and the admin page (inventory_view, allocation_view) both
        # describe with views.describe_slice
        assert page["description"] == s.describe() == views.describe_slice(row)
        assert (
            (page["isolation"], page["isolation_detail"])
            == (level, sentence)
            == (s.isolation, sentence)
        )
        for mps in (True, False, None):
            said = isolation(kind, mps)[1]
            assert s.explain(mps) == f"{s.describe()} — {said}"
            req = SliceRequest(SliceKind(kind), mig_profile=s.mig_profile)
            profile = load_profiles([{"slug": "p", "display_name": "P", "image": "x",
                                      "slice": {"kind": kind, **({"mig_profile": s.mig_profile} if s.mig_profile else {})}}])  # fmt: skip
            [form_row] = form_rows(profile, lambda r: (1, 1), preselect=None, mps=mps)
            assert form_row.gives == f"{req.describe()} — {said}"
    assert "advisory" in isolation("shared", False)[1] and "MPS" in isolation("shared", True)[1]
    assert "advisory" not in isolation("shared", True)[1]


def test_the_service_asks_the_docker_engine_the_hub_asks(tmp_path, monkeypatch):
    """A hub on a Swarm reaches the manager through DOCKER_HOST; the service (Distribute,
    Collect) must ask that engine too, not the local socket JupyterHub's bare environment means
    (``This node is not a swarm manager``: a 500 on Distribute)."""
    for k in [k for k in os.environ if k.startswith("GPULAB_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("DOCKER_HOST", "unix:///var/run/gpulab-swarm/n1.sock")
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
    monkeypatch.setenv("DOCKER_CERT_PATH", "/etc/gpulab/docker-tls")
    monkeypatch.setenv("GPULAB_SITE", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "never passed on")
    c = Config()
    configure_service(c, config_file=tmp_path / "jupyterhub_config.py")
    [svc] = c.JupyterHub.services
    assert svc["environment"] == {
        "DOCKER_HOST": "unix:///var/run/gpulab-swarm/n1.sock",
        "DOCKER_TLS_VERIFY": "1",
        "DOCKER_CERT_PATH": "/etc/gpulab/docker-tls",
        "GPULAB_SITE": "x",
    }
