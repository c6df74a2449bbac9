"""The node agent, run on each GPU node of a lab of several nodes (``gpulab node-agent``).

- :mod:`.report`: what one report says (the node's NVML inventory and utilisation); pure but for
  the NVML read it is handed;
- :mod:`.app`: the process (a traitlets ``Application``): read, send to the gpulab service's API
  with the node's token, wait, again.

The agent holds no database credentials: it only knows the service's URL and its node's token.
"""
