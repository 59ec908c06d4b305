"""Demo data for `manage.py seed_demo`, one module per domain app."""
