"""Structured outputs (``cascade/StructuredOutput-v0``): JSON/YAML/TOML/CSV checked against a strict schema."""
