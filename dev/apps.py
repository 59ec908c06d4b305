from django.apps import AppConfig


class DevConfig(AppConfig):
    """The run commands (`manage.py run_local`, `run_prod`, `run_cluster`, `seed_demo`). No
    models, no templates: installed or not, the database and the pages are the same."""

    name = "dev"
    verbose_name = "Local runs and demo data"
