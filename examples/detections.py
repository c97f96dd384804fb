"""Detections compared as a detector means them, not element by element: where two peaks score within
tolerance of each other, another precision or kernel can order them otherwise in the top-k, and whole boxes trade
places although every detection is right."""
from __future__ import annotations

import torch


def pair_detections(a, b, atol: float, rtol: float):
    """Each detection of ``a`` (boxes [B, K, F] with the centre first, scores [B, K], labels [B, K]) paired with the
    nearest same-class detection of ``b`` whose centre is within the box tolerance (ten times ``atol``/``rtol``).
    Returns (a's boxes, b's boxes matched to them, the paired mask [B, K]), as float."""
    boxes_a, _, labels_a = (t.float() if t.is_floating_point() else t for t in a)
    boxes_b, _, labels_b = (t.float() if t.is_floating_point() else t for t in b)
    box_atol, box_rtol = atol * 10, rtol * 10
    xy_a, xy_b = boxes_a[..., :, None, :2], boxes_b[..., None, :, :2]  # [B, K, 1, 2], [B, 1, K, 2]
    close = ((xy_a - xy_b).abs() <= box_atol + box_rtol * xy_b.abs()).all(dim=-1)
    close &= labels_a[..., :, None] == labels_b[..., None, :]
    dist = torch.cdist(boxes_a[..., :2], boxes_b[..., :2]).masked_fill(~close, float("inf"))  # [B, K, K]
    nearest, j = dist.min(dim=-1)
    matched_b = torch.gather(boxes_b, 1, j[..., None].expand(-1, -1, boxes_b.shape[-1]))
    return boxes_a, matched_b, torch.isfinite(nearest)


def compare_detections(a, b, atol: float, rtol: float, min_matched: float = 0.9) -> None:
    """Sorted scores must match. Peaks whose scores tie within tolerance may
    swap places in the top-k (or at its cut-off), so each detection of ``a``
    is paired with the nearest same-class detection of ``b`` whose centre is
    within the box tolerance; at least ``min_matched`` of them must pair up,
    and paired boxes must match in every field."""
    torch.testing.assert_close(a[1].float(), b[1].float(), atol=atol, rtol=rtol)
    boxes_a, matched_b, paired = pair_detections(a, b, atol, rtol)
    if paired.float().mean() < min_matched:
        raise AssertionError(f"only {paired.float().mean():.0%} of detections pair up with a same-class detection")
    torch.testing.assert_close(boxes_a[paired], matched_b[paired], atol=atol * 10, rtol=rtol * 10)


def compare_at_cutoff(a, b, atol: float, rtol: float) -> None:
    """As ``compare_detections``, but stricter about what may go unpaired, in both directions (a detection
    repeated in one output leaves one of the other unpaired): only a detection whose score ties the lowest kept
    score within tolerance (a peak at the top-k's cut-off, where another order keeps another one)."""
    torch.testing.assert_close(a[1].float(), b[1].float(), atol=atol, rtol=rtol)
    for first, second in ((a, b), (b, a)):
        boxes, matched, paired = pair_detections(first, second, atol, rtol)
        torch.testing.assert_close(boxes[paired], matched[paired], atol=atol * 10, rtol=rtol * 10)
        scores = first[1].float()
        cutoff = second[1].float().min(dim=-1, keepdim=True).values.expand_as(scores)
        stray = ~paired & ((scores - cutoff).abs() > atol + rtol * cutoff.abs())
        if bool(stray.any()):
            raise AssertionError(f"{int(stray.sum())} detection(s) scoring above the top-k's cut-off have no "
                                 "same-class detection with the same centre in the other output")
