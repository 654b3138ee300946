"""Search mode: single-pulse search of filterbanks (docs/search.md)."""
