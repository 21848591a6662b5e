"""Figures and HTML reports. Everything here reads records from disk; nothing touches a model."""
