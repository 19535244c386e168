"""Calibration evidence: the records behind conf/contract.yaml and their report."""
