"""The spawn form as a template an admin can override (``c.GPUDockerSpawner.profile_form_template``,
as kubespawner's): a template string or a file's path, autoescaped like the packaged
``spawner/templates/gpulab_form.html``; a template that cannot be read or compiled is refused at
config load naming the setting. The last test reads ``/hub/spawn`` from a real hub."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from form_support import FREE, PROFILES, capacity_of
from leakcheck import unique

from jupyterhub_gpulab.lab.profiles import load_profiles
from jupyterhub_gpulab.spawner import GPUDockerSpawner
from jupyterhub_gpulab.spawner.form import form_rows, render_form

ADMIN_TEMPLATE = """\
<div class="our-lab">
  <p>{{ note }}</p>
  {% for r in rows %}
  <label><input type="radio" name="profile" value="{{ r.slug }}"
    {%- if r.checked %} checked{% endif %}{% if r.disabled_reason %} disabled{% endif %}>
    Our {{ r.display_name }}: {{ r.capacity }}</label>
  {% endfor %}
</div>
"""


def rows(profiles=PROFILES):
    return form_rows(profiles, capacity_of(FREE), preselect=None)


def _inputs(html: str) -> list[dict]:
    from html.parser import HTMLParser

    found = []

    class P(HTMLParser):
        def handle_starttag(self, tag, attrs):
            if tag == "input":
                found.append(dict(attrs))

    P().feed(html)
    return found


def test_the_packaged_template_is_the_default():
    html = render_form(rows(), "You hold 0 GPU slices.")
    assert [i["value"] for i in _inputs(html)] == ["cpu", "mig-1g", "seat", "a100"]
    assert "You hold 0 GPU slices." in html


@pytest.mark.parametrize("given_as", ["string", "file"])
def test_an_admins_template_is_rendered_with_the_same_rows(tmp_path, given_as):
    template = ADMIN_TEMPLATE
    if given_as == "file":
        path = tmp_path / "our_form.html"
        path.write_text(ADMIN_TEMPLATE)
        template = str(path)
    html = render_form(rows(), "You hold 0 GPU slices.", template=template)
    assert "Our PyTorch (MIG 1g.10gb): 3 of 14 free" in html
    assert "You hold 0 GPU slices." in html
    inputs = {i["value"]: i for i in _inputs(html)}
    assert list(inputs) == ["cpu", "mig-1g", "seat", "a100"]
    assert "checked" in inputs["cpu"] and "disabled" in inputs["seat"]


def test_an_admins_template_may_include_the_packaged_one():
    html = render_form(rows(), template='<div id="ours">{% include "gpulab_form.html" %}</div>')
    assert [i["value"] for i in _inputs(html)] == ["cpu", "mig-1g", "seat", "a100"]


def test_an_admins_template_escapes_profile_text():
    hostile = "<script>alert(1)</script>"
    (p,) = load_profiles([{"slug": "evil", "display_name": hostile, "image": "x"}])
    html = render_form(form_rows((p,), capacity_of({}), preselect=None), template=ADMIN_TEMPLATE)
    assert "<script>" not in html and "&lt;script&gt;" in html


@pytest.mark.parametrize(
    ("template", "says"),
    [
        pytest.param("/srv/nowhere/form.html", "cannot read '/srv/nowhere/form.html'", id="path"),
        pytest.param("{% for r in %}", "does not compile", id="syntax"),
        pytest.param('{% include "nope.html" %}', "does not render", id="missing-include"),
    ],
)
def test_a_template_that_cannot_be_used_is_refused_at_config_load(template, says):
    with pytest.raises(Exception) as e:
        GPUDockerSpawner(user=SimpleNamespace(name="t"), profile_form_template=template)
    assert "c.GPUDockerSpawner.profile_form_template" in str(e.value)
    assert says in str(e.value)


@pytest.mark.docker
def test_the_hubs_spawn_page_shows_the_admins_form(tmp_path):
    from e2e_support import gpulab_config, hub_login, remove_node_containers, require_docker
    from hubtools import Hub

    require_docker()
    path = tmp_path / "our_form.html"
    path.write_text(ADMIN_TEMPLATE)
    node = unique("gpulabtest")
    hub = Hub(
        tmp_path / node,
        gpulab_config(node, extra=f"c.GPUDockerSpawner.profile_form_template = {str(path)!r}\n"),
    )
    hub.start()
    try:
        page = hub_login(hub, "student1").get(f"{hub.url}/hub/spawn")
        assert page.status_code == 200
        assert "Our PyTorch (MIG 1g.10gb): 2 of 2 free" in page.text
        assert {i["value"] for i in _inputs(page.text) if i.get("name") == "profile"} == {
            "mig",
            "seat",
            "cpu",
        }
    finally:
        hub.stop()
        remove_node_containers(node)
