"""Renderers: a Report in, text out. They read Report values and compute nothing."""
