"""The local web app (`phasewise ui`): thin front end over the Python API."""
