"""The lab gpulab was first described for: one Tesla P40 (24 GB, Pascal, compute capability 6.1)
shared by 24 students, one capped seat each, PyTorch from the cuda12-legacy image (CUDA 12.6
wheels that still carry sm_60 code; see the admin guide's "Framework images") or TensorFlow
from the cuda image (CUDA 12 wheels built from sm_60), and one course, dl101, whose roster
starts course servers on the PyTorch seat.

On the P40 host:  ``gpulab check-config -f examples/p40-lab/jupyterhub_config.py`` then
``jupyterhub -f examples/p40-lab/jupyterhub_config.py``. Set ``P40_UUID`` to the card's GPU UUID
(``nvidia-smi -L``). Without a P40 (to read the layout, or in the tests),
``GPULAB_P40_DECLARED=1`` declares the card instead of reading it from NVML.

Why 640 MiB seats and not 1 GiB: each seat's process also holds a CUDA context outside the
framework's cap (~300 MiB with CUDA lazy loading; ``inventory/slices.py`` says where the figure
comes from), so 24 seats of 1 GiB need ~31 GiB of a 24 GiB card; ``check-config`` says so and
names the largest seat that fits (24 of 724 MiB on the declared 24 GiB). A real P40 reports less
than 24 GiB to NVML, less again with ECC on (ECC's check bits take about 1/16 of its GDDR5,
leaving ~22.4 GiB): 24 × (640 MiB + 300 MiB) = ~22 GiB fits either way, where 700 MiB fits
only with ECC off. ``check-config`` on the host reads the card's own figure and says what fits.
"""

import os

import jupyterhub

import jupyterhub_gpulab

c = get_config()  # noqa: F821 (provided by JupyterHub's config loader)
here = os.path.dirname(os.path.abspath(__file__))
state = os.environ.get("GPULAB_STATE_DIR", os.path.join(here, ".state"))
os.makedirs(state, mode=0o700, exist_ok=True)  # ledger and secrets: the hub's user only

# 1. The card and its 24 seats.
P40_UUID = os.environ.get("P40_UUID", "GPU-5a1d0c40-0000-4000-8000-000000000040")
SEATS = {"seats": 24, "memory_per_seat": "640MiB", "compute_share": 1 / 24}
if os.environ.get("GPULAB_P40_DECLARED"):
    c.GPULab.inventory_source = "declared"
    c.GPULab.inventory = [
        {
            "uuid": P40_UUID,
            "index": 0,
            "name": "Tesla P40",
            "memory": "24GiB",
            "compute_capability": "6.1",
            "driver_version": "580.95.05",  # R580: Pascal's last driver branch
            "shared": SEATS,
        }
    ]
else:
    c.GPULab.inventory_source = "nvml"
    c.GPULab.shared_devices = {P40_UUID: SEATS}
# A layout that does not fit is an error, on the declared twin and on NVML's P40 alike:
# check-config fails naming what fits, and no server starts until it does (not a lecture's
# worth of out-of-memory errors). NVML counts the card's usable memory, less than 24 GiB with
# ECC on: run check-config on the host, it names the seat that fits there.
c.GPULab.seat_overcommit = "refuse"
c.GPULab.db_url = f"sqlite:///{state}/gpulab.sqlite"

# 2. What a student may pick: a PyTorch seat, a TensorFlow seat, or CPU only. Both framework
# images carry labels (CUDA major, lowest compute capability, driver) that the image gate and
# check-config read: the cuda12-legacy PyTorch and the CUDA 12 TensorFlow are let onto a 6.1
# card, the CUDA 13 PyTorch (gpulab/pytorch:<v>-cuda) is not.
hub = jupyterhub.__version__  # the images are tagged with it (images/build-image.sh)
c.GPULab.profiles = [
    {
        "slug": "pytorch-seat",
        "display_name": "PyTorch (P40 seat, 640 MiB for tensors)",
        "image": f"gpulab/pytorch:{hub}-cuda12-legacy",
        "slice": {"kind": "shared"},
        "default": True,
    },
    {
        "slug": "tensorflow-seat",
        "display_name": "TensorFlow (P40 seat, 640 MiB for tensors)",
        "image": f"gpulab/tensorflow:{hub}-cuda",
        "slice": {"kind": "shared"},
    },
    {"slug": "cpu", "display_name": "CPU only", "image": f"gpulab/base:{hub}"},
]
ONE_SEAT = {"max_slices_per_user": 1}  # per person, all their servers (course ones too)
c.GPULab.group_policies = {
    "students": {"profiles": ["pytorch-seat", "tensorflow-seat", "cpu"], **ONE_SEAT},
    # a course's roster must be able to pick the course's profile on its own (instructor guide)
    "dl101": {"profiles": ["pytorch-seat", "cpu"], **ONE_SEAT},
}
c.GPULab.default_policy = {"profiles": ["cpu"], **ONE_SEAT}

# 3. A course: its roster (dl101) gets course servers on the PyTorch seat; its staff
# (dl101-staff) run it from /services/gpulab/courses/dl101 (content, sessions, assignments: the
# instructor guide). The roster's seats come out of the same 24: a course server is a student's
# one seat.
c.JupyterHub.allow_named_servers = True  # course servers are named servers
c.GPULabCourses.home_volume = "gpulab-home-{username}"  # the same as DockerSpawner.volumes
c.GPULabCourses.staff_owner = [1000, 1000]  # the framework images' user (uid, gid)
c.GPULabCourses.courses = [
    {
        "slug": "dl101",
        "title": "Deep learning 101 on the P40",
        "term": "2026-fall",
        "roster_group": "dl101",
        "staff_group": "dl101-staff",
        "profiles": ["pytorch-seat"],
    }
]

# 4. The hub: campus sign-on would go here (configure(sso=...)); the demo's dummy login otherwise.
c.JupyterHub.spawner_class = "gpulab"
c.GPUDockerSpawner.attach_mode = os.environ.get("GPULAB_ATTACH_MODE", "device_request")
c.DockerSpawner.volumes = {"gpulab-home-{username}": "/home/jovyan"}
c.JupyterHub.db_url = f"sqlite:///{state}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = f"{state}/jupyterhub_cookie_secret"
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allow_all = True
c.JupyterHub.load_groups = {
    "students": {"users": [f"student{i}" for i in range(1, 25)]},
    "dl101": {"users": [f"student{i}" for i in range(1, 13)]},
    "dl101-staff": {"users": ["instructor1"]},
}
c.Authenticator.admin_users = {"admin"}

# 5. Everything else in one call: the gpulab service (pages, API, culler), metrics, courses.
jupyterhub_gpulab.configure(c, config_file=__file__)
