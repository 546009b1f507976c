"""The websocket clients gauge of /metrics (issue 14 item 4): counted when a socket is accepted,
uncounted once when it closes; a refused socket is never counted."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync

from runs import consumers
from tests.realtime.test_trace_socket import _alices_run, _connect

pytestmark = pytest.mark.django_db(transaction=True)


def test_open_sockets_are_counted_by_kind(personas):
    alice, run_id, _total = _alices_run(personas)
    before = consumers.open_clients()

    async def scenario():
        comm, connected, _ = await _connect(f"/ws/runs/{run_id}/trace/", alice)
        assert connected
        during = consumers.open_clients()
        _refused, ok, _ = await _connect(f"/ws/runs/{run_id}/trace/", personas["bob"])
        assert not ok  # bob may not see alice's run: closed before accept, never counted
        assert consumers.open_clients() == during
        await comm.disconnect()
        return during

    during = async_to_sync(scenario)()
    assert during["trace"] == before["trace"] + 1
    assert during["console"] == before["console"]
    assert consumers.open_clients() == before
