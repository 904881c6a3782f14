"""HTTP serving shared by the webhook and the extender: safe body reading,
Prometheus exposition across gunicorn workers, embedded gunicorn, and the probes
(the controller's too)."""
