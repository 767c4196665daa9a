"""The knowledge graph and memoirs: entities, facts, graph walks, concepts and their links.
"""
