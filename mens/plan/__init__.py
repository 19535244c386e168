"""Plan stage. In: a composed config. Out: an immutable RunSpec (every `auto` resolved) and a
Plan — predicted peak by component against the budget, the chosen shape, or a refusal with
ways out — written as spec.yaml + plan.json. Imports no torch / transformers / lightning (the
device probe in detect.py excepted): planning stays instant."""
