"""Logs spread over nodes: a node's digest of its logs, and the merge of the digests.
"""
