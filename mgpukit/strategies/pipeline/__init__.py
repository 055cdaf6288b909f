"""(family package: filled in by its strategies)"""
