"""Django settings for the Picnic back-office.

Everything deployment-specific comes from environment variables (see README, "Settings");
the defaults run the whole system on one machine: SQLite under var/, a filesystem Celery
broker, and the local chain stack on 127.0.0.1.
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured

from core.chains import parse_chains
from core.logs import logging_config
from picnic.brokers import amqp_celery_settings, dead_letter_queue, publish_bound_settings
from picnic.env import (
    database_settings,
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_is_set,
    env_json,
    env_list,
    env_str,
    env_url,
    machine_secret,
    trusted_proxies,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("PICNIC_VAR_DIR", str(BASE_DIR / "var")))

# Off unless asked: `make run` sets DJANGO_DEBUG=true for the embedded setup. Tests run with
# DEBUG off too (pytest-django forces it).
DEBUG = env_bool("DJANGO_DEBUG", False)
_DEV_SECRET = "dev-only-insecure-secret-key-do-not-use-in-production"
SECRET_KEY = env_str("DJANGO_SECRET_KEY", "")
if not SECRET_KEY:
    if DEBUG:
        SECRET_KEY = _DEV_SECRET
    elif env_is_set("DJANGO_DEBUG"):
        # DJANGO_DEBUG=false says "production": a key must be given, not made up.
        raise ImproperlyConfigured("DJANGO_SECRET_KEY must be set when DJANGO_DEBUG is false")
    else:
        # Nothing said (tests, lint, one-off commands): never the public dev key with DEBUG
        # off, but a random one kept under var/ so every process on this machine agrees.
        SECRET_KEY = machine_secret(VAR_DIR / "secret_key")
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost"])
if not DEBUG and "*" in ALLOWED_HOSTS:
    raise ImproperlyConfigured("DJANGO_ALLOWED_HOSTS must name the hosts when DEBUG is off, not *")
# Every error report (500 page under DEBUG, admin e-mails, logs) masks secrets, including the
# password part of URL-valued settings such as DATABASE_URL and CELERY_BROKER_URL.
DEFAULT_EXCEPTION_REPORTER_FILTER = "core.debug.SecretMaskingExceptionReporterFilter"

INSTALLED_APPS = [
    # django.contrib.admin whose site orders the index (picnic.admin.PicnicAdminSite).
    "picnic.apps.PicnicAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "oauth2_provider",
    "drf_spectacular",
    "django_htmx",
    "template_partials",
    # The shared machinery (lifecycle, events, health, metrics, admin helpers, template tags).
    "core",
    # This deployment: its admin site, process hooks and static files.
    "picnic",
    "actions",
    "messaging",
    "operations",
    "mcp_adapter",
    "console",
    "oauth",
]
# The dev app (dev/: run_local, run_prod, run_cluster, seed_demo; the demo data, the local
# providers, the test helpers). Installed unless DJANGO_DEBUG=false says "production": so in
# `make run`, the tests and one-off commands. `make prod`/`make cluster` set PICNIC_DEV_APPS=1
# for their runner command only; the processes it starts run without it.
DEV_APPS = env_bool("PICNIC_DEV_APPS", DEBUG or not env_is_set("DJANGO_DEBUG"))
if DEV_APPS:
    INSTALLED_APPS.append("dev")

MIDDLEWARE = [
    # Before everything that reads REMOTE_ADDR (the access line, throttles, device records).
    "core.proxy.ClientAddressMiddleware",
    # Next: the trace covers everything below, and the access line sees every response.
    "core.middleware.TraceMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Static files from the web process itself (no separate file server), before sessions.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # After sessions, before common: end-user pages in the user's language (core/i18n.py).
    "core.i18n.EndUserLocaleMiddleware",
    # The admin and staff pages in the staff member's time zone (a cookie; core.timezones).
    "core.timezones.StaffTimezoneMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "core.middleware.ContentSecurityPolicyMiddleware",
]

ROOT_URLCONF = "picnic.urls"
WSGI_APPLICATION = "picnic.wsgi.application"
ASGI_APPLICATION = "picnic.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database ------------------------------------------------------------------------------
DATABASE_URL = env_url(
    "DATABASE_URL",
    f"sqlite:///{VAR_DIR / 'picnic.sqlite3'}",
    schemes=("sqlite", "postgres", "postgresql", "pgsql"),
)
# Several hosts (a primary and its standby under pg_auto_failover) in libpq's form:
# postgres://user@h1:5432,h2:5432/db?target_session_attrs=read-write (docs/deploy.md).
DATABASES = {"default": database_settings("DATABASE_URL", DATABASE_URL, conn_max_age=60)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A web process and a worker share the file: wait for the write lock instead of failing.
    DATABASES["default"]["OPTIONS"] = {"timeout": 20, "transaction_mode": "IMMEDIATE"}
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    # A file, not :memory:, so a real Celery worker subprocess can share the test database.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}
# The ASGI web process runs each request in a thread of its own, so a persistent connection
# would be left behind with every request until PostgreSQL refuses more clients (Django: "when
# using ASGI, persistent connections should be disabled"). It uses a psycopg pool instead:
# picnic/gunicorn_conf.py turns DATABASE_POOL on. Workers and commands keep persistent ones.
DATABASE_POOL = env_bool("DATABASE_POOL", False)
if DATABASE_POOL and DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1,
        "max_size": env_int("DATABASE_POOL_MAX_SIZE", 10, minimum=1),
        "timeout": env_float("DATABASE_POOL_TIMEOUT_SECONDS", 10.0),
    }
# A transition's statement (core/lifecycle_sql.py) is prepared on each connection after this
# many runs of it. Django leaves psycopg's preparation off for every other statement, for the
# sake of transaction-mode poolers (pgbouncer before 1.21): behind one, set 0 (never).
DATABASE_PREPARE_THRESHOLD = env_int("DATABASE_PREPARE_THRESHOLD", 5, minimum=0)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Auth, i18n, static --------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
# End users sign in to manage their passkeys; staff come through /admin/login/ (its own next).
LOGIN_REDIRECT_URL = "front-door"  # staff: the console; end users: their activity
# The end user's logout (a POST from the page header) lands back on the sign-in page.
LOGOUT_REDIRECT_URL = "login"
# Every password check (the login page, the admin's, any authenticate() call) counts failures
# per username and client address, per address and per username; see core/login.py.
AUTHENTICATION_BACKENDS = ["core.login.ThrottledModelBackend"]
LOGIN_MAX_FAILURES = env_int("LOGIN_MAX_FAILURES", 5, minimum=1)
LOGIN_LOCKOUT_SECONDS = env_int("LOGIN_LOCKOUT_SECONDS", 900, minimum=1)
# From one address whatever the usernames, and for one username from all addresses (generous:
# locking a victim out takes many addresses; a browser that signed in before is let through).
LOGIN_MAX_FAILURES_PER_ADDRESS = env_int("LOGIN_MAX_FAILURES_PER_ADDRESS", 30, minimum=1)
LOGIN_MAX_FAILURES_PER_ACCOUNT = env_int("LOGIN_MAX_FAILURES_PER_ACCOUNT", 100, minimum=1)
LANGUAGE_CODE = "en-us"
# End-user pages (login, passkeys, signing) speak the users' languages: Brazil and Europe
# (BRL and EUR ramps). The choice comes from the switcher (a cookie, Django's set_language
# view), else Accept-Language; back-office pages stay English (core/i18n.py).
LANGUAGES = [("pt-br", "Português (Brasil)"), ("es", "Español"), ("en", "English")]
LOCALE_PATHS = [BASE_DIR / "locale"]
LANGUAGE_COOKIE_NAME = "picnic_language"
LANGUAGE_COOKIE_AGE = 365 * 24 * 3600
LANGUAGE_COOKIE_SAMESITE = "Lax"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# Dates to the second with their zone, no microseconds, no a.m./p.m. (picnic/locale_formats).
FORMAT_MODULE_PATH = ["core.locale_formats"]
STATIC_URL = "static/"
# `manage.py collectstatic` (the release step) writes here; the web process serves it.
STATIC_ROOT = Path(env_str("DJANGO_STATIC_ROOT", str(VAR_DIR / "static")))
# Production (DJANGO_DEBUG=false said explicitly): hashed, compressed file names from the
# collectstatic manifest, cached for a year. Elsewhere (make run, tests) files come straight
# from the apps' static folders, so nothing needs collectstatic first.
STATIC_MANIFEST = env_bool("DJANGO_STATIC_MANIFEST", not DEBUG and env_is_set("DJANGO_DEBUG"))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if STATIC_MANIFEST
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}
WHITENOISE_USE_FINDERS = not STATIC_MANIFEST
if not STATIC_MANIFEST:
    # WhiteNoise also indexes STATIC_ROOT at start and warns when it is missing.
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)

# --- HTTPS -----------------------------------------------------------------------------------
# On when the deployment says it is served over TLS: PUBLIC_BASE_URL is https (override with
# DJANGO_SECURE_SSL). Then cookies are Secure, HSTS is sent and http:// redirects to https://.
# Off for the embedded default and CI, which serve http://127.0.0.1.
PUBLIC_BASE_URL = env_url(
    "PUBLIC_BASE_URL",
    env_url("WEBAUTHN_ORIGIN", "http://localhost:8000", schemes=("http", "https")),
    schemes=("http", "https"),
)
SECURE_SSL = env_bool("DJANGO_SECURE_SSL", PUBLIC_BASE_URL.startswith("https://"))
SECURE_SSL_REDIRECT = SECURE_SSL
SESSION_COOKIE_SECURE = SECURE_SSL
CSRF_COOKIE_SECURE = SECURE_SSL
LANGUAGE_COOKIE_SECURE = SECURE_SSL
SECURE_HSTS_SECONDS = env_int("DJANGO_HSTS_SECONDS", 31_536_000 if SECURE_SSL else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_HSTS_INCLUDE_SUBDOMAINS", SECURE_SSL)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_HSTS_PRELOAD", False)
# Load balancers probe the health endpoints over plain http inside the network: no redirect.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
# Behind a TLS-terminating proxy that sets X-Forwarded-Proto (and strips it from clients).
if env_bool("DJANGO_BEHIND_TLS_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# The proxies in front (HAProxy, a load balancer): only a request arriving from one of these
# has its X-Forwarded-For believed, and the client is the rightmost address in it that is not
# one of them (core/proxy.py). Empty by default: behind no proxy, the peer is the client.
TRUSTED_PROXY_IPS = trusted_proxies()
if env_bool("DJANGO_BEHIND_TLS_PROXY", False) and not TRUSTED_PROXY_IPS:
    # Its X-Forwarded-Proto would be dropped as a client's, and every client would have the
    # proxy's address (one login throttle for everyone).
    raise ImproperlyConfigured("DJANGO_BEHIND_TLS_PROXY needs TRUSTED_PROXY_IPS (the proxy's)")

# --- API: DRF, OAuth2 (django-oauth-toolkit), OpenAPI (drf-spectacular) ---------------------
OAUTH2_SCOPES = {
    "read:actions": "Read the status of Picnic actions",
    "write:actions": "Propose Picnic wallet actions for the user to sign",
    "agent:dm_read": "Read DM delivery facts in your workspaces",
    "agent:dm_write": "Send and cancel DMs through your workspaces' social accounts",
    "operations:read": "Read your generation operations",
    "operations:write": "Quote and submit generation operations, spending your credits",
    "read:balances": "Read token balances of your smart accounts",
    "read:accounts": "List the smart accounts your passkey controls",
    "read:card": "Read your Picnic card's state, balances and daily limit",
    "read:transactions": "Read your transaction history: transfers, swaps, ramps, card purchases",
    "read:profile": "Read your profile: email, fiat ramps and their KYC status, cards",
}
_REDIRECT_URI_SCHEMES = env_list("OAUTH2_REDIRECT_URI_SCHEMES", ["http", "https"])
if not _REDIRECT_URI_SCHEMES or set(_REDIRECT_URI_SCHEMES) - {"http", "https"}:
    raise ImproperlyConfigured(
        f"OAUTH2_REDIRECT_URI_SCHEMES={','.join(_REDIRECT_URI_SCHEMES)!r} must be http and/or https"
    )
# Dynamic registration (RFC 7591) takes loopback callbacks (http://127.0.0.1:<port>/…, RFC 8252)
# and, beyond them, exactly these URIs: the hosted clients an operator lets in, e.g. Claude's
# https://claude.ai/api/mcp/auth_callback or Cursor's cursor://anysphere.cursor-mcp/oauth/callback
# (README, "MCP"). A private-use scheme listed here is allowed as a redirect scheme too.
OAUTH2_DCR_REDIRECT_URIS = env_list("OAUTH2_DCR_REDIRECT_URIS", [])
for _uri in OAUTH2_DCR_REDIRECT_URIS:
    _scheme = _uri.partition(":")[0].lower()
    if (
        not re.fullmatch(r"[a-z][a-z0-9+.-]*:/{0,2}[^\s#]+", _uri)
        or _scheme in {"javascript", "data", "file", "vbscript", "about", "blob"}
        or (
            _scheme == "http" and not re.match(r"http://(127\.0\.0\.1|localhost|\[::1\])[:/]", _uri)
        )
    ):
        raise ImproperlyConfigured(
            f"OAUTH2_DCR_REDIRECT_URIS: {_uri!r} is not an absolute https or private-use URI "
            "without a fragment"
        )
    if _scheme not in _REDIRECT_URI_SCHEMES:
        _REDIRECT_URI_SCHEMES.append(_scheme)
# Registration is open (agents register before anyone signs in): at most this many an hour
# from one client address.
OAUTH2_DCR_PER_HOUR = env_int("OAUTH2_DCR_PER_HOUR", 20, minimum=1)
# The token endpoint: at most this many requests a minute from one client address; metadata
# documents: at most this many fetches a minute per host of client ids (oauth/throttles.py).
OAUTH2_TOKEN_PER_MINUTE = env_int("OAUTH2_TOKEN_PER_MINUTE", 60, minimum=1)
# And for one client id from every address together: generous (a busy agent's refreshes).
OAUTH2_TOKEN_PER_CLIENT_PER_MINUTE = env_int("OAUTH2_TOKEN_PER_CLIENT_PER_MINUTE", 600, minimum=1)
OAUTH2_CIMD_FETCHES_PER_MINUTE = env_int("OAUTH2_CIMD_FETCHES_PER_MINUTE", 30, minimum=1)
# Client ID Metadata Documents are fetched from public addresses only. Tests serve one on
# 127.0.0.1: they set this; nothing else should (it lets a client id point us at loopback).
OAUTH2_CIMD_ALLOW_LOOPBACK = env_bool("OAUTH2_CIMD_ALLOW_LOOPBACK", False)
# A metadata document is fetched whole within this many seconds (connect to last byte; a
# server that drips it is cut off), or the client is unknown: oauth/cimd.py, core/outbound.py.
OAUTH2_CIMD_FETCH_SECONDS = env_float("OAUTH2_CIMD_FETCH_SECONDS", 5.0)
# Agents' logos are fetched by the server and served from this origin (oauth/logos.py): at
# most this many bytes, the whole fetch within this time (a server that drips it is cut off),
# re-encoded as a PNG of at most this many pixels a side. Loopback logo URLs (http allowed)
# only with AGENT_LOGO_ALLOW_LOOPBACK: local runs and tests; a deployment leaves it off (it
# would let a client point us at this machine).
AGENT_LOGO_MAX_BYTES = env_int("AGENT_LOGO_MAX_BYTES", 256 * 1024, minimum=1)
AGENT_LOGO_TIMEOUT_SECONDS = env_float("AGENT_LOGO_TIMEOUT_SECONDS", 5.0)
AGENT_LOGO_PIXELS = env_int("AGENT_LOGO_PIXELS", 96, minimum=16)
AGENT_LOGO_ALLOW_LOOPBACK = env_bool("AGENT_LOGO_ALLOW_LOOPBACK", DEBUG)
# Named explicitly so our models can point at the (swappable) application model.
OAUTH2_PROVIDER_APPLICATION_MODEL = "oauth2_provider.Application"
OAUTH2_PROVIDER_ACCESS_TOKEN_MODEL = "oauth2_provider.AccessToken"
OAUTH2_PROVIDER = {
    "SCOPES": OAUTH2_SCOPES,
    "DEFAULT_SCOPES": ["read:actions"],
    # Our rules on top of DOT's: only the authorization-code and refresh grants, and RFC 8707
    # resource indicators only for the resources we serve (oauth/validators.py).
    "OAUTH2_VALIDATOR_CLASS": "oauth.validators.PicnicOAuth2Validator",
    # DOT's admins of what grows with every sign-in, without a full count on each page load.
    "ACCESS_TOKEN_ADMIN_CLASS": "oauth.token_admins.AccessTokenAdmin",
    "REFRESH_TOKEN_ADMIN_CLASS": "oauth.token_admins.RefreshTokenAdmin",
    "GRANT_ADMIN_CLASS": "oauth.token_admins.GrantAdmin",
    "PKCE_REQUIRED": True,
    # S256 only (RFC 9700): the metadata stops advertising "plain" and DOT refuses it.
    "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,
    "ACCESS_TOKEN_EXPIRE_SECONDS": env_int("OAUTH2_ACCESS_TOKEN_SECONDS", 3600, minimum=60),
    # Refresh tokens rotate on every use (DOT's default) and a family lives at most this long.
    "ROTATE_REFRESH_TOKEN": True,
    "REFRESH_TOKEN_EXPIRE_SECONDS": env_int(
        "OAUTH2_REFRESH_TOKEN_SECONDS", 30 * 24 * 3600, minimum=3600
    ),
    # RFC 9700: no implicit or password grant (refused, and not advertised in the metadata),
    # no token in the query string (it lands in access logs), the `iss` authorization-response
    # parameter, and access/refresh tokens stored only as their SHA-256 checksum.
    "COMPLIANT_BCP_RFC9700_IMPLICIT_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PASSWORD_GRANT": True,
    "COMPLIANT_BCP_RFC9700_ACCESS_TOKEN_TRANSPORT": True,
    "COMPLIANT_BCP_RFC9700_AUTHZ_RESPONSE_ISS": True,
    "COMPLIANT_BCP_RFC9700_TOKEN_STORAGE": True,
    # http stays allowed by default for native/CLI clients' loopback callbacks (RFC 8252, e.g.
    # MCP clients on http://127.0.0.1:<port>/); a deployment without them sets "https".
    "ALLOWED_REDIRECT_URI_SCHEMES": _REDIRECT_URI_SCHEMES,
    # A replayed refresh token revokes its whole family.
    "REFRESH_TOKEN_REUSE_PROTECTION": True,
    # Agents register themselves: RFC 7591 for public clients (our view checks the metadata
    # first: oauth/registration.py), or a Client ID Metadata Document resolved by DOT (public
    # addresses, https, no redirects, a cache and a failure backoff) and fetched by ours within
    # OAUTH2_CIMD_FETCH_SECONDS as a whole, which also keeps the logo and home page.
    "DCR_ENABLED": True,
    "DCR_REGISTRATION_PERMISSION_CLASSES": ("oauth2_provider.dcr.AllowAllDCRPermission",),
    "CIMD_ENABLED": True,
    "CIMD_METADATA_FETCHER": "oauth.cimd.ProfileKeepingFetcher",
    "CIMD_REGISTRATION_PERMISSION_CLASSES": ("oauth.throttles.CimdFetchBudget",),
    # The API accepts a token bound (RFC 8707) to itself or to the MCP server it serves.
    "RESOURCE_SERVER_TOKEN_RESOURCE_VALIDATOR": "oauth.policy.api_accepts_audience",
    # What the metadata advertises is what the server accepts: the code flow with PKCE and
    # its refresh, no implicit, password, client-credentials or device grant. Every API call
    # acts for a user (a user-less token gets 403), and no MCP client uses the device flow.
    "OAUTH2_RESPONSE_TYPES_SUPPORTED": ["code"],
    "OAUTH2_GRANT_TYPES_SUPPORTED": ["authorization_code", "refresh_token"],
    # "none": public clients (every self-registered agent); secrets for the clients staff
    # create in the admin.
    "OAUTH2_TOKEN_ENDPOINT_AUTH_METHODS_SUPPORTED": [
        "none",
        "client_secret_basic",
        "client_secret_post",
    ],
}
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "oauth.authentication.BearerAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "core.api.ApiAutoSchema",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # JSON only, behind one size/UTF-8/nesting limit (a form body is a 415, as documented).
    "DEFAULT_PARSER_CLASSES": ["core.json_input.JSONParser"],
    "UNAUTHENTICATED_USER": None,
    # Throttles identify the client by REMOTE_ADDR, which core.proxy already resolved: DRF's
    # default would believe any X-Forwarded-For.
    "NUM_PROXIES": 0,
    "EXCEPTION_HANDLER": "core.api.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Picnic back-office API",
    "DESCRIPTION": (
        "Status of asynchronous work started by agents: Picnic wallet actions. Every error "
        "answer has one body, the Error component: detail, code and field errors."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "OAUTH2_FLOWS": ["authorizationCode"],
    "OAUTH2_AUTHORIZATION_URL": "/o/authorize/",
    "OAUTH2_TOKEN_URL": "/o/token/",
    "OAUTH2_REFRESH_URL": "/o/token/",
    "OAUTH2_SCOPES": OAUTH2_SCOPES,
    "ENUM_NAME_OVERRIDES": {
        "ActionTypeEnum": "actions.execution.models.ActionType",
        "ActionStatusEnum": "actions.execution.models.ActionStatus",
    },
}

# --- Cache (short-lived provider tokens) ----------------------------------------------------
# One deployment's name on shared infrastructure: the event channel (`<prefix>:events`), every
# cache key, the Celery queues (`<prefix>.chain`, …) and the MCP event store carry it, so two
# deployments on one Redis never hear each other (docs/deploy.md).
DEPLOYMENT_PREFIX = env_str("DEPLOYMENT_PREFIX", "picnic")
if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,39}", DEPLOYMENT_PREFIX):
    raise ImproperlyConfigured(
        "DEPLOYMENT_PREFIX must be 1-40 letters, digits and _ . - (starting with a letter or digit)"
    )
# Redis under Sentinel: EVENTS_URL, CACHE_URL and CELERY_BROKER_URL may name the sentinels
# (`sentinel://h1:26379/0;sentinel://h2:26379/0;…`) instead of one Redis; this is the name
# they monitor the primary by (core/stores.py).
REDIS_SENTINEL_MASTER = env_str("REDIS_SENTINEL_MASTER", "picnic")
if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", REDIS_SENTINEL_MASTER):
    raise ImproperlyConfigured("REDIS_SENTINEL_MASTER may hold only letters, digits and _ . -")
# Status transitions, published for live listeners (the MCP adapter): Redis pub/sub, or Unix
# datagram sockets under EVENTS_DIR on the embedded default (see core/events.py).
EVENTS_URL = env_url("EVENTS_URL", "local://", schemes=("local", "redis", "rediss", "sentinel"))
EVENTS_DIR = Path(env_str("EVENTS_DIR", str(VAR_DIR / "events")))
# Live pages (core/live.py): a comment this often keeps an idle stream open through proxies;
# a stream ends after LIVE_STREAM_SECONDS and the browser reconnects after LIVE_RETRY_MS.
LIVE_HEARTBEAT_SECONDS = env_float("LIVE_HEARTBEAT_SECONDS", 15.0)
LIVE_STREAM_SECONDS = env_float("LIVE_STREAM_SECONDS", 300.0)
LIVE_RETRY_MS = env_int("LIVE_RETRY_MS", 1000, minimum=100)
# Every stream (live pages, MCP SSE) re-checks the session or token it was opened with at each
# event and at least this often, and ends once the grant is gone (logout, revocation, expiry,
# Disconnect, staff rights withdrawn).
STREAM_GRANT_CHECK_SECONDS = env_float("STREAM_GRANT_CHECK_SECONDS", 30.0)
if STREAM_GRANT_CHECK_SECONDS > 30:
    raise ImproperlyConfigured("STREAM_GRANT_CHECK_SECONDS must be at most 30")

# --- MCP adapter (python manage.py mcp) ----------------------------------------------------
# The DRF API the adapter calls with the caller's bearer token.
MCP_API_URL = env_url("MCP_API_URL", "http://127.0.0.1:8000", schemes=("http", "https"))
MCP_API_TIMEOUT_SECONDS = env_float("MCP_API_TIMEOUT_SECONDS", 30.0)
MCP_HTTP_PORT = env_int("MCP_HTTP_PORT", 8001, minimum=1)
# Loopback by default; a deployment whose proxy runs on another machine binds 0.0.0.0.
MCP_HTTP_HOST = env_str("MCP_HTTP_HOST", "127.0.0.1")
# The resource identifier (RFC 9728) of the HTTP transport, and the Origins it accepts.
MCP_RESOURCE_URL = env_url(
    "MCP_RESOURCE_URL", f"http://127.0.0.1:{MCP_HTTP_PORT}/mcp", schemes=("http", "https")
)
MCP_ALLOWED_ORIGINS = env_list(
    "MCP_ALLOWED_ORIGINS",
    [f"http://127.0.0.1:{MCP_HTTP_PORT}", f"http://localhost:{MCP_HTTP_PORT}"],
)
# Scopes every HTTP request needs (403 insufficient_scope otherwise); each tool's own scope is
# checked by the API it calls.
MCP_REQUIRED_SCOPES = env_list("MCP_REQUIRED_SCOPES", [])
# Resumable SSE streams (2025-11-25): a client that lost a stream reconnects after
# MCP_SSE_RETRY_MS with Last-Event-ID; each stream keeps its last MCP_EVENT_STORE_MAX_EVENTS
# events (in Redis with EVENTS_URL=redis://…, for MCP_EVENT_STORE_TTL_SECONDS after the last).
MCP_SSE_RETRY_MS = env_int("MCP_SSE_RETRY_MS", 1000, minimum=100)
MCP_EVENT_STORE_MAX_EVENTS = env_int("MCP_EVENT_STORE_MAX_EVENTS", 1000, minimum=10)
MCP_EVENT_STORE_TTL_SECONDS = env_int("MCP_EVENT_STORE_TTL_SECONDS", 3600, minimum=60)
# A request's stream resumed on an instance not handling it (its instance died) waits this long
# for its answer to reach the store, then tells the client to send it again.
MCP_RESUME_WAIT_SECONDS = env_float("MCP_RESUME_WAIT_SECONDS", 10.0, minimum=0.5)
# Sessions (2025-11-25) are shared by every MCP instance (mcp_adapter/sessions.py): a session
# nobody has used for MCP_SESSION_IDLE_SECONDS ends everywhere (its id then answers 404).
MCP_SESSION_IDLE_SECONDS = env_int("MCP_SESSION_IDLE_SECONDS", 1800, minimum=10)
# MCP tasks (mcp_adapter/task_store.py): the TTL a task gets when the client asks for none, the
# most it may ask for, the poll interval we suggest, and the tasks/list page size.
MCP_TASK_DEFAULT_TTL_MS = env_int("MCP_TASK_DEFAULT_TTL_MS", 24 * 3600 * 1000, minimum=1000)
MCP_TASK_MAX_TTL_MS = env_int("MCP_TASK_MAX_TTL_MS", 7 * 24 * 3600 * 1000, minimum=1000)
MCP_TASK_POLL_INTERVAL_MS = env_int("MCP_TASK_POLL_INTERVAL_MS", 5000, minimum=100)
MCP_TASK_PAGE_SIZE = env_int("MCP_TASK_PAGE_SIZE", 50, minimum=1)
# Tasks still in progress one user + OAuth client may have; past it no new task is created.
MCP_TASK_MAX_LIVE = env_int("MCP_TASK_MAX_LIVE", 100, minimum=1)

CACHE_URL = env_url("CACHE_URL", "locmem://", schemes=("locmem", "redis", "rediss", "sentinel"))
CACHES = {
    "default": (
        {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
        if CACHE_URL.startswith("locmem")
        else {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CACHE_URL}
    )
    | {"KEY_PREFIX": DEPLOYMENT_PREFIX}
}
if CACHE_URL.startswith("sentinel://"):
    # One LOCATION (a list: Django would split the sentinels into "replicas"), whose pool
    # asks the sentinels for the primary.
    CACHES["default"]["LOCATION"] = [CACHE_URL]
    CACHES["default"]["OPTIONS"] = {
        "pool_class": "core.stores.SentinelCachePool",
        "master": REDIS_SENTINEL_MASTER,
    }

# --- Celery --------------------------------------------------------------------------------
# Default broker: kombu's filesystem transport under var/, so the embedded setup needs no
# server; production and CI point CELERY_BROKER_URL at Redis.
CELERY_BROKER_URL = env_url(
    "CELERY_BROKER_URL",
    "filesystem://localhost/",  # a host named: kombu warns when it has to assume one
    schemes=("filesystem", "redis", "rediss", "sentinel", "amqp", "memory"),
)
CELERY_BROKER_TRANSPORT_OPTIONS = {}
if CELERY_BROKER_URL.startswith("sentinel://"):
    CELERY_BROKER_TRANSPORT_OPTIONS = {"master_name": REDIS_SENTINEL_MASTER}
# A broker that stops answering without closing the connection (a frozen node, a network path
# that drops packets) never holds the request that publishes: each step of a publish gives up
# after BROKER_TIMEOUT_SECONDS, a publish is tried three times, then it raises and the beat's
# sweep takes the work over (picnic/brokers.py; docs/deploy.md, "A broker that does not
# answer").
BROKER_TIMEOUT_SECONDS = env_float("BROKER_TIMEOUT_SECONDS", 2.0)
_publish_bound = publish_bound_settings(CELERY_BROKER_URL, BROKER_TIMEOUT_SECONDS)
CELERY_BROKER_CONNECTION_TIMEOUT = _publish_bound["broker_connection_timeout"]
CELERY_TASK_PUBLISH_RETRY_POLICY = _publish_bound["task_publish_retry_policy"]
CELERY_BROKER_TRANSPORT_OPTIONS |= _publish_bound.get("broker_transport_options", {})
if CELERY_BROKER_URL.startswith("filesystem://"):
    _queue = VAR_DIR / "celery" / "queue"
    for _folder in (_queue, VAR_DIR / "celery" / "control", VAR_DIR / "celery" / "staging"):
        _folder.mkdir(parents=True, exist_ok=True)
    # kombu's transport, but a message is renamed into the queue once written whole: a
    # worker reading a half-written one dies (picnic/filesystem_broker.py).
    CELERY_BROKER_TRANSPORT = "picnic.filesystem_broker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_queue),
        "data_folder_out": str(_queue),
        "staging_folder": str(VAR_DIR / "celery" / "staging"),
        "control_folder": str(VAR_DIR / "celery" / "control"),
    }
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
# Exactly one beat ticks: it holds a PostgreSQL advisory lock (a file lock on SQLite); other
# beats stand by and retry this often (picnic/beat.py).
CELERY_BEAT_SCHEDULER = "picnic.beat:SingleBeatScheduler"
BEAT_LOCK_RETRY_SECONDS = env_float("BEAT_LOCK_RETRY_SECONDS", 5.0)
# Queues split by kind of work, so a slow provider cannot starve the rest: each kind has its
# own workers in production (Procfile); `make run` has one worker consuming them all.
# CELERY_QUEUE_PREFIX keeps systems that share one broker apart: the deployment's prefix by
# default (the soak test sets its own).
CELERY_QUEUE_PREFIX = env_str("CELERY_QUEUE_PREFIX", f"{DEPLOYMENT_PREFIX}.")
if not re.fullmatch(r"[A-Za-z0-9_.:-]*", CELERY_QUEUE_PREFIX):
    raise ImproperlyConfigured("CELERY_QUEUE_PREFIX may hold only letters, digits and _ . : -")
# Remote control (`celery inspect`, `control.revoke`) and task events go through broadcast
# exchanges named by these, not by the queues: the same prefix keeps one deployment's
# `celery inspect` from reaching another's workers on a shared broker.
CELERY_CONTROL_EXCHANGE = f"{CELERY_QUEUE_PREFIX}celery"
CELERY_EVENT_EXCHANGE = f"{CELERY_QUEUE_PREFIX}celeryev"
CELERY_EVENT_QUEUE_PREFIX = f"{CELERY_QUEUE_PREFIX}celeryev"
CELERY_QUEUE_KINDS = ("chain", "dm", "operations", "housekeeping", "fetch")
CELERY_QUEUES_BY_KIND = {kind: f"{CELERY_QUEUE_PREFIX}{kind}" for kind in CELERY_QUEUE_KINDS}
_TASK_KINDS = {
    # chain: submitting, reconciling and expiring actions against the node and the bundler.
    "actions.tasks.action_submit": "chain",
    "actions.tasks.action_reconcile": "chain",
    "actions.tasks.actions_reconcile_pending": "chain",
    "actions.tasks.actions_expire_overdue": "chain",
    "actions.tasks.bridges_reconcile_pending": "chain",
    "actions.tasks.account_change_submit": "chain",
    "actions.tasks.account_changes_process": "chain",
    "actions.tasks.spend_permissions_sweep": "chain",
    # dm: deliveries to the X API (at most once: a slow X must not hold anything else up).
    "messaging.tasks.delivery_deliver": "dm",
    "messaging.tasks.deliveries_process_due": "dm",
    # operations: dispatch to and polling of the Responses backend.
    "operations.tasks.operation_dispatch": "operations",
    "operations.tasks.operations_process_due": "operations",
    # housekeeping: purges, detail expiry, lease reaping (it must run even when the dm queue
    # is stuck behind a hanging provider) and the Gnosis Pay purchase sync (not urgent).
    "actions.tasks.actions_purge_retained": "housekeeping",
    "operations.tasks.operations_expire_details": "housekeeping",
    "messaging.tasks.deliveries_reap_leases": "housekeeping",
    "actions.tasks.card_purchases_sync_signed_in": "housekeeping",
    "mcp_adapter.tasks.tasks_purge_expired": "housekeeping",
    # fetch: what a client's server answers, at its pace (agents' logos): a slow one holds a
    # fetch worker up to its deadline, never the purges and lease reaping.
    "oauth.tasks.client_logo_fetch": "fetch",
}
CELERY_TASK_ROUTES = {
    name: {"queue": CELERY_QUEUES_BY_KIND[kind]} for name, kind in _TASK_KINDS.items()
}
# Anything unrouted (a new task nobody classified yet) still runs: on housekeeping.
CELERY_TASK_DEFAULT_QUEUE = CELERY_QUEUES_BY_KIND["housekeeping"]
# RabbitMQ (CELERY_BROKER_URL=amqp://…): quorum queues, publisher confirms, a message given
# back more than CELERY_DELIVERY_LIMIT times dead-lettered to `<prefix>dead` (picnic/brokers.py,
# docs/deploy.md).
CELERY_DELIVERY_LIMIT = env_int("CELERY_DELIVERY_LIMIT", 5, minimum=1)
BROKER_DEAD_LETTER_QUEUE = None
if CELERY_BROKER_URL.startswith("amqp://"):
    _amqp = amqp_celery_settings(
        queues=CELERY_QUEUES_BY_KIND.values(),
        prefix=CELERY_QUEUE_PREFIX,
        delivery_limit=CELERY_DELIVERY_LIMIT,
    )
    CELERY_BROKER_TRANSPORT_OPTIONS = _amqp["broker_transport_options"]
    CELERY_TASK_QUEUES = _amqp["task_queues"]
    CELERY_TASK_DEFAULT_QUEUE_TYPE = _amqp["task_default_queue_type"]
    CELERY_TASK_DEFAULT_EXCHANGE_TYPE = _amqp["task_default_exchange_type"]
    CELERY_TASK_CREATE_MISSING_QUEUE_TYPE = _amqp["task_create_missing_queue_type"]
    CELERY_TASK_CREATE_MISSING_QUEUE_EXCHANGE_TYPE = _amqp[
        "task_create_missing_queue_exchange_type"
    ]
    CELERY_TASK_REJECT_ON_WORKER_LOST = _amqp["task_reject_on_worker_lost"]
    CELERY_WORKER_DETECT_QUORUM_QUEUES = _amqp["worker_detect_quorum_queues"]
    BROKER_DEAD_LETTER_QUEUE = dead_letter_queue(CELERY_QUEUE_PREFIX)
CELERY_BEAT_SCHEDULE = {
    "actions-expire-overdue": {"task": "actions.tasks.actions_expire_overdue", "schedule": 15.0},
    "actions-reconcile-pending": {
        "task": "actions.tasks.actions_reconcile_pending",
        "schedule": 10.0,
    },
    "bridges-reconcile-pending": {
        "task": "actions.tasks.bridges_reconcile_pending",
        "schedule": 5.0,
    },
    "account-changes-process": {
        "task": "actions.tasks.account_changes_process",
        "schedule": 10.0,
    },
    # Spending permissions past their end expire (keys destroyed); grants and revocations
    # whose action ended outside the worker (unsigned, rejected) are followed.
    "spend-permissions-sweep": {"task": "actions.tasks.spend_permissions_sweep", "schedule": 15.0},
    "actions-purge-retained": {"task": "actions.tasks.actions_purge_retained", "schedule": 600.0},
    "card-purchases-sync": {
        "task": "actions.tasks.card_purchases_sync_signed_in",
        "schedule": 300.0,
    },
    "deliveries-process-due": {"task": "messaging.tasks.deliveries_process_due", "schedule": 5.0},
    "deliveries-reap-leases": {"task": "messaging.tasks.deliveries_reap_leases", "schedule": 15.0},
    "operations-process-due": {"task": "operations.tasks.operations_process_due", "schedule": 3.0},
    "operations-expire-details": {
        "task": "operations.tasks.operations_expire_details",
        "schedule": 600.0,
    },
    "mcp-tasks-purge-expired": {"task": "mcp_adapter.tasks.tasks_purge_expired", "schedule": 300.0},
}

# --- Chain ---------------------------------------------------------------------------------
CHAIN_RPC_URL = env_url("CHAIN_RPC_URL", "http://127.0.0.1:8545", schemes=("http", "https"))
BUNDLER_RPC_URL = env_url("BUNDLER_RPC_URL", "http://127.0.0.1:4337", schemes=("http", "https"))
# The read tools (balances, card, history) and proposals wait at most this long for each chain
# RPC call (an agent is waiting).
CHAIN_READ_TIMEOUT_SECONDS = env_float("CHAIN_READ_TIMEOUT_SECONDS", 10.0)
ENTRY_POINT_VERSION = env_choice("ENTRY_POINT_VERSION", "0.7", ("0.7", "0.8"))
CHAIN_ID = env_int("CHAIN_ID", 31337, minimum=1)
# Every chain this deployment serves, one row each (core.chains): id, the name people read,
# RPC, bundler, explorer link template, native currency, ENS registry. CHAINS (a JSON list of
# such rows) replaces the default: the local stack's two chains, a Gnosis-like one (home of the
# card) and an L2-like one.
CHAINS = parse_chains(
    env_json(
        "CHAINS",
        [
            {
                "id": CHAIN_ID,
                "name": "Gnosis (local)",
                "rpc_url": CHAIN_RPC_URL,
                "bundler_url": BUNDLER_RPC_URL,
                "native": {"symbol": "xDAI", "name": "xDAI", "slip44": 700, "price_id": "xdai"},
                # The local stack's ENS registry (chain/ens.py: CREATE2, so always here). The
                # L2 row has none: it answers "no ENS on that chain" (docs/ens.md).
                "ens_registry": "0x7C5ca0BD4883D5970C5f52E7DE58e7Fa4Aa94EC4",
                "icon": "picnic/chains/gnosis.svg",
            },
            {
                "id": env_int("L2_CHAIN_ID", 31338, minimum=1),
                "name": "Base (local)",
                "rpc_url": env_url(
                    "L2_CHAIN_RPC_URL", "http://127.0.0.1:8546", schemes=("http", "https")
                ),
                "bundler_url": env_url(
                    "L2_BUNDLER_RPC_URL", "http://127.0.0.1:4338", schemes=("http", "https")
                ),
                "native": {"symbol": "ETH", "name": "Ether", "slip44": 60, "price_id": "ethereum"},
                "icon": "picnic/chains/base.svg",
            },
        ],
    )
)
# The chain of the card (Gnosis Pay's Safe, Delay and Roles): one of CHAINS.
CARD_CHAIN_ID = env_int("CARD_CHAIN_ID", CHAIN_ID, minimum=1)
if CARD_CHAIN_ID not in {chain.id for chain in CHAINS}:
    raise ImproperlyConfigured(f"CARD_CHAIN_ID={CARD_CHAIN_ID} is not one of CHAINS' ids")
# Upper bound for any single bundler/RPC call made while answering a request.
BUNDLER_TIMEOUT_SECONDS = env_float("BUNDLER_TIMEOUT_SECONDS", 2.0)

# --- Passkeys (WebAuthn) -------------------------------------------------------------------
# WebAuthn forbids IP addresses as RP ID: locally the site is http://localhost:8000.
WEBAUTHN_RP_ID = env_str("WEBAUTHN_RP_ID", "localhost")
WEBAUTHN_RP_NAME = env_str("WEBAUTHN_RP_NAME", "Picnic")
WEBAUTHN_ORIGIN = env_url("WEBAUTHN_ORIGIN", "http://localhost:8000", schemes=("http", "https"))
# PUBLIC_BASE_URL (default: WEBAUTHN_ORIGIN) is read with the HTTPS settings above.

# --- Devices and recovery (docs/devices.md) --------------------------------------------------
# An "add a device" link works this long, once.
DEVICE_LINK_TTL_SECONDS = env_int("DEVICE_LINK_TTL_SECONDS", 600, minimum=30)
# The on-chain delay between a recovery's proposal and its execution, during which any owner
# can cancel it (48 h). At least a minute: a shorter delay leaves no time to cancel.
RECOVERY_DELAY_SECONDS = env_int("RECOVERY_DELAY_SECONDS", 48 * 3600, minimum=60)
# A proposed account change (add or remove a passkey, the recovery key, a cancellation) not
# signed within this long is expired, and its page says so; signed ones never expire.
ACCOUNT_CHANGE_EXPIRY_SECONDS = env_int("ACCOUNT_CHANGE_EXPIRY_SECONDS", 3600, minimum=60)
# A chain that missed a change (down, or its bundler unreachable) is tried again after a delay
# that doubles from 10 s up to this, until it has the change too.
ACCOUNT_CHANGE_REPAIR_MAX_BACKOFF_SECONDS = env_int(
    "ACCOUNT_CHANGE_REPAIR_MAX_BACKOFF_SECONDS", 600, minimum=10
)
# Recovery-code attempts per account and per client address, in the shared cache, per window.
RECOVERY_ATTEMPTS = env_int("RECOVERY_ATTEMPTS", 5, minimum=1)
RECOVERY_ATTEMPTS_WINDOW_SECONDS = env_int("RECOVERY_ATTEMPTS_WINDOW_SECONDS", 3600, minimum=60)
# Mail to end users (a device added or removed, recovery started or completed), in their
# language and time zone (actions.Preferences): Django's backend; the console prints them.
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "Picnic <no-reply@picnic.localhost>")

# --- Spending permissions (docs/spend-permissions.md) ---------------------------------------
# Fernet keys (comma-separated, newest first: MultiFernet encrypts with the first and decrypts
# with any, so a key is rotated by putting a new one in front) that encrypt each grant's
# session key at rest. Required in production; the dev setup and tests derive one from the
# secret key, never a constant.
SPEND_PERMISSION_KEYS = env_list("SPEND_PERMISSION_KEYS", [])
if not SPEND_PERMISSION_KEYS:
    if env_is_set("DJANGO_DEBUG") and not DEBUG:
        raise ImproperlyConfigured("SPEND_PERMISSION_KEYS must be set when DJANGO_DEBUG is false")
    SPEND_PERMISSION_KEYS = [
        base64.urlsafe_b64encode(
            hashlib.sha256(b"picnic spend permissions|" + SECRET_KEY.encode()).digest()
        ).decode()
    ]
for _key in SPEND_PERMISSION_KEYS:
    try:
        Fernet(_key)
    except (ValueError, TypeError):
        raise ImproperlyConfigured(
            "SPEND_PERMISSION_KEYS: each key must be a Fernet key (32 url-safe base64 bytes; "
            "make one with cryptography.fernet.Fernet.generate_key())"
        ) from None
# Most grants one agent may hold open on one user's account, and the longest window.
SPEND_PERMISSIONS_PER_AGENT = env_int("SPEND_PERMISSIONS_PER_AGENT", 10, minimum=1)
SPEND_PERMISSION_MAX_DAYS = env_int("SPEND_PERMISSION_MAX_DAYS", 366, minimum=1)

# --- Swap quotes (LI.FI's API shape) -------------------------------------------------------
SWAP_QUOTE_URL = env_url("SWAP_QUOTE_URL", "http://127.0.0.1:8789", schemes=("http", "https"))
SWAP_QUOTE_TIMEOUT_SECONDS = env_float("SWAP_QUOTE_TIMEOUT_SECONDS", 10.0)
# A swap quote is signed within this long or not at all: the action expires with its quote
# (whichever comes first, this or ACTION_TTL_SECONDS), and signing later is refused.
SWAP_QUOTE_TTL_SECONDS = env_int("SWAP_QUOTE_TTL_SECONDS", 600, minimum=30)
# Cross-chain swaps: the bridge's /status is polled BRIDGE_POLL_SECONDS after the source
# transaction is mined, then with doubling waits up to BRIDGE_POLL_MAX_SECONDS, until DONE or
# FAILED. The console lists a bridge still waiting after BRIDGE_STUCK_AFTER_MINUTES, and flags
# it past its deadline (BRIDGE_DEADLINE_MINUTES after the source transaction); it is still
# polled then, and nothing is marked done for it.
BRIDGE_POLL_SECONDS = env_float("BRIDGE_POLL_SECONDS", 5.0)
BRIDGE_POLL_MAX_SECONDS = env_float("BRIDGE_POLL_MAX_SECONDS", 300.0)
BRIDGE_RECONCILE_BATCH_SIZE = env_int("BRIDGE_RECONCILE_BATCH_SIZE", 50, minimum=1)
BRIDGE_STUCK_AFTER_MINUTES = env_int("BRIDGE_STUCK_AFTER_MINUTES", 30, minimum=1)
BRIDGE_DEADLINE_MINUTES = env_int("BRIDGE_DEADLINE_MINUTES", 120, minimum=1)

# --- Gnosis Pay (card actions) -------------------------------------------------------------
GNOSIS_PAY_URL = env_url("GNOSIS_PAY_URL", "http://127.0.0.1:8790", schemes=("http", "https"))
GNOSIS_PAY_TIMEOUT_SECONDS = env_float("GNOSIS_PAY_TIMEOUT_SECONDS", 10.0)
# The card account's Zodiac Delay: a daily-limit change runs this long after it is enqueued
# (Gnosis Pay: about 3 minutes) and expires if nobody dispatched it this long after that.
CARD_DELAY_COOLDOWN_SECONDS = env_int("CARD_DELAY_COOLDOWN_SECONDS", 180, minimum=1)
CARD_DELAY_EXPIRATION_SECONDS = env_int("CARD_DELAY_EXPIRATION_SECONDS", 1800, minimum=0)
if 0 < CARD_DELAY_EXPIRATION_SECONDS < 60:  # the Delay modifier's own rule
    raise ImproperlyConfigured("CARD_DELAY_EXPIRATION_SECONDS must be 0 (never) or at least 60")
# The EOA that relays signed delay-module transactions and dispatches them after the cooldown
# (pays gas; holds no authority). Default: Hardhat dev account #2, refused on other chains.
CARD_RELAYER_KEY = env_str(
    "CARD_RELAYER_KEY", "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a"
)
if not re.fullmatch(r"0x[0-9a-fA-F]{64}", CARD_RELAYER_KEY):
    raise ImproperlyConfigured("CARD_RELAYER_KEY must be a 0x-prefixed 32-byte hex private key")

# --- Fiat prices for balances (CoinGecko's /simple/price shape) ----------------------------
PRICE_API_URL = env_url("PRICE_API_URL", "http://127.0.0.1:8791", schemes=("http", "https"))
PRICE_API_KEY = env_str("PRICE_API_KEY", "")
PRICE_API_TIMEOUT_SECONDS = env_float("PRICE_API_TIMEOUT_SECONDS", 3.0)
PRICE_CACHE_SECONDS = env_int("PRICE_CACHE_SECONDS", 60, minimum=0)

# --- Fiat ramps (get_profile): Monerium for EUR, BRLA/Avenia for BRL -----------------------
MONERIUM_URL = env_url("MONERIUM_URL", "http://127.0.0.1:8792", schemes=("http", "https"))
MONERIUM_CLIENT_ID = env_str("MONERIUM_CLIENT_ID", "picnic-local")
MONERIUM_CLIENT_SECRET = env_str("MONERIUM_CLIENT_SECRET", "picnic-local-secret")
AVENIA_URL = env_url("AVENIA_URL", "http://127.0.0.1:8793", schemes=("http", "https"))
AVENIA_API_TOKEN = env_str("AVENIA_API_TOKEN", "avenia-local-token")
RAMP_TIMEOUT_SECONDS = env_float("RAMP_TIMEOUT_SECONDS", 3.0)

# --- Transaction history (get_transactions) -----------------------------------------------
# Transfer logs are indexed up to `latest - confirmations` (0 on the instant-mining dev chain;
# a few blocks on a chain that reorganises), in eth_getLogs ranges of at most this many blocks.
HISTORY_CONFIRMATIONS = env_int("HISTORY_CONFIRMATIONS", 0, minimum=0)
HISTORY_LOG_CHUNK_BLOCKS = env_int("HISTORY_LOG_CHUNK_BLOCKS", 50_000, minimum=1)
# No account of ours existed before this block: indexing starts there, not at genesis.
HISTORY_START_BLOCK = env_int("HISTORY_START_BLOCK", 0, minimum=0)

# --- Actions lifecycle ---------------------------------------------------------------------
ACTION_TTL_SECONDS = env_int("ACTION_TTL_SECONDS", 15 * 60, minimum=30)
ACTION_RETENTION_HOURS = env_int("ACTION_RETENTION_HOURS", 24, minimum=1)
ACTIONS_STUCK_AFTER_MINUTES = env_int("ACTIONS_STUCK_AFTER_MINUTES", 10, minimum=1)
ACTIONS_RECONCILE_BATCH_SIZE = env_int("ACTIONS_RECONCILE_BATCH_SIZE", 50, minimum=1)
# A signed action whose submit task never ran (a killed worker) is submitted by reconciliation
# after this long; the task normally runs within a second of the signature.
ACTIONS_SUBMIT_GRACE_SECONDS = env_int("ACTIONS_SUBMIT_GRACE_SECONDS", 60, minimum=1)
# Re-sends of the same signed user operation after a transient bundler failure, or to check
# that the bundler still holds it: doubling from the first value, capped at the second.
ACTIONS_RESEND_BACKOFF_SECONDS = env_int("ACTIONS_RESEND_BACKOFF_SECONDS", 10, minimum=1)
ACTIONS_RESEND_BACKOFF_MAX_SECONDS = env_int(
    "ACTIONS_RESEND_BACKOFF_MAX_SECONDS", 600, minimum=ACTIONS_RESEND_BACKOFF_SECONDS
)

# --- DM deliveries -------------------------------------------------------------------------
X_API_BASE_URL = env_url("X_API_BASE_URL", "http://127.0.0.1:8787", schemes=("http", "https"))
DM_PROVIDER_TIMEOUT_SECONDS = env_float("DM_PROVIDER_TIMEOUT_SECONDS", 10.0)
# A claim outlives the provider timeout by a margin, so only a dead worker's lease lapses.
DM_LEASE_SECONDS = env_float("DM_LEASE_SECONDS", DM_PROVIDER_TIMEOUT_SECONDS + 20)
if DM_LEASE_SECONDS <= DM_PROVIDER_TIMEOUT_SECONDS:
    raise ImproperlyConfigured(
        f"DM_LEASE_SECONDS={DM_LEASE_SECONDS} must exceed "
        f"DM_PROVIDER_TIMEOUT_SECONDS={DM_PROVIDER_TIMEOUT_SECONDS}"
    )
DM_MAX_CONNECT_ATTEMPTS = env_int("DM_MAX_CONNECT_ATTEMPTS", 5, minimum=1)
DM_RETRY_BACKOFF_SECONDS = env_float("DM_RETRY_BACKOFF_SECONDS", 5.0, allow_minimum=True)

# --- Generation operations -----------------------------------------------------------------
OPERATIONS_BACKEND_URL = env_url(
    "OPERATIONS_BACKEND_URL", "http://127.0.0.1:8788", schemes=("http", "https")
)
OPERATIONS_BACKEND_API_KEY = env_str("OPERATIONS_BACKEND_API_KEY", "local-dev-key")
# A label for billing components (which credential paid), never the key itself.
OPERATIONS_BACKEND_CREDENTIAL_ID = env_str("OPERATIONS_BACKEND_CREDENTIAL_ID", "local-openai")
OPERATIONS_BACKEND_TIMEOUT_SECONDS = env_float("OPERATIONS_BACKEND_TIMEOUT_SECONDS", 10.0)
OPERATIONS_DEFAULT_MODEL = env_str("OPERATIONS_DEFAULT_MODEL", "gpt-5-mini")
OPERATIONS_MAX_OUTPUT_TOKENS = env_int("OPERATIONS_MAX_OUTPUT_TOKENS", 2048, minimum=16)
# Credits per 1,000 tokens.
OPERATIONS_PRICES = {"input": "0.5", "cached": "0.1", "output": "1.5", "reasoning": "2.0"}
# Which operations wait for a human first: "category:<name>" or "tool:<name>", comma-separated.
OPERATIONS_REVIEW_RULES = env_list("OPERATIONS_REVIEW_RULES", ["category:sensitive"])
for _rule in OPERATIONS_REVIEW_RULES:
    if not _rule.startswith(("category:", "tool:")) or _rule.endswith(":"):
        raise ImproperlyConfigured(
            f"OPERATIONS_REVIEW_RULES: {_rule!r} is not category:<name> or tool:<name>"
        )
OPERATIONS_DETAIL_TTL_HOURS = env_int("OPERATIONS_DETAIL_TTL_HOURS", 24 * 7, minimum=1)
OPERATIONS_QUOTE_TTL_SECONDS = env_int("OPERATIONS_QUOTE_TTL_SECONDS", 600, minimum=10)
OPERATIONS_POLL_SECONDS = env_float("OPERATIONS_POLL_SECONDS", 2.0)
OPERATIONS_STUCK_RUNNING_MINUTES = env_int("OPERATIONS_STUCK_RUNNING_MINUTES", 30, minimum=1)
# The support console lists an unfinished operation still holding credits after this long.
CONSOLE_HOLD_STUCK_MINUTES = env_int("CONSOLE_HOLD_STUCK_MINUTES", 60, minimum=1)
# Its counts and 24 h charts are recomputed at most this often (0: on every load).
CONSOLE_SUMMARY_CACHE_SECONDS = env_int("CONSOLE_SUMMARY_CACHE_SECONDS", 15, minimum=0)

# --- Health (/healthz, /readyz, manage.py health) -------------------------------------------
# Each readiness check (database, broker, cache, events, chain RPC, bundler) waits this long at
# most; they run at once, so /readyz answers within about this bound.
HEALTH_CHECK_TIMEOUT_SECONDS = env_float("HEALTH_CHECK_TIMEOUT_SECONDS", 2.0)

# --- Metrics (/metrics, Prometheus text format) ----------------------------------------------
# The bearer token Prometheus sends (`authorization: {credentials: ...}`); unset, /metrics
# answers 404. Compared in constant time; at least 16 characters so it cannot be guessed.
# Spans over OTLP/HTTP to this collector (picnic.otel); unset, tracing stays off: no
# OpenTelemetry provider, instrumentation or exporter is installed. The SDK reads it too.
OTEL_EXPORTER_OTLP_ENDPOINT = (
    env_url("OTEL_EXPORTER_OTLP_ENDPOINT", "", schemes=("http", "https"))
    if env_is_set("OTEL_EXPORTER_OTLP_ENDPOINT")
    else ""
)
# The `service.name` of this process's spans (e.g. picnic-web, picnic-worker-dm).
OTEL_SERVICE_NAME = env_str("OTEL_SERVICE_NAME", "picnic")

METRICS_TOKEN = env_str("METRICS_TOKEN", "")
if METRICS_TOKEN and (len(METRICS_TOKEN) < 16 or not METRICS_TOKEN.isprintable()):
    raise ImproperlyConfigured("METRICS_TOKEN must be at least 16 printable characters")
# The Celery queues whose backlog /metrics reports; empty: the queue of each kind of work
# (CELERY_QUEUES_BY_KIND).
METRICS_CELERY_QUEUES = env_list("METRICS_CELERY_QUEUES", [])
# PROMETHEUS_MULTIPROC_DIR (read by prometheus-client itself, not a setting): set it for every
# process (web, Celery workers, MCP server) to one directory emptied before they start.
if env_str("PROMETHEUS_MULTIPROC_DIR", ""):
    Path(env_str("PROMETHEUS_MULTIPROC_DIR", "")).mkdir(parents=True, exist_ok=True)

# --- Process start-up -----------------------------------------------------------------------
# Each web worker and Celery worker freezes its start-up objects once it is loaded (gc.freeze,
# core/gc_freeze.py): full collections then skip them (76–91 ms pauses down to about 2 ms).
GC_FREEZE_AT_STARTUP = env_bool("GC_FREEZE_AT_STARTUP", True)

# --- Logs ----------------------------------------------------------------------------------
# JSON lines (one object per record, with trace_id/span_id and the work in hand) unless DEBUG
# is on (`make run`), where one readable line is friendlier; LOG_FORMAT says it explicitly.
LOG_FORMAT = env_choice("LOG_FORMAT", "text" if DEBUG else "json", ("json", "text"))
LOGGING = logging_config(log_format=LOG_FORMAT, level=env_str("LOG_LEVEL", "INFO"))
# Workers log through LOGGING too (JSON, trace ids) instead of Celery's own root handler.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
