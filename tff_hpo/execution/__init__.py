"""TFF's execution context and its workers: local, remote or several; CPU kernels, malloc settings, parent death, TensorFlow's quiet start, the runner's stop requests."""
