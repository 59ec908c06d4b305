"""The dev package: everything that runs or fakes the system locally and never runs in
production. The run commands (`run_local`, `run_prod`, `run_cluster`, `seed_demo`), the demo
data, the local stand-ins of outside providers, the process and cluster runners, and the test
helpers. Production code never imports it (core/layers.py, DEV_ONLY_PACKAGES); settings add
the app only outside production (picnic/settings.py, DEV_APPS)."""
