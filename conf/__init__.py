"""Shipped config groups, read through importlib.resources (mens.resources)."""
