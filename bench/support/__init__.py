"""What the benchmarks share and start; no benchmark lives here.

Statistics, a private database and results (harness), /proc readings (proc_stats), the live
stack's child processes (stack), the slow model server (slow_model) and the websocket clients'
process (ws_clients).
"""
