# jupyterhub-gpulab: a working default configuration.
#
# On a host WITH NVIDIA GPUs (driver + NVIDIA Container Toolkit) the lab is what NVML reports and
# containers get their slice through a Docker device request. On a host WITHOUT GPUs it serves a
# demo lab from a declared inventory (one A100 in MIG mode, one whole A40, one T4 split in seats)
# and attaches nothing (attach mode "env"), so every page and rule can be tried on a laptop.
#
# Run it:  ./scripts/demo.sh    (installs what is missing, builds the image, starts the hub)
# Check it: gpulab check-config -f jupyterhub_config.py
#
# Settings an admin changes are marked ADMIN. Environment variables override a few for the demo.
# The walk, top to bottom (each setting: the docs' configuration reference):
#   1. the hub and its proxy        where it listens, its state, restarts that keep servers
#   2. who logs in                  the demo's any-password login, or campus SSO (passed to 7)
#   3. the spawner                  images, homes, /dev/shm, container limits
#   4. the GPU lab                  the inventory (NVML, or the declared demo lab), profiles, quotas
#   5. the gpulab service           its cookie secret and the GPU-aware culler
#   6. courses                      the demo course, declared here
#   7. one call, configure(...)     sign-on, the service, metrics and courses, in that order
import os

import jupyterhub

from jupyterhub_gpulab.inventory import discover
from jupyterhub_gpulab.spawner.network import bridge_gateway

c = get_config()  # noqa: F821 (provided by JupyterHub's config loader)
here = os.path.dirname(os.path.abspath(__file__))
state_dir = os.environ.get("GPULAB_STATE_DIR", os.path.join(here, ".state"))
os.makedirs(state_dir, mode=0o700, exist_ok=True)  # databases and secrets: the hub's user only

# --- The hub and its proxy -------------------------------------------------------------------
# ADMIN: the public address. The proxy listens here; put TLS in front (or set ssl_cert/ssl_key).
c.JupyterHub.ip = os.environ.get("GPULAB_IP", "127.0.0.1")
c.JupyterHub.port = int(os.environ.get("GPULAB_PORT", "8000"))
# The hub's API listens on the host's address on the containers' Docker network (docker0's,
# 172.17.0.1 on a stock engine): every container reaches it there, and it is not exposed on the
# host's other interfaces as "0.0.0.0" would. ADMIN: set GPULAB_HUB_IP (or these two lines) if
# the containers join another network (c.DockerSpawner.network_name).
hub_ip = os.environ.get("GPULAB_HUB_IP") or bridge_gateway("bridge", default="172.17.0.1")
c.JupyterHub.hub_ip = hub_ip
c.JupyterHub.hub_connect_ip = hub_ip
c.JupyterHub.db_url = f"sqlite:///{state_dir}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = f"{state_dir}/jupyterhub_cookie_secret"
c.ConfigurableHTTPProxy.pid_file = f"{state_dir}/jupyterhub-proxy.pid"
c.JupyterHub.hub_port = int(os.environ.get("GPULAB_HUB_PORT", "8081"))
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{os.environ.get('GPULAB_PROXY_API_PORT', '8001')}"
# A hub restart (upgrade, config change) keeps users' servers and their GPU slices running. The
# proxy keeps routing while the hub is down; the restarted hub replaces it (a ~3 s gap).
c.JupyterHub.cleanup_servers = False
c.JupyterHub.cleanup_proxy = False
c.JupyterHub.allow_named_servers = True
c.JupyterHub.named_server_limit_per_user = 3

# --- Who logs in ---------------------------------------------------------------------------
# ADMIN: use your campus SSO in production (docs: admin/sso); groups then come from the
# provider's claims. configure(...) at the end of this file takes it, e.g. for Keycloak:
#   sso = {"provider": "keycloak", "issuer": "https://sso.example.edu/realms/campus",
#          "client_id": "jupyterhub", "client_secret": os.environ["OIDC_CLIENT_SECRET"],
#          "callback_url": "https://hub.example.edu/hub/oauth_callback",
#          "admin_groups": ["gpu-admins"], "refresh_age": "5m"}
# and JUPYTERHUB_CRYPT_KEY in the hub's environment (openssl rand -hex 32).
c.Authenticator.admin_users = {"admin"}
sso = None
if os.environ.get("GPULAB_DEMO_AUTH") == "oidc":
    # GPULAB_DEMO_AUTH=oidc ./scripts/demo.sh: the local provider of scripts/demo-idp.sh plays a
    # Keycloak realm (its endpoints, "/students"-style group paths); any password. The same
    # settings as for a campus Keycloak, only the issuer differs.
    _hub_url = f"http://{c.JupyterHub.ip}:{c.JupyterHub.port}"
    sso = {
        "provider": "keycloak",
        "issuer": os.environ.get("GPULAB_IDP_ISSUER", "http://127.0.0.1:9000/realms/campus"),
        "client_id": os.environ.get("GPULAB_IDP_CLIENT_ID", "jupyterhub"),
        "client_secret": os.environ.get("GPULAB_IDP_CLIENT_SECRET", "gpulab-demo-secret"),
        "callback_url": f"{_hub_url}/hub/oauth_callback",
        "admin_groups": ["gpu-admins"],
        "refresh_age": "1m",
    }
else:
    # The demo accepts any username with any password; "admin" is a JupyterHub admin.
    c.JupyterHub.authenticator_class = "dummy"
    c.Authenticator.allow_all = True
    # ADMIN: groups drive entitlement and quotas. With SSO the authenticator manages them (and
    # JupyterHub refuses load_groups).
    c.JupyterHub.load_groups = {
        "students": {"users": ["student1", "student2", "student3"]},
        "researchers": {"users": ["researcher1"]},
        "instructors": {"users": ["instructor1"]},
        # the demo course's roster and staff (its record: "Courses" below)
        "dl101": {"users": ["student1", "student2", "student3"]},
        "dl101-staff": {"users": ["instructor1"]},
    }

# --- The spawner -----------------------------------------------------------------------------
c.JupyterHub.spawner_class = "gpulab"  # jupyterhub_gpulab.GPUDockerSpawner
# ADMIN: the single-user images. images/build-image.sh builds them without a registry (docs:
# admin guide, "Framework images"): gpulab/base (JupyterLab and the scientific stack), gpulab/pytorch and
# gpulab/tensorflow on top, each in a "cpu" and a "cuda" variant. This host's variant is chosen
# below (cuda where NVML sees GPUs); GPULAB_IMAGE puts one image on every profile instead.
hub_version = jupyterhub.__version__
c.DockerSpawner.pull_policy = "never"  # no registry here; use "ifnotpresent" with one
c.DockerSpawner.start_timeout = 120
c.DockerSpawner.http_timeout = 60
# ADMIN: persistent home directories (one Docker volume per user). Containers are always removed
# when their server stops (c.DockerSpawner.remove = False is refused): keep files in volumes.
# Courses pull their notebooks into these homes and collect assignments from them.
home_volume = os.environ.get("GPULAB_HOME_VOLUME", "gpulab-home-{username}")
c.DockerSpawner.volumes = {home_volume: "/home/jovyan"}
# ADMIN: the size of /dev/shm (PyTorch DataLoader workers need more than Docker's 64 MiB);
# a profile's "shm_size" overrides it.
c.GPUDockerSpawner.shm_size = "1GiB"
# Every container runs with no-new-privileges, no Linux capabilities and at most 4096 processes
# and threads; ADMIN: change the lab-wide limit, or give one profile "pids_limit" / "cap_add":
# c.GPUDockerSpawner.pids_limit = 4096

# --- The GPU lab ---------------------------------------------------------------------------
c.GPULab.db_url = os.environ.get("GPULAB_DB_URL", f"sqlite:///{state_dir}/gpulab.sqlite")

found = discover()  # what NVML sees on this host (nothing, with a warning, without a driver)
demo = not found.devices or bool(os.environ.get("GPULAB_DEMO"))
if not demo:
    c.GPULab.inventory_source = "nvml"
    # ADMIN: "device_request" needs the NVIDIA Container Toolkit; "cdi" for Docker >= 25 with a
    # CDI spec; "env" when the default Docker runtime is nvidia.
    c.GPUDockerSpawner.attach_mode = os.environ.get("GPULAB_ATTACH_MODE", "device_request")
    # ADMIN: split a GPU into seats (soft caps, or MPS caps with c.GPUDockerSpawner.mps = True):
    # c.GPULab.shared_devices = {"GPU-...": {"seats": 4, "memory_per_seat": "4GiB"}}
else:
    # Demo lab: declared devices, no GPU attached (the engine has no NVIDIA runtime here).
    c.GPULab.inventory_source = "declared"
    # Nothing reports utilisation for declared devices: count it as idle, so the GPU-idle rule
    # shows itself (a demo server is warned, then stopped, a few minutes after it starts). A
    # real lab keeps the default "busy": a GPU the culler cannot see is never called idle.
    c.GPULabService.unknown_utilization = "idle"
    c.GPUDockerSpawner.attach_mode = os.environ.get("GPULAB_ATTACH_MODE", "env")
    c.GPULab.inventory = [
        {
            "uuid": "GPU-0d3a7a3c-5b7e-4c1e-9d6f-a10000000000",
            "index": 0,
            "name": "NVIDIA A100-SXM4-80GB",
            "memory": "80GiB",
            # what images are matched against (a CUDA 13 image needs >= 7.5 and driver 580)
            "compute_capability": "8.0",
            "driver_version": "580.95.05",
            "mig": [
                {"uuid": "MIG-1b2c3d4e-0000-4000-8000-000000000001", "profile": "3g.40gb"},
                {"uuid": "MIG-1b2c3d4e-0000-4000-8000-000000000002", "profile": "2g.20gb"},
                {"uuid": "MIG-1b2c3d4e-0000-4000-8000-000000000003", "profile": "1g.10gb"},
                {"uuid": "MIG-1b2c3d4e-0000-4000-8000-000000000004", "profile": "1g.10gb"},
            ],
        },
        {
            "uuid": "GPU-0d3a7a3c-5b7e-4c1e-9d6f-a40000000001",
            "index": 1,
            "name": "NVIDIA A40",
            "memory": "48GiB",
            "compute_capability": "8.6",
            "driver_version": "580.95.05",
        },
        {
            "uuid": "GPU-0d3a7a3c-5b7e-4c1e-9d6f-740000000002",
            "index": 2,
            "name": "Tesla T4",
            "memory": "16GiB",
            "compute_capability": "7.5",
            "driver_version": "580.95.05",
            "shared": {"seats": 4, "memory_per_seat": "4GiB", "compute_share": 0.25},
        },
    ]

variant = os.environ.get("GPULAB_IMAGE_VARIANT") or ("cpu" if demo else "cuda")
images = {
    name: os.environ.get("GPULAB_IMAGE") or f"gpulab/{name}:{hub_version}-{variant}"
    for name in ("pytorch", "tensorflow")
}
images["base"] = os.environ.get("GPULAB_IMAGE") or f"gpulab/base:{hub_version}"

# ADMIN: how long a GPU may sit idle (below 5 %) before its server is stopped, how long a server
# may go unused, and the longest session. The demo counts its declared GPUs as idle (nothing
# measures them), so it stops every GPU server this long after its start; GPULAB_DEMO_GPU_IDLE=3m
# shows the culler's warning and stop sooner (a course's lead_minutes must stay below it).
gpu_idle = os.environ.get("GPULAB_DEMO_GPU_IDLE", "20m") if demo else "30m"

# ADMIN: what users pick. Every profile may set image, cpu_limit (cores), mem_limit, shm_size, env, groups,
# the culler's idle_timeout, gpu_idle_timeout, max_age, and its container's pids_limit and
# cap_add (Docker's default capabilities only, e.g. ["CHOWN", "SETUID", "SETGID"] for an image
# that starts as root; SYS_ADMIN and privileged are refused).
c.GPULab.profiles = [
    {
        "slug": "pytorch-mig",
        "display_name": "PyTorch (MIG 1g.10gb)",
        "description": "A hardware-isolated slice of an A100: right for coursework.",
        "image": images["pytorch"],
        "slice": {"kind": "mig", "mig_profile": "1g.10gb"},
        "cpu_limit": 2,
        "mem_limit": "8G",
        "default": True,
        "gpu_idle_timeout": gpu_idle,
        "idle_timeout": "1h",
        "max_age": "8h",
    },
    {
        "slug": "tensorflow-seat",
        "display_name": "TensorFlow (shared T4 seat, 4 GiB)",
        "description": "A quarter of a T4, shared with three others; TensorFlow keeps to 4 GiB.",
        "image": images["tensorflow"],
        "slice": {"kind": "shared"},
        "cpu_limit": 2,
        "mem_limit": "8G",
        "gpu_idle_timeout": gpu_idle,
        "idle_timeout": "1h",
        "max_age": "8h",
    },
    {
        "slug": "pytorch-a40",
        "display_name": "PyTorch (full A40, 48 GiB)",
        "description": "A whole GPU for research runs.",
        "image": images["pytorch"],
        "shm_size": "8GiB",
        "slice": {"kind": "gpu", "min_memory": "40GiB"},
        "cpu_limit": 8,
        "mem_limit": "64G",
        "groups": ["researchers"],
        "gpu_idle_timeout": "1h",
        "idle_timeout": "2h",
        "max_age": "3d",
    },
    {
        "slug": "cpu",
        "display_name": "CPU only",
        "description": "No GPU: for reading, writing and small data.",
        "image": images["base"],
        "cpu_limit": 1,
        "mem_limit": "4G",
        "idle_timeout": "2h",
    },
]

# ADMIN: quotas per group. How several groups combine: see jupyterhub_gpulab/lab/policy.py.
# gpu_hours: weighted GPU-hours per user and calendar period ("day", "week" or "term"): a whole
# GPU hour counts 1, a 1g.10gb MIG hour 1/7, a seat its compute share; CPU profiles count nothing.
# 5 GPU-hours a week is 35 hours of a 1g.10gb slice. max_session caps a profile's max_age.
c.GPULab.group_policies = {
    "students": {
        "profiles": ["pytorch-mig", "tensorflow-seat", "cpu"],
        "max_slices_per_user": 1,
        "max_slices": 6,
        "gpu_hours": 5,
        "period": "week",
        "max_session": "8h",
    },
    "instructors": {"max_slices_per_user": 2},
    "researchers": {"max_slices_per_user": 2, "priority": 10},
}
# Users in none of those groups:
c.GPULab.default_policy = {"profiles": ["tensorflow-seat", "cpu"], "max_slices_per_user": 1}
# ADMIN: periods start at local midnight / Monday 00:00 in this time zone.
# c.GPULab.quota_timezone = "Europe/Berlin"
# ADMIN: for "period": "term" budgets, the term's first day and the day after its last:
# c.GPULab.term_start = "2026-09-07"
# c.GPULab.term_end = "2026-12-19"

# --- The gpulab service: admin page, user page, JSON API ----------------------------------
# Runs as a hub-managed service at /services/gpulab/ (user page: /services/gpulab/me), set up by
# configure(...) at the end of this file. It reads this same file and the same ledger; spawns
# keep working while it is down. Its cookie secret is written when it (or the hub) first starts.
c.GPULabService.cookie_secret_file = f"{state_dir}/gpulab_cookie_secret"
# The GPU-aware culler (docs: admin guide, fair use). ADMIN: try new timeouts with cull_dry_run = True.
if demo:
    # a pass every 20 s and warnings a minute ahead, so the demo's 3-minute timeout shows
    c.GPULabService.cull_every = "20s"
    c.GPULabService.cull_warn_before = "1m"
# else the defaults: a pass every minute, warnings 10 minutes ahead
# c.GPULabService.cull_dry_run = True

# --- Courses ----------------------------------------------------------------------------------
# Courses (docs: instructor guide): admins create them on /services/gpulab/courses, staff run them
# from the course page. ADMIN: declare courses here too (c.GPULabCourses.courses = [{...}]).
c.GPULabCourses.home_volume = home_volume
c.GPULabCourses.course_volume = os.environ.get("GPULAB_COURSE_VOLUME", "gpulab-course-{slug}")
if demo:
    # instructor1 runs it from /services/gpulab/courses/dl101: roster, content, Start all, collect.
    # Its groups come from load_groups above, or with GPULAB_DEMO_AUTH=oidc from the provider's
    # claims (scripts/idp/demo-users.json: "/dl101", "/dl101-staff"), synced at each login.
    c.GPULabCourses.courses = [
        {
            "slug": "dl101",
            "title": "Deep learning 101 (demo)",
            "term": "demo",
            "roster_group": "dl101",
            "staff_group": "dl101-staff",
            # a T4 seat each: the demo's four seats hold the roster of three (two MIG slices would
            # not), and the default policy opens it to the roster group (a course is saved only
            # if its roster group may use its profile)
            "profiles": ["tensorflow-seat"],
            "assignments": [{"name": "hw1", "due": "2030-01-15T23:59"}],
        }
    ]
# dcgm-exporter, run with --hpc-job-mapping-dir on this folder, names each GPU's holder.
c.GPULab.dcgm_job_mapping_dir = os.environ.get("GPULAB_DCGM_JOB_MAP", "")

# --- One call: sign-on, the service, metrics, courses -----------------------------------------
# In that order, and with no I/O here (this file also runs in the service and in `gpulab`): the
# courses' staff roles and pre-start tokens are made when the hub starts, from the ledger and
# the service's cookie secret. JupyterHub admins hold custom:gpulab:admin; ADMIN: name groups for
# more admins and for read-only viewers.
from jupyterhub_gpulab import configure  # noqa: E402

configure(
    c,
    config_file=__file__,
    # on the containers' network like the hub's API: servers read their slice and GPU-hours
    # here (JupyterLab's status bar); the proxy routes /services/gpulab/ to it for browsers
    url=os.environ.get("GPULAB_SERVICE_URL", f"http://{hub_ip}:10101"),
    admin_groups=["gpu-admins"],
    reader_groups=["instructors"],
    sso=sso,
    # Prometheus scrapes /hub/metrics and /services/gpulab/metrics with this token (docs:
    # admin/metrics); none: no Prometheus service
    prometheus_token=os.environ.get("GPULAB_PROMETHEUS_TOKEN"),
)
