"""Rendering: text summaries and tables, plots, the HTML page. Nothing here computes results."""
