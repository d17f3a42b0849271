"""Labeling (02): text trajectories of the loop -> the labeled arrays of the data contract."""
from .labeling import build_setting, finalize_setting, label_probe, label_records, relabel  # noqa: F401
