"""Many nodes, one observation (issue 16; docs/scale-out.md): subbands captured and
folded on N nodes of a Dask cluster, merged into one archive.

- `node.py`: a node's task (capture or read, fold, send rows), `engines.py` its CPU or
  GPU fold;
- `merge.py`: rows of the whole band from the nodes' rows (the completion rules);
- `merger.py`: the Dask actor that merges and appends to the archive
  (io/psrfits_append.py);
- `driver.py`: plans, starts, watches and reports an observation;
- `local.py` and `netns.py`: a cluster of `dask scheduler`/`dask worker` processes on
  one machine, each node in its own network namespace when root (the demo, tests and
  bench/cluster.py).
"""
