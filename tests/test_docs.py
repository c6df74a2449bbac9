"""The documentation site builds with warnings as errors, its internal links resolve, and its
reference is the code's: every setting, API operation, command and metric appears on its page.

One Sphinx build (``-W --keep-going``, ``nitpicky``, MyST's ``myst_all_links_external = False``:
a link to a page, heading or label that does not exist is an error) into a temporary folder,
shared by the module. ``-b linkcheck`` would need the internet; internal references are what
this checks. The README stays what a visitor reads first (≤ 250 lines) and points into the site.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.docs

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "docs" / "source"


def _build(out: Path, source: Path = SOURCE) -> subprocess.CompletedProcess:
    try:
        import autodoc_traits  # noqa: F401
        import myst_parser  # noqa: F401
        import pydata_sphinx_theme  # noqa: F401
        import sphinx  # noqa: F401
    except ImportError as e:  # pragma: no cover - the test extra pulls in the docs extra
        pytest.fail(f"{e}: install the docs extra: pip install -e '.[docs]'")
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-E", "-b", "html"]
    return subprocess.run(
        [*cmd, str(source), str(out)], capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = _build(out)
    assert done.returncode == 0, f"the docs build failed:\n{done.stdout}\n{done.stderr}"
    return out


def _text(page: Path) -> str:
    return re.sub(r"<[^>]+>", " ", page.read_text())


def test_every_guide_is_built_and_in_the_navigation(site):
    index = (site / "index.html").read_text()
    for page in (
        "quickstart", "student", "instructor", "admin/index", "admin/one-host", "admin/swarm",
        "admin/upgrades", "reference/configuration", "reference/rest-api", "reference/cli",
        "reference/metrics", "architecture/invariants", "architecture/layout", "developing",
    ):  # fmt: skip
        assert (site / f"{page}.html").is_file(), page
        assert f'href="{page}.html"' in index, f"{page} is not in the site's navigation"


def test_every_setting_of_every_configurable_is_in_the_reference(site):
    from jupyterhub_gpulab.courses.config import GPULabCourses
    from jupyterhub_gpulab.lab.config import GPULab
    from jupyterhub_gpulab.service.app import GPULabService
    from jupyterhub_gpulab.spawner import GPUDockerSpawner

    page = (site / "reference" / "configuration.html").read_text()
    for cls in (GPULab, GPULabService, GPULabCourses, GPUDockerSpawner):
        own = [
            name
            for name in cls.class_traits(config=True)
            if next(k for k in cls.__mro__ if name in vars(k)).__module__.startswith(
                "jupyterhub_gpulab"
            )
        ]
        assert own, cls
        for name in own:
            assert f"{cls.__name__}.{name}" in page, f"c.{cls.__name__}.{name} is not documented"
    # the one call, with its keywords (autodoc of its signature and docstring)
    text = " ".join(_text(site / "reference" / "configuration.html").split())
    assert "jupyterhub_gpulab.hub.wiring. configure (" in text
    for keyword in ("prometheus_token", "reader_groups", "api_token"):
        assert f"{keyword} :" in text or f"{keyword} =" in text, keyword
    # a trait's help= text is the reference's text
    first = " ".join(GPULab.class_traits()["db_url"].help.split())[:60]
    assert first in " ".join(_text(site / "reference" / "configuration.html").split())


def test_every_api_operation_is_in_the_reference(site):
    from jupyterhub_gpulab.service.web.openapi import openapi

    page = " ".join(_text(site / "reference" / "rest-api.html").split())
    doc = openapi("/services/gpulab/")
    ops = [
        (m, p) for p, item in doc["paths"].items() for m in item if m in ("get", "post", "delete")
    ]
    assert len(ops) > 20
    for method, path in ops:
        assert f"{method.upper()} {path}" in page, f"{method.upper()} {path} is not documented"


def test_every_command_and_its_options_are_in_the_reference(site):
    import argparse

    from jupyterhub_gpulab.cli import build_parser

    page = _text(site / "reference" / "cli.html")
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in sub.choices.items():
        assert f"gpulab {name}" in page, name
        for action in parser._actions:
            for flag in action.option_strings:
                assert flag in page, f"gpulab {name} {flag}"


def test_every_metric_is_in_the_reference(site):
    page = _text(site / "reference" / "metrics.html")
    for name in (
        "gpulab_server_spawn_total", "gpulab_slice_release_total", "gpulab_slices",
        "gpulab_nodes", "gpulab_server_cull_total", "gpulab_slice_holder_info",
    ):  # fmt: skip
        assert name in page, name


def _copy(to: Path) -> Path:
    """A copy of the site's source in ``to``/docs/source, beside a copy of the README it
    includes; its generator looks for screenshots in ``to``/test-artifacts."""
    import shutil

    source = to / "docs" / "source"
    shutil.copytree(SOURCE, source, ignore=shutil.ignore_patterns("_generated"))
    shutil.copy(REPO / "README.md", to / "README.md")
    return source


def test_a_broken_internal_link_fails_the_build(tmp_path):
    """The check itself: a page linking to a page that does not exist does not build."""
    source = _copy(tmp_path)
    (source / "student.md").write_text(
        (source / "student.md").read_text() + "\nSee [the missing page](no-such-page.md).\n"
    )
    done = _build(tmp_path / "out", source)
    assert done.returncode != 0
    assert "no-such-page" in done.stderr


def test_the_browser_tests_screenshots_are_shown_in_the_student_guide(tmp_path):
    import zlib
    from struct import pack

    def chunk(kind: bytes, data: bytes) -> bytes:
        return pack(">I", len(data)) + kind + data + pack(">I", zlib.crc32(kind + data))

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00")) + chunk(b"IEND", b"")
    (tmp_path / "test-artifacts").mkdir()
    (tmp_path / "test-artifacts" / "user-page.png").write_bytes(png)  # as save_screenshot does
    source = _copy(tmp_path)
    done = _build(tmp_path / "out", source)
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "out" / "student.html").read_text()
    assert 'src="_images/user-page.png"' in page and "No screenshots in this build" not in page
    assert (tmp_path / "out" / "_images" / "user-page.png").read_bytes() == png


def test_the_readme_is_short_and_points_into_the_site():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    assert "./scripts/demo.sh" in readme and "./scripts/test.sh" in readme
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (REPO / link).is_file(), f"README links to {link}, which does not exist"


def test_the_readme_sections_in_the_site_link_to_its_pages(site):
    """The intro and quick start are the README's own text, included in the site: a link the
    README writes as ``docs/source/admin/sso.md`` must reach the page from the site too (MyST's
    ``relative-docs``), not a name in quotes of a section that moved into the site."""
    readme = (REPO / "README.md").read_text()
    assert not re.search(r'see "[A-Z][^"]+"', readme), "the README names a section, not a link"
    for page, marker in (("index.html", "intro"), ("quickstart.html", "quickstart")):
        start = readme.index(f"<!-- {marker}:start -->")
        part = readme[start : readme.index(f"<!-- {marker}:end -->")]
        html = (site / page).read_text()
        depth = "../" * page.count("/")
        for link in re.findall(r"\]\(docs/source/([^)#]+)\.md", part):
            assert f'href="{depth}{link}.html' in html, f"{page} does not link to {link}"


def test_pending_doc_text_is_not_part_of_the_site():
    """Other branches write their doc text into docs/pending/ for the lead to fold in."""
    from importlib.util import module_from_spec, spec_from_file_location

    spec = spec_from_file_location("docs_conf", SOURCE / "conf.py")
    conf = module_from_spec(spec)
    spec.loader.exec_module(conf)
    assert "pending" in conf.exclude_patterns and "**/pending" in conf.exclude_patterns
