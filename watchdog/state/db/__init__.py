"""Storage: SQLAlchemy models, engines, Alembic migrations and retention."""
