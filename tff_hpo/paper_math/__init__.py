"""The papers' math as small TF functions (equation numbers in the docstrings), the shared local-training loop and the server optimizers."""
