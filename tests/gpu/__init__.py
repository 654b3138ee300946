"""GPU tests: run with `make gpu-test` on a machine with CuPy and a CUDA GPU."""
