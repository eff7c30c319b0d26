"""One driver module per federated chapter (module name = chapter id with ``-`` -> ``_``), beside its registry file."""
