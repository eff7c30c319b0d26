"""Chapter drivers of the collectives family: one module per chapter, beside its registry file ``<id>.yaml``."""
