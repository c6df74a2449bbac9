"""The slice ledger: SQLAlchemy tables, Alembic migrations, and atomic claim / release."""

from .db import SchemaOutOfDate, make_engine
from .ledger import Ledger, close_shared_ledgers, shared_ledger
from .models import (
    Allocation,
    Claim,
    CullWarning,
    LedgerRefusal,
    NoFreeSlice,
    QuotaExceeded,
    ReconcileReport,
    SyncReport,
)

__all__ = [
    "Allocation",
    "Claim",
    "CullWarning",
    "Ledger",
    "LedgerRefusal",
    "NoFreeSlice",
    "QuotaExceeded",
    "ReconcileReport",
    "SchemaOutOfDate",
    "SyncReport",
    "close_shared_ledgers",
    "make_engine",
    "shared_ledger",
]
