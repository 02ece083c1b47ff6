"""Black-box tuning on Optuna: a study whose trials are ordinary runs of this
project (`python -m tff_hpo.tune`), and what a study cost until it reached
a target."""
