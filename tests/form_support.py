"""The spawn form's profiles as its tests use them: four profiles (CPU, a 1g.10gb MIG slice, a
T4 seat, a whole A100) with the capacity a test says is free, and the form's rows and radio
buttons read back from its HTML (``html_support``; no exact-HTML assertions)."""

from __future__ import annotations

from html_support import Node, parse_html

from jupyterhub_gpulab.lab.profiles import load_profiles

IMG = "quay.io/jupyter/pytorch-notebook:cuda12-latest"
PROFILES = load_profiles(
    [
        {
            "slug": "cpu",
            "display_name": "CPU only",
            "image": IMG,
            "cpu_limit": 1,
            "mem_limit": "4G",
        },
        {
            "slug": "mig-1g",
            "display_name": "PyTorch (MIG 1g.10gb)",
            "description": "Coursework.",
            "image": IMG,
            "slice": {"kind": "mig", "mig_profile": "1g.10gb"},
            "cpu_limit": 2,
            "mem_limit": "8G",
        },
        {
            "slug": "seat",
            "display_name": "Shared T4 seat",
            "image": IMG,
            "slice": {"kind": "shared"},
        },
        {
            "slug": "a100",
            "display_name": "Full A100",
            "image": IMG,
            "slice": {"kind": "gpu", "model": "A100"},
        },
    ]
)
BY_SLUG = {p.slug: p for p in PROFILES}
#: ``{slug: (free, total)}`` a test's form shows
FREE = {"mig-1g": (3, 14), "seat": (0, 4), "a100": (0, 0)}  # seat: all taken; a100: none here


def capacity_of(free: dict[str, tuple[int, int]]):
    """The ``capacity`` callable ``form_rows`` takes: ``request -> (free, total)`` from ``free``
    (``{slug: (free, total)}`` of :data:`PROFILES`)."""
    by_request = {BY_SLUG[slug].slice: cap for slug, cap in free.items()}
    return lambda request: by_request[request]


def rows(page: Node) -> list[Node]:
    """The form's rows: one ``div.form-check`` per profile (the outermost ones)."""
    found = page.find_all("div", cls="form-check")
    return [n for n in found if not any(n in r.iter() for r in found)]


def radios(html: str) -> dict[str, dict]:
    """``{slug: attrs}`` of the profile radio buttons, checking each row has exactly one: with
    the row's visible ``text``, its capacity ``badge`` and ``why`` it is disabled."""
    out = {}
    for row in rows(parse_html(html)):
        (radio,) = row.find_all("input")
        assert radio.attrs["type"] == "radio"
        assert radio.attrs["name"] == "profile"
        out[radio.attrs["value"]] = {
            **radio.attrs,
            "text": row.text(),
            "badge": " ".join(b.text() for b in row.find_all(cls="badge")),
            "why": radio.description(),
        }
    return out
