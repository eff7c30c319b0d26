"""Medical imaging: CT-to-PET translation and PET/CT report generation on synthetic phantoms.

Core modules (used by both chapters):

- :mod:`repro.medical.phantom`: procedural CT/PET torso phantoms (2D slices and
  3D volumes) with lesion masks and structured findings; it stands in for the
  clinical datasets, which cannot be downloaded here.
- :mod:`repro.medical.attenuation`: the bilinear HU-to-511 keV attenuation conversion.
- :mod:`repro.medical.metrics`: PSNR and SSIM (scikit-image) and MAE, on whole
  images and inside lesion masks.
- :mod:`repro.medical.unet`: a small 2D UNet with condition channels and a Dice loss.
- :mod:`repro.medical.reports`: templated Vietnamese reports, the rule-based field
  extractor, field accuracy, BLEU-4 (sacrebleu) and ROUGE-L (rouge-score).
- :mod:`repro.medical.figures`: image panels shared by the chapters.
- :mod:`repro.medical.runs`: the per-seed job, the sweep over seeds in worker
  processes and the network checkpoint writer.

Methods
-------
- :mod:`repro.medical.cpdm`: CPDM's attenuation and attention maps around the shared
  Brownian bridge (:mod:`repro.bridge`); without maps it is the BBDM backbone.
- :mod:`repro.medical.regression`: the L1 regression UNet baseline.
- :mod:`repro.medical.report_generator`: a 3D-CNN encoder with a GRU decoder.

Chapters: :mod:`repro.medical.chapters.cpdm`, :mod:`repro.medical.chapters.vimedpet`.
"""
