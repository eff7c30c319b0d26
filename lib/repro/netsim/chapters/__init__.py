"""Chapter drivers of the vehicular and sensor-network family (one module per chapter)."""
