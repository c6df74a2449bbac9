"""Sphinx extension: the reference pages that are generated from the code at each build.

Written before Sphinx reads the sources, as pages of ``docs/source/reference/`` (git-ignored):

- ``configuration.md``: every configurable class's own traits, from their ``help=``
  (``autodoc_traits``' ``autoconfigurable``; the traits a class inherits from JupyterHub,
  DockerSpawner or OAuthenticator are left to those projects' references, named on the page);
- ``rest-api.md``: the service's OpenAPI document (``service.web.openapi.openapi``, the one the
  service serves at ``/services/gpulab/api/openapi.json``), one section per operation;
- ``cli.md``: ``gpulab``'s argparse parser (``cli.build_parser``), each command's ``--help``;
- ``metrics.md``: the hub's series from ``prometheus_client``'s registry and the service's from
  its exposition over a throw-away ledger (a declared one-GPU lab in a temporary SQLite file);
- ``docs/source/_generated/screenshots.md`` (included by the guides): the browser tests'
  screenshots (``test-artifacts/*.png``, written by ``pytest -m browser``), copied beside it;
  a note when there are none.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
OUT = HERE / "_generated"
REFERENCE = HERE / "reference"
REPO = HERE.parent.parent
PREFIX = "/services/gpulab/"
METHODS = ("get", "put", "post", "delete", "patch")
#: the screenshots the student and instructor guides show, with their captions
SCREENSHOTS = {
    "spawn-form-reserved.png": "The spawn form: profiles with their free capacity",
    "user-page.png": "My GPU: the slice, the GPU-hours left, the server's limits",
    "keep-warning.png": "My GPU: a GPU-idle warning with Keep and Move to CPU",
    "lab-keep-warning.png": "JupyterLab's status bar: the GPU-idle warning, Keep, Move to CPU",
    "home-waitlist-offer.png": "The hub's home page holding a waitlist offer",
    "admin-page.png": "The admin page: every GPU, slice and holder",
    "course-page-started.png": "A course page after Start all",
    "course-page-collected.png": "A course page after collecting an assignment",
    "course-page-csv-preview.png": "A roster CSV's preview on the course page",
}


#: (heading, class, where it runs, the upstream reference of what it inherits)
CONFIGURABLES = [
    ("The lab", "jupyterhub_gpulab.lab.config.GPULab",
     "every process (the hub, the service, the `gpulab` command): inventory, profiles, "
     "group policies, the ledger", None),
    ("One Docker host", "jupyterhub_gpulab.spawner.GPUDockerSpawner", "the hub",
     "[DockerSpawner](https://jupyterhub-dockerspawner.readthedocs.io/en/latest/api/index.html)"),
    ("Docker Swarm", "jupyterhub_gpulab.spawner.GPUSwarmSpawner", "the hub",
     "[SwarmSpawner](https://jupyterhub-dockerspawner.readthedocs.io/en/latest/api/index.html)"),
    ("The service", "jupyterhub_gpulab.service.app.GPULabService",
     "the service (pages, API, culler, waitlist, node agents' API)", None),
    ("Courses", "jupyterhub_gpulab.courses.config.GPULabCourses",
     "the hub (course servers, roles) and the service (course pages)", None),
    ("OpenID Connect sign-on", "jupyterhub_gpulab.auth.oidc.GPULabOAuthenticator", "the hub",
     "[GenericOAuthenticator](https://oauthenticator.readthedocs.io/en/latest/reference/api/gen/oauthenticator.generic.html)"),
    ("LTI 1.3 launches", "jupyterhub_gpulab.auth.lti.GPULabLTI13Authenticator", "the hub",
     "[LTI13Authenticator](https://ltiauthenticator.readthedocs.io/)"),
    ("The node agent", "jupyterhub_gpulab.agent.app.NodeAgent",
     "each GPU node of a Swarm (`gpulab node-agent`)", None),
]  # fmt: skip


def _inherited(cls) -> list[str]:
    """The config traits ``cls`` takes from classes outside this package."""
    out = []
    for name in cls.class_traits(config=True):
        owner = next(k for k in cls.__mro__ if name in vars(k))
        if not owner.__module__.startswith("jupyterhub_gpulab"):
            out.append(name)
    return sorted(out)


def configuration_page() -> str:
    import importlib

    out = [
        "# Configuration\n",
        "Every configurable class of the package with each of its settings, generated from the "
        "traits' own `help=` text (`autodoc_traits`, as kubespawner's and dockerspawner's "
        "references). Set them in `jupyterhub_config.py` as `c.<Class>.<trait> = …`; "
        "`gpulab check-config -f jupyterhub_config.py` checks them.\n",
    ]
    out += [
        "## The one call: `jupyterhub_gpulab.configure`\n",
        "```{eval-rst}",
        ".. autofunction:: jupyterhub_gpulab.hub.wiring.configure",
        "   :noindex:",
        "```",
        "",
    ]
    for heading, path, where, upstream in CONFIGURABLES:
        module, name = path.rsplit(".", 1)
        cls = getattr(importlib.import_module(module), name)
        out.append(f"## {heading}: `{name}`\n")
        out.append(f"Runs in {where}.")
        skipped = _inherited(cls)
        if skipped:
            out.append(
                f"It also takes the {len(skipped)} settings it inherits, documented by "
                f"{upstream or 'traitlets'}."
            )
        out += ["", "```{eval-rst}", f".. autoconfigurable:: {path}", "   :noindex:"]
        if skipped:
            out.append(f"   :exclude-members: {', '.join(skipped)}")
        out += ["```", ""]
    return "\n".join(out)


def _cell(text) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _schema_name(schema: dict | None) -> str:
    if not schema:
        return ""
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if schema.get("type") == "array":
        return f"array of {_schema_name(schema.get('items')) or 'items'}"
    return schema.get("type", "object")


def _response(doc: dict, resp: dict) -> tuple[str, str]:
    if "$ref" in resp:
        resp = doc["components"]["responses"][resp["$ref"].rsplit("/", 1)[-1]]
    schema = resp.get("content", {}).get("application/json", {}).get("schema")
    return resp.get("description", ""), _schema_name(schema)


def rest_api_page() -> str:
    from jupyterhub_gpulab.service.web.openapi import openapi

    doc = openapi(PREFIX)
    info = doc["info"]
    out = [
        "# REST API\n",
        "Generated from the OpenAPI document the service serves at "
        f"`{PREFIX}api/openapi.json` (`jupyterhub_gpulab/service/web/openapi.py`). "
        f"{info['description']}\n",
        f"Base URL: `{doc['servers'][0]['url']}` (relative to the hub's address).\n",
    ]
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method not in METHODS:
                continue  # the path's own "parameters": shared by its operations
            out.append(f"## `{method.upper()} {path}`\n")
            out.append(f"{op.get('summary', '')}. {op.get('description', '')}".strip() + "\n")
            params = item.get("parameters", []) + op.get("parameters", [])
            if params:
                out.append("| parameter | in | required | type | description |")
                out.append("| --- | --- | --- | --- | --- |")
                for p in params:
                    s = p.get("schema", {})
                    out.append(
                        f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} "
                        f"| {_cell(s.get('type', ''))} | {_cell(p.get('description', ''))} |"
                    )
                out.append("")
            body = op.get("requestBody")
            if body:
                schema = body.get("content", {}).get("application/json", {}).get("schema")
                kind = _schema_name(schema) or next(iter(body.get("content", {})), "")
                out.append(f"Body: {kind}. {_cell(body.get('description', ''))}\n")
            out.append("| status | meaning | body |")
            out.append("| --- | --- | --- |")
            for status, resp in op["responses"].items():
                text, schema = _response(doc, resp)
                out.append(f"| {status} | {_cell(text)} | {_cell(schema)} |")
            out.append("")
    out.append("## Schemas\n")
    out.append("The bodies' JSON schemas, as in the document's `components.schemas`:\n")
    for name, schema in doc["components"]["schemas"].items():
        out.append(f"### {name}\n")
        out.append("```json")
        out.append(json.dumps(schema, indent=2, sort_keys=True))
        out.append("```\n")
    return "\n".join(out)


def cli_page() -> str:
    from jupyterhub_gpulab.cli import build_parser

    os.environ["COLUMNS"] = "100"  # argparse wraps its help to the terminal's width
    parser = build_parser()
    intro = (REFERENCE / "cli-intro.md").read_text()
    out = [
        intro,
        "\n## Every command's options\n",
        "Generated from `gpulab`'s parser (`jupyterhub_gpulab/cli/__init__.py`: `build_parser`).\n",
    ]
    out += ["```text", parser.format_help().rstrip(), "```\n"]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        out.append(f"### `gpulab {name}`\n")
        if name == "node-agent":
            from jupyterhub_gpulab.agent.app import NodeAgent

            out.append(
                "A traitlets application of its own (`jupyterhub_gpulab/agent/app.py`): "
                "`gpulab node-agent --help-all` lists its settings; the "
                "[configuration reference](configuration.md) documents "
                f"`{NodeAgent.__name__}`.\n"
            )
            continue
        out += ["```text", p.format_help().rstrip(), "```\n"]
    return "\n".join(out)


def _service_families():
    """The service's metric families, from its exposition over a throw-away declared lab."""
    from prometheus_client.parser import text_string_to_metric_families
    from traitlets.config import Config

    from jupyterhub_gpulab.lab.config import GPULab
    from jupyterhub_gpulab.ledger import Ledger
    from jupyterhub_gpulab.service.metrics import Exposition
    from jupyterhub_gpulab.service.state import LabState

    c = Config()
    c.GPULab.node_name = "node-a"
    c.GPULab.inventory_source = "declared"
    c.GPULab.inventory = [
        {"uuid": "GPU-00000000-0000-4000-8000-000000000000", "index": 0,
         "name": "NVIDIA A40", "memory": "48GiB"}
    ]  # fmt: skip
    c.GPULab.profiles = [
        {"slug": "gpu", "display_name": "GPU", "image": "x", "slice": {"kind": "gpu"}}
    ]
    with tempfile.TemporaryDirectory() as tmp:
        ledger = Ledger(f"sqlite:///{tmp}/gpulab.sqlite")
        try:
            state = LabState(GPULab(config=c), ledger)
            state.sync()
            text = Exposition(state, user_labels=True).render().decode()
            state.close()
        finally:
            ledger.close()
    return list(text_string_to_metric_families(text))


def _hub_families():
    from prometheus_client import REGISTRY
    from prometheus_client.metrics import MetricWrapperBase

    from jupyterhub_gpulab.hub import metrics  # registers the hub's series

    # a family with no series yet names no labels: take them from the metric objects
    declared = {
        m._name: tuple(m._labelnames)
        for m in vars(metrics).values()
        if isinstance(m, MetricWrapperBase)
    }
    families = [f for f in REGISTRY.collect() if f.name.startswith("gpulab_")]
    return families, declared


def _metric_rows(families, declared=None) -> list[str]:
    rows = ["| name | type | labels | meaning |", "| --- | --- | --- | --- |"]
    for f in sorted(families, key=lambda f: f.name):
        labels = sorted({k for s in f.samples for k in s.labels if k not in ("le", "quantile")})
        labels = labels or sorted((declared or {}).get(f.name, ()))
        name = f.name + ("_total" if f.type == "counter" else "")
        rows.append(
            f"| `{name}` | {f.type} | {', '.join(f'`{x}`' for x in labels) or '—'} "
            f"| {_cell(f.documentation)} |"
        )
    return rows


def metrics_page() -> str:
    out = [
        "# Metrics\n",
        "Generated from the series themselves: the hub's from `prometheus_client`'s registry "
        "(`jupyterhub_gpulab/hub/metrics.py`), the service's from its exposition "
        "(`jupyterhub_gpulab/service/metrics.py`) over a one-GPU lab. How to scrape them: "
        "[the admin guide's Metrics](../admin/metrics.md).\n",
        "## The hub: `/hub/metrics`\n",
        *_metric_rows(*_hub_families()),
        "",
        f"## The service: `{PREFIX}metrics`\n",
        "Series naming a user appear only with `c.GPULabService.metrics_user_labels = True`. "
        "Labels are shown where the one-GPU lab has a series; a family with no series here "
        "shows —.\n",
        *_metric_rows(_service_families()),
        "",
    ]
    return "\n".join(out)


def screenshots_page() -> str:
    found = REPO / "test-artifacts"
    dest = OUT / "screenshots"
    shutil.rmtree(dest, ignore_errors=True)
    shown = [n for n in SCREENSHOTS if (found / n).is_file()]
    if not shown:
        return (
            "*No screenshots in this build: the browser tests write them "
            "(`pytest -m browser`, into `test-artifacts/`) and the next build shows them.*\n"
        )
    dest.mkdir(parents=True)
    out = []
    for n in shown:
        shutil.copy(found / n, dest / n)
        out += [f"![{SCREENSHOTS[n]}](screenshots/{n})", "", f"*{SCREENSHOTS[n]}*", ""]
    return "\n".join(out)


def generate(app=None) -> None:
    OUT.mkdir(exist_ok=True)
    pages = {
        REFERENCE / "configuration.md": configuration_page,
        REFERENCE / "rest-api.md": rest_api_page,
        REFERENCE / "cli.md": cli_page,
        REFERENCE / "metrics.md": metrics_page,
        OUT / "screenshots.md": screenshots_page,
    }
    for path, make in pages.items():
        text = make()
        # rewrite only what changed, so Sphinx's incremental build rereads only that page
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)


def setup(app):
    app.connect("builder-inited", generate)
    return {"parallel_read_safe": True, "version": "1"}
