"""What a fold may be asked for, stated once for the command line and the pipeline
file (both check a fold's options against these before any work)."""

#: The most phase bins `fold` makes: 65536 bins resolve 0.5 us of a 33 ms pulsar, and
#: one sub-integration of 256 channels x 4 pols stays at 256 MiB of float32 (a bin
#: count beyond any period's samples only asks for memory).
MAX_NBIN = 1 << 16
