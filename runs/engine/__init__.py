"""What moves a run in a worker, around the runner loop of ``runs.domain``.

The executor and the isolated child process a tool may run in, the lease that gives one worker a
run, the sweeper that hands stranded runs back, and the doorbell rung after each commit. What
belongs here: worker-side machinery; the rules it applies live in ``runs.domain``.
"""
