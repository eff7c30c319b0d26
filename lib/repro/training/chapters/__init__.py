"""Chapter drivers of the training-systems family (one module per chapter, beside its registry yaml)."""
