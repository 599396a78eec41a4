"""Parsing: launcher prefixes, producer envelopes and message families into Arrow tables."""
