from django.apps import AppConfig

from core.agent_logos import register_logo_lookup
from core.agents import user_deactivated


class OAuthConfig(AppConfig):
    name = "oauth"
    label = "oauth"
    verbose_name = "OAuth agents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # In ready(): oauth.services imports the models, which exist only once apps load.
        from oauth import cimd, services

        cimd.install_loopback_switch()
        register_logo_lookup(services.application_logo_shown)
        user_deactivated.connect(services.on_user_deactivated, dispatch_uid="oauth-deactivated")
