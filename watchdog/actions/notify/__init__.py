"""Notifications: routes (which receiver hears of an alert, grouped how), a durable outbox in the
database, a sender that delivers with retries, and one module per chat service (`channels/`)."""
