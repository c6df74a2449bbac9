"""Sphinx configuration of the jupyterhub-gpulab documentation site (as kubespawner's and
dockerspawner's: Sphinx + MyST + autodoc_traits).

Build it: ``pip install -e '.[docs]'`` then ``sphinx-build -W --keep-going -b html docs/source
docs/_build/html``. The reference pages of the REST API, the CLI and the metrics are generated
from the code at each build (``_ext/gpulab_reference.py`` writes them into ``_generated/``)."""

from __future__ import annotations

import sys
from pathlib import Path

import jupyterhub_gpulab

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

project = "jupyterhub-gpulab"
author = "jupyterhub-gpulab developers"
copyright = "jupyterhub-gpulab developers"
release = jupyterhub_gpulab.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "autodoc_traits",
    "myst_parser",
    "gpulab_reference",
]
root_doc = "index"
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
default_role = "literal"
# docs/pending/: text other branches wrote for the lead to fold into these pages
exclude_patterns = ["_build", "pending", "**/pending", "_generated", "reference/cli-intro.md"]

myst_enable_extensions = ["colon_fence", "deflist"]
# headings up to ### get anchors that links like [x](page.md#a-heading) reach
myst_heading_anchors = 3
# a link that is not a URL must be a page, a heading or a label of this site (else a warning)
myst_all_links_external = False
# every cross-reference must resolve: -W turns a missing one into an error
nitpicky = True
# ... except Python names: the site documents pages and settings, not every module, so a
# docstring's :mod:/:func: reference renders as code (pages, headings, labels stay checked)
nitpick_ignore_regex = [(r"py:.*", r".*")]
# the reference renders traits' help= text as written (plain text, not reST)
autodoc_typehints = "none"

html_title = "jupyterhub-gpulab"
html_theme = "pydata_sphinx_theme"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
}
html_static_path: list[str] = []
