"""Importers: bringing memories recorded elsewhere into a palace (``palace import ...``)."""
