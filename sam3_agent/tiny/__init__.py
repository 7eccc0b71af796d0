"""Builders of tiny random-weight models (real architectures, shrunken configs) for offline tests and demos."""
