"""TLS for karpy's servers: a private CA, serving certificates, caBundle injection."""
