"""The base of every settings model: strict, so a misspelt key in the configuration is an error naming it,
never a setting silently left at its default. One base for every section (each section's model lives with
the part it configures), in core so that no settings module has to import another part to get it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Section"]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")
