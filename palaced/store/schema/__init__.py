"""The schema, in one home: every DDL statement of SQLite and PostgreSQL, the migrations and the
check that refuses objects palace did not make.
"""
