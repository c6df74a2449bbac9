"""Alembic environment for the gpulab ledger; run through ``gpulab upgrade-db``."""

from alembic import context

from jupyterhub_gpulab.ledger.db import make_engine
from jupyterhub_gpulab.ledger.schema import metadata

config = context.config
engine = config.attributes.get("engine") or make_engine(config.get_main_option("sqlalchemy.url"))

with engine.connect() as connection:
    context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
    connection.commit()
