"""What a recipe wires into a run besides its parts: the callback registry, the functions callbacks call (harness
evaluation, generation, export) and the model a checkpoint holds (export, merge)."""
