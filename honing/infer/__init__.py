"""Using a trained model: ``honing generate``, ``honing chat``, ``honing eval`` and ``honing push``."""
