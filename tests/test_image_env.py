"""Our TensorFlow images start quietly: ``import tensorflow`` in a notebook does not print a red
block of oneDNN/absl start-up lines, because the image's environment sets
``TF_CPP_MIN_LOG_LEVEL`` (as docker-stacks does). Read from the build files, without building."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from jupyterhub_gpulab.lab.imageenv import image_env

REPO = Path(__file__).resolve().parents[1]


def printed(image: str) -> dict[str, str]:
    out = subprocess.run(
        [sys.executable, "-m", "jupyterhub_gpulab.lab.imageenv", image],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return dict(line.split("=", 1) for line in out.splitlines())


def test_the_tensorflow_image_hides_info_and_warning_lines_but_keeps_errors():
    env = printed("tensorflow")
    assert env["TF_CPP_MIN_LOG_LEVEL"] == "2"  # 3 would hide errors too
    assert printed("pytorch") == {} == image_env("base")


@pytest.mark.parametrize(
    ("script", "feeds"),
    [
        # docker import --change "ENV KEY=value" for every line, after the recipe's own env
        pytest.param("images/build-image.sh", r'import_image "\$img" "\$tag" "\$lock" "\$\{envs\[@\]\}"', id="build-image"),
        # one "ENV KEY=value" line each in the Dockerfile piped to the labelling docker build
        pytest.param("images/docker-stacks/build.sh", r"sed 's/\^/ENV /'", id="docker-stacks"),
    ],
)  # fmt: skip
def test_both_build_paths_put_that_environment_into_the_image(script, feeds):
    text = (REPO / script).read_text()
    call = re.search(r"-m jupyterhub_gpulab\.lab\.imageenv \"\$(img|name)\"(.*)", text)
    assert call, f"{script} does not read the image's environment"
    # what it prints reaches the image: in the envs the import gets, or the ENV lines built
    after = text[call.start() :]
    assert re.search(r"envs\+=\(\"\$kv\"\)", text[: call.end()]) or "ENV" in call.group(2)
    assert re.search(feeds, after), f"{script} reads the environment but does not apply it"
