# jupyterhub-gpulab: a lab, top to bottom. Run it: ./scripts/demo.sh; check it: gpulab check-config.
# With NVIDIA GPUs (driver + Container Toolkit) the lab is what NVML reports; without, a demo lab
# of declared devices (an A100 in MIG mode, an A40, a T4 in seats) that attaches nothing.
# ADMIN marks what an admin changes; GPULAB_* variables change a few for the demo. This file also
# runs in the gpulab service and in `gpulab`: it does no I/O (jupyterhub_gpulab/hub/demo.py).
import os

import jupyterhub

from jupyterhub_gpulab import configure
from jupyterhub_gpulab.hub import demo
from jupyterhub_gpulab.units import parse_seconds

c = get_config()  # noqa: F821 (provided by JupyterHub's config loader)
env = os.environ.get
host = demo.Host()  # the demo lab where GPULAB_DEMO is set or NVML sees no GPU (asked later)
state = demo.StateDir(env("GPULAB_STATE_DIR", os.path.join(os.path.dirname(__file__), ".state")))

# 1. The hub. ADMIN: the public address (TLS in front). Its API listens on the containers' network
# (docker0's address: scripts/demo.sh asks the engine), not on every interface.
c.JupyterHub.ip = env("GPULAB_IP", "127.0.0.1")
c.JupyterHub.port = int(env("GPULAB_PORT", "8000"))
hub_ip = env("GPULAB_HUB_IP", "172.17.0.1")
c.JupyterHub.hub_ip = c.JupyterHub.hub_connect_ip = hub_ip
c.JupyterHub.hub_port = int(env("GPULAB_HUB_PORT", "8081"))
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{env('GPULAB_PROXY_API_PORT', '8001')}"
c.JupyterHub.db_url = state.sqlite("jupyterhub.sqlite")
c.JupyterHub.cookie_secret_file = state.file("jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.pid_file = state.file("jupyterhub-proxy.pid")
c.JupyterHub.cleanup_servers = c.JupyterHub.cleanup_proxy = False  # restarts keep servers
c.JupyterHub.allow_named_servers, c.JupyterHub.named_server_limit_per_user = True, 3

# 2. Who logs in. ADMIN: campus SSO in production (docs: admin/sso): configure(sso={"provider":
# "keycloak", "issuer": ..., "client_id": ..., ...}) below; groups then come from its claims. The
# demo: any password, or (GPULAB_DEMO_AUTH=oidc) the local Keycloak-like scripts/demo-idp.sh.
c.Authenticator.admin_users = {"admin"}
sso = None
if env("GPULAB_DEMO_AUTH") == "oidc":
    sso = demo.local_sso(f"http://{c.JupyterHub.ip}:{c.JupyterHub.port}")
else:
    c.JupyterHub.authenticator_class = "dummy"
    c.Authenticator.allow_all = True
    c.JupyterHub.load_groups = demo.GROUPS  # ADMIN: groups drive entitlement and quotas

# 3. The spawner: one container per server, holding its slice. ADMIN: images (images/build-image.sh
# builds them without a registry), homes (a volume per user; containers are always removed).
c.JupyterHub.spawner_class = "gpulab"
c.DockerSpawner.pull_policy = "never"  # "ifnotpresent" with a registry
c.DockerSpawner.start_timeout, c.DockerSpawner.http_timeout = 120, 60
home_volume = env("GPULAB_HOME_VOLUME", "gpulab-home-{username}")
c.DockerSpawner.volumes = {home_volume: "/home/jovyan"}
c.GPUDockerSpawner.shm_size = "1GiB"  # PyTorch's DataLoader needs more than Docker's 64 MiB
# ADMIN: "device_request" (NVIDIA Container Toolkit), "cdi" (Docker >= 25), "env" (attach nothing)
c.GPUDockerSpawner.attach_mode = env("GPULAB_ATTACH_MODE") or host.pick("device_request", "env")

# 4. The GPU lab: its devices, what users pick, the groups' quotas.
c.GPULab.db_url = env("GPULAB_DB_URL") or state.sqlite("gpulab.sqlite")
c.GPULab.inventory_source = host.pick("nvml", "declared")
c.GPULab.inventory = host.pick([], demo.INVENTORY)
# ADMIN: seats: c.GPULab.shared_devices = {"GPU-...": {"seats": 4, "memory_per_seat": "3.5GiB"}}
#   (each seat's process also holds a CUDA context beside its cap: 4 x 4 GiB overcommit a T4)


def profiles(variant: str, gpu_idle: str) -> list[dict]:
    """ADMIN: what users pick (the docs list every key); ``variant``: the images' cpu or cuda."""
    v = f"{jupyterhub.__version__}-{env('GPULAB_IMAGE_VARIANT') or variant}"
    image = {n: env("GPULAB_IMAGE") or f"gpulab/{n}:{v}" for n in ("pytorch", "tensorflow")}
    limits = {"cpu_limit": 2, "mem_limit": "8G", "idle_timeout": "1h", "max_age": "8h"}
    return [
        {"slug": "pytorch-mig", "display_name": "PyTorch (MIG 1g.10gb)", "default": True,
         "description": "A hardware-isolated slice of an A100: right for coursework.",
         "image": image["pytorch"], "slice": {"kind": "mig", "mig_profile": "1g.10gb"},
         "gpu_idle_timeout": gpu_idle, **limits},
        {"slug": "tensorflow-seat", "display_name": "TensorFlow (shared T4 seat, 3.5 GiB)",
         "description": "A quarter of a T4, shared with three others; TensorFlow keeps to 3.5 GiB.",
         "image": image["tensorflow"], "slice": {"kind": "shared"},
         "gpu_idle_timeout": gpu_idle, **limits},
        {"slug": "pytorch-a40", "display_name": "PyTorch (full A40, 48 GiB)",
         "description": "A whole GPU for research runs.", "image": image["pytorch"],
         "slice": {"kind": "gpu", "min_memory": "40GiB"}, "shm_size": "8GiB", "cpu_limit": 8,
         "mem_limit": "64G", "groups": ["researchers"], "gpu_idle_timeout": "1h",
         "idle_timeout": "2h", "max_age": "3d"},
        {"slug": "cpu", "display_name": "CPU only", "cpu_limit": 1, "mem_limit": "4G",
         "description": "No GPU: for reading, writing and small data.", "idle_timeout": "2h",
         "image": env("GPULAB_IMAGE") or f"gpulab/base:{jupyterhub.__version__}"},
    ]  # fmt: skip


# The demo's GPUs report no utilisation: it counts them idle (a real lab: busy), so its culler
# shows itself a few minutes after a start (GPULAB_DEMO_GPU_IDLE=3m: sooner).
demo_idle = env("GPULAB_DEMO_GPU_IDLE", "20m")
c.GPULab.profiles = host.pick(profiles("cuda", "30m"), profiles("cpu", demo_idle))
c.GPULabService.unknown_utilization = host.pick("busy", "idle")
# ADMIN: quotas per group (docs: fair use). gpu_hours weigh a slice: a GPU 1, a 1g.10gb MIG 1/7.
c.GPULab.group_policies = {
    "students": {"profiles": ["pytorch-mig", "tensorflow-seat", "cpu"], "max_slices_per_user": 1,
                 "max_slices": 6, "gpu_hours": 5, "period": "week", "max_session": "8h"},
    "instructors": {"max_slices_per_user": 2},
    "researchers": {"max_slices_per_user": 2, "priority": 10},
}  # fmt: skip
c.GPULab.default_policy = {"profiles": ["tensorflow-seat", "cpu"], "max_slices_per_user": 1}
# ADMIN: c.GPULab.quota_timezone, term_start/term_end ("term" budgets), dcgm-exporter's job map:
c.GPULab.dcgm_job_mapping_dir = env("GPULAB_DCGM_JOB_MAP", "")

# 5. The gpulab service (/services/gpulab/: admin page, My GPU, the API) and its GPU-aware culler
# (ADMIN: try timeouts with c.GPULabService.cull_dry_run = True). Spawns work while it is down.
c.GPULabService.cookie_secret_file = state.file("gpulab_cookie_secret")
c.GPULabService.cull_every = host.pick("1m", "20s")
c.GPULabService.cull_warn_before = host.pick("10m", "1m")

# 6. Courses (docs: instructor guide): admins create them on /services/gpulab/courses.
c.GPULabCourses.home_volume = home_volume
c.GPULabCourses.course_volume = env("GPULAB_COURSE_VOLUME", "gpulab-course-{slug}")
# The demo course's servers start lead_minutes (15) before a session and wait GPU-idle for it:
# the lead must be shorter than its profile's gpu_idle_timeout, so a short demo idle shortens it.
demo_lead = min(15, max(1, parse_seconds(demo_idle) // 60 - 1))
c.GPULabCourses.courses = host.pick([], [{**demo.COURSE, "lead_minutes": demo_lead}])

# 7. One call: sign-on, the service, metrics, courses, in that order; the courses' roles and
# pre-start tokens are made when the hub starts. ADMIN: groups of gpulab admins and readers.
configure(
    c, config_file=__file__, sso=sso, admin_groups=["gpu-admins"], reader_groups=["instructors"],
    url=env("GPULAB_SERVICE_URL", f"http://{hub_ip}:10101"),  # the containers reach it there too
    prometheus_token=env("GPULAB_PROMETHEUS_TOKEN"),  # scrapes /hub/metrics and the service's
)  # fmt: skip
