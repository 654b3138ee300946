"""Search mode (issue 28): filterbanks for pulsar and burst searches (`filterbank.py`,
its plan and NumPy reference; `quantise.py`, the running 8-bit quantiser) and the
single-pulse search (`single_pulse.py`, its NumPy reference; `candidates.py`, clusters
and heimdall's candidate lines). docs/search.md has the contract."""
