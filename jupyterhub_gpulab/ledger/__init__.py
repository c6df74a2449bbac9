"""The slice ledger: SQLAlchemy tables (:mod:`.schema`), Alembic migrations, atomic claim / release
(:mod:`.ledger`), the waitlist and its offers (:mod:`.waitlist`, :mod:`.queueoffers`), the notice rules (:mod:`.notices`), the Keeps users took (:mod:`.keeps`), reservations kept in that claim (:mod:`.placement`, records in
:mod:`.bookings`), the read queries and the one slice-matching SQL filter (:mod:`.queries`), the
lab's identity and other labs' containers (:mod:`.labs`), the nodes and whether each is in
service (:mod:`.nodes`), and :mod:`.aio`, the one seam that runs
ledger calls off the event loop (``await aio.call(fn, ...)``)."""

from .bookings import Booking, BookingConflict, Reserved
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
from .nodes import NODE_TOKEN_PREFIX, EngineNode, Node

__all__ = [
    "Allocation",
    "Booking",
    "BookingConflict",
    "Claim",
    "CullWarning",
    "EngineNode",
    "ForeignContainer",
    "LabIdentity",
    "Ledger",
    "LedgerRefusal",
    "NODE_TOKEN_PREFIX",
    "Node",
    "NoFreeSlice",
    "QuotaExceeded",
    "Reserved",
    "SchemaOutOfDate",
    "SyncReport",
    "close_shared_ledgers",
    "peek_identity",
    "shared_ledger",
]
