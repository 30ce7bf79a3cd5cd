"""Profiles: the dataclasses, their files, the --set overrides and the checks of every value."""
