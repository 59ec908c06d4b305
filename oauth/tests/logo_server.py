"""A local web site for agents' logos (dev/local_server.py): a PNG, an SVG, an SVG that says
it is a PNG, files over the size limit (one declared, one not), an answer that never comes, one sent a
byte a second,
and redirects to a private and a metadata address. It counts the requests per path."""

from __future__ import annotations

import io
from collections import Counter
from http.server import BaseHTTPRequestHandler

from PIL import Image, ImageDraw

from dev.local_server import LocalJsonServer

SVG = (
    b'<svg xmlns="http://www.w3.org/2000/svg" width="64" height="64">'
    b'<script>alert(document.domain)</script><rect width="64" height="64" fill="red"/></svg>'
)
TOO_BIG = 300 * 1024  # over the default 256 KB


def logo_png(size: int = 200) -> bytes:
    """A square logo: a teal disc with a white bar, on transparency."""
    image = Image.new("RGBA", (size, size), (0, 0, 0, 0))
    draw = ImageDraw.Draw(image)
    draw.ellipse((0, 0, size - 1, size - 1), fill=(0, 128, 128, 255))
    draw.rectangle((size // 4, size * 2 // 5, size * 3 // 4, size * 3 // 5), fill="white")
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


class LogoServer(LocalJsonServer):
    def __init__(self) -> None:
        super().__init__()
        self.hits: Counter[str] = Counter()
        self.png = logo_png()

    def on_get(self, handler: BaseHTTPRequestHandler) -> None:
        path = handler.path
        self.hits[path] = self.hits[path] + 1
        if path == "/logo.png":
            self._answer(handler, "image/png", self.png)
        elif path == "/logo.svg":
            self._answer(handler, "image/svg+xml", SVG)
        elif path == "/disguised.png":
            self._answer(handler, "image/png", SVG)
        elif path == "/big.png":
            self._answer(handler, "image/png", self.png + b"\0" * TOO_BIG)
        elif path == "/endless.png":  # no length said: read until the connection closes
            handler.send_response(200)
            handler.send_header("Content-Type", "image/png")
            handler.send_header("Connection", "close")
            handler.end_headers()
            handler.close_connection = True
            handler.wfile.write(self.png + b"\0" * TOO_BIG)
        elif path == "/hang.png":
            self.hang()
        elif path == "/drip.png":  # a whole logo, one byte a second
            self.drip_answer(handler, "image/png", self.png)
        elif path in ("/private.png", "/metadata.png"):
            target = "10.0.0.1" if path == "/private.png" else "169.254.169.254"
            handler.send_response(302)
            handler.send_header("Location", f"http://{target}/logo.png")
            handler.send_header("Content-Length", "0")
            handler.end_headers()
        else:
            self.send(handler, 404, b"{}")

    @staticmethod
    def _answer(handler: BaseHTTPRequestHandler, kind: str, body: bytes) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", kind)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
