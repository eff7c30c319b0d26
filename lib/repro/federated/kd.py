"""Knowledge-distillation losses shared by the federated chapters."""

from __future__ import annotations

import torch


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Hinton's distillation loss ``T^2 * KL(softmax(t/T) || softmax(s/T))``, averaged over the batch.

    Parameters
    ----------
    student_logits, teacher_logits
        Logits of shape ``(batch, classes)``; the teacher's are not differentiated.
    temperature
        Softening temperature ``T`` (> 0).
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(f"logit shapes differ: {tuple(student_logits.shape)} vs {tuple(teacher_logits.shape)}")
    log_p_s = torch.log_softmax(student_logits / temperature, dim=1)
    log_p_t = torch.log_softmax(teacher_logits.detach() / temperature, dim=1)
    kl = torch.sum(log_p_t.exp() * (log_p_t - log_p_s), dim=1)
    return temperature**2 * kl.mean()
