"""Memory planning: the estimated peak memory per rank of the run a config describes (``honing plan``)."""
