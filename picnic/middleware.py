from __future__ import annotations

# Everything is served from our origin (htmx is vendored, no CDN); no inline scripts.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'self'; form-action 'self'"
)


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        # The admin ships inline scripts of its own; our pages get the strict policy.
        if not request.path.startswith("/admin/"):
            response.setdefault("Content-Security-Policy", CSP)
        return response
