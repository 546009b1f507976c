"""The console pages of runs: the runs list and run detail, run profiles, the handoff inbox."""
