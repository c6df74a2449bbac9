"""What a single-user image needs of the GPU it lands on: its labels, read and written here.

Pure logic, no I/O. ``images/build-image.sh`` writes the labels (:mod:`.imagelabels`, from the
image's lock file, what the installed framework says of its build, and the CUDA facts); the
spawner's claim, the spawn form and ``gpulab check-config`` read them back
(:func:`requirements_from_labels`) and narrow a profile's slice request to the devices the image
can use (:meth:`ImageRequirements.restrict`, then :meth:`~..inventory.model.SliceRequest.matches`
and its SQL twin, the one rule). An image without these labels (any image gpulab did not
build) requires nothing: every slice may serve it.

Labels (all strings):

- ``org.jupyter.gpulab.image``: ``base``, ``pytorch``, ``tensorflow``;
  ``org.jupyter.gpulab.variant``: ``cpu``, ``cuda`` or ``cuda12-legacy`` (CUDA 12.6, from sm_50);
- ``org.jupyter.gpulab.framework.<name>``: the version of each framework in the image (``torch``,
  ``torchvision``, ``tensorflow``, ``keras``, ``jupyterlab``, ``jupyterhub``);
- ``org.jupyter.gpulab.cuda``: the CUDA major version its libraries need (absent: none);
- ``org.jupyter.gpulab.cuda.min-driver``: the lowest NVIDIA driver (``"580.65.06"``);
- ``org.jupyter.gpulab.cuda.min-compute-capability``: the lowest compute capability (``"7.5"``);
- ``org.jupyter.gpulab.cuda.max-compute-capability``: the newest architecture the build carries
  machine code for when it carries no PTX (``"9.0"`` for sm_50 … sm_90): a GPU of a later major
  (Blackwell's 10.0, 12.0) cannot run it; absent (PTX, which the driver compiles for newer GPUs,
  or an image labelled before it existed): no maximum;
- ``org.jupyter.gpulab.seat-cap``: ``framework`` when the image caps a shared seat's memory in
  its frameworks (``images/site/gpulab_seatcap.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from ..inventory.model import Slice, SliceRequest, format_version, parse_version

PREFIX = "org.jupyter.gpulab."
LABEL_IMAGE = PREFIX + "image"
LABEL_VARIANT = PREFIX + "variant"
LABEL_FRAMEWORK = PREFIX + "framework."
LABEL_CUDA = PREFIX + "cuda"
LABEL_MIN_DRIVER = PREFIX + "cuda.min-driver"
LABEL_MIN_CC = PREFIX + "cuda.min-compute-capability"
LABEL_MAX_CC = PREFIX + "cuda.max-compute-capability"
LABEL_SEAT_CAP = PREFIX + "seat-cap"

#: Packages whose version an image's labels state, when its lock file pins them.
FRAMEWORKS = ("torch", "torchvision", "tensorflow", "tensorflow-cpu", "keras", "jax", "jupyterlab", "jupyterhub")  # fmt: skip


@dataclass(frozen=True)
class ImageRequirements:
    """What an image needs of a GPU: ``cuda_major`` (``None``: no CUDA libraries, any device or
    none), ``min_driver``, ``min_compute_capability`` and ``max_compute_capability`` (the newest
    architecture of a build without PTX: its major is the last it runs on) as integer tuples,
    ``frameworks``
    (``{"torch": "2.13.0"}``) and ``seat_cap`` (``True``: the frameworks cap a seat's memory)."""

    image: str = ""
    cuda_major: int | None = None
    min_driver: tuple[int, ...] | None = None
    min_compute_capability: tuple[int, int] | None = None
    max_compute_capability: tuple[int, int] | None = None
    frameworks: Mapping[str, str] = field(
        default_factory=lambda: MappingProxyType({}), hash=False, compare=False
    )
    seat_cap: bool = False

    @property
    def needs_gpu_facts(self) -> bool:
        return (
            self.min_driver is not None
            or self.min_compute_capability is not None
            or self.max_compute_capability is not None
        )

    def restrict(self, request: SliceRequest) -> SliceRequest:
        """``request`` narrowed to the devices this image can use (unchanged for no GPU or no
        requirement)."""
        if request.kind is None or not self.needs_gpu_facts:
            return request
        return replace(
            request,
            min_driver=self.min_driver,
            min_compute_capability=self.min_compute_capability,
            max_compute_capability=self.max_compute_capability,
        )

    def describe(self) -> str:
        """``"CUDA 13 needs NVIDIA driver >= 580.65.06 and compute capability >= 7.5"``; with a
        maximum ``"… and compute capability 5.0 to 9.x (built up to sm_90, no PTX)"``."""
        needs = []
        if self.min_driver:
            needs.append(f"NVIDIA driver >= {format_version(self.min_driver)}")
        low, top = self.min_compute_capability, self.max_compute_capability
        if top:
            # a cubin for sm_XY runs on X.Y and later minors of X: the major is the bound
            span = f"{format_version(low)} to " if low else "up to "
            needs.append(
                f"compute capability {span}{top[0]}.x (built up to sm_{top[0]}{top[1]}, no PTX)"
            )
        elif low:
            needs.append(f"compute capability >= {format_version(low)}")
        head = f"CUDA {self.cuda_major}" if self.cuda_major else "its CUDA libraries"
        return f"{head} needs {' and '.join(needs)}" if needs else "no particular GPU"


def requirements_from_labels(image: str, labels: Mapping[str, str] | None) -> ImageRequirements:
    """The requirements an image's labels state; none for an image without gpulab's labels.
    Raises ``ValueError`` naming the label for a malformed value (a config error)."""
    labels = labels or {}

    def version(key: str) -> tuple[int, ...] | None:
        raw = labels.get(key)
        if raw in (None, ""):
            return None
        try:
            return parse_version(raw)
        except ValueError:
            raise ValueError(
                f"image {image}: label {key}={raw!r} is not a version such as '7.5'"
            ) from None

    cuda = labels.get(LABEL_CUDA) or None
    if cuda is not None and not cuda.isdigit():
        raise ValueError(f"image {image}: label {LABEL_CUDA}={cuda!r} is not a CUDA major version")
    cc, top = version(LABEL_MIN_CC), version(LABEL_MAX_CC)
    for key, value in ((LABEL_MIN_CC, cc), (LABEL_MAX_CC, top)):
        if value is not None and len(value) != 2:
            raise ValueError(f"image {image}: label {key} must be major.minor, e.g. '7.5'")
    return ImageRequirements(
        image=image,
        cuda_major=int(cuda) if cuda else None,
        min_driver=version(LABEL_MIN_DRIVER),
        min_compute_capability=cc,  # type: ignore[arg-type]
        max_compute_capability=top,  # type: ignore[arg-type]
        frameworks=MappingProxyType(
            {
                k[len(LABEL_FRAMEWORK) :]: v
                for k, v in labels.items()
                if k.startswith(LABEL_FRAMEWORK)
            }
        ),
        seat_cap=labels.get(LABEL_SEAT_CAP) == "framework",
    )


def device_problem(
    req: ImageRequirements,
    device: str,
    compute_capability: tuple[int, int] | None,
    driver_version: tuple[int, ...] | None,
) -> str | None:
    """Why the GPU ``device`` (``"GPU 0 (Tesla P40)"``) cannot serve the image, naming both, or
    ``None`` when it can or its facts are unknown (then the gate cannot judge and lets it be)."""
    short = []
    cc = compute_capability
    if cc is not None and (
        (req.min_compute_capability and cc < req.min_compute_capability)
        or (req.max_compute_capability and cc[0] > req.max_compute_capability[0])
    ):
        short.append(f"compute capability {format_version(cc)}")
    if req.min_driver and driver_version is not None and driver_version < req.min_driver:
        short.append(f"driver {format_version(driver_version)}")
    if not short:
        return None
    return (
        f"image {req.image} ({req.describe()}) cannot run on {device}: it has {' and '.join(short)}"
    )


def gate_report(
    req: ImageRequirements, request: SliceRequest, slices: Iterable[Slice]
) -> tuple[int, int, list[str]]:
    """``(servable, matching, problems)`` for a profile asking ``request`` (its own, without
    the image's needs) with an image needing ``req``: how many of the inventory's ``slices``
    match the profile and can run the image, how many match it at all, and one sentence per
    device that cannot (:func:`device_problem`, naming the image and the device)."""
    mine = [s for s in slices if request.unrestricted.matches(s)]
    restricted = req.restrict(request.unrestricted)
    servable = [s for s in mine if restricted.matches(s)]
    problems: dict[str, str] = {}
    for s in mine:
        if s in servable or s.device_uuid in problems:
            continue
        where = f"GPU {s.device_index} ({s.device_name})"
        problem = device_problem(req, where, s.compute_capability, s.driver_version)
        if problem:
            problems[s.device_uuid] = problem
    return len(servable), len(mine), list(problems.values())


def unservable(
    req: ImageRequirements, request: SliceRequest, slices: Iterable[Slice]
) -> str | None:
    """The sentence for a user and an admin when no slice the profile may get can run its
    image (``None`` when one can, or when the profile matches no slice at all)."""
    servable, matching, problems = gate_report(req, request, slices)
    if servable or not matching or not problems:
        return None
    return (
        "No GPU this profile may use can run its image: "
        + "; ".join(problems)
        + ". An administrator must give the profile an image built for these GPUs or a GPU "
        "that can run it."
    )


def check_profiles(
    profiles: Iterable, slices: Iterable[Slice], labels_of
) -> tuple[list[str], list[str]]:
    """``(errors, warnings)`` of ``gpulab check-config`` about the GPU profiles' images:
    an error for a profile no slice of which can run its image (or a mislabelled image), a
    warning for one some of whose slices cannot (they are skipped at claim time), and for an
    image the engine does not have. ``labels_of(image)`` gives its labels or raises
    ``LookupError`` when the image is not there."""
    slices = list(slices)
    errors: list[str] = []
    warnings: list[str] = []
    for p in profiles:
        if not p.wants_gpu:
            continue
        try:
            need = requirements_from_labels(p.image, labels_of(p.image))
        except LookupError:
            warnings.append(
                f"profile {p.slug!r}: image {p.image} is not on this host's Docker engine, so "
                "what it needs of a GPU is not checked (build it: images/build-image.sh)"
            )
            continue
        except ValueError as e:
            errors.append(f"profile {p.slug!r}: {e}")
            continue
        servable, matching, problems = gate_report(need, p.slice, slices)
        if matching and not servable and problems:
            errors.append(
                f"profile {p.slug!r}: none of its {matching} slice(s) can run its image: "
                + "; ".join(problems)
                + ". Give it an image built for these GPUs, or other GPUs."
            )
        elif problems:
            warnings.append(
                f"profile {p.slug!r}: {servable} of its {matching} slices can run its image, "
                "the others are skipped: " + "; ".join(problems)
            )
    return errors, warnings
