"""Where a model comes from (torch-free): the family table (families.py: one `Family` row per
model family with every per-family fact), config.json reading, the local hub cache walk
(weights.py), hub downloads (hub.py) and resolving a rung to its files (resolve.py). Planning,
data, export and model loading read these; nothing here loads weights."""
