"""``python -m jupyterhub_gpulab.service --config jupyterhub_config.py``"""

import sys

from .launcher import main

sys.exit(main())
