"""How a command reaches the warehouse under $CHUNKEVAL_HOME.

Every command module says so in `WAREHOUSE_SESSION`: True for commands that only read the warehouse
(or change it in one short step), whose openings share one connection held until the command ends;
False for the others (`run`, whose flow writes to the warehouse meanwhile; commands that never open it).
`chunkeval.cli.main` builds one `WarehouseAccess` per command from that and hands it to the handler.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from chunkeval.warehouse import Warehouse


class WarehouseAccess:
    """Opens the warehouse; with a session (an ExitStack the command runs inside), each opening of an
    existing warehouse enters one connection that lasts until the command ends."""

    def __init__(self, session: contextlib.ExitStack | None = None):
        self._session = session

    def __call__(self, must_exist: bool = True) -> Warehouse:
        """The warehouse under $CHUNKEVAL_HOME. Commands that only read it never create it."""
        from chunkeval.warehouse import Warehouse  # on first opening: parsing the arguments loads no DuckDB

        wh = Warehouse.at_home(must_exist)
        if self._session is not None and wh.exists():
            self._session.enter_context(wh.session())
        return wh
