"""The order callbacks run in, in one table: a higher priority runs earlier within every event.

The order matters at step end (the clock stops before the work of evaluating and saving; a checkpoint
is chosen by this step's evaluation) and at train end (the final checkpoint, then the exports, then the
uploads of what was written, then the trackers, then the console's summary). Unlisted callbacks (a
user's, the metrics file, the garbage collector) run at 0.
"""

PRIORITY: dict[str, int] = {
    "speed_monitor": 1000,  # stop the step's clock before any callback does work in on_step_end
    "profiler": 900,  # step the profiler right after the step's work, before evaluation and saving
    "loss_spike": 300,  # this step's loss statistics, before evaluation and saving (its state is this step's)
    "evaluator": 200,  # before the checkpointer: a checkpoint of this step can be chosen by its eval loss
    "generation_eval": 190,  # just after the evaluator, so both land in the same step's metrics
    "harness_eval": 180,  # with the other evaluations, before best-model selection and the checkpointer
    "best_model": 150,  # after the evaluations, before the checkpointer: a new best is protected before pruning
    "checkpointer": -50,  # after the other step-end work, so saved callback states include this step
    "export": -60,  # the final model export, once the final checkpoint is written
    "best_model_export": -65,  # the best checkpoint's export, after the final checkpoint too
    "sample": -70,  # samples after the final checkpoint and exports, before the console summary
    "upload": -80,  # uploads after the final checkpoint, the model export and the best-model export
    "hub": -85,  # the Hub push of the final export, after it is written (and after the bucket copies start)
    "tracker": -90,  # trackers close after everything else has logged, before the console's summary
    "console": -100,  # last: the final summary follows the final save
}
