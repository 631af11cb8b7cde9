"""Helpers the fuzz tests share."""

from __future__ import annotations

import copy


def mutate(doc, mutations):
    """A deep copy of a JSON-like ``doc`` with each (path, value) applied: the value set at the path,
    or the key deleted when the value is "__delete__"; a path that no longer leads anywhere is skipped."""
    doc = copy.deepcopy(doc)
    for path, value in mutations:
        parent = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
            if value == "__delete__":
                del parent[path[-1]]
            else:
                parent[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue
    return doc
