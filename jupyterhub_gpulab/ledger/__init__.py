"""The slice ledger: SQLAlchemy tables, Alembic migrations, and atomic claim / release."""

from .db import SchemaOutOfDate
from .labs import peek_identity
from .ledger import Ledger, close_shared_ledgers, shared_ledger
from .models import (
    Allocation,
    Claim,
    CullWarning,
    ForeignContainer,
    LabIdentity,
    LedgerRefusal,
    NoFreeSlice,
    QuotaExceeded,
    SyncReport,
)

__all__ = [
    "Allocation",
    "Claim",
    "CullWarning",
    "ForeignContainer",
    "LabIdentity",
    "Ledger",
    "LedgerRefusal",
    "NoFreeSlice",
    "QuotaExceeded",
    "SchemaOutOfDate",
    "SyncReport",
    "close_shared_ledgers",
    "peek_identity",
    "shared_ledger",
]
