"""Realtime is a doorbell (STYLE habit 10): after commit, announce (run_id, last sequence).

The database is the truth; listeners re-read from it. Until the websocket layer exists this
only logs at debug level, so the announce point is already where it must be: after commit.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def ring_after_commit(run_id: str, sequence: int) -> None:
    log.debug("run %s trace advanced to %s", run_id, sequence)
