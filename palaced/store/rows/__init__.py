"""The palace's own rows: drawers, their edits, trash, dates, the import ledger, transcript
captures, upkeep, the audit log and the access policy.
"""
