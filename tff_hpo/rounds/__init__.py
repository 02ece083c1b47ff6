"""What a round does around the learning process: clients without and with state, federated evaluation, metric names and the progress line."""
