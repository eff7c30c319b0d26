"""Chapter drivers of the medical-imaging family: ``cpdm`` (CT-to-PET translation) and ``vimedpet`` (PET/CT report generation)."""
