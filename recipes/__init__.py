"""Shipped named recipes (`+recipe=NAME`), read through importlib.resources."""
