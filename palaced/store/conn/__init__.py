"""Connections: SQLite's (``db``), PostgreSQL's (``pg``), the SQL dialect switch and the meta
table.
"""
