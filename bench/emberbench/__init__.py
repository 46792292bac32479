"""emberbench: the modules behind bench/run.py, the ember benchmark harness.

bench/run.py owns the command line and the order of events; this package owns the pieces:
config (constants, job/engine tables, logging), machine (machine description), data (data
sets and manifests), build (ember's example binaries and cluster daemons), engines (reference
detection and each engine's command line), runs (one measured, checked run), checks (answer
verification), cluster (the local driver + executors of the `cluster` and `faults` jobs),
faults (the `faults` job: an executor killed mid-shuffle, reruns counted from the driver log)
and report (medians, markdown, plot). Stdlib only (Python 3.11).
"""
