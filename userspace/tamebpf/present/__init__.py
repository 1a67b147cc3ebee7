"""Presentation of model results: plain data in, JSON-ready dicts or text out."""
