"""Chapter drivers of the parallel I/O family (one module per chapter)."""
