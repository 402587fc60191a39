"""Data sets by name (``data.*.sources[].dataset``): each a builder from the data set's own columns (a hub data set's,
or a local file with them) to a row of honing's formats, and the reward that scores it (``registry.py``)."""
