"""The local web viewer: ``repinterp serve --index DIR`` (see ``docs/web.md``)."""

from .app import create_app, serve

__all__ = ["create_app", "serve"]
