"""How refused spawns reach the hub log: routine refusals become one INFO line without a
traceback, what an administrator must act on stays an ERROR (the end-to-end check is in
test_spawner_options_e2e.py)."""

from __future__ import annotations

import logging
import sys

import pytest

from jupyterhub_gpulab.errors import SpawnRefused
from jupyterhub_gpulab.spawner.logs import RefusalLogFilter, install_refusal_filter


@pytest.fixture
def hub_log():
    """A logger standing in for JupyterHub's, with the filter, recording what it emits."""
    logger = logging.getLogger("test-gpulab-hub")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append((record.levelname, record.getMessage(), record.exc_info))

    handler = Keep()
    logger.addHandler(handler)
    install_refusal_filter(logger)
    install_refusal_filter(logging.LoggerAdapter(logger, {}))  # idempotent
    assert sum(isinstance(f, RefusalLogFilter) for f in logger.filters) == 1
    yield logger, records
    logger.removeHandler(handler)
    logger.filters.clear()


QUOTA = SpawnRefused("You already hold 1 GPU slice.", reason="quota")
NO_RUNTIME = SpawnRefused("No GPU runtime.", reason="gpu-runtime-missing", log_message="install it")


def _raised(err):
    try:
        raise err
    except SpawnRefused:
        return sys.exc_info()


def test_routine_refusals_become_one_info_line_without_a_traceback(hub_log):
    logger, records = hub_log
    # what JupyterHub 6.1 writes for one refusal from the form (user.py, handlers/pages.py)
    logger.error(f"Not starting ann's server : {QUOTA}")
    logger.error(f"Error starting server ann: {QUOTA}")
    logger.error("Failed to spawn single-user server with form", exc_info=_raised(QUOTA))
    assert records == [
        ("INFO", "Not starting ann's server : 429 SpawnRefused(reason=quota): You already hold 1 GPU slice.", None),
        ("INFO", "Error starting server ann: 429 SpawnRefused(reason=quota): You already hold 1 GPU slice.", None),
        ("INFO", "Failed to spawn single-user server with form: 429 SpawnRefused(reason=quota): You already hold 1 GPU slice.", None),
    ]  # fmt: skip


def test_what_an_admin_must_act_on_stays_an_error(hub_log):
    logger, records = hub_log
    logger.error(f"Not starting ann's server : {NO_RUNTIME}")
    logger.error("Failed to spawn single-user server with form", exc_info=_raised(NO_RUNTIME))
    logger.error(
        "Unhandled error starting ann's server",
        exc_info=_raised(QUOTA.__class__("x", reason="misconfigured")),
    )
    try:
        raise RuntimeError("docker went away")
    except RuntimeError:
        logger.exception("Unhandled error starting ann's server")
    assert [level for level, _, _ in records] == ["ERROR"] * 4
    assert all(exc is not None for _, _, exc in records[1:])


def test_a_lowered_refusal_respects_the_hubs_log_level(hub_log):
    logger, records = hub_log
    logger.setLevel(logging.WARNING)
    logger.error(f"Not starting ann's server : {QUOTA}")
    assert records == []
