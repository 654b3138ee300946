"""Operations: a running verb's counters as Prometheus metrics and JSON over HTTP
(`--metrics HOST:PORT`), and `voltstream status`, the live terminal view of them.

Nothing here is imported by the verbs' libraries: a run hands its report-so-far
callable to a `RunStatus` (board.py) through a plain callback, so the product path
never depends on prometheus-client or rich. Modules stay importable one by one; this
file imports none of them, so building the command line stays fast.
"""
