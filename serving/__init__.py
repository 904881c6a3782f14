"""HTTP serving shared by the webhook and the extender: safe body reading,
Prometheus exposition across gunicorn workers, and embedded gunicorn."""
