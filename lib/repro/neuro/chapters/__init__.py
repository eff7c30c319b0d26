"""Chapter drivers of the neuro family (one module per chapter)."""
