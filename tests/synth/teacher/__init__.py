"""A package, so that its conftest.py is not imported as the module `conftest` (tests/conftest.py is)."""
