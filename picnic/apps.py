from django.apps import AppConfig


class PicnicConfig(AppConfig):
    name = "picnic"
    verbose_name = "Picnic (shared lifecycle machinery)"

    def ready(self) -> None:
        from picnic.events import on_entity_changed, on_status_changed
        from picnic.lifecycle import entity_changed, status_changed

        # Every committed transition, and every visible change without one, goes on the event
        # channel (the MCP adapter listens).
        status_changed.connect(on_status_changed, dispatch_uid="picnic-events")
        entity_changed.connect(on_entity_changed, dispatch_uid="picnic-events-changed")
