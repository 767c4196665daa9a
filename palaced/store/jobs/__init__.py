"""Whole-palace SQL: backups, integrity checks, repairs, export and import.
"""
