"""The HTTP edge: FastAPI app factory and routes that translate HTTP to the service and back."""

from proxy.web.app import create_app

__all__ = ["create_app"]
