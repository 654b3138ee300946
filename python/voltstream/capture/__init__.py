"""The capture's Python side: its settings (`config.py`: `CaptureSettings`, opened
as `_core.Capture`; `defaults.py`: the core's defaults, read once), the one capture
loop every live product runs on (`run.py`: `run_capture`, `CaptureRun`, the CPU
sinks), the chunk timeline (`timeline.py`: blocks and gaps in time order, one band
over several streams and threads), the run's report (`report.py`) and per-stage
times (`stage_times.py`). The packets themselves are placed by the Rust core."""
