"""Calls runs wait on (issue 22): the model calls a run's step asks for, recorded in the
database and made by the gateway process (``manage.py gateway``), which is built for waiting.

- ``models``: the records (``ModelCall``, ``CallAttempt``), owned here, written only through
  ``records`` and the run store's writers.
- ``records``: every write of a call, each a compare-and-set (claim, answer, retry, renew,
  abandon), and the reads the gateway, the sweeper and the metrics need.
- ``gateway``: the asyncio loop that claims calls fairly within each endpoint's limit, sends
  them, records the replies and hands the runs back to the workers.
- ``endpoints``: one asynchronous client per model endpoint.
- ``doorbell``: how a worker wakes the gateway after it recorded a request.

The pure half (what a call is, its states, its id) is ``runs.domain.gateway.calls``.
"""
