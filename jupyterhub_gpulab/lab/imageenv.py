"""The environment our images set for their framework: quiet start-up logs, as docker-stacks'.

TensorFlow's C++ core prints a block of INFO and WARNING lines (oneDNN custom operations, CPU
instructions, cuDNN/cuFFT factory registration, absl's "log messages before
absl::InitializeLog()") to stderr on ``import tensorflow``; a notebook shows them in red under
the first cell, where students read them as an error. ``TF_CPP_MIN_LOG_LEVEL=2`` keeps errors
and hides the rest; a user who wants them back sets ``os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"``
before importing TensorFlow.

Both build paths read it (``images/build-image.sh`` through ``docker import --change ENV``,
``images/docker-stacks/build.sh`` through ``docker build``) with
``python -m jupyterhub_gpulab.lab.imageenv IMAGE``, which prints ``KEY=value`` lines.
"""

from __future__ import annotations

#: ``{image: {variable: value}}``: the environment an image of that recipe (``base``,
#: ``pytorch``, ``tensorflow``) is built with, on top of the recipe's own paths.
IMAGE_ENV: dict[str, dict[str, str]] = {
    "tensorflow": {
        # 0 all, 1 no INFO, 2 no INFO/WARNING, 3 no ERROR either: errors still show
        "TF_CPP_MIN_LOG_LEVEL": "2",
        # gRPC (bundled with TensorFlow) logs its own start-up lines through absl
        "GRPC_VERBOSITY": "ERROR",
    },
}


def image_env(image: str) -> dict[str, str]:
    """The variables an image of recipe ``image`` sets (``{}`` for one without any)."""
    return dict(IMAGE_ENV.get(image, {}))


def _main(argv: list[str]) -> int:
    """``python -m jupyterhub_gpulab.lab.imageenv IMAGE``: ``KEY=value`` lines, one each."""
    if len(argv) != 1:
        print(_main.__doc__)
        return 2
    for key, value in sorted(image_env(argv[0]).items()):
        print(f"{key}={value}")
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(_main(sys.argv[1:]))
