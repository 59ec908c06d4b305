from django.apps import AppConfig


class McpAdapterConfig(AppConfig):
    name = "mcp_adapter"
    verbose_name = "MCP adapter"
