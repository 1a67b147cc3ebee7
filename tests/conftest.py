"""Shared fixtures. Kernel-facing fixtures live in tests/integration/conftest.py."""
