"""Config stage. In: Hydra overrides (`+hw=…`, `lane=qlora`, `train.seq_len=512`), the shipped
option files (mens.conf, mens.recipes) and the user's ./conf. Out: a composed DictConfig checked
against the typed schemas (schema.py), with every bad key or value turned into one paragraph
(explain.py, exit 2). options.py reads single option files fast, for the planner's ways out."""
