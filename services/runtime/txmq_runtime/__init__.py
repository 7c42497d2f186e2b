"""Shared server-side runtime for txmq services: settings, gRPC server bootstrap
(health, reflection, graceful stop), error mapping, etcd registration, route look-up,
tag codes and filters."""
