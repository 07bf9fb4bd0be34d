"""Outputs: reports, tables, files."""
