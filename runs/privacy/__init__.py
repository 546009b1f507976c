"""Erasure: a subject's values erased from every run record they were copied into.

``erasure`` rewrites; ``erasure_places`` is the one list of the columns it rewrites and why every
other text column is left alone. What belongs here: the runs side of a memory erase.
"""
