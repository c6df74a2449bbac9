"""``python -m jupyterhub_gpulab.cli``: the ``gpulab`` command."""

import sys

from . import main

sys.exit(main())
