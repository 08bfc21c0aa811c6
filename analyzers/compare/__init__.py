"""``profkit diff``: whether two runs can be compared, and whether the change helped."""
