"""Fault injection and the fault lab, apart from the engine.

The fault layer a scenario's ``faults`` block wraps tools with (faults), the switch run creation
checks without importing it (fault_switch), and the lab's experiments on the real stack
(faultlab, faultlab_calls; ``manage.py faultlab``). What belongs here: what only tests, demos and
the lab turn on (``AGENTCONSOLE_FAULTS_ENABLED``).
"""
