"""Rendering only: terminal tables, JSON, CSV, Markdown, plots. No arithmetic."""
