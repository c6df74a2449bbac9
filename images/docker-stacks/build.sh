#!/usr/bin/env bash
# build.sh pytorch|tensorflow TAG [BASE] — gpulab's image on a Jupyter docker-stacks CUDA image
# (needs a registry to pull BASE from; not used by the demo or the tests).
#
# Stages the build context (the jupyterlab-gpulab wheel, the seat cap hook), builds Dockerfile,
# then adds the labels gpulab's gate reads (jupyterhub_gpulab/lab/images.py): the framework's
# version as installed, the CUDA major of BASE's tag, and the facts for that CUDA major (minimum
# driver, compute capability). Default BASE: quay.io/jupyter/pytorch-notebook:cuda12-latest or
# quay.io/jupyter/tensorflow-notebook:cuda-latest (pin a date tag in production).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PYTHON=${PYTHON:-$REPO/.venv/bin/python}
name=${1:?pytorch or tensorflow}; tag=${2:?the image tag to build}
case "$name" in
    pytorch) base=${3:-quay.io/jupyter/pytorch-notebook:cuda12-latest}; module=torch ;;
    tensorflow) base=${3:-quay.io/jupyter/tensorflow-notebook:cuda-latest}; module=tensorflow ;;
    *) echo "build.sh: pytorch or tensorflow, not $name" >&2; exit 2 ;;
esac
cuda=$(echo "$base" | sed -n 's/.*:cuda\([0-9]*\)-.*/\1/p'); cuda=${cuda:-12}  # "cuda-": 12 today
hub=$("$PYTHON" -c 'import jupyterhub; print(jupyterhub.__version__)')
ctx=$(mktemp -d); trap 'rm -rf "$ctx"' EXIT
cp "$("$REPO/images/jupyterlab-gpulab/build.sh" | tail -n 1)" "$REPO/images/site/"* "$HERE/Dockerfile" "$ctx/"
docker build --pull --build-arg "BASE=$base" --build-arg "JUPYTERHUB_VERSION=$hub" -t "$tag" "$ctx"
version=$(docker run --rm --entrypoint python "$tag" -c "import $module; print($module.__version__)")
labels=(--label "org.jupyter.gpulab.image=$name" --label org.jupyter.gpulab.variant=cuda
    --label "org.jupyter.gpulab.framework.$module=$version" --label org.jupyter.gpulab.seat-cap=framework)
while IFS= read -r kv; do labels+=(--label "$kv"); done \
    < <("$PYTHON" -m jupyterhub_gpulab.lab.imagelabels facts "$module" "$cuda")
# the framework's quiet start-up (TF_CPP_MIN_LOG_LEVEL, ...): jupyterhub_gpulab/lab/imageenv.py
{ echo "FROM $tag"; "$PYTHON" -m jupyterhub_gpulab.lab.imageenv "$name" | sed 's/^/ENV /'; } \
    | docker build "${labels[@]}" -t "$tag" -
echo "$tag"
