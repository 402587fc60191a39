"""What goes with an exported model besides its weights: the model card."""
