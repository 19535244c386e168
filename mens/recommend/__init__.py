"""`python -m mens.recommend` = `mens recommend` (mens.cli.recommend; the work: mens.cloud.recommend)."""
