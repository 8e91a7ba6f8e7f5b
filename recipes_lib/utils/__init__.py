"""The reference cookbook's `utils` modules under their names: `ml_log`, `misc_utils`,
`format_colorized`. Each re-exports the project's own implementation (same objects)."""
