"""Chapter drivers of the misc family (one module per chapter)."""
