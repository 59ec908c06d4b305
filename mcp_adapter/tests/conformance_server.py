"""The test-only "conformance" profile: the `core` server plus the fixture tools, resources and
prompts the official conformance suite (`@modelcontextprotocol/conformance` 0.1.16, server
scenarios) calls by name, registered on the same server machinery (the SDK's decorators on a
`PicnicMCP`, served by `mcp_adapter.http`). It lives under tests/ so no deployment can serve it.
The fixtures follow the suite's reference servers (its TypeScript everything-server and the
Python SDK's examples/servers/everything-server)."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import mcp_types as types
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.prompts.base import UserMessage
from pydantic import BaseModel, Field

from mcp_adapter.server import PicnicMCP

PROFILE = "conformance"
TEST_IMAGE_BASE64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
TEST_AUDIO_BASE64 = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="
JSON_SCHEMA_2020_12_INPUT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False,
}


class ConformanceMCP(PicnicMCP):
    """`core` tools first; a name that is no product tool goes to the SDK's tool manager."""

    def __init__(self, **kwargs):
        super().__init__(profile="core", **kwargs)
        self.profile = PROFILE
        _register_fixtures(self)

    async def list_tools(self) -> list[types.Tool]:
        return [*await super().list_tools(), *await MCPServer.list_tools(self)]

    def _tool_input_schema(self, name: str):
        return super()._tool_input_schema(name) or MCPServer._tool_input_schema(self, name)

    async def _call_tool(self, name: str, arguments: dict[str, Any], context=None):
        if name in self.specs or self._tool_manager.get_tool(name) is None:
            return await super()._call_tool(name, arguments, context)
        return await MCPServer.call_tool(self, name, arguments, context)

    async def _refusal(self, uri: str) -> str | None:
        return None if uri.startswith("test://") else await super()._refusal(uri)


class UserResponse(BaseModel):
    response: str = Field(description="User's response")


class DefaultsSchema(BaseModel):
    """SEP-1034: a default for every primitive type."""

    name: str = Field(default="John Doe", description="User name")
    age: int = Field(default=30, description="User age")
    score: float = Field(default=95.5, description="User score")
    status: str = Field(
        default="active",
        description="User status",
        json_schema_extra={"enum": ["active", "inactive", "pending"]},
    )
    verified: bool = Field(default=True, description="Verification status")


class EnumSchema(BaseModel):
    """SEP-1330: the enum schema variations."""

    untitledSingle: str = Field(  # noqa: N815 - the suite's field names
        description="Simple enum without titles",
        json_schema_extra={"enum": ["option1", "option2", "option3"]},
    )
    titledSingle: str = Field(  # noqa: N815
        description="Enum with titled options (oneOf)",
        json_schema_extra={
            "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ]
        },
    )
    legacyEnum: str = Field(  # noqa: N815
        description="Legacy enum with enumNames",
        json_schema_extra={
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
    )
    untitledMulti: list[str] = Field(  # noqa: N815
        description="Multi-select without titles",
        json_schema_extra={
            "minItems": 1,
            "maxItems": 3,
            "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
        },
    )
    titledMulti: list[str] = Field(  # noqa: N815
        description="Multi-select with titled options",
        json_schema_extra={
            "minItems": 1,
            "maxItems": 3,
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"},
                ]
            },
        },
    )


def _register_fixtures(mcp: ConformanceMCP) -> None:  # noqa: C901 - one list of fixtures
    @mcp.tool()
    def test_simple_text() -> str:
        """Tests simple text content response"""
        return "This is a simple text response for testing."

    @mcp.tool()
    def test_image_content() -> list[types.ImageContent]:
        """Tests image content response"""
        return [types.ImageContent(type="image", data=TEST_IMAGE_BASE64, mime_type="image/png")]

    @mcp.tool()
    def test_audio_content() -> list[types.AudioContent]:
        """Tests audio content response"""
        return [types.AudioContent(type="audio", data=TEST_AUDIO_BASE64, mime_type="audio/wav")]

    def _resource(uri: str, mime_type: str, text: str) -> types.EmbeddedResource:
        contents = types.TextResourceContents(uri=uri, mime_type=mime_type, text=text)
        return types.EmbeddedResource(type="resource", resource=contents)

    @mcp.tool()
    def test_embedded_resource() -> list[types.EmbeddedResource]:
        """Tests embedded resource content response"""
        return [
            _resource(
                "test://embedded-resource", "text/plain", "This is an embedded resource content."
            )
        ]

    @mcp.tool()
    def test_multiple_content_types() -> list[
        types.TextContent | types.ImageContent | types.EmbeddedResource
    ]:
        """Tests response with multiple content types (text, image, resource)"""
        return [
            types.TextContent(type="text", text="Multiple content types test:"),
            types.ImageContent(type="image", data=TEST_IMAGE_BASE64, mime_type="image/png"),
            _resource(
                "test://mixed-content-resource",
                "application/json",
                json.dumps({"test": "data", "value": 123}),
            ),
        ]

    @mcp.tool()
    async def test_tool_with_logging(ctx: Context) -> str:
        """Tests tool that emits log messages during execution"""
        for text in ("Tool execution started", "Tool processing data", "Tool execution completed"):
            await ctx.log("info", text)
            await asyncio.sleep(0.05)
        return "Tool with logging executed successfully"

    @mcp.tool()
    async def test_tool_with_progress(ctx: Context) -> str:
        """Tests tool that reports progress notifications"""
        for step in (0, 50, 100):
            await ctx.report_progress(
                progress=step, total=100, message=f"Completed step {step} of 100"
            )
            await asyncio.sleep(0.05)
        meta = ctx.request_context.meta if ctx.request_context else None
        return str((meta or {}).get("progress_token", 0))

    @mcp.tool()
    def test_error_handling() -> str:
        """Tests error response handling"""
        raise RuntimeError("This tool intentionally returns an error for testing")

    @mcp.tool()
    async def test_reconnection(ctx: Context) -> str:
        """Tests SSE polling by closing the stream mid-call (SEP-1699)"""
        await ctx.log("info", "Before disconnect")
        await ctx.close_sse_stream()
        await asyncio.sleep(0.2)  # the client reconnects with Last-Event-ID meanwhile
        await ctx.log("info", "After reconnect")
        return "Reconnection test completed"

    @mcp.tool()
    async def test_sampling(prompt: str, ctx: Context) -> str:
        """Tests server-initiated sampling (LLM completion request)"""
        result = await ctx.session.create_message(
            messages=[
                types.SamplingMessage(
                    role="user", content=types.TextContent(type="text", text=prompt)
                )
            ],
            max_tokens=100,
            related_request_id=ctx.request_id,
        )
        text = result.content.text if result.content.type == "text" else "No response"
        return f"LLM response: {text}"

    @mcp.tool()
    async def test_elicitation(message: str, ctx: Context) -> str:
        """Tests server-initiated elicitation (user input request)"""
        result = await ctx.elicit(message=message, schema=UserResponse)
        content = result.data.model_dump_json() if result.action == "accept" else "{}"
        return f"User response: action={result.action}, content={content}"

    @mcp.tool()
    async def test_elicitation_sep1034_defaults(ctx: Context) -> str:
        """Tests elicitation with default values for all primitive types (SEP-1034)"""
        result = await ctx.elicit(message="Please provide user information", schema=DefaultsSchema)
        content = result.data.model_dump_json() if result.action == "accept" else "{}"
        return f"Elicitation result: action={result.action}, content={content}"

    @mcp.tool()
    async def test_elicitation_sep1330_enums(ctx: Context) -> str:
        """Tests elicitation with enum schema variations per SEP-1330"""
        result = await ctx.elicit(
            message="Please select values using different enum schema types", schema=EnumSchema
        )
        content = result.data.model_dump_json() if result.action == "accept" else "{}"
        return f"Elicitation completed: action={result.action}, content={content}"

    @mcp.tool(name="json_schema_2020_12_tool")
    def json_schema_2020_12_tool() -> str:
        """Tool with JSON Schema 2020-12 features for conformance testing (SEP-1613)"""
        return "json_schema_2020_12_tool"

    # The SDK derives schemas from signatures; this one is the suite's, verbatim.
    mcp._tool_manager.get_tool(
        "json_schema_2020_12_tool"
    ).parameters = JSON_SCHEMA_2020_12_INPUT_SCHEMA

    @mcp.resource("test://static-text", mime_type="text/plain")
    def static_text() -> str:
        """A static text resource for testing"""
        return "This is the content of the static text resource."

    @mcp.resource("test://static-binary", mime_type="image/png")
    def static_binary() -> bytes:
        """A static binary resource (image) for testing"""
        return base64.b64decode(TEST_IMAGE_BASE64)

    @mcp.resource("test://template/{id}/data", mime_type="application/json")
    def template(id: str) -> str:  # noqa: A002 - the template's variable
        """A resource template with parameter substitution"""
        return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})

    @mcp.resource("test://watched-resource", mime_type="text/plain")
    def watched() -> str:
        """A resource that can be subscribed to for updates"""
        return "Watched resource content"

    @mcp.prompt()
    def test_simple_prompt() -> list[UserMessage]:
        """A simple prompt without arguments"""
        return [
            UserMessage(
                content=types.TextContent(type="text", text="This is a simple prompt for testing.")
            )
        ]

    @mcp.prompt()
    def test_prompt_with_arguments(arg1: str, arg2: str) -> list[UserMessage]:
        """A prompt with required arguments"""
        text = f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"
        return [UserMessage(content=types.TextContent(type="text", text=text))]

    @mcp.prompt()
    def test_prompt_with_embedded_resource(resourceUri: str) -> list[UserMessage]:  # noqa: N803
        """A prompt that includes an embedded resource"""
        return [
            UserMessage(
                content=_resource(
                    resourceUri, "text/plain", "Embedded resource content for testing."
                )
            ),
            UserMessage(
                content=types.TextContent(
                    type="text", text="Please process the embedded resource above."
                )
            ),
        ]

    @mcp.prompt()
    def test_prompt_with_image() -> list[UserMessage]:
        """A prompt that includes image content"""
        return [
            UserMessage(
                content=types.ImageContent(
                    type="image", data=TEST_IMAGE_BASE64, mime_type="image/png"
                )
            ),
            UserMessage(
                content=types.TextContent(type="text", text="Please analyze the image above.")
            ),
        ]

    async def set_level(ctx, params: types.SetLevelRequestParams) -> types.EmptyResult:
        return types.EmptyResult()

    mcp._lowlevel_server.add_request_handler(
        "logging/setLevel", types.SetLevelRequestParams, set_level
    )

    @mcp.completion()
    async def complete(ref, argument, context) -> types.Completion:
        return types.Completion(values=[], total=0, has_more=False)
