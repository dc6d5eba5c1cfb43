"""The local web viewer: ``repinterp serve --index DIR`` (see ``docs/web.md``)."""

from .app import create_app
from .server import serve, server_config

__all__ = ["create_app", "serve", "server_config"]
