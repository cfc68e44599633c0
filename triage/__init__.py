"""The inbox sorts itself: what a voice message asks for, and whether it may not wait.

`reading.read` finds a clinic's words in a transcript (`matching`: inflections and
misspellings) and suggests one of its request types, or none ("other"), and whether the
message may be urgent; `vocabulary` holds the shipped words and the rules for a clinic's
own; `inbox` reads a clinic's words from the database, stores what a transcript suggests on
its request, reads it again when the words change, and records staff confirming a type or
clearing a flag. A suggestion and a flag are hints for a human, never a diagnosis.
"""
