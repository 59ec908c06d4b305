from django.apps import AppConfig


class OAuthConfig(AppConfig):
    name = "oauth"
    label = "oauth"
    verbose_name = "OAuth agents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # In ready(): oauth.services imports the models, which exist only once apps load.
        from oauth import cimd

        cimd.install_loopback_switch()
