from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class PicnicConfig(AppConfig):
    """This deployment: settings, URLs, the process entry points, the admin site, static
    files. The shared machinery is the `core` app."""

    name = "picnic"
    verbose_name = "Picnic (this deployment)"

    def ready(self) -> None:
        # Every process sets Django up before it serves or runs anything: OpenTelemetry (the
        # ids of every request and task; spans exported when OTEL_EXPORTER_OTLP_ENDPOINT is
        # set) is configured here, once.
        from picnic import otel

        otel.configure()


class PicnicAdminConfig(admin_apps.AdminConfig):
    """django.contrib.admin with picnic.admin.PicnicAdminSite as `admin.site` (the index lists
    the three apps first); picnic.admin is imported only once the apps are loaded."""

    default = False  # `picnic` itself is PicnicConfig
    default_site = "picnic.admin.PicnicAdminSite"
