"""What finds drawers: full-text search (FTS5, PostgreSQL's tsvector), vectors and their re-
embedding, room context and the full-text change log.
"""
