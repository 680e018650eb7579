"""The watchdog's web UI (server-rendered HTML at `/` and `/ui/...`): see `watchdog.views.ui.pages`."""

from volcano_monitor.watchdog.views.ui.pages import ui_router

__all__ = ["ui_router"]
