"""The watchdog's web UI (server-rendered HTML at `/` and `/ui/...`): see `watchdog.ui.pages`."""

from watchdog.ui.pages import ui_router

__all__ = ["ui_router"]
