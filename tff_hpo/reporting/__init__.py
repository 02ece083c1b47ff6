"""Reading run directories (ours and cross-check runs): metrics, labels, rounds to target, figures, Table 1."""
