"""Many nodes, one observation (issue 16, in progress): for now the row merger
(`merge.py`), the part every transport of that issue builds on, with the appending
archive it will write (`io/psrfits_append.py`), and the node namespaces of the demo
(`netns.py`: each node on its own address, as on a real host); the design is in
docs/research/dask-scale-out.md."""
