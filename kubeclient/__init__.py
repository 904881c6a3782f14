"""Talking to an API server: the official `kubernetes` client used raw (JSON dicts),
list+watch informers, reconcile loops and Events.

Shared by the controller and the local cluster's own components: both talk to
an API server over HTTP through it, and neither knows the other."""
