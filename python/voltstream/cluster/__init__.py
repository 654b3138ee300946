"""Many nodes, one observation (issue 16): for now the row merger (`merge.py`), the
part every transport and writer of that issue builds on; the design is in
docs/research/dask-scale-out.md."""
