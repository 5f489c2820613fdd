"""Stand-in for DreamZero's `groot` package (see ../README.md)."""

STAND_IN = True
